"""Sync strategies over emulated links (network namespaces, delay line, htb): measured against the
perf model, per topology and strategy. Needs root.

    .venv/bin/python bench/wan.py [--steps 24] [--only "two regions"]

    .venv/bin/python bench/wan.py --write 3     # first refit the runtime's protocol terms (protocol.json)

Topologies: one zone (2 nodes); two regions at 100 ms RTT, 200 Mbit/s (2 nodes); three continents at
100–300 ms with 50–200 Mbit/s (3 nodes). The runtime's measured protocol terms per strategy
(``geotrain.perf.protocol.Protocol``: round trips, or seconds over the WAN transport) are fitted on
the two regions and checked on the three continents. Per strategy: measured and predicted samples/s and round
time, the model's error on the round, bytes/s per cross-region link (wire vs model), and the held-out
loss reached (tiny-lm, the same steps). The model: geotrain.perf.strategies for these nodes at their
measured compute rates and the emulated links (hivemind: the runtime's own fit)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from geotrain.app.rehearse import STRATEGIES, rehearse_topology
from geotrain.domain import Continent, Location, SyncSettings
from geotrain.perf.protocol import MESH_STRATEGIES, runtime_protocol
from geotrain.wan import Link, privileges

US = Location("aws", "us-east-1", "use1-az1", Continent.NORTH_AMERICA)
US_B = Location("aws", "us-east-1", "use1-az1", Continent.NORTH_AMERICA)
EU = Location("aws", "eu-west-1", "euw1-az1", Continent.EUROPE)
ASIA = Location("aws", "ap-southeast-1", "apse1-az1", Continent.ASIA)
PAIRS = {frozenset(("us-east-1", "eu-west-1")): Link(100, 200), frozenset(("us-east-1", "ap-southeast-1")): Link(230, 100),
         frozenset(("eu-west-1", "ap-southeast-1")): Link(300, 50)}


def link(a: Location, b: Location) -> Link:
    if a.region == b.region:
        return Link(rtt_ms=0.2, rate_mbit=1000)
    return PAIRS[frozenset((a.region, b.region))]


TOPOLOGIES = {"one zone": [US, US_B], "two regions, 100 ms": [US, EU], "three continents, 100-300 ms": [US, EU, ASIA]}


FIT_ON = "two regions, 100 ms"  # the topology the protocol terms are fitted on; the others check it
PROTOCOL = Path(__file__).resolve().parent.parent / "geotrain/perf/data/protocol.json"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--only", default="", help="topologies whose names contain one of these ('|'-separated)")
    parser.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated (default: all)")
    parser.add_argument("--write", type=int, default=0, metavar="RUNS",
                        help=f"fit the runtime's protocol terms per strategy on {FIT_ON!r} (RUNS runs each, their mean) "
                             "and write geotrain/perf/data/protocol.json before the other topologies")
    args = parser.parse_args()
    reason = privileges()
    if reason is not None:
        print(f"bench/wan.py needs emulated links: {reason}")
        return 2
    strategies = args.strategies.split(",")
    if args.write:
        fit(args.write, args.steps, strategies)
    print("error: the measured round against the model's; 'bare': the model without the runtime's measured round "
          f"trips and seconds (perf/data/protocol.json, fitted on {FIT_ON!r}); 'in-run': the nodes' compute while "
          "they trained together over alone (mean), and samples/s over the model's at that compute (not for "
          "allreduce and hivemind, whose clocks do not time all their compute)")
    for name, nodes in TOPOLOGIES.items():
        if args.only and not any(part in name for part in args.only.split("|")):
            continue
        print(f"\n== {name} ({len(nodes)} nodes){' (the fit)' if name == FIT_ON else ''} ==")
        print(f"{'strategy':10} {'samples/s':>10} {'model':>8} {'ratio':>6} {'round s':>8} {'model':>7} {'error':>7} "
              f"{'bare':>7} {'loss':>6} {'in-run':>10}  cross-region kB/s wire (model)")
        for strategy in strategies:
            t0 = time.perf_counter()
            r = rehearse_topology(nodes, link, settings(strategy), steps=steps_of(strategy, args.steps))
            cross = ", ".join(f"{f.src}→{f.dst} {f.bytes_per_s / 1e3:,.0f} ({f.predicted_bytes_per_s / 1e3:,.0f})"
                              for f in r.links if f.link_class != "same_zone")
            bare = r.round_s / (r.predicted_round_s - r.protocol_s) - 1
            in_run = "-" if r.in_run_samples_per_s is None else (
                f"{statistics.fmean(a / b for a, b in zip(r.in_run_samples_per_s, r.compute_samples_per_s)):.2f}"
                f" {r.samples_per_s / r.predicted_in_run_samples_per_s:.2f}")
            print(f"{strategy:10} {r.samples_per_s:10,.0f} {r.predicted_samples_per_s:8,.0f} "
                  f"{r.samples_per_s / r.predicted_samples_per_s:6.2f} {r.round_s:8.3f} "
                  f"{r.predicted_round_s:7.3f} {r.error:+7.0%} {bare:+7.0%} {r.loss:6.3f} {in_run:>10}  "
                  f"{cross or '-'}   [{time.perf_counter() - t0:.0f} s]", flush=True)
    return 0


def steps_of(strategy: str, steps: int) -> int:
    """asgd-ga's regions keep their own pace: its link-bound region takes about a third of the steps
    of the home region, so it gets 3× the budget for as many rounds of its slowest region."""
    return 3 * steps if strategy == "asgd-ga" else steps


def settings(strategy: str) -> SyncSettings:
    return SyncSettings(strategy=strategy, local_steps=4, averaging_pushes=4, accumulation_steps=4,
                        target_batch_size=256)


def fit(runs: int, steps: int, strategies: list[str]) -> None:
    """Per run, the measured round less the model's round without the term: in seconds (``c_s``) for
    the strategies over geotrain's WAN transport (``MESH_STRATEGIES``), in round trips of the longest
    RTT (``k_s``) for the others (gloo's handshakes); the mean of the runs. Only ``strategies`` are
    refitted; the others keep their figures."""
    found: dict[str, list[float]] = {}
    for strategy in strategies:
        for _ in range(runs):
            r = rehearse_topology(TOPOLOGIES[FIT_ON], link, settings(strategy), steps=steps_of(strategy, steps))
            residual = r.round_s - (r.predicted_round_s - r.protocol_s)
            found.setdefault(strategy, []).append(round(residual if strategy in MESH_STRATEGIES else residual / r.rtt_s,
                                                        3 if strategy in MESH_STRATEGIES else 2))
        print(f"fit {strategy}: {'seconds' if strategy in MESH_STRATEGIES else 'round trips'} {found[strategy]}",
              flush=True)
    document = json.loads(PROTOCOL.read_text())
    document["runs"] = {FIT_ON: {**document["runs"].get(FIT_ON, {}), **found}}
    document["measured_at"] = time.strftime("%Y-%m-%d")
    gloo = document["backends"]["gloo"]
    for s, v in found.items():
        kind, other = ("seconds", "round_trips") if s in MESH_STRATEGIES else ("round_trips", "seconds")
        gloo.setdefault(kind, {})[s] = round(statistics.fmean(v), 3 if kind == "seconds" else 2)
        gloo.get(other, {}).pop(s, None)
    PROTOCOL.write_text(json.dumps(document, indent=2) + "\n")
    runtime_protocol.cache_clear()  # the report below predicts with what was just written
    print(f"wrote {PROTOCOL}", flush=True)


if __name__ == "__main__":
    sys.exit(main())

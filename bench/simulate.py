"""Spot-market replay: every policy over windows of the shared traces at several deadline slacks.

Per trace set × slack, per policy: mean cost relative to on-demand, mean ratio to the oracle (the
omniscient lower bound), deadline misses, mean run time. Targets for ``geotrain``: ≤ 1.05× the
oracle on average, no missed deadline, ≥ 15 % cheaper than ``up-s`` on multi-region traces.

    .venv/bin/python bench/simulate.py [--windows N] [--seed S]

Windows start at seeded random ticks, each followed by the job's deadline; the market before a
window's start is its past (what geotrain's policy may learn from). Skipped where ../shared/data is
absent.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

from geotrain.sim.compare import POLICIES, compare
from geotrain.sim.job import SimJob
from geotrain.sim.market import align
from geotrain.sim.traces import load_traces
from geotrain.sim.world import build_world

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

# (name, paths, tick, spot prices, job: workload, nodes, GPU-hours of work)
SETS = [
    ("aws-v100 (9 zones, 3 regions)", [DATA / "skynomad/data/real_availability_2023-02-15"], None, "trace",
     ("resnet50", 1, 24.0)),
    ("gcp-h100 8-gang, catalog prices (13 zones, 8 regions)", [DATA / "skynomad/gcp_h100_16x_probe_counts.csv"], 600.0, "catalog",
     ("resnet50", 8, 96.0)),
    ("gcp-h100 16-gang, catalog prices", [DATA / "skynomad/gcp_h100_16x_probe_counts.csv"], 600.0, "catalog",
     ("resnet50", 16, 192.0)),
    # the probes' own prices: the GPU SKU part of the spot price only (the VM's CPU and memory left out),
    # on-demand from the catalog; their order differs from the catalog's (asia-south2 the dearest here)
    ("gcp-h100 8-gang, probe prices", [DATA / "skynomad/gcp_h100_16x_probe_counts.csv"], 600.0, "trace",
     ("resnet50", 8, 96.0)),
    ("gcp-h100 16-gang, probe prices", [DATA / "skynomad/gcp_h100_16x_probe_counts.csv"], 600.0, "trace",
     ("resnet50", 16, 192.0)),
]
SLACKS = (1.1, 1.5, 2.0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--windows", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slacks", default=",".join(map(str, SLACKS)), help="deadline slacks, e.g. 1.1,2")
    parser.add_argument("--only", default="", help="only the trace sets whose name holds one of these texts (a|b)")
    args = parser.parse_args()
    if not DATA.is_dir():
        print(f"skipped: {DATA} is absent")
        return
    summary = {}
    for name, paths, tick, prices, (workload, nodes, gpu_hours) in SETS:
        if not any(part in name for part in args.only.split("|")):
            continue
        market = align(load_traces(paths), tick_s=tick)
        work_h = gpu_hours / nodes
        for slack in (float(x) for x in args.slacks.split(",")):
            deadline = work_h * slack
            job = SimJob(name="bench", workload=workload, nodes=nodes, deadline_h=deadline, work_gpu_hours=gpu_hours,
                         checkpoint_gb=2.0, checkpoint_every_s=1800, restart_s=300)
            world = build_world(market, job, spot_prices=prices)
            need = int(deadline * 3600 / market.tick_s) + 2
            rng = random.Random(f"{args.seed}/{name}/{slack}")
            warm = int(24 * 3600 / market.tick_s)  # a day of the market's past before each window
            starts = sorted(rng.randrange(warm, market.ticks - need) for _ in range(args.windows))
            rows = {p: [] for p in POLICIES}
            for start in starts:
                for outcome in compare(world, start_tick=start, record=False):
                    rows[outcome.policy].append(outcome)
            print(f"\n{name}: {args.windows} windows, {gpu_hours:g} GPU-h of {workload} on {nodes} node(s), "
                  f"deadline {deadline:.1f} h (slack {slack:g}x)")
            print(f"  {'policy':<10} {'cost/OD':>8} {'x oracle':>9} {'missed':>7} {'preempt':>8} {'run s':>7}")
            oracle_usd = [o.usd for o in rows["oracle"]]
            od_usd = [o.usd for o in rows["on-demand"]]
            for policy in POLICIES:
                outs = rows[policy]
                ratio_od = statistics.mean(o.usd / od for o, od in zip(outs, od_usd, strict=True))
                ratio_or = statistics.mean(o.usd / orc for o, orc in zip(outs, oracle_usd, strict=True))
                missed = sum(1 for o in outs if not o.deadline_met)
                print(f"  {policy:<10} {ratio_od:>8.3f} {ratio_or:>9.3f} {missed:>7d} "
                      f"{statistics.mean(o.preemptions for o in outs):>8.1f} {statistics.mean(o.run_s for o in outs):>7.2f}")
                summary.setdefault(policy, []).extend(o.usd / orc for o, orc in zip(outs, oracle_usd, strict=True))
            geo = [o.usd for o in rows["geotrain"]]
            ups = [o.usd for o in rows["up-s"]]
            print(f"  geotrain vs up-s: {100 * (1 - statistics.mean(g / u for g, u in zip(geo, ups, strict=True))):.1f} % "
                  "cheaper on average (target >= 15 %)")
    print("\nall sets: mean ratio to the oracle")
    for policy, ratios in summary.items():
        print(f"  {policy:<10} {statistics.mean(ratios):.3f}" + ("  (target <= 1.05)" if policy == "geotrain" else ""))
    clock = time.perf_counter()
    market = align(load_traces([DATA / "skynomad/gcp_h100_16x_probe_counts.csv"]), tick_s=600.0)
    job = SimJob(name="speed", workload="resnet50", nodes=8, deadline_h=14 * 24 - 1, work_gpu_hours=8 * 24 * 10)
    world = build_world(market, job, spot_prices="catalog")
    from geotrain.sim.engine import Replay
    from geotrain.sim.policies import baseline

    load_s = time.perf_counter() - clock
    for policy in ("up-s", "greedy"):
        out = Replay(world, record=True).run(baseline(policy))
        print(f"speed: 14 days x {world.zones} zones at 10-minute ticks, {policy}: {out.run_s:.3f} s "
              f"(target < 2 s; loading and world {load_s:.2f} s)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

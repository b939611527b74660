"""Hivemind's averaging groups at more peers than the published runs had (Erben et al.: 2 to 8).

The perf model takes a Hivemind round's terms for a group of ``m = min(n, G)`` peers (``G``: the
plan's ``group_size``, Hivemind's ``target_group_size``) and carries the per-peer overhead ``β·m``,
fitted on groups of 2 to 8 peers, up to ``G`` and no further (``geotrain.perf.terms``). This bench
asks the library itself what it does at 16 to 32 local peers: ``n`` peers, each a ``hivemind.DHT``
and a ``DecentralizedAverager`` with the runtime's averaging options
(``geotrain.train.sync.hivemind.averaging_options``: its request timeout and the group size), all
stepping at one scheduled time, as the runtime's optimizer does at the end of an epoch. Per
``(n, G)`` it prints:

- the groups the matchmaking formed (each peer's step returns its group): mean, smallest and largest
  group, and the peers left out of a round (a step that found no group);
- the wall seconds of a round, from the scheduled start to the last peer's return;
- the CPU seconds one peer's processes (its DHT, its p2p daemon, its averager) spent per round, read
  from ``/proc``: the host's work per peer, which on separate machines is what the round costs each.

Every peer runs on this machine, so the wall time carries the whole swarm's CPU on its cores (2 here):
it grows with ``n`` whatever the groups; the CPU per peer is the figure to compare across ``n``.

    python bench/hivemind_groups.py [--peers 8,16,24,32] [--group-sizes 4,8,16] [--rounds 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from geotrain.train.sync.hivemind import MATCHMAKING_S, averaging_options, library  # noqa: E402

PARAMETERS = 100_000  # a small vector: the round's protocol work, not its bytes
TICKS = os.sysconf("SC_CLK_TCK")


def _process_table() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds so far) for every process."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS)
    return out


def tree_cpu_s(roots: list[int]) -> float:
    """CPU seconds of the processes ``roots`` and all their descendants."""
    table = _process_table()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    seen, stack, total = set(), list(roots), 0.0
    while stack:
        pid = stack.pop()
        if pid in seen or pid not in table:
            continue
        seen.add(pid)
        total += table[pid][1]
        stack.extend(children.get(pid, []))
    return total


def swarm(n: int, group_size: int, rounds: int) -> dict:
    os.environ.setdefault("HIVEMIND_LOGLEVEL", "CRITICAL")  # a step that finds no group is counted, not logged
    hivemind = library()
    import torch
    from hivemind.averaging import DecentralizedAverager
    from hivemind.utils import get_dht_time

    dhts = [hivemind.DHT(start=True, host_maddrs=["/ip4/127.0.0.1/tcp/0"])]
    first = [str(a) for a in dhts[0].get_visible_maddrs()]
    dhts += [hivemind.DHT(start=True, host_maddrs=["/ip4/127.0.0.1/tcp/0"], initial_peers=first) for _ in range(n - 1)]
    averagers = [DecentralizedAverager([torch.full((PARAMETERS,), float(i))], dht, prefix=f"bench-{n}-{group_size}",
                                       min_matchmaking_time=MATCHMAKING_S, start=True,
                                       **averaging_options(group_size))
                 for i, dht in enumerate(dhts)]
    roots = [d.pid for d in dhts] + [a.pid for a in averagers]
    groups, left_out, walls, cpus = [], [], [], []
    try:
        time.sleep(2.0)  # the DHT's routing tables fill
        for _ in range(rounds):
            before = tree_cpu_s(roots)
            start = get_dht_time() + MATCHMAKING_S
            controls = [a.step(scheduled_time=start, timeout=4 * MATCHMAKING_S, wait=False) for a in averagers]
            results = []
            for c in controls:
                try:
                    results.append(c.result())
                except Exception:  # noqa: BLE001 - a step that found no group (the library's own error)
                    results.append(None)
            walls.append(get_dht_time() - start + MATCHMAKING_S)
            cpus.append((tree_cpu_s(roots) - before) / n)
            groups.append([len(r) for r in results if r])
            left_out.append(sum(1 for r in results if not r))
    finally:
        for a in averagers:
            a.shutdown()
        for d in dhts:
            d.shutdown()
    return {"groups": groups, "left_out": left_out, "wall_s": walls, "cpu_s": cpus}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peers", default="8,16,24,32")
    parser.add_argument("--group-sizes", default="4,8,16")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    print(f"Hivemind {library().__version__}: DecentralizedAverager, {PARAMETERS} parameters, matchmaking "
          f"{MATCHMAKING_S:g} s, {os.cpu_count()} cores; {args.rounds} rounds per row (the first is left out)")
    print(f"{'peers':>5} {'G':>3} | {'groups: mean':>12} {'min':>4} {'max':>4} {'left out':>8} | "
          f"{'round wall s p50':>16} | {'CPU s per peer-round':>20}")
    for n in (int(v) for v in args.peers.split(",")):
        for g in (int(v) for v in args.group_sizes.split(",")):
            if g > n:
                continue
            out = {k: v[1:] or v for k, v in swarm(n, g, args.rounds).items()}  # the first round warms up
            sizes = [s for r in out["groups"] for s in r] or [0]
            print(f"{n:>5} {g:>3} | {statistics.fmean(sizes):>12.1f} {min(sizes):>4} {max(sizes):>4} "
                  f"{sum(out['left_out']):>8} | {statistics.median(out['wall_s']):>16.2f} | "
                  f"{statistics.median(out['cpu_s']):>20.3f}", flush=True)


if __name__ == "__main__":
    main()

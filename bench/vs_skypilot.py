"""geotrain's planner next to SkyPilot's optimizer on the same price data: process time, and the plan.

SkyPilot 0.14.1 runs offline through ``../shared/tools/skypilot-bench`` (its README says how to set
it up in a scratch folder ``$SKYBENCH``: catalogs built from ``../shared/data/prices``, a venv with
skypilot). For each job SkyPilot picks N identical nodes; geotrain plans the same demand: the
samples/s the perf model gives SkyPilot's choice, on the same accelerator, spot where SkyPilot's job
is spot. Both run as fresh processes; the figure is each process's CPU time (user + system), which
includes Python start-up and imports, as a user waits for them. Each job is run ``--repeat`` times
and the median is printed.

    .venv/bin/python bench/vs_skypilot.py --skybench $SKYBENCH [--repeat 3] [--workload convnext-large]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOBS = [  # (name, accelerator, GPUs per node, nodes, spot, geotrain's --strategy; None: the job's default)
    ("8 x T4 spot", "T4", 1, 8, True, None),
    ("4 x A100:8 spot", "A100", 8, 4, True, None),
    ("1,000 x T4 spot", "T4", 1, 1000, True, None),
    ("1,000 x T4 allreduce", "T4", 1, 1000, True, "allreduce"),  # SkyPilot's own kind of job: one gang
]


def timed(cmd: list[str], env: dict | None = None, timeout_s: float = 600) -> tuple[float, float, str, int]:
    """(cpu s, wall s, stdout, exit code) of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s)
        out, code = done.stdout, done.returncode
    except subprocess.TimeoutExpired:
        out, code = "", 124
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, out, code


def sky(skybench: Path, acc: str, count: int, nodes: int, spot: bool) -> tuple[float, float, dict]:
    env = dict(os.environ, TMPDIR=str(skybench / "tmp"))
    (skybench / "tmp").mkdir(exist_ok=True)
    cmd = [str(skybench / "venv/bin/python"), str(skybench / "sky_optimize.py"), "--catalog",
           str(skybench / "catalogs/full"), "--acc", acc, "--count", str(count), "--nodes", str(nodes),
           "--spot" if spot else "--on-demand", "--repeat", "0"]
    cpu, wall, out, code = timed(cmd, env)
    if code != 0:
        raise SystemExit(f"sky_optimize.py failed ({code}); see its README for the set-up")
    return cpu, wall, json.loads(out)


def target_of(choice: dict, workload: str, strategy: str | None) -> tuple[float, float, str]:
    """The perf model's samples/s and $/h for SkyPilot's choice (N nodes of one offer)."""
    from geotrain.domain import Constraints, JobSpec, Objective, SyncSettings, SyncStrategyName
    from geotrain.planning.planner import PlanOptions, plan_for_nodes
    from geotrain.pricing.snapshot import bundled_snapshot

    where = choice.get("zone") or choice["region"]
    market = "spot" if choice["use_spot"] else "on_demand"
    nodes = f"{choice['cloud'].lower()}/{where}/{choice['instance_type']}/{market}={choice['num_nodes']}"
    sync = SyncSettings() if strategy is None else SyncSettings(strategy=SyncStrategyName(strategy))
    job = JobSpec("skypilot", workload, Objective.MIN_COST, target_samples_per_s=1.0, sync=sync,
                  constraints=Constraints(max_nodes=max(64, choice["num_nodes"])))
    # SkyPilot's choice at the prices SkyPilot sees (the listed ones); geotrain's own plan prices a listing
    # far below its type elsewhere at the type's price (``pricing.outliers``), so its $/h may be the higher
    plan = plan_for_nodes(job, bundled_snapshot(), nodes, options=PlanOptions(frontier_points=0, raw_prices=True))
    return plan.totals.goodput_samples_per_s, plan.totals.usd_per_hour, nodes


def geotrain(acc: str, target: float, nodes: int, spot: bool, workload: str,
             strategy: str | None) -> tuple[float, float, str, int]:
    cmd = [str(ROOT / ".venv/bin/geotrain"), "plan", "--workload", workload, "--accelerators", acc,
           "--target-sps", f"{math.floor(target * 10) / 10:.1f}",  # never above what SkyPilot's choice trains
           "--max-nodes", str(max(64, nodes)), "--json"]
    if strategy is not None:
        cmd += ["--strategy", strategy]
    if spot:
        cmd.append("--spot-only")
    return timed(cmd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skybench", type=Path, default=os.environ.get("SKYBENCH"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workload", default="convnext-large")
    args = parser.parse_args()
    if args.skybench is None:
        raise SystemExit("--skybench: the folder set up from ../shared/tools/skypilot-bench (or $SKYBENCH)")
    print(f"workload {args.workload}; cpu s = user + system of a fresh process (median of {args.repeat})")
    print(f"{'job':<17} {'sky cpu s':>9} {'geo cpu s':>9} {'ratio':>6} {'geo wall s':>10}  "
          f"{'skypilot choice (perf model)':<58} geotrain plan")
    for name, acc, count, nodes, spot, strategy in JOBS:
        sky_runs = [sky(args.skybench, acc, count, nodes, spot) for _ in range(args.repeat)]
        choice = sky_runs[0][2]["choice"]
        target, sky_usd, sky_nodes = target_of(choice, args.workload, strategy)
        geo_runs = [geotrain(acc, target, nodes, spot, args.workload, strategy) for _ in range(args.repeat)]
        sky_cpu = statistics.median(r[0] for r in sky_runs)
        geo_cpu = statistics.median(r[0] for r in geo_runs)
        geo_wall = statistics.median(r[1] for r in geo_runs)
        out, code = geo_runs[-1][2], geo_runs[-1][3]
        if code == 0:
            plan = json.loads(out)
            totals = plan["totals"]
            solver = plan["solver"]
            share = solver["frontier_s"] / solver["total_s"] if solver["total_s"] else 0.0
            mix = (f"{sum(i['count'] for i in plan['items'])} nodes, {totals['goodput_samples_per_s']:,.0f}/s, "
                   f"${totals['usd_per_hour']:,.2f}/h, {solver['status']}; frontier {share:.0%} of planning")
        else:
            mix = f"exit {code}"
        sky_words = f"{sky_nodes}: {target:,.0f}/s, ${sky_usd:,.2f}/h"
        print(f"{name:<17} {sky_cpu:>9.2f} {geo_cpu:>9.2f} {geo_cpu / sky_cpu:>5.2f}x {geo_wall:>10.2f}  "
              f"{sky_words:<58} {mix}", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()

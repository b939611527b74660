"""Planner: wall time per objective on the full bundled catalog, and geotrain vs the best single region.

Part 1 — every objective on the full bundled catalog (all clouds and regions) plus an inventory of
three on-prem sites (examples/sites.yaml): wall time of the objective's search, the
solver status and gap, MIP solves (target: proven optimal in ≤ 2 s on 2 cores).

Part 2 — scenarios (ConvNextLarge and RoBERTa-XLM at several targets and budgets, hivemind): the
plan's $/1M samples next to the best single-region homogeneous choice (both evaluated by the perf
model), and the saving.

    .venv/bin/python bench/plan.py [--backend CBC|SCIP] [--part 1|2]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from geotrain.domain import Constraints, JobSpec, Objective
from geotrain.planning.planfile import savings
from geotrain.planning.planner import PlanOptions, build_context, make_plan, run_objective
from geotrain.pricing.inventory import load_inventory
from geotrain.pricing.snapshot import bundled_snapshot

HERE = Path(__file__).resolve().parent
SITES = HERE.parent / "examples" / "sites.yaml"


def part1(backend: str) -> None:
    snapshot, inventory = bundled_snapshot(), load_inventory(SITES)
    jobs = [
        JobSpec("min-cost", "convnext-large", Objective.MIN_COST, target_samples_per_s=3000),
        JobSpec("max-throughput", "convnext-large", Objective.MAX_THROUGHPUT, budget_usd_per_hour=20),
        JobSpec("min-cost-per-sample", "convnext-large", Objective.MIN_COST_PER_SAMPLE),
        JobSpec("deadline", "convnext-large", Objective.MIN_COST_BY_DEADLINE, total_samples=200_000_000,
                deadline_h=24),
    ]
    print(f"full bundled catalog ({len(snapshot)} offers) + 3 on-prem sites, backend {backend}")
    print(f"{'objective':<22} {'build s':>8} {'solve s':>8} {'status':<9} {'gap':>8} {'solves':>6} {'cands':>6}  plan")
    for job in jobs:
        start = time.perf_counter()
        ctx = build_context(job, snapshot, inventory=inventory, options=PlanOptions(backend=backend))
        built = time.perf_counter() - start
        result = run_objective(ctx, ctx.searcher())
        mix = "infeasible" if result.solution is None else " + ".join(
            f"{n}x{c.key}" for c, n in zip(ctx.problem.candidates, result.solution.counts, strict=True) if n)
        print(f"{job.objective.value:<22} {built:>8.2f} {result.wall_s:>8.2f} {result.status.value:<9} "
              f"{result.gap:>8.2e} {result.solves:>6} {len(ctx.problem.candidates):>6}  {mix}")


def part2(backend: str) -> None:
    snapshot = bundled_snapshot()
    t4 = Constraints(accelerators=frozenset({"T4"}), max_nodes_per_zone=8)
    t4_tight = Constraints(accelerators=frozenset({"T4"}), max_nodes_per_zone=4)
    scenarios = [
        ("convnext-large", Objective.MIN_COST, dict(target_samples_per_s=300), Constraints()),
        ("convnext-large", Objective.MIN_COST, dict(target_samples_per_s=3000), Constraints()),
        ("convnext-large", Objective.MIN_COST, dict(target_samples_per_s=300), t4),
        ("convnext-large", Objective.MAX_THROUGHPUT, dict(budget_usd_per_hour=5), t4),
        ("convnext-large", Objective.MAX_THROUGHPUT, dict(budget_usd_per_hour=20), Constraints()),
        ("roberta-xlm", Objective.MIN_COST, dict(target_samples_per_s=1000), Constraints()),
        ("roberta-xlm", Objective.MIN_COST, dict(target_samples_per_s=600), t4),
        ("roberta-xlm", Objective.MAX_THROUGHPUT, dict(budget_usd_per_hour=5), t4),
        ("roberta-xlm", Objective.MIN_COST_BY_DEADLINE, dict(total_samples=100_000_000, deadline_h=48), t4),
        ("convnext-large", Objective.MIN_COST, dict(target_samples_per_s=500), t4_tight),
        ("roberta-xlm", Objective.MIN_COST, dict(target_samples_per_s=1500), t4_tight),
    ]
    print(f"{'workload':<15} {'objective':<21} {'given':<22} {'limits':<14} {'plan $/1M':>10} {'base $/1M':>10} "
          f"{'saving':>7} {'sps':>8} {'nodes':>5} {'regions':>7} {'s':>6}")
    for workload, objective, given, constraints in scenarios:
        job = JobSpec("bench", workload, objective, constraints=constraints, **given)
        start = time.perf_counter()
        plan = make_plan(job, snapshot, options=PlanOptions(backend=backend, frontier_points=0))
        wall = time.perf_counter() - start
        base = plan.baseline.usd_per_million_samples if plan.baseline else float("nan")
        regions = len({i.offer.location.region_scope for i in plan.items})
        limits = f"T4, ≤{constraints.max_nodes_per_zone}/zone" if constraints.accelerators else "-"
        given_text = ", ".join(f"{k}={v:g}" for k, v in given.items())
        print(f"{workload:<15} {objective.value:<21} {given_text:<22} {limits:<14} "
              f"{plan.totals.usd_per_million_samples:>10.3f} {base:>10.3f} {savings(plan) or 0:>7.1%} "
              f"{plan.totals.samples_per_s:>8.0f} {plan.nodes:>5} {regions:>7} {wall:>6.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="CBC")
    parser.add_argument("--part", choices=["1", "2"])
    args = parser.parse_args()
    if args.part in (None, "1"):
        part1(args.backend)
    if args.part in (None, "2"):
        part2(args.backend)


if __name__ == "__main__":
    main()

"""Planner: wall time per objective on the full bundled catalog, and geotrain vs the best single region.

Part 1 — every objective on the full bundled catalog (all clouds and regions) plus an inventory of
three on-prem sites (examples/sites.yaml): wall time of the objective's search, the
solver status and gap, MIP solves (target: proven optimal in ≤ 2 s on 2 cores).

Part 2 — the scenario table (``part2``): T4 fleets with per-zone capacity from the capacity model,
each strategy, on-prem plus spot, a budget cap, a deadline; the plan's $/1M samples next to each
baseline (all evaluated by the perf model), the saving against each, the status, wall and process
time.

    .venv/bin/python bench/plan.py [--backend CBC|SCIP] [--part 1|2]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from geotrain.domain import BaselineKind, Constraints, JobSpec, Objective, SyncSettings, SyncStrategyName
from geotrain.errors import GeotrainError
from geotrain.planning.planfile import advantage
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
    """The scenario table: T4 fleets of 500–2,000 samples/s with per-zone capacity from the capacity
    model (``capacity_confidence`` 0.5), each strategy, on-prem plus spot, a budget cap and a deadline;
    the plan next to each baseline (saving = 1 − plan $/1M ÷ baseline $/1M), the solver's status, the
    plan's wall and process time."""
    snapshot, inventory = bundled_snapshot(), load_inventory(SITES)
    t4 = Constraints(accelerators=frozenset({"T4"}), capacity_confidence=0.5)
    mixed = Constraints(accelerators=frozenset({"T4", "A10", "A10G", "L4", "RTX8000", "V100"}), max_nodes_per_zone=4,
                        capacity_confidence=0.5)
    sync = {s: SyncSettings(strategy=SyncStrategyName(s)) for s in ("hivemind", "allreduce", "local-sgd", "asgd-ga")}
    scenarios = [
        ("T4 500/s", "convnext-large", Objective.MIN_COST, dict(target_samples_per_s=500), t4, "hivemind", None),
        ("T4 1000/s", "convnext-large", Objective.MIN_COST, dict(target_samples_per_s=1000), t4, "hivemind", None),
        ("T4 2000/s", "roberta-xlm", Objective.MIN_COST, dict(target_samples_per_s=2000), t4, "hivemind", None),
        ("T4 1000/s allreduce", "roberta-xlm", Objective.MIN_COST, dict(target_samples_per_s=1000), t4, "allreduce",
         None),
        ("T4 1000/s local-sgd", "roberta-xlm", Objective.MIN_COST, dict(target_samples_per_s=1000), t4, "local-sgd",
         None),
        ("T4 1000/s asgd-ga", "roberta-xlm", Objective.MIN_COST, dict(target_samples_per_s=1000), t4, "asgd-ga", None),
        ("on-prem + spot 800/s", "convnext-large", Objective.MIN_COST, dict(target_samples_per_s=800), mixed,
         "hivemind", inventory),
        ("T4 budget $5/h", "convnext-large", Objective.MAX_THROUGHPUT, dict(budget_usd_per_hour=5), t4, "hivemind",
         None),
        ("T4 deadline 1e8 in 48 h", "roberta-xlm", Objective.MIN_COST_BY_DEADLINE,
         dict(total_samples=100_000_000, deadline_h=48), t4, "hivemind", None),
    ]
    kinds = list(BaselineKind)
    head = " ".join(f"{k.value[:18]:>18}" for k in kinds)
    print("capacity: each zone's pool capped at what the capacity model gives at once with a chance of 0.5")
    print(f"{'scenario':<24} {'plan $/1M':>9} {'sps':>7} {'nodes':>5} {'zones':>5} {'status':<9} "
          f"{'wall s':>6} {'cpu s':>6}  {head}  (baseline $/1M, saving; max_throughput: more samples/s)")
    for name, workload, objective, given, constraints, strategy, inv in scenarios:
        job = JobSpec("bench", workload, objective, constraints=constraints, sync=sync[strategy], **given)
        options = PlanOptions(backend=backend, frontier_points=0)
        start, cpu = time.perf_counter(), time.process_time()
        try:
            plan = make_plan(job, snapshot, inventory=inv, options=options)
        except GeotrainError as error:
            print(f"{name:<24} {str(error)[:150]}")
            continue
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        by_kind = {b.kind: b for b in plan.baselines}
        cells = []
        for kind in kinds:
            b = by_kind.get(kind)
            share = advantage(plan, b)[0] if b is not None else None
            cells.append(f"{'none':>18}" if b is None else f"{b.usd_per_million_samples:>9.3f} {share:>+7.0%} ")
        zones = len({i.offer.location.zone_scope for i in plan.items})
        print(f"{name:<24} {plan.totals.usd_per_million_samples:>9.3f} {plan.totals.goodput_samples_per_s:>7.0f} "
              f"{plan.nodes:>5} {zones:>5} {plan.solver.status:<9} {wall:>6.1f} {cpu:>6.1f}  {' '.join(cells)}")


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

"""Why a job is infeasible, in words: the best the constraints allow, and which limit to raise."""

from __future__ import annotations

from dataclasses import replace

from geotrain.domain import Objective
from geotrain.planning.planner import PlanningContext
from geotrain.solver.result import SearchResult

_RELAXATIONS = (
    ("budget_usd_per_hour", None, "raise --budget"),
    ("max_regions", None, "raise --max-regions"),
    ("max_nodes_per_zone", None, "raise --max-per-zone"),
    ("max_zone_share", None, "raise the zone share limit"),
    ("max_spot_share", None, "allow more spot nodes"),
)


def explain_infeasible(ctx: PlanningContext, result: SearchResult) -> str:
    job, cands = ctx.job, ctx.candidates
    if not ctx.problem.candidates:
        skipped = "; ".join(f"{n} offers: {why}" for why, n in sorted(cands.skipped.items()))
        return (f"no offer can run {job.workload}: {cands.considered} offers pass the filters"
                + (f" ({skipped})" if skipped else "")
                + "; widen --clouds/--regions/--continents, drop --spot-only, or add rates with --rates")
    limits = ctx.problem.limits
    reach = ctx.searcher(replace(limits, budget_usd_per_hour=limits.budget_usd_per_hour,
                                 min_samples_per_s=None)).max_throughput()
    best = reach.samples_per_s or 0.0
    where = _describe(limits, ctx.problem.node_cap)
    want = _wanted(ctx)
    helps = []
    if want is not None:
        for name, value, advice in _RELAXATIONS:
            if getattr(limits, name) is None:
                continue
            relaxed = replace(limits, **{name: value})
            if ctx.searcher(relaxed).min_cost(want).solution is not None:
                helps.append(advice)
        bigger = replace(limits, max_nodes=ctx.problem.node_cap * 4)
        if not helps and _more_nodes_possible(ctx) and ctx.searcher(bigger).min_cost(want).solution is not None:
            helps.append("raise --max-nodes")
    advice = " or ".join(helps) if helps else "widen the offer filters or lower the target"
    if want is None:
        return f"no mix meets the constraints ({where}); {advice}"
    what = ("deadline needs" if job.objective is Objective.MIN_COST_BY_DEADLINE
            and job.target_samples_per_s is None else "target")
    return (f"{what} {want:,.0f} samples/s is out of reach: at most {best:,.0f} with {where}; {advice}")


def _wanted(ctx: PlanningContext) -> float | None:
    job = ctx.job
    if job.objective is Objective.MIN_COST:
        return job.target_samples_per_s
    return ctx.problem.limits.min_samples_per_s


def _more_nodes_possible(ctx: PlanningContext) -> bool:
    return sum(c.capacity for c in ctx.problem.candidates) > ctx.problem.node_cap


def _describe(limits, node_cap: int) -> str:  # noqa: ANN001
    parts = [f"≤ {node_cap} nodes"]
    if limits.max_regions is not None:
        parts.append(f"≤ {limits.max_regions} region{'s' if limits.max_regions > 1 else ''}")
    if limits.max_nodes_per_zone is not None:
        parts.append(f"≤ {limits.max_nodes_per_zone} per zone")
    if limits.budget_usd_per_hour is not None:
        parts.append(f"under ${limits.budget_usd_per_hour:,.2f}/h")
    return ", ".join(parts)

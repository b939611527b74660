"""Why a job is infeasible, in words: the best the constraints allow, and which limit to raise."""

from __future__ import annotations

from dataclasses import replace

from geotrain.domain import Objective
from geotrain.planning.baseline import baselines_for
from geotrain.planning.context import PlanningContext
from geotrain.errors import SearchCutShortError
from geotrain.solver.result import SearchResult
from geotrain.solver.search import Searcher

REACH_TIME_S = 10.0  # for "at most X samples/s": a bound found in this time
CHECK_TIME_S = 5.0  # per relaxation tried

_RELAXATIONS = (
    ("budget_usd_per_hour", None, "raise --budget"),
    ("max_regions", None, "raise --max-regions"),
    ("max_nodes_per_zone", None, "raise --max-per-zone"),
    ("max_accelerators_per_zone", None, "raise --max-gpus-per-zone"),
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
    reach_search = ctx.searcher(replace(limits, min_samples_per_s=None))
    reach_search.tolerance, reach_search.time_limit_s = 0.01, REACH_TIME_S
    reach = reach_search.max_throughput()
    best = reach.samples_per_s or 0.0
    ceiling = best / (1 - reach.gap) if reach.gap < 1 else float("inf")
    reach_text = f"{best:,.0f}" if reach.gap <= 0.01 else f"{best:,.0f} to {ceiling:,.0f} (search cut short)"
    where = _describe(limits, ctx.problem.node_cap)
    want = _wanted(ctx)
    if want is not None and ceiling >= want * (1 - 1e-9):
        # the bound does not rule the goal out: the search ran out of time, nothing proves "out of reach"
        raise SearchCutShortError(cut_short_words(ctx, reach_search, None))
    helps = []
    if want is not None:
        for name, value, advice in _RELAXATIONS:
            if getattr(limits, name) is None:
                continue
            if _feasible(ctx, replace(limits, **{name: value}), want):
                helps.append(advice)
        bigger = replace(limits, max_nodes=ctx.problem.node_cap * 4)
        if not helps and _more_nodes_possible(ctx) and _feasible(ctx, bigger, want):
            helps.append("raise --max-nodes")
    ceiling_words = hivemind_ceiling(ctx, want)
    if ceiling_words and not helps:
        helps.append(ceiling_words)
    advice = " or ".join(helps) if helps else "widen the offer filters or lower the target"
    if want is None:
        return f"no mix meets the constraints ({where}); {advice}"
    what = ("deadline needs" if job.objective is Objective.MIN_COST_BY_DEADLINE
            and job.target_samples_per_s is None else "target")
    return f"{what} {want:,.0f} samples/s is out of reach: at most {reach_text} with {where}; {advice}"


def cut_short_words(ctx: PlanningContext, searcher: Searcher, elapsed_s: float | None) -> str:
    """A search that ran out of time without a mix that meets the goal and without a proof that none
    does: how long it ran, the fastest admissible mix it evaluated (by the perf model), what to do."""
    want = _wanted(ctx)
    known = [(e.samples_per_s, -e.usd_per_hour, counts) for counts, e in searcher.model.known_mixes()]
    words = (f"no mix found within {ctx.options.time_limit_s:,.0f} s"
             + (f" (the search ran {elapsed_s:,.0f} s)" if elapsed_s is not None else "")
             + (f" that trains {want:,.0f} samples/s" if want is not None else " that meets the goal")
             + ", and none was proven impossible")
    if known:
        rate, usd, counts = max(known)
        mix = " + ".join(f"{n} x {c.key}" for c, n in zip(ctx.problem.candidates, counts, strict=True) if n)
        words += f"; the fastest mix it found: {mix} ({rate:,.1f} samples/s, ${-usd:,.2f}/h)"
    return words + "; raise --time-limit, or loosen a limit (--max-per-zone, --max-gpus-per-zone, --budget)"


def hivemind_ceiling(ctx: PlanningContext, want: float | None) -> str | None:
    """Hivemind averages once per ``S`` samples (the target batch size) and every round costs at least
    its fixed overhead ``A_k``: two or more nodes train below ``S / A_2`` however fast they are. When
    that ceiling is below the target and no single node reaches it, say so and how large ``S`` must be."""
    oracle = ctx.problem.oracle
    if want is None or oracle.strategy != "hivemind" or ctx.problem.node_cap < 2:
        return None
    if any(c.rate * c.goodput >= want for c in ctx.problem.candidates):
        return None
    overhead = oracle.overhead_s(2)
    if overhead <= 0:
        return None
    size = oracle.samples_per_round
    ceiling = size / overhead
    if ceiling > want:
        return None
    needed = want * overhead * 2  # at twice the ceiling's batch, the overhead takes at most half a round
    return (f"the hivemind ceiling binds (target batch {size:,.0f} samples / round overhead ≥ {overhead:.1f} s "
            f"= at most {ceiling:,.0f} samples/s with two or more nodes): raise --tbs to at least {needed:,.0f}")


def _feasible(ctx: PlanningContext, limits, target: float) -> bool:  # noqa: ANN001
    """Whether the target is reachable under ``limits`` (False also when it cannot tell in time): a
    simpler choice that meets it under those limits proves it at once; otherwise the MIP decides."""
    relaxed = replace(ctx, problem=replace(ctx.problem, limits=limits))
    if ctx.job.objective is Objective.MIN_COST and baselines_for(relaxed)[0]:
        return True
    searcher = ctx.searcher(limits)
    searcher.time_limit_s = CHECK_TIME_S
    return searcher.min_cost(target).solution is not None


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
    if limits.max_accelerators_per_zone is not None:
        parts.append(f"≤ {limits.max_accelerators_per_zone} GPUs per zone")
    if limits.budget_usd_per_hour is not None:
        parts.append(f"under ${limits.budget_usd_per_hour:,.2f}/h")
    return ", ".join(parts)

"""The best single-region homogeneous choice: n nodes of one offer, chosen by the job's objective.

This is what a one-offer tool (SkyPilot's cheapest resource) can do at best; the plan reports how
much the mix saves against it. For max_throughput, rates within the solver's relative tolerance of
the best count as equal and the cheapest of them wins, as in the solver's own search. Candidates are scanned with the solver's model (fast), the winner is
evaluated with the perf model like the plan itself.
"""

from __future__ import annotations

from dataclasses import replace

from geotrain.domain import Baseline, NodeGroup, Objective
from geotrain.planning.planner import PlanningContext
from geotrain.solver import semantics


def best_homogeneous(ctx: PlanningContext) -> Baseline | None:
    job, problem = ctx.job, ctx.problem
    limits = problem.limits
    best = None  # (score, candidate index, n)
    fastest: list[tuple[float, float, int, int]] = []  # max_throughput: (rate, cost, candidate index, n)
    for index, cand in enumerate(problem.candidates):
        if cand.minimum and any(c.minimum for j, c in enumerate(problem.candidates) if j != index):
            continue
        single = replace(problem, candidates=(cand,), limits=limits)
        top = min(cand.capacity, problem.node_cap)
        if limits.max_nodes_per_zone is not None:
            top = min(top, limits.max_nodes_per_zone)
        for n in range(max(1, cand.minimum), top + 1):
            x = (n,)
            if not semantics.structurally_feasible(single, x):
                continue
            rate = semantics.throughput(single, x)
            floor = limits.min_samples_per_s or 0.0
            cost = semantics.hourly_cost(single, x, rate)
            if rate < floor or (limits.budget_usd_per_hour is not None and cost > limits.budget_usd_per_hour):
                continue
            if job.objective is Objective.MIN_COST:
                if rate < job.target_samples_per_s:
                    continue
                score = (cost, 0.0)
            elif job.objective is Objective.MAX_THROUGHPUT:
                fastest.append((rate, cost, index, n))
                continue
            else:
                score = (cost / rate, 0.0)
            if best is None or score < best[0]:
                best = (score, index, n)
            if job.objective is Objective.MIN_COST:
                break  # more nodes of the same offer only cost more
    if fastest:
        top_rate = max(f[0] for f in fastest)
        near = [f for f in fastest if f[0] >= top_rate * (1 - ctx.options.tolerance)]
        _, cost, index, n = min(near, key=lambda f: (f[1], -f[0]))
        best = ((cost, 0.0), index, n)
    if best is None:
        return None
    _, index, n = best
    offer = ctx.candidates.offers[problem.candidates[index].key]
    estimate = ctx.perf.predict(ctx.workload, [NodeGroup(offer, n)], job.sync, ctx.data)
    return Baseline(offer, n, estimate.samples_per_s, estimate.usd_per_hour, estimate.usd_per_million_samples)

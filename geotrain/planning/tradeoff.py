"""Why a plan is one homogeneous choice: the term that binds when a mix would spread further.

When the planned mix is one instance type and market in one region (what a simpler tool would pick),
the user should see what a mix would have traded. For the ``SWAPS_TRIED`` candidates cheapest per
good sample that the plan does not use (another instance type, market or region), one of the plan's
nodes of its dearest offer per good sample is replaced by enough nodes of that candidate to keep its
rate at full speed, and the result is priced by the perf model (the referee). The best of those
swaps by the job's objective names what stops it, largest first among:

* *capacity*: no such swap keeps the limits (per-zone, region, node or quota limits);
* *egress*: traffic between places costs more than the cheaper nodes save;
* *the round*: the swapped mix trains slower (a slower peer sets the pace; more peers add overhead),
  so it misses the goal or each sample costs more;
* *price*: the other nodes are dearer per sample once their goodput is counted.
"""

from __future__ import annotations

import math

from geotrain.domain import NodeGroup
from geotrain.planning.context import PlanningContext, counts_of, keeps_the_goal, objective_score, totals_of
from geotrain.solver import semantics

SWAPS_TRIED = 8


def homogeneous(groups: list[NodeGroup]) -> bool:
    """One instance type and market in one region (zones of it may differ)."""
    kinds = {(g.offer.location.cloud, g.offer.location.region, g.offer.shape.instance_type, g.offer.market)
             for g in groups}
    return len(kinds) == 1


def why_homogeneous(ctx: PlanningContext, groups: list[NodeGroup]) -> str | None:
    """A sentence on what binds, for a homogeneous plan; None for a mix, or where nothing was tried."""
    if not groups or not homogeneous(groups):
        return None
    problem, referee = ctx.problem, ctx.problem.referee
    cands = problem.candidates
    x = counts_of(ctx, groups)
    used = [i for i, n in enumerate(x) if n]
    planned = {(cands[i].region, ctx.candidates.offers[cands[i].key].shape.instance_type, cands[i].market)
               for i in used}

    def per_good_sample(i: int) -> float:
        return cands[i].usd_per_good_sample_s

    others = sorted((j for j, c in enumerate(cands)
                     if (c.region, ctx.candidates.offers[c.key].shape.instance_type, c.market) not in planned),
                    key=lambda j: (per_good_sample(j), cands[j].key))[:SWAPS_TRIED]
    if not others:
        return None
    out_i = max(used, key=per_good_sample)
    base = referee.estimate(x)
    mine = totals_of(ctx, groups, base)
    best = None
    blocked = 0
    for j in others:
        k = max(1, math.ceil(cands[out_i].rate * cands[out_i].goodput / (cands[j].rate * cands[j].goodput)))
        y = list(x)
        y[out_i] -= 1
        y[j] += k
        y = tuple(y)
        if not semantics.structurally_feasible(problem, y):
            blocked += 1
            continue
        estimate = referee.estimate(y)
        mix = [NodeGroup(ctx.candidates.offers[c.key], n) for c, n in zip(cands, y, strict=True) if n]
        theirs = totals_of(ctx, mix, estimate)
        keeps = keeps_the_goal(ctx, theirs.goodput_samples_per_s, estimate.usd_per_hour)
        rank = (not keeps, objective_score(ctx, theirs.goodput_samples_per_s, estimate.usd_per_hour))
        if best is None or rank < best[0]:
            best = (rank, j, k, estimate, theirs, keeps)
    if best is None:
        return (f"no other offer fits: swapping a node for the {len(others)} offers cheapest per sample breaks the "
                "job's limits (nodes per zone, regions, nodes or quotas): capacity binds")
    _, j, k, estimate, theirs, keeps = best
    offer = ctx.candidates.offers[cands[j].key]
    swap = (f"swapping 1 x {ctx.candidates.offers[cands[out_i].key].offer_id} for {k} x {offer.offer_id}")
    d_compute = estimate.compute_usd_per_hour - base.compute_usd_per_hour
    d_egress = (estimate.egress_usd_per_hour + estimate.data_egress_usd_per_hour
                - base.egress_usd_per_hour - base.data_egress_usd_per_hour)
    d_rate = theirs.goodput_samples_per_s - mine.goodput_samples_per_s
    figures = (f"compute {d_compute:+,.3f} $/h, egress {d_egress:+,.3f} $/h, {d_rate:+,.1f} samples/s "
               f"(round {base.time_per_round_s:,.1f} -> {estimate.time_per_round_s:,.1f} s)")
    if not keeps:
        binding = "the round: the swapped mix misses the goal (a slower peer or more peers)"
    elif d_egress > 0 and d_egress >= -d_compute:
        binding = "egress: traffic between places costs more than the cheaper nodes save"
    elif d_compute >= 0:
        binding = "price: the other nodes cost more per sample once goodput is counted"
    else:
        binding = "the round: the swap saves on nodes but trains slower, so each sample costs more"
    tail = f"; {blocked} other swaps break the limits" if blocked else ""
    return f"the best swap to another offer, {swap}: {figures}; binding term: {binding}{tail}"

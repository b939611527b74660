"""Fallbacks for the launcher: for each zone of the plan, the zones that can take its nodes when it
cannot be had (no capacity, failed boots, preemptions: the launcher blocks a whole zone), best first,
each evaluated by the perf model as the whole plan with that zone's nodes moved there.

A zone Z' can take the nodes of zone Z when, for every planned offer in Z, Z' has an offer of the same
accelerator model and count per node and the same market (the cheapest such one) that can hold them
(its capacity, at the plan's capacity confidence, counting nodes the plan has there already). Offers
the MIP never saw because a cheaper one of their region dominates them count too: in another zone
they are still another zone. Places a new account must opt in to (``clouds.geography.needs_opt_in``: AWS
opt-in regions, Local and Wavelength Zones) are no fallback unless the job or the planned mix names them. The
``SCANNED_PER_ZONE`` zones cheapest for the moved nodes are
evaluated; those whose moved mix keeps the job's limits and goal are kept, ordered by the job's
objective (min_cost: $/h; max_throughput: samples/s, then $/h; otherwise $/1M samples), then by the
capacity model's chance of getting the moved nodes at once. The launcher walks them in order before
it re-plans (``launcher.provisioning``): no solver runs while a zone is out of capacity, as long as a
fallback is left.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from geotrain.clouds.geography import launcher_may_go, named_places
from geotrain.domain import Fallback, NodeGroup
from geotrain.planning.context import PlanningContext, keeps_the_goal, objective_score, totals_of
from geotrain.planning.referee import PerfReferee
from geotrain.solver import semantics

FALLBACKS_PER_ZONE = 3
SCANNED_PER_ZONE = 12


def fallbacks_of(ctx: PlanningContext, groups: list[NodeGroup]) -> tuple[Fallback, ...]:
    offers = dict(ctx.candidates.offers)
    cands = list(ctx.problem.candidates)
    for c, offer in ctx.candidates.alternates:
        cands.append(c)
        offers[c.key] = offer
    index = {c.key: i for i, c in enumerate(cands)}
    if any(g.offer.offer_id not in index for g in groups):
        return ()  # a mix of offers outside the candidates: nothing to evaluate it against
    referee = PerfReferee(ctx.perf, ctx.workload, ctx.job.sync, tuple(cands), offers, ctx.data)
    problem = replace(ctx.problem, candidates=tuple(cands), referee=referee)
    counts = [0] * len(cands)
    for g in groups:
        counts[index[g.offer.offer_id]] += g.count
    capacity = ctx.options.capacity_model()

    def kind(j: int) -> tuple:
        shape = offers[cands[j].key].shape
        return shape.accelerator, shape.accelerator_count, cands[j].market

    # a fallback is the launcher's own move after a failure: never into a place a new account must opt in to
    # (an AWS opt-in region, a Local or Wavelength Zone) that neither the job nor the planned mix names
    named = named_places(ctx.job, locations=[g.offer.location for g in groups])
    by_place: dict[str, dict[tuple, list[int]]] = defaultdict(lambda: defaultdict(list))
    for j, c in enumerate(cands):
        if not c.minimum and c.market != "owned" and launcher_may_go(offers[c.key].location, named):
            by_place[c.zone][kind(j)].append(j)
    for kinds in by_place.values():
        for js in kinds.values():
            js.sort(key=lambda j: (cands[j].price_usd_per_hour + cands[j].data_usd_per_hour, cands[j].key))
    planned: dict[str, list[int]] = defaultdict(list)
    for i, n in enumerate(counts):
        if n:
            planned[cands[i].zone].append(i)
    out: list[Fallback] = []
    for zone, members in sorted(planned.items()):
        if any(cands[i].minimum or cands[i].market == "owned" for i in members):
            continue  # nodes that must stay, or machines of the user's own: nothing to move
        options = []
        for place, kinds in by_place.items():
            if place == zone:
                continue
            moves, moved, price = [], list(counts), 0.0
            for i in members:
                j = next((j for j in kinds.get(kind(i), []) if cands[j].capacity >= moved[j] + counts[i]), None)
                if j is None:
                    break
                moved[j] += counts[i]
                moved[i] -= counts[i]
                moves.append((i, j))
                price += counts[i] * (cands[j].price_usd_per_hour + cands[j].data_usd_per_hour)
            else:
                options.append((price, place, tuple(moved), tuple(moves)))
        options.sort(key=lambda o: o[:2])
        found = []
        for _, place, x, moves in options[:SCANNED_PER_ZONE]:
            if not semantics.admissible(problem, x, referee.evaluate(x)):
                continue
            estimate = referee.estimate(x)
            mix = [NodeGroup(offers[c.key], n) for c, n in zip(cands, x, strict=True) if n]
            rate = totals_of(ctx, mix, estimate).goodput_samples_per_s
            if not keeps_the_goal(ctx, rate, estimate.usd_per_hour):
                continue
            chance = capacity.launch_probability([(offers[cands[j].key], counts[i]) for i, j in moves])
            found.append((objective_score(ctx, rate, estimate.usd_per_hour), -chance, place, Fallback(
                zone, tuple((cands[i].key, offers[cands[j].key]) for i, j in moves), estimate.samples_per_s,
                estimate.usd_per_hour, chance)))
        found.sort(key=lambda f: f[:3])
        out += [f[3] for f in found[:FALLBACKS_PER_ZONE]]
    return tuple(out)

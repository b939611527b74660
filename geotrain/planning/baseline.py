"""What simpler tools would pick for the same job, under the same limits, by the job's objective:

- *single-zone homogeneous*: n nodes of one offer (one zone, or one region-wide offer);
- *single-region homogeneous*: n nodes of one instance type and market over the zones of one region,
  the cheapest zones filled first;
- *SkyPilot's pick*: what SkyPilot's optimizer buys for ``accelerators: X:k`` and ``num_nodes: n``: the
  cheapest offer per hour of that accelerator type that holds all n, on-demand unless the job asks for spot
  only (``skypilot_market``); for each type the smallest n that meets the goal, and the best type.

Options are scanned with the solver's model (fast; for min_cost, the smallest count that meets the goal,
by bisection between the counts where a choice opens another zone); the best few of each kind are evaluated with the
perf model, like the plan itself, and the best by the perf model that meets the job's goal is the
baseline. A kind with no option meeting the goal is reported with the reason. For max_throughput,
rates within the solver's relative tolerance of the best count as equal and the cheapest wins.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

from geotrain.domain import BASELINE_WORDS, Baseline, BaselineKind, Market, NodeGroup, Objective
from geotrain.planning.context import PlanningContext, estimate_of, keeps_the_goal, objective_score, totals_of
from geotrain.providers.base import LOCAL_PROVIDER
from geotrain.solver import semantics

EVALUATED_PER_KIND = 8  # options of each kind evaluated with the perf model


@dataclass(frozen=True, slots=True)
class _Option:
    counts: tuple[tuple[int, int], ...]  # (candidate index, nodes)
    rate: float  # the solver model's samples/s
    usd_per_hour: float


def baselines_for(ctx: PlanningContext) -> tuple[tuple[Baseline, ...], tuple[tuple[BaselineKind, str], ...]]:
    """The simpler choices the plan is compared with; none for a local-provider plan, where every offer
    trains at this machine's CPU rate and the comparison would say nothing about the clouds."""
    if ctx.options.provider == LOCAL_PROVIDER or not ctx.problem.candidates:
        return (), ()
    return baselines_of(ctx)


def baselines_of(ctx: PlanningContext) -> tuple[tuple[Baseline, ...], tuple[tuple[BaselineKind, str], ...]]:
    options = _options(ctx)
    found, missing = [], []
    for kind in BaselineKind:
        best = _best(ctx, options[kind])
        if best is None:
            missing.append((kind, _why_none(ctx, kind)))
        else:
            found.append(replace(best, kind=kind))
    return tuple(found), tuple(missing)


def _options(ctx: PlanningContext) -> dict[BaselineKind, list[_Option]]:
    problem = ctx.problem
    limits = problem.limits
    cands = problem.candidates
    out: dict[BaselineKind, list[_Option]] = {kind: [] for kind in BaselineKind}
    pinned = [i for i, c in enumerate(cands) if c.minimum]
    if len(pinned) > 1:
        return out  # nodes that must stay in several offers: no homogeneous choice keeps them
    allowed = pinned or range(len(cands))

    def room_of(i: int) -> int:
        room = cands[i].capacity
        if limits.max_nodes_per_zone is not None:
            room = min(room, limits.max_nodes_per_zone)
        if limits.max_accelerators_per_zone is not None:
            room = min(room, limits.max_accelerators_per_zone // cands[i].accelerators)
        return room

    def scan(indices: list[int], n: int) -> _Option | None:
        """n nodes over ``indices`` (cheapest first, each up to its capacity and the zone limit)."""
        left, counts = n, []
        for i in indices:
            take = min(room_of(i), left)
            if take:
                counts.append((i, take))
                left -= take
            if not left:
                break
        if left:
            return None
        sub = replace(problem, candidates=tuple(cands[i] for i, _ in counts))
        x = tuple(k for _, k in counts)
        if not semantics.structurally_feasible(sub, x):
            return None
        rate = semantics.throughput(sub, x)
        return _Option(tuple(counts), rate, semantics.hourly_cost(sub, x, rate))

    top = problem.node_cap
    # for min_cost more nodes of the same choice only cost more once the target is met: stop there
    enough = (lambda o: o is not None and keeps_the_goal(ctx, o.rate, o.usd_per_hour)) \
        if ctx.job.objective is Objective.MIN_COST else (lambda o: False)  # noqa: E731
    zone_limit = limits.max_nodes_per_zone if limits.max_nodes_per_zone is not None else top
    sweep = _smallest_enough if ctx.job.objective is Objective.MIN_COST else _every
    for i in allowed:
        out[BaselineKind.SINGLE_ZONE] += sweep(max(1, cands[i].minimum), min(cands[i].capacity, zone_limit, top),
                                               lambda n, i=i: scan([i], n), enough)
    # SkyPilot's pick: the user names one accelerator type (model and count per node) and num_nodes n; its
    # optimizer takes the cheapest offer per hour of that type that holds all n, on-demand unless use_spot
    market = skypilot_market(ctx)
    by_type: dict[tuple, list[int]] = defaultdict(list)
    for i in allowed:
        shape = ctx.candidates.offers[cands[i].key].shape
        if cands[i].market == market:
            by_type[(shape.accelerator, shape.accelerator_count)].append(i)

    def identical(indices: list[int], n: int) -> _Option | None:
        holding = [(cands[i].price_usd_per_hour, -cands[i].rate, cands[i].key, i) for i in indices
                   if cands[i].capacity >= n and cands[i].minimum <= n]
        return scan([min(holding)[3]], n) if holding else None

    for indices in by_type.values():
        largest = max(cands[i].capacity for i in indices)  # no offer holds more: SkyPilot's n stops there
        out[BaselineKind.CHEAPEST_IDENTICAL] += sweep(1, min(top, zone_limit, largest),
                                                      lambda n, indices=indices: identical(indices, n), enough)
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i in allowed:
        c = cands[i]
        offer = ctx.candidates.offers[c.key]
        groups[(c.region, offer.shape.instance_type, c.market)].append(i)
    for indices in groups.values():
        indices.sort(key=lambda i: (cands[i].price_usd_per_hour, cands[i].key))
        rooms, breaks = 0, []
        for i in indices:  # where ``scan`` opens the next offer's zone
            rooms += room_of(i)
            breaks.append(rooms)
        out[BaselineKind.SINGLE_REGION] += sweep(1, top, lambda n, indices=indices: scan(indices, n), enough, breaks)
    return out




def _every(low: int, high: int, option_of, enough, breaks=()) -> list[_Option]:  # noqa: ANN001
    """Every node count from ``low`` to ``high`` (max_throughput and the per-sample objectives: any may win)."""
    return [o for n in range(low, high + 1) if (o := option_of(n)) is not None]


def _smallest_enough(low: int, high: int, option_of, enough, breaks=()) -> list[_Option]:  # noqa: ANN001
    """min_cost: more nodes of the same choice only cost more once the goal is met, so the smallest count
    that meets it is the choice's best. ``breaks``: the counts at which the choice's fill opens another
    zone (its rate may fall there: a ring across zones); between two, the rate of n nodes grows with n,
    so the first segment whose largest count meets the goal is bisected for its smallest (a few dozen
    evaluations where 1,000 nodes are allowed, not 1,000). Every option evaluated is kept."""
    seen: dict[int, _Option | None] = {}

    def met(n: int) -> bool:
        if n not in seen:
            seen[n] = option_of(n)
        return enough(seen[n])

    edges = sorted({b for b in breaks if low <= b < high} | {high})
    start = low
    for top in edges:
        if met(top):
            bad, n = start - 1, top  # met(n); the counts up to ``bad`` are known not to
            while n - bad > 1:
                mid = (bad + n) // 2
                bad, n = (bad, mid) if met(mid) else (mid, n)
            break
        start = top + 1
    return [o for o in seen.values() if o is not None]


def skypilot_market(ctx: PlanningContext) -> str:
    """The market SkyPilot's optimizer buys for the job: spot where the job asks for spot only (``--spot-only``,
    or every resource choice of its task says ``use_spot: true``), else on-demand (SkyPilot's default)."""
    c = ctx.job.constraints
    spot = c.spot_only or (bool(c.resources) and all(r.market == Market.SPOT for r in c.resources))
    return Market.SPOT.value if spot else Market.ON_DEMAND.value


def _best(ctx: PlanningContext, options: list[_Option | None]) -> Baseline | None:
    feasible = [o for o in options if o is not None and keeps_the_goal(ctx, o.rate, o.usd_per_hour)]
    feasible.sort(key=lambda o: objective_score(ctx, o.rate, o.usd_per_hour))
    best, best_score = None, None
    for option in feasible[:EVALUATED_PER_KIND]:
        groups = [NodeGroup(ctx.candidates.offers[ctx.problem.candidates[i].key], n) for i, n in option.counts]
        estimate = estimate_of(ctx, groups)
        rate = totals_of(ctx, groups, estimate).goodput_samples_per_s
        if not keeps_the_goal(ctx, rate, estimate.usd_per_hour):
            continue
        score = objective_score(ctx, rate, estimate.usd_per_hour)
        if ctx.job.objective is Objective.MAX_THROUGHPUT and best is not None:
            # rates within the tolerance of the best count as equal: the cheaper wins
            if abs(rate - best.samples_per_s) <= ctx.options.tolerance * best.samples_per_s:
                score = (-best.samples_per_s, estimate.usd_per_hour)
        if best_score is None or score < best_score:
            best_score = score
            best = Baseline(tuple(groups), estimate.samples_per_s, estimate.usd_per_hour,
                            estimate.usd_per_million_samples)
    return best


def _why_none(ctx: PlanningContext, kind: BaselineKind) -> str:
    job = ctx.job
    goal = (f"reaches {job.target_samples_per_s:,.0f} samples/s" if job.objective is Objective.MIN_COST
            else "meets the job's limits")
    if kind is BaselineKind.CHEAPEST_IDENTICAL:
        return (f"no {BASELINE_WORDS[kind]} ({skypilot_market(ctx).replace('_', '-')}: n nodes of one accelerator "
                f"type, the cheapest offer that holds them all) {goal} within the limits "
                f"(≤ {ctx.problem.node_cap} nodes)")
    return f"no {BASELINE_WORDS[kind]} choice {goal} within the limits (≤ {ctx.problem.node_cap} nodes)"

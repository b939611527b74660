"""Re-planning: the plan's job solved again with what is left (``plan_again``), after a failure or a
preemption (``replan``: the survivors kept), never into a place a new account must opt in to that the job or
its plan did not name (``unnamed_opt_in``); a job with a deadline is steered by its spot policy at
each look instead (``keep_the_deadline`` → ``launcher.steering``).
Each works on the launch state of ``launcher.run`` (``Launch``), for a launch and for a replay alike.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from geotrain.domain import Market, Objective, Offer, Plan
from geotrain.errors import GeotrainError
from geotrain.launcher.deadline import MarketRule
from geotrain.launcher.run import release_surplus, served_clouds
from geotrain.ledger import EventKind

if TYPE_CHECKING:
    from geotrain.launcher.run import Launch


@dataclass(frozen=True, slots=True)
class Replanned:
    plan: Plan | None  # None: no mix found (``reasons`` says why)
    objective: Objective | None
    rule: MarketRule | None  # the market a deadline allowed (None: no deadline)
    keep: dict[str, int]
    blocked: frozenset[str]
    reasons: tuple[str, ...]


def plan_again(la: Launch, survivors: Counter) -> Replanned:
    """The plan's job solved again around the blocked scopes with ``survivors`` kept (a job with a
    deadline: for what is left of it, in the market ``launcher.deadline`` allows). Changes nothing."""
    from geotrain.planning.planner import PlanOptions, make_plan
    from geotrain.pricing.inventory import load_inventory

    now = la.clock.time()
    blocked = frozenset(scope for scope, until in la.blocked.items() if until > now)
    plan, job = la.plan, la.plan.job
    nodes = max(plan.nodes, sum(survivors.values()))
    constraints = replace(job.constraints, max_nodes=min(job.constraints.max_nodes or nodes, nodes))
    clouds = served_clouds(la.provider)  # a re-plan buys only where this launch's providers can
    if clouds is not None:
        constraints = replace(constraints, clouds=clouds & job.constraints.clouds if job.constraints.clouds else clouds)
    deadline = la.remaining()
    rule = None
    if deadline is not None:
        rule = deadline.rule()
        market = (replace(constraints, spot_only=True) if rule is MarketRule.SPOT
                  else replace(constraints, max_spot_share=0.0, spot_only=False))
        attempts = [replace(job, objective=Objective.MIN_COST_BY_DEADLINE, constraints=market,
                            total_samples=max(1, math.ceil(deadline.samples_left)),
                            deadline_h=max(deadline.hours_left, 1e-3))]
        if rule is MarketRule.ON_DEMAND:  # the deadline may be out of reach: the fastest on-demand mix then
            attempts.append(replace(job, objective=Objective.MAX_THROUGHPUT, constraints=market,
                                    budget_usd_per_hour=10 * plan.totals.usd_per_hour, total_samples=None,
                                    deadline_h=None))
        else:  # spot that the planner expects to be too often interrupted: the rule keeps the deadline
            attempts.append(replace(job, objective=Objective.MIN_COST_PER_SAMPLE, constraints=market,
                                    total_samples=None, deadline_h=None))
    else:
        attempts = [
            replace(job, objective=Objective.MIN_COST, constraints=constraints,
                    target_samples_per_s=plan.totals.samples_per_s * 0.999),
            replace(job, objective=Objective.MAX_THROUGHPUT, constraints=constraints,
                    budget_usd_per_hour=plan.totals.usd_per_hour * 1.25),
        ]
    keep = dict(survivors)
    if rule is MarketRule.ON_DEMAND:  # no slack for spot: its survivors go, on-demand ones stay
        keep = {key: n for key, n in survivors.items() if la.offers[key].market != Market.SPOT}
    reasons = []
    try:
        snapshot = la.prices()
        inventory = load_inventory(job.onprem_inventory) if job.onprem_inventory else None
    except GeotrainError as exc:
        return Replanned(None, None, rule, keep, blocked, (str(exc),))
    left_out = unnamed_opt_in(la, snapshot.offers()) | other_networks(la, snapshot.offers())
    options = PlanOptions(keep=keep, blocked=blocked | left_out, frontier_points=0,
                          time_limit_s=la.options.replan_time_limit_s, recovery_h=plan.recovery_h,
                          provider=plan.provider, capacity=la.capacity())
    # a job with a deadline restarts its gang either way: the survivors are kept only where that trains
    # cheaper per good sample than a mix planned afresh (a whole gang in one zone, say, over 15 kept
    # nodes and one far away)
    keeps = [keep] + ([{}] if deadline is not None and keep else [])
    found = []
    for kept in keeps:
        for attempt in attempts:
            try:
                new = make_plan(attempt, snapshot, inventory=inventory, options=replace(options, keep=kept))
            except GeotrainError as exc:
                reasons.append(str(exc))
                continue
            good = new.totals.goodput_samples_per_s
            found.append((new.totals.usd_per_hour / good if good > 0 else math.inf, len(found), new, attempt, kept))
            break
    if not found:
        return Replanned(None, None, rule, keep, blocked, tuple(reasons))
    _, _, new, attempt, kept = min(found, key=lambda f: f[:2])
    return Replanned(new, attempt.objective, rule, kept, blocked, tuple(reasons))


def unnamed_opt_in(la: Launch, offers: Iterable[Offer]) -> frozenset[str]:
    """The scopes of ``offers`` a re-plan leaves out: places a new account must opt in to (AWS opt-in regions,
    Local and Wavelength Zones: ``clouds.geography.needs_opt_in``) that neither the job nor its plan named
    (nor a node the run holds now)."""
    from geotrain.clouds.geography import launcher_may_go, named_places

    named = named_places(la.plan.job, la.plan, [la.offers[k].location for k in la.wanted if k in la.offers])
    return frozenset(o.location.zone_scope for o in offers if not launcher_may_go(o.location, named))


def other_networks(la: Launch, offers: Iterable[Offer]) -> frozenset[str]:
    """The scopes of ``offers`` a re-plan leaves out on machines of their own (a NodeLink provider): those
    outside the one private network the plan's nodes are in, which no rule would join to it
    (``planning.exposure.unjoined_networks``). A plan already across networks is left as it is."""
    from geotrain.planning.exposure import unjoined_networks
    from geotrain.providers.base import NodeLink

    home = {item.offer.location.network_scope for item in la.plan.items}
    if not isinstance(la.provider, NodeLink) or len(home) != 1:
        return frozenset()
    return frozenset(o.location.zone_scope for o in offers
                     if unjoined_networks([o.location, la.plan.items[0].offer.location]))


def adopt(la: Launch, new: Plan) -> None:
    """Make ``new``'s mix the wanted one (its offers known to the launch)."""
    for item in new.items:
        la.offers[item.offer.offer_id] = item.offer
    la.wanted = Counter({item.offer.offer_id: item.count for item in new.items})
    la.stand_ins.clear()


def replan(la: Launch, survivors: Counter, *, cause: str) -> bool:
    """Buy back what the plan promised around the blocked scopes, the survivors kept (``plan_again``),
    and release live nodes the new mix does not want. False: no new mix was found (the wanted mix is
    the survivors alone)."""
    from geotrain.pricing.records import offer_record

    started = la.clock.time()
    found = plan_again(la, survivors)
    market = found.rule.value if found.rule is not None else None
    if found.plan is None:
        la.wanted = Counter(dict(survivors))
        la.ledger.event(la.run_id, EventKind.REPLAN_FAILED, reasons=list(found.reasons), kept=dict(survivors),
                        cause=cause, market=market)
        return False
    new = found.plan
    adopt(la, new)
    release_surplus(la)
    la.ledger.event(la.run_id, EventKind.REPLANNED, wanted=dict(la.wanted), kept=found.keep, cause=cause,
                    objective=found.objective.value, blocked=sorted(found.blocked), market=market,
                    usd_per_hour=new.totals.usd_per_hour, samples_per_s=new.totals.samples_per_s,
                    seconds=round(la.clock.time() - started, 3), offers=[offer_record(i.offer) for i in new.items])
    return True


def keep_the_deadline(la: Launch) -> bool:
    """A job with a deadline, at a look while it trains: the spot policy decides again (the safety net
    first: on-demand once the deadline's margin is spent; a cheaper gang where one pays, counting its
    restart). True if the wanted mix changed."""
    from geotrain.launcher.steering import steer

    if la.remaining() is None:
        return False
    return steer(la, cause="look")

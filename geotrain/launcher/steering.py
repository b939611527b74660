"""A job with a deadline, steered by the spot policy (``launcher.spot_policy``) at each look: the
decision becomes the wanted mix, what the mix no longer holds is released, and the ledger says why.

A launch and a replay call the same :func:`steer`; what differs is how each one learns the market
(``Launch.watch``: a replay probes every zone each tick; a launch sees its own launches, failures and
preemptions) and which mixes it can buy (``Launch.mixes``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from geotrain.domain import Offer, Plan
from geotrain.launcher.run import release_surplus
from geotrain.launcher.spot_policy import Mix, gang_mixes
from geotrain.ledger import EventKind

if TYPE_CHECKING:
    from geotrain.launcher.run import Launch
    from geotrain.launcher.spot_policy import Decision


def steer(la: Launch, *, cause: str) -> bool:
    """Decide (``SpotPolicy.decide``) and make the decision the wanted mix. True if the wanted mix changed."""
    situation = la.situation()
    if situation is None:
        return False
    decision: Decision = la.spot_policy.decide(situation, la.mixes(), la.watch, la.holds)
    target = Counter(dict(decision.mix.nodes)) if decision.mix is not None else Counter()
    if target == +la.wanted:
        return False
    for offer_id in target:
        la.offers[offer_id] = la.offer_for(offer_id)
    la.wanted = target
    la.stand_ins.clear()
    release_surplus(la)
    mix = decision.mix
    la.ledger.event(la.run_id, EventKind.REPLANNED, wanted=dict(target), cause=cause, by="spot policy",
                    reason=decision.reason, committed=decision.committed,
                    expected_usd=round(decision.expected_usd, 6) if decision.expected_usd < float("inf") else None,
                    market="on_demand" if decision.committed else "spot",
                    usd_per_hour=mix.usd_per_hour if mix else 0.0, samples_per_s=mix.samples_per_s if mix else 0.0)
    return True


def market_key(offer: Offer) -> str:
    """An offer's spot market for the watch: ``cloud/region/zone/instance_type`` (a replay's zone trace key)."""
    return f"{offer.location.zone_scope}/{offer.shape.instance_type}"


def offer_mixes(offers: Iterable[Offer], plan: Plan, available: Callable[[str], int | None]) -> list[Mix]:
    """A launch's mixes (``spot_policy.gang_mixes``): gangs of the plan's node count of the instance types
    it planned, every spot zone and the cheapest on-demand offer of each region (none where a new account must
    opt in, unless the job or plan names it: ``clouds.geography.launcher_may_go``), priced by the perf model
    (the plan's workload and sync settings; the user's rates and egress files where the job names them)."""
    from geotrain.domain import Market, NodeGroup
    from geotrain.perf.model import PerfModel
    from geotrain.perf.rates import RateTable
    from geotrain.perf.workloads import WorkloadRegistry
    from geotrain.pricing.egress import EgressPrices
    from geotrain.clouds.geography import launcher_may_go, named_places

    job = plan.job
    types = {item.offer.shape.instance_type for item in plan.items}
    clouds = job.constraints.clouds
    named = named_places(job, plan)  # no gang in a place a new account must opt in to, unless the job named it
    picked = [o for o in offers if o.shape.instance_type in types and (not clouds or o.location.cloud in clouds)
              and launcher_may_go(o.location, named)]
    by_id = {o.offer_id: o for o in picked}
    for item in plan.items:
        by_id.setdefault(item.offer.offer_id, item.offer)
    spot = [(market_key(o), o.offer_id, o.location.region_scope, o.price_usd_per_hour)
            for o in by_id.values() if o.market == Market.SPOT]
    cheapest: dict[str, Offer] = {}
    for o in by_id.values():
        if o.market == Market.ON_DEMAND:
            region = o.location.region_scope
            if region not in cheapest or o.price_usd_per_hour < cheapest[region].price_usd_per_hour:
                cheapest[region] = o
    on_demand = [(o.offer_id, o.location.region_scope, o.price_usd_per_hour) for o in cheapest.values()]
    rates = RateTable.bundled().with_file(job.rates_file) if job.rates_file else RateTable.bundled()
    egress = EgressPrices.bundled().with_file(job.egress_file) if job.egress_file else EgressPrices.bundled()
    perf = PerfModel(rates=rates, egress=egress)
    workload = WorkloadRegistry.bundled().for_job(job)

    def rate(items: tuple[tuple[str, int], ...]) -> tuple[float, float]:
        estimate = perf.predict(workload, [NodeGroup(by_id[o], n) for o, n in items], job.sync)
        return estimate.samples_per_s, estimate.egress_usd_per_hour

    return gang_mixes(spot, on_demand, plan.nodes, rate, available)

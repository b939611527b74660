"""A plan on price alone, for a task file that names no workload (``geotrain.taskfile``).

Without a workload the perf model cannot say what a mix trains, so geotrain does what SkyPilot does
for such a task: ``n`` nodes (the task's ``num_nodes``, pinned) of the offers that match its
resources, the cheapest per hour. A task's nodes form one gang (its own script syncs them), so they
go into one zone: the cheapest offer that can hold them all (its capacity hint, or what the capacity
model gives at ``capacity_confidence``); only where no single offer can, the cheapest offers are
filled in turn, and the plan says so. Ties go to the offer with fewer expected interruptions. Nodes
kept by a re-plan (``PlanOptions.keep``) stay, and only the missing ones are chosen.

Such a plan predicts no throughput (its totals' samples/s are 0 and its $/1M samples unknown): its
cost per hour is the offers' prices; the traffic the script sends is billed from the ledger.
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import datetime, timezone

from geotrain.domain import JobSpec, Market, NodeGroup, Offer, Plan, PlanItem, PlanTotals, SolverReport
from geotrain.errors import InfeasibleError
from geotrain.planning.candidates import default_interruption_rate, passes_filters
from geotrain.planning.chance import launch_chance_words
from geotrain.planning.context import planning_offers
from geotrain.planning.exposure import plaintext_words
from geotrain.planning.names import check_names
from geotrain.pricing.capacity import CapacityModel
from geotrain.pricing.inventory import Inventory, inventory_table
from geotrain.pricing.snapshot import PriceSnapshot, offers_from_table, staleness_words

BY_PRICE = "by-price"  # the solver status of a plan chosen on price alone


def plan_for_shape(job: JobSpec, snapshot: PriceSnapshot, *, inventory: Inventory | None = None,
                   options, groups: list[NodeGroup] | None = None) -> Plan:  # noqa: ANN001 - PlanOptions
    """The cheapest ``job.constraints.node_count`` (default 1) nodes that match the job's filters;
    ``groups``: a mix the user gave (``--nodes``), priced as it is."""
    started = time.perf_counter()
    offers: list[Offer] = planning_offers(snapshot, options)
    if inventory is not None:
        offers += offers_from_table(inventory_table(inventory))
    check_names(job, offers)
    by_id = {o.offer_id: o for o in offers}
    default_rate = (default_interruption_rate(offers) if options.unknown_interruptions_per_hour is None
                    else options.unknown_interruptions_per_hour)
    matching = [o for o in offers if passes_filters(o, job, options.blocked)]
    count = job.constraints.node_count or 1
    notes: list[str] = []
    if groups is None:
        kept = [NodeGroup(by_id[k], n) for k, n in sorted(options.keep.items()) if k in by_id and n > 0]
        need = count - sum(g.count for g in kept)
        groups = _merged(kept + (_cheapest(job, matching, need, default_rate, notes) if need > 0 else []))
    wall_s = time.perf_counter() - started
    return _assemble(job, snapshot, groups, default_rate, len(matching), wall_s, options, notes)


def _merged(groups: list[NodeGroup]) -> list[NodeGroup]:
    """One group per offer (a kept node and a new one of the same offer are two nodes of it)."""
    counts: dict[str, int] = {}
    offers: dict[str, Offer] = {}
    for group in groups:
        counts[group.offer.offer_id] = counts.get(group.offer.offer_id, 0) + group.count
        offers[group.offer.offer_id] = group.offer
    return [NodeGroup(offers[key], n) for key, n in counts.items()]


def _hourly_risk(offer: Offer, default_rate: float) -> float:
    if offer.market != Market.SPOT:
        return 0.0
    rate = offer.interruption.interruptions_per_hour
    return default_rate if rate is None else rate


def _capacity(job: JobSpec, offer: Offer, need: int, model: CapacityModel | None) -> int:
    cap = need if offer.capacity_hint is None else min(need, offer.capacity_hint)
    confidence = job.constraints.capacity_confidence
    if model is not None and confidence is not None and offer.market != Market.OWNED:
        cap = min(cap, model.cap(offer, confidence))
    per_zone = job.constraints.max_nodes_per_zone
    return cap if per_zone is None else min(cap, per_zone)


def _cheapest(job: JobSpec, offers: list[Offer], need: int, default_rate: float, notes: list[str]) -> list[NodeGroup]:
    if not offers:
        raise InfeasibleError(_nothing_matches(job))
    ranked = sorted(offers, key=lambda o: (o.price_usd_per_hour, _hourly_risk(o, default_rate), o.offer_id))
    model = CapacityModel.bundled() if job.constraints.capacity_confidence is not None else None  # read once
    whole = next((o for o in ranked if _capacity(job, o, need, model) >= need), None)
    if whole is not None:
        return [NodeGroup(whole, need)]
    out, left, used_zones = [], need, set()
    for offer in ranked:
        if offer.location.zone_scope in used_zones and job.constraints.max_nodes_per_zone is not None:
            continue
        take = min(left, _capacity(job, offer, left, model))
        if take > 0:
            out.append(NodeGroup(offer, take))
            used_zones.add(offer.location.zone_scope)
            left -= take
        if left == 0:
            break
    if left:
        raise InfeasibleError(f"only {need - left} of the {need} nodes asked for can be had among the {len(offers)} "
                              "matching offers (capacity hints, capacity model, max nodes per zone); lower "
                              "num_nodes, widen the resources (any_of), or drop capacity_confidence")
    notes.append(f"no single offer holds all {need} nodes: they are spread over {len(out)} offers, cheapest first")
    return out


def _nothing_matches(job: JobSpec) -> str:
    wanted = "; ".join(", ".join(f"{k}={v}" for k, v in _fields(r).items()) for r in job.constraints.resources)
    return (f"no offer in the snapshot matches the task's resources ({wanted or 'no resources given'}"
            f"{', spot only' if job.constraints.spot_only else ''}); check the names with `geotrain catalog list` "
            "(accelerators match exactly: A100 is not A100-80GB), or widen them with any_of")


def _fields(resource) -> dict:  # noqa: ANN001
    return {k: (v.value if hasattr(v, "value") else v) for k in resource.__slots__
            if (v := getattr(resource, k)) is not None}


def _assemble(job: JobSpec, snapshot: PriceSnapshot, groups: list[NodeGroup], default_rate: float,
              considered: int, wall_s: float, options, notes: list[str]) -> Plan:  # noqa: ANN001
    items = tuple(PlanItem(g.offer, g.count, 0.0) for g in groups)
    compute = sum(g.offer.price_usd_per_hour * g.count for g in groups)
    interruptions = sum(_hourly_risk(g.offer, default_rate) * g.count for g in groups)
    totals = PlanTotals(
        samples_per_s=0.0, goodput_samples_per_s=0.0, time_per_round_s=0.0, granularity=None,
        compute_usd_per_hour=compute, egress_usd_per_hour=0.0, data_egress_usd_per_hour=0.0,
        usd_per_million_samples=None, interruptions_per_hour=interruptions,
        bottleneck="not modelled: the task names no workload, so the mix is the cheapest that matches its resources",
    )
    solver = SolverReport(objective=job.objective, status=BY_PRICE, gap=0.0, wall_s=wall_s, solves=0,
                          backend="none", candidates=considered, dominated=0, total_s=wall_s)
    created = datetime.now(timezone.utc).replace(microsecond=0)
    digest = hashlib.sha256(json.dumps([snapshot.snapshot_id, job.name, [(i.offer.offer_id, i.count) for i in items],
                                        created.isoformat()]).encode()).hexdigest()[:12]
    bought = [g.offer.observed_at for g in groups if g.offer.market != Market.OWNED]
    stale = staleness_words(max(bought), min(bought)) if bought else None
    assumptions = [
        "the task names no workload: its throughput is not predicted and the nodes were chosen by price alone; add "
        "workload: (a built-in one, or your own with a model section and --rates from `geotrain profile`) to let "
        "the perf model choose",
        "the traffic the task's script sends between nodes is not predicted (0 $/h planned)",
        f"an interruption costs {options.recovery_h * 60:.0f} min of a node's work (checkpoint + restart)",
        *notes,
    ]
    if stale is not None:
        assumptions.append(f"the planned offers' {stale}")
    exposed = plaintext_words(g.offer.location for g in groups) if options.provider != "local" else None
    if exposed:
        assumptions.append(exposed)
    unknown = sum(g.count for g in groups if g.offer.market == Market.SPOT and g.offer.interruption.interruptions_per_hour is None)
    if unknown:
        assumptions.append(f"{unknown} spot node{' has' if unknown == 1 else 's have'} no interruption figure; "
                           f"{default_rate:.2g}/h assumed (median of known spot rates)")
    if options.provider is None:
        assumptions.append(launch_chance_words(groups))
    return Plan(plan_id=f"plan-{digest}", created_at=created, snapshot_id=snapshot.snapshot_id, job=job, items=items,
                totals=totals, solver=solver, recovery_h=options.recovery_h, provider=options.provider,
                assumptions=tuple(assumptions))

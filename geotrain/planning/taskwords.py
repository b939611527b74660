"""What a plan of a task file says about the task's own choices: the fields geotrain reads its own way
(``JobSpec.notes``), the storage it will not mount, and, where the task's nodes are on-demand (SkyPilot's default: ``use_spot`` absent),
what the same instance types would cost on spot and what the script must do to survive that."""

from __future__ import annotations

from dataclasses import replace

from geotrain.domain import Market, Plan
from geotrain.pricing.snapshot import PriceSnapshot


def with_task_words(plan: Plan, snapshot: PriceSnapshot) -> Plan:
    job = plan.job
    words = list(job.notes)
    if job.task is not None:
        for dest, bucket, mode in job.task.storage_mounts_to_mount:
            words.append(f"file_mounts.{dest}: mode {mode} of {bucket}: launch refuses it before buying anything "
                         "(geotrain mounts no storage); write mode: COPY to copy it onto each node before setup")
        if job.task.container:
            words.append(f"image_id {job.task.container}: launch refuses it before buying anything (geotrain "
                         "runs a task on its VMs' own image, not in a container); install what it needs in setup")
        spot = spot_words(plan, snapshot)
        if spot:
            words.append(spot)
    return replace(plan, assumptions=plan.assumptions + tuple(w for w in words if w not in plan.assumptions))


def spot_words(plan: Plan, snapshot: PriceSnapshot) -> str | None:
    """The saving of the plan's on-demand nodes on spot, for the same instance types in the same zones
    (else regions); None when no planned node is on-demand or none of their types is sold on spot there."""
    od = [i for i in plan.items if i.offer.market == Market.ON_DEMAND]
    if not od:
        return None
    spot: dict[tuple[str, str, str], float] = {}
    for offer in snapshot.offers():
        if offer.market != Market.SPOT:
            continue
        loc = offer.location
        for key in ((loc.cloud, loc.zone or loc.region, offer.shape.instance_type),
                    (loc.cloud, loc.region, offer.shape.instance_type)):
            spot[key] = min(spot.get(key, float("inf")), offer.price_usd_per_hour)
    now = then = 0.0
    for item in od:
        loc, itype = item.offer.location, item.offer.shape.instance_type
        price = spot.get((loc.cloud, loc.zone or loc.region, itype), spot.get((loc.cloud, loc.region, itype)))
        if price is None or price >= item.offer.price_usd_per_hour:
            continue
        now += item.offer.price_usd_per_hour * item.count
        then += price * item.count
    if now == 0:
        return None
    nodes = sum(i.count for i in od)
    return (f"{nodes} on-demand node{'s' if nodes != 1 else ''}, as the task asks (use_spot absent or false, as in "
            f"SkyPilot): the same instance types on spot would cost ${then:,.2f}/h instead of ${now:,.2f}/h "
            f"({1 - then / now:.0%} less); ask for them with use_spot: true, and have the script save and resume from "
            "checkpoint_store() (geotrain.train.api), or a preemption restarts it from scratch")

"""The GCP provider's node records (one per instance name, in the state file) and how what GCE shows changes
them: node states from instance statuses and preemption operations, records adopted from an instance's
metadata, and the merge of observations into the stored state (an ended record is final)."""

from __future__ import annotations

import ipaddress
from datetime import datetime, timezone
from typing import Any

from geotrain.domain import Continent, Location, OfferId
from geotrain.providers.base import LaunchRequest, NodeInfo, NodeState
from geotrain.providers.gcp.shapes import (
    CLOUD,
    LABEL_OFFER,
    LABEL_REQUEST,
    LABEL_RUN,
    address_of,
    private_address_of,
    instance_name,
    metadata_value,
)

PENDING_STATUSES = frozenset({"PROVISIONING", "STAGING"})
RUNNING_STATUSES = frozenset({"RUNNING", "REPAIRING"})
LIVE_STATUSES = PENDING_STATUSES | RUNNING_STATUSES

# status: "launching" (asked for, never seen: the insert may not have reached GCE), "up" (seen), "ended"


def now() -> str:
    return datetime.now(timezone.utc).isoformat()


def ended(rec: dict[str, Any]) -> bool:
    return NodeState(rec["state"]).ended


def live(inst: Any | None) -> bool:
    return inst is not None and inst.status in LIVE_STATUSES


def info(rec: dict[str, Any]) -> NodeInfo:
    loc = rec["location"]
    return NodeInfo(node_id=rec["node_id"], request_id=rec["request_id"], run_id=rec["run_id"],
                    offer_id=rec["offer_id"],
                    location=Location(loc["cloud"], loc["region"], loc["zone"], Continent(loc["continent"])),
                    state=NodeState(rec["state"]), launched_at=datetime.fromisoformat(rec["launched_at"]),
                    ended_at=datetime.fromisoformat(rec["ended_at"]) if rec["ended_at"] else None,
                    end_reason=rec["end_reason"], address=rec["address"] or "",
                    private_address=rec.get("private_address") or "")


def new_record(request: LaunchRequest, project: str, attempt: int) -> dict[str, Any]:
    loc = request.offer.location
    return {"node_id": instance_name(request.request_id), "request_id": request.request_id, "run_id": request.run_id,
            "offer_id": request.offer.offer_id, "market": request.offer.market.value, "project": project,
            "location": {"cloud": loc.cloud, "region": loc.region, "zone": loc.zone, "continent": loc.continent.value},
            "zone": loc.zone or None, "zone_chosen": not loc.zone, "attempt": attempt, "status": "launching",
            "state": NodeState.PENDING.value, "address": "", "private_address": "", "launched_at": now(),
            "ended_at": None, "end_reason": None}


def ended_update(state: NodeState, reason: str, *, lingering: bool = False) -> dict[str, Any]:
    return {"status": "ended", "state": state.value, "end_reason": reason, "ended_at": now(), "lingering": lingering}


def observe(rec: dict[str, Any], inst: Any | None, preempted: set[str]) -> dict[str, Any]:
    """The record's new fields from what GCE shows: the instance (None: gone) and the zone's preempted
    instances. A stopped or vanished VM that GCE did not preempt and geotrain did not delete is lost."""
    if live(inst):
        state = NodeState.PENDING if inst.status in PENDING_STATUSES else NodeState.RUNNING
        return {"status": "up", "state": state.value, "address": address_of(inst) or rec["address"],
                "private_address": private_address_of(inst) or rec.get("private_address") or ""}
    lingering = inst is not None  # stopped or stopping: it still holds its disk until deleted
    if rec["node_id"] in preempted:
        return ended_update(NodeState.PREEMPTED, "preempted", lingering=lingering)
    if rec.get("deleting"):
        return ended_update(NodeState.TERMINATED, rec.get("terminate_reason") or "terminated", lingering=lingering)
    if inst is None and rec["status"] == "launching":
        return {}
    return ended_update(NodeState.TERMINATED, "lost", lingering=lingering)


def merge(state: dict[str, Any], updates: dict[str, dict[str, Any]], adopted: list[dict[str, Any]]) -> None:
    """Apply observations to the stored records, and add adopted ones. An ended record keeps its end (only
    whether its VM lingers changes); a VM seen gone while our terminate was deleting it ends with our reason."""
    for node_id, update in updates.items():
        stored = state["nodes"].get(node_id)
        if stored is None or not update:
            continue
        if ended(stored):
            if "lingering" in update:
                stored["lingering"] = update["lingering"]
            continue
        if update.get("end_reason") == "lost" and stored.get("deleting"):
            update = dict(update, end_reason=stored.get("terminate_reason") or "terminated")
        stored.update(update)
    for rec in adopted:
        state["nodes"].setdefault(rec["node_id"], rec)


def adopt(inst: Any, project: str, zone: str) -> dict[str, Any] | None:
    """A record for a VM of ours that the state file does not know (launched from another GEOTRAIN_HOME), from
    its metadata; None for anything else."""
    from geotrain.clouds.geography import continent_of

    run_id, request_id, offer_id = (metadata_value(inst, k) for k in (LABEL_RUN, LABEL_REQUEST, LABEL_OFFER))
    if not (run_id and request_id and offer_id) or instance_name(request_id) != inst.name:
        return None
    try:
        key = OfferId.parse(offer_id)
    except ValueError:
        return None
    continent = continent_of(CLOUD, key.region)
    if continent is None:
        return None
    try:
        launched_at = datetime.fromisoformat(inst.creation_timestamp).astimezone(timezone.utc).isoformat()
    except (TypeError, ValueError):
        launched_at = now()
    rec = {"node_id": inst.name, "request_id": request_id, "run_id": run_id, "offer_id": offer_id,
           "market": key.market.value, "project": project,
           "location": {"cloud": CLOUD, "region": key.region, "zone": key.zone, "continent": continent.value},
           "zone": zone, "zone_chosen": not key.zone, "attempt": 0, "status": "up", "state": NodeState.PENDING.value,
           "address": "", "private_address": "", "launched_at": launched_at, "ended_at": None, "end_reason": None}
    rec.update(observe(rec, inst, set()))
    return rec


def cidr(text: str) -> str:
    """A control range: a CIDR, or a bare address (/32, /128)."""
    try:
        return str(ipaddress.ip_network(text, strict=False))
    except ValueError as exc:
        raise ValueError(f"control_cidr {text!r} is not an address or CIDR range") from exc

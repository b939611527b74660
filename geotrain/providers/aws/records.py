"""The AWS provider's node records (see :mod:`geotrain.providers.aws.state` for their fields): made,
adopted from tags, turned into :class:`~geotrain.providers.base.NodeInfo`; the tag and token rules."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from geotrain.clouds.geography import continent_of
from geotrain.domain import Continent, Location, Market, Offer, OfferId
from geotrain.errors import InputError
from geotrain.providers.aws.state import Record
from geotrain.providers.base import LaunchRequest, NodeInfo, NodeState

TAG_RUN, TAG_REQUEST, TAG_OFFER, TAG_END = "geotrain-run", "geotrain-request", "geotrain-offer", "geotrain-end-reason"


def check_offer(offer: Offer) -> None:
    if offer.location.cloud != "aws":
        raise InputError(f"offer {offer.offer_id} is not an AWS offer; the AWS provider launches only aws/… offers")
    if offer.market not in (Market.SPOT, Market.ON_DEMAND):
        raise InputError(f"offer {offer.offer_id}: AWS sells spot and on_demand, not {offer.market}")


def new_record(request: LaunchRequest, now: str) -> Record:
    loc = request.offer.location
    return {"request_id": request.request_id, "run_id": request.run_id, "offer_id": request.offer.offer_id,
            "region": loc.region, "zone": loc.zone, "continent": loc.continent.value,
            "client_token": client_token(request.request_id), "image_id": None, "sent_at": now,
            "node_id": None, "launched_at": None, "address": "", "state": NodeState.PENDING.value,
            "ended_at": None, "end_reason": None, "end_requested": None}


def adopted(inst: dict[str, Any], tags: dict[str, str], region: str) -> Record | None:
    """A record for a run's instance this state did not know (its request was lost), from its tags."""
    try:
        key = OfferId.parse(tags[TAG_OFFER])
        request_id, run_id = tags[TAG_REQUEST], tags[TAG_RUN]
    except (KeyError, ValueError):
        return None
    continent = continent_of("aws", region)
    if key.cloud != "aws" or key.region != region or continent is None:
        return None
    now = datetime.now(timezone.utc).isoformat()
    return {"request_id": request_id, "run_id": run_id, "offer_id": str(key), "region": region, "zone": key.zone,
            "continent": continent.value, "client_token": client_token(request_id), "image_id": inst.get("ImageId"),
            "sent_at": now, "node_id": inst["InstanceId"], "launched_at": utc(inst.get("LaunchTime")) or now,
            "address": "", "state": NodeState.PENDING.value, "ended_at": None, "end_reason": None,
            "end_requested": None}


def same_request(rec: Record, request: LaunchRequest) -> None:
    if rec["run_id"] != request.run_id or rec["offer_id"] != request.offer.offer_id:
        raise ValueError(f"request id {request.request_id!r} was used for run {rec['run_id']} and offer "
                         f"{rec['offer_id']}, not run {request.run_id} and offer {request.offer.offer_id}")


def end(rec: Record, state: NodeState, reason: str, when: str) -> None:
    rec["state"], rec["end_reason"], rec["ended_at"] = state.value, reason, when


def info(rec: Record) -> NodeInfo:
    location = Location("aws", rec["region"], rec["zone"], Continent(rec["continent"]))
    return NodeInfo(
        node_id=rec["node_id"], request_id=rec["request_id"], run_id=rec["run_id"], offer_id=rec["offer_id"],
        location=location, state=NodeState(rec["state"]),
        launched_at=datetime.fromisoformat(rec["launched_at"]),
        ended_at=datetime.fromisoformat(rec["ended_at"]) if rec["ended_at"] else None,
        end_reason=rec["end_reason"], address=rec.get("address") or "",
        private_address=rec.get("private_address") or "")


def sorted_infos(recs: Iterable[Record]) -> list[NodeInfo]:
    # AWS's LaunchTime has whole seconds: launches within one second keep the order they were sent in
    return [info(r) for r in sorted(recs, key=lambda r: (r["launched_at"], r["sent_at"], r["node_id"]))]


def client_token(request_id: str) -> str:
    """AWS's idempotency key (≤ 64 ASCII characters): the same request id always gives the same one."""
    return hashlib.sha256(f"geotrain:{request_id}".encode()).hexdigest()


def tag(value: str) -> str:
    """A tag value (≤ 256 characters): the value itself, or a digest of a longer one."""
    return value if len(value) <= 256 else f"sha256:{hashlib.sha256(value.encode()).hexdigest()}"


def latest(a: str, b: str) -> str:
    return a if datetime.fromisoformat(a) >= datetime.fromisoformat(b) else b


def utc(moment: Any) -> str | None:
    if not isinstance(moment, datetime):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).isoformat()

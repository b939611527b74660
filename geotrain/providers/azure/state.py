"""The Azure provider's state file, ``GEOTRAIN_HOME/providers/azure/state.json`` (0600, atomic writes,
read and written under an ``fcntl.flock`` on ``state.lock``), and per-key lock files (one VM's launch or
terminate, one run's network in one region) under ``locks/``.

What it keeps: per VM (by name, the node id) the request, run, offer, location, resource group, whether
it is spot, the launch time, the address, how it ended (state, reason, time: the first end wins) and
whether its resources were deleted; per run the resource group and which regions have the run's network.
This is what lets a VM that was terminated and is gone still list as ended, a new process list the run,
and a spot VM that vanished be told from one we deleted.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from geotrain.domain import Location, Market, Offer
from geotrain.errors import ProviderError
from geotrain.providers.base import LaunchRequest, NodeInfo, NodeState
from geotrain.providers.statefile import JsonState, flocked, location_of  # noqa: F401 - the provider reads it here
from geotrain.providers.statefile import node_info as record_node_info

STATE_VERSION = 1
# a VM's ``status``: "creating" (asked for; it may or may not exist), "created" (seen), "failed" (a launch
# that failed and could not delete what it had made; a retry of the request reuses the names)
CREATING, CREATED, FAILED = "creating", "created", "failed"


class StateStore(JsonState):
    """``root()`` is the provider's directory (resolved at each use: GEOTRAIN_HOME may be set later)."""

    def __init__(self, root: Callable[[], Path]) -> None:
        super().__init__(root, lambda: {"version": STATE_VERSION, "nodes": {}, "runs": {}},
                         corrupt_hint="the VMs it listed may still run: find them in the Azure portal by their "
                                      "geotrain-run tag (`az vm list --query \"[?tags.\\\"geotrain-run\\\"]\"`), "
                                      "delete them")

    def transaction(self) -> contextlib.AbstractContextManager[dict[str, Any]]:
        """The state, locked; written back (atomically) if the block changed it and did not raise."""
        return self.locked()

    def key_lock(self, key: str) -> contextlib.AbstractContextManager[None]:
        """Serialises work on one key (a VM name, a run's network in a region) across processes."""
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in key)
        return flocked(self.root / "locks" / f"{safe}.lock")


def now_text(when: datetime | None = None) -> str:
    """A UTC time as the state file keeps it (ISO 8601 with the offset)."""
    return (when or datetime.now(timezone.utc)).astimezone(timezone.utc).isoformat()


def new_record(node_id: str, request_id: str, run_id: str, offer_id: str, location: Location, *,
               resource_group: str, spot: bool, launched_at: str) -> dict[str, Any]:
    """A VM asked for (status "creating"), not yet seen."""
    return {"node_id": node_id, "request_id": request_id, "run_id": run_id, "offer_id": offer_id,
            "location": {"cloud": location.cloud, "region": location.region, "zone": location.zone,
                         "continent": location.continent.value},
            "resource_group": resource_group, "spot": spot, "status": CREATING, "state": NodeState.PENDING.value,
            "launched_at": launched_at, "ended_at": None, "end_reason": None, "address": None,
            "private_address": None, "cleaned": False}


def check_offer(offer: Offer) -> None:
    """The Azure provider launches Azure spot and on-demand offers only (the router sends it no other)."""
    if offer.location.cloud != "azure" or offer.market not in (Market.SPOT, Market.ON_DEMAND):
        raise ValueError(f"offer {offer.offer_id} is not an Azure spot or on-demand offer")


def check_same_request(rec: Mapping[str, Any], request: LaunchRequest) -> None:
    """A request id names one node of one run and offer (ValueError otherwise)."""
    if rec["request_id"] != request.request_id:
        raise ProviderError(f"Azure: VM name {rec['node_id']} is taken by request {rec['request_id']}; use another "
                            "request id")
    if rec["run_id"] != request.run_id or rec["offer_id"] != request.offer.offer_id:
        raise ValueError(f"request id {request.request_id!r} was used for run {rec['run_id']} and offer "
                         f"{rec['offer_id']}, not run {request.run_id} and offer {request.offer.offer_id}")


def node_info(rec: Mapping[str, Any]) -> NodeInfo:
    """``address``: the public IP (the private one where there is none); ``private_address``: the NIC's."""
    return dataclasses.replace(record_node_info(rec, rec["address"] or rec["private_address"] or ""),
                               private_address=rec.get("private_address") or "")

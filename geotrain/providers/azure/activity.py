"""Telling a spot eviction from a deletion: the VM's activity log (Azure Monitor, ``GET /subscriptions/{s}/
providers/Microsoft.Insights/eventtypes/management/values?api-version=2015-04-01``, filtered by the VM's
resource id and time), read through the compute client's pipeline (same credential and endpoint).

Azure logs a spot eviction as a ResourceHealth event of the VM (the portal shows it "preempted"; the event
says Downtime, PlatformInitiated); a deletion or a stop by someone is an Administrative event
(``Microsoft.Compute/virtualMachines/delete``, ``.../deallocate/action``, ``.../powerOff/action``). The log
lags by minutes, so "no word" is a possible answer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from geotrain.providers.azure import arm

log = logging.getLogger(__name__)

ACTIVITY_LOG_API = "2015-04-01"
MAX_PAGES = 5
REMOVALS = ("microsoft.compute/virtualmachines/delete", "microsoft.compute/virtualmachines/deallocate/action",
            "microsoft.compute/virtualmachines/poweroff/action")


def _iso(when: datetime) -> str:
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def vm_evidence(clients: Any, *, resource_group: str, vm: str, since: datetime) -> str | None:
    """"evicted", "removed" (deleted, deallocated or powered off by someone) or None (no word, or the log
    cannot be read), from the VM's activity log since ``since`` (less 10 minutes of clock skew)."""
    from azure.core.rest import HttpRequest

    vm_id = arm.arm_id(clients.subscription_id, resource_group, "Microsoft.Compute/virtualMachines", vm)
    start, end = since - timedelta(minutes=10), datetime.now(timezone.utc) + timedelta(minutes=5)
    flt = f"eventTimestamp ge '{_iso(start)}' and eventTimestamp le '{_iso(end)}' and resourceUri eq '{vm_id}'"
    url: str | None = (f"{clients.arm_url}/subscriptions/{clients.subscription_id}/providers/"
                       "Microsoft.Insights/eventtypes/management/values")
    params: dict[str, str] | None = {"api-version": ACTIVITY_LOG_API, "$filter": flt}
    events: list[Mapping[str, Any]] = []
    try:
        for _ in range(MAX_PAGES):
            if not url:
                break
            answer = clients.compute.send_request(HttpRequest("GET", url, params=params), **clients.call_options)
            answer.raise_for_status()
            body = answer.json()
            events += [e for e in body.get("value") or [] if isinstance(e, Mapping)]
            url, params = body.get("nextLink"), None  # the next link carries the query
    except Exception as exc:  # noqa: BLE001 - no word from the log: the caller decides without it
        log.info("Azure: the activity log of VM %s cannot be read (%s)", vm, exc)
        return None
    return evidence(events)


def evidence(events: Iterable[Mapping[str, Any]]) -> str | None:
    """What the VM's activity-log events say (see :func:`vm_evidence`); an eviction outweighs a deletion."""
    removed = False
    for event in events:
        category = str((event.get("category") or {}).get("value") or "").lower()
        operation = str((event.get("operationName") or {}).get("value") or "").lower()
        text = f"{json.dumps(event.get('properties') or {})} {event.get('description') or ''}".lower()
        if "evict" in operation or (category == "resourcehealth" and ("preempt" in text or "evict" in text)):
            return "evicted"
        if category == "administrative" and operation in REMOVALS:
            removed = True
    return "removed" if removed else None

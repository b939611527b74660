"""Preemption notices from the cloud's instance metadata service, as the node sees them.

One ``NoticeSource`` per cloud; ``poll()`` answers the notice the metadata shows now, or None:

- **aws**: IMDSv2. ``PUT /latest/api/token`` (header ``X-aws-ec2-metadata-token-ttl-seconds``), then
  with ``X-aws-ec2-metadata-token``: ``GET /latest/meta-data/spot/instance-action`` (404 until AWS
  decides to reclaim; then ``{"action": "terminate"|"stop"|"hibernate", "time": ISO-8601}``, two
  minutes ahead) and ``GET /latest/meta-data/events/recommendations/rebalance`` (404, or
  ``{"noticeTime": ISO-8601}``: the instance is at elevated risk; no deadline).
- **gcp**: ``GET /computeMetadata/v1/instance/preempted`` with ``Metadata-Flavor: Google``: "TRUE"
  once the preemption has begun (about 30 s before the VM stops).
- **azure**: Scheduled Events, ``GET /metadata/scheduledevents?api-version=2020-07-01`` with
  ``Metadata: true``: an event with ``EventType`` "Preempt" (spot eviction, at least 30 s ahead;
  ``NotBefore`` is an RFC 1123 date) names this VM among its ``Resources``.

``base_url`` defaults to the cloud's link-local endpoint; the tests point it at a fake.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Protocol

DEFAULT_BASE_URL = {"aws": "http://169.254.169.254", "gcp": "http://metadata.google.internal",
                    "azure": "http://169.254.169.254"}
NOTICE_S = {"aws": 120.0, "gcp": 30.0, "azure": 30.0}  # the warning each cloud gives before a spot reclaim
TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True)
class Notice:
    source: str  # "aws spot instance-action terminate", "gcp preempted", ...
    deadline: float | None  # unix time the node goes, or None (a rebalance recommendation)
    notice_s: float | None  # the warning the cloud gives


class NoticeSource(Protocol):
    def poll(self) -> Notice | None: ...


def _get(url: str, headers: dict[str, str], method: str = "GET") -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:  # noqa: S310 - a fixed metadata URL
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


def _iso(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return None


class AwsNotices:
    def __init__(self, base_url: str | None = None) -> None:
        self.base = (base_url or DEFAULT_BASE_URL["aws"]).rstrip("/")
        self._token: str | None = None
        self._token_until = 0.0

    def _headers(self) -> dict[str, str]:
        if self._token is None or time.time() > self._token_until:
            status, body = _get(f"{self.base}/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "21600"},
                                method="PUT")
            if status != 200:
                raise OSError(f"IMDSv2 token: HTTP {status}")
            self._token, self._token_until = body.decode().strip(), time.time() + 21000
        return {"X-aws-ec2-metadata-token": self._token}

    def poll(self) -> Notice | None:
        status, body = _get(f"{self.base}/latest/meta-data/spot/instance-action", self._headers())
        if status == 200:
            action = json.loads(body)
            return Notice(f"aws spot instance-action {action.get('action', '?')}", _iso(action.get("time", "")),
                          NOTICE_S["aws"])
        status, body = _get(f"{self.base}/latest/meta-data/events/recommendations/rebalance", self._headers())
        if status == 200:
            return Notice("aws rebalance recommendation", None, None)
        return None


class GcpNotices:
    def __init__(self, base_url: str | None = None) -> None:
        self.base = (base_url or DEFAULT_BASE_URL["gcp"]).rstrip("/")

    def poll(self) -> Notice | None:
        status, body = _get(f"{self.base}/computeMetadata/v1/instance/preempted", {"Metadata-Flavor": "Google"})
        if status == 200 and body.strip().upper() == b"TRUE":
            return Notice("gcp preempted", time.time() + NOTICE_S["gcp"], NOTICE_S["gcp"])
        return None


class AzureNotices:
    def __init__(self, base_url: str | None = None, vm_name: str | None = None) -> None:
        self.base = (base_url or DEFAULT_BASE_URL["azure"]).rstrip("/")
        self.vm_name = vm_name

    def poll(self) -> Notice | None:
        status, body = _get(f"{self.base}/metadata/scheduledevents?api-version=2020-07-01", {"Metadata": "true"})
        if status != 200:
            return None
        for event in json.loads(body).get("Events", []):
            resources = event.get("Resources") or []
            if event.get("EventType") == "Preempt" and (self.vm_name is None or not resources
                                                        or self.vm_name in resources):
                deadline = None
                if event.get("NotBefore"):
                    try:
                        deadline = parsedate_to_datetime(event["NotBefore"]).timestamp()
                    except (TypeError, ValueError):
                        deadline = None
                return Notice("azure scheduled event Preempt", deadline, NOTICE_S["azure"])
        return None


def notice_source(cloud: str, base_url: str | None = None) -> NoticeSource | None:
    """The metadata watch of ``cloud``; None for a node no cloud can take away (on-prem, local)."""
    kinds = {"aws": AwsNotices, "gcp": GcpNotices, "azure": AzureNotices}
    return kinds[cloud](base_url) if cloud in kinds else None

"""A fake instance metadata service for all three clouds, one base URL per VM
(``http://127.0.0.1:PORT/<vm_id>``), in the shapes the node agent reads (``geotrain.node.notices``):

- AWS IMDSv2: ``PUT /latest/api/token`` (requires ``X-aws-ec2-metadata-token-ttl-seconds``) → a token;
  ``GET /latest/meta-data/spot/instance-action`` and ``.../events/recommendations/rebalance`` require
  ``X-aws-ec2-metadata-token`` (401 without) and answer 404 until a notice is given.
- GCP: ``GET /computeMetadata/v1/instance/preempted`` requires ``Metadata-Flavor: Google`` (403
  without) → ``FALSE`` / ``TRUE``.
- Azure: ``GET /metadata/scheduledevents?api-version=...`` requires ``Metadata: true`` (400 without)
  → ``{"DocumentIncarnation", "Events": [...]}`` with a ``Preempt`` event once given.

``notify(vm_id, kind)`` gives a notice (kind "reclaim", or "rebalance" on AWS); ``first_served[vm_id]``
is the time a notice was first answered to that VM (for the notice-to-checkpoint bench).
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlparse

from tests.fakes.http import LocalServer


class FakeMetadata(LocalServer):
    name = "fake-metadata"
    methods = ("GET", "PUT")

    def __init__(self) -> None:
        self.notices: dict[str, tuple[str, float]] = {}  # vm id -> (kind, given at)
        self.first_served: dict[str, float] = {}
        self.tokens: set[str] = set()
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def base_url(self, vm_id: str) -> str:
        return f"{self.url}/{vm_id}"

    def notify(self, vm_id: str, kind: str = "reclaim") -> None:
        with self._lock:
            self.notices[vm_id] = (kind, time.time())

    def _served(self, vm_id: str) -> None:
        with self._lock:
            self.first_served.setdefault(vm_id, time.time())

    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        url = urlparse(handler.path)
        vm_id, _, path = url.path.lstrip("/").partition("/")
        path = "/" + path
        with self._lock:
            self.requests.append((vm_id, path))
            notice = self.notices.get(vm_id)

        def reply(status: int, body: str, kind: str = "text/plain") -> None:
            data = body.encode()
            handler.send_response(status)
            handler.send_header("Content-Type", kind)
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)

        if path == "/latest/api/token" and method == "PUT":
            if not handler.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                return reply(400, "missing TTL header")
            token = secrets.token_hex(16)
            self.tokens.add(token)
            return reply(200, token)
        if path.startswith("/latest/meta-data/"):
            if handler.headers.get("X-aws-ec2-metadata-token") not in self.tokens:
                return reply(401, "")
            if path == "/latest/meta-data/spot/instance-action" and notice and notice[0] == "reclaim":
                self._served(vm_id)
                when = datetime.fromtimestamp(notice[1], timezone.utc) + timedelta(seconds=120)
                return reply(200, json.dumps({"action": "terminate", "time": when.strftime("%Y-%m-%dT%H:%M:%SZ")}),
                             "application/json")
            if path == "/latest/meta-data/events/recommendations/rebalance" and notice and notice[0] == "rebalance":
                self._served(vm_id)
                when = datetime.fromtimestamp(notice[1], timezone.utc)
                return reply(200, json.dumps({"noticeTime": when.strftime("%Y-%m-%dT%H:%M:%SZ")}), "application/json")
            return reply(404, "")
        if path == "/computeMetadata/v1/instance/preempted":
            if handler.headers.get("Metadata-Flavor") != "Google":
                return reply(403, "Missing Metadata-Flavor:Google header.")
            if notice:
                self._served(vm_id)
            return reply(200, "TRUE" if notice else "FALSE")
        if path == "/metadata/scheduledevents":
            if handler.headers.get("Metadata") != "true":
                return reply(400, json.dumps({"error": "Bad request. Required metadata header not specified"}))
            events = []
            if notice:
                self._served(vm_id)
                not_before = datetime.fromtimestamp(notice[1], timezone.utc) + timedelta(seconds=30)
                events.append({"EventId": f"ev-{vm_id}", "EventType": "Preempt", "ResourceType": "VirtualMachine",
                               "Resources": [vm_id], "EventStatus": "Scheduled",
                               "NotBefore": format_datetime(not_before, usegmt=True), "Description": "spot eviction",
                               "EventSource": "Platform", "DurationInSeconds": -1})
            return reply(200, json.dumps({"DocumentIncarnation": len(events), "Events": events}), "application/json")
        reply(404, "")

"""A fake instance metadata service for all three clouds, one base URL per VM
(``http://127.0.0.1:PORT/<vm_id>``), in the shapes the node agent reads (``geotrain.node.notices``):

- AWS IMDSv2: ``PUT /latest/api/token`` (requires ``X-aws-ec2-metadata-token-ttl-seconds``) → a token;
  ``GET /latest/meta-data/spot/instance-action`` and ``.../events/recommendations/rebalance`` require
  ``X-aws-ec2-metadata-token`` (401 without) and answer 404 until a notice is given.
- Every cloud: the VM's public address, where the hypervisor told it (``public_addresses``): AWS
  ``/latest/meta-data/public-ipv4`` (IMDSv2 token), GCP ``…/network-interfaces/0/access-configs/0/external-ip``,
  Azure ``/metadata/instance/network/interface/0/ipv4/ipAddress/0/publicIpAddress?format=text``.
- GCP: ``GET /computeMetadata/v1/instance/preempted`` requires ``Metadata-Flavor: Google`` (403
  without) → ``FALSE`` / ``TRUE``.
- Azure: ``GET /metadata/scheduledevents?api-version=...`` requires ``Metadata: true`` (400 without)
  → ``{"DocumentIncarnation", "Events": [...]}`` with a ``Preempt`` event once given.

``notify(vm_id, kind)`` gives a notice (kind "reclaim", or "rebalance" on AWS); ``first_served[vm_id]``
is the time a notice was first answered to that VM (for the notice-to-checkpoint bench).

``serve_unix(path, vm_of)`` also answers on a Unix socket (which, unlike 127.0.0.1, is reachable from
another network namespace): each connection starts with a PROXY protocol v1 line
(``PROXY TCP4 <source> <destination> <source port> <destination port>``, as a relay in front of it
writes, see ``tests.fakes.cloudhosts``), then the VM's request exactly as it sent it, with the path the
VM used (``/latest/api/token``, no VM id in it): ``vm_of(source)`` says which VM asks (None: 404).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socketserver
import threading
import time
from collections.abc import Callable
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
        self.public_addresses: dict[str, str] = {}  # vm id → its public address (a hypervisor fills it)
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._unix: list[tuple[socketserver.ThreadingUnixStreamServer, threading.Thread, str]] = []

    def serve_unix(self, path: str | os.PathLike[str], vm_of: Callable[[str], str | None]) -> None:
        """Answer on the Unix socket ``path`` too (made here, mode 0600; see the module docstring)."""
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            source = ""

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
                return None

            def handle(self) -> None:
                parts = self.rfile.readline(108).decode("ascii", "replace").split()
                if len(parts) != 6 or parts[0] != "PROXY":
                    return
                self.source = parts[2]
                with contextlib.suppress(ValueError):
                    self.client_address = (parts[2], int(parts[4]))
                super().handle()

        for method in self.methods:
            setattr(Handler, f"do_{method}", lambda handler, m=method: owner._handle_proxied(handler, m, vm_of))
        path = os.fspath(path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        old_umask = os.umask(0o177)
        try:
            server = socketserver.ThreadingUnixStreamServer(path, Handler)
        finally:
            os.umask(old_umask)
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                                  name=f"{self.name}-unix", daemon=True)
        thread.start()
        self._unix.append((server, thread, path))

    def stop_unix(self) -> None:
        """Stop the Unix-socket listeners (``stop`` does it too) and remove their sockets."""
        while self._unix:
            server, thread, path = self._unix.pop()
            server.shutdown()
            server.server_close()
            thread.join(5)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def stop(self) -> None:
        self.stop_unix()
        super().stop()

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
        self._answer(handler, method, vm_id, "/" + path)

    def _handle_proxied(self, handler: BaseHTTPRequestHandler, method: str,
                        vm_of: Callable[[str], str | None]) -> None:
        vm_id = vm_of(getattr(handler, "source", ""))
        if vm_id is None:
            handler.send_response(404)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        self._answer(handler, method, vm_id, urlparse(handler.path).path)

    def _answer(self, handler: BaseHTTPRequestHandler, method: str, vm_id: str, path: str) -> None:
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
            if path == "/latest/meta-data/public-ipv4" and vm_id in self.public_addresses:
                return reply(200, self.public_addresses[vm_id])
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
        if path == "/computeMetadata/v1/instance/network-interfaces/0/access-configs/0/external-ip":
            if handler.headers.get("Metadata-Flavor") != "Google":
                return reply(403, "Missing Metadata-Flavor:Google header.")
            return reply(200, self.public_addresses.get(vm_id, ""))
        if path == "/metadata/instance/network/interface/0/ipv4/ipAddress/0/publicIpAddress":
            if handler.headers.get("Metadata") != "true":
                return reply(400, json.dumps({"error": "Bad request. Required metadata header not specified"}))
            return reply(200, self.public_addresses.get(vm_id, ""))
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

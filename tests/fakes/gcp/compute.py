"""The instance side of the GCP fake: Compute Engine's instances, zone and global operations, firewall rules
and regions, in the published REST shapes, served by the same server as the catalog (:class:`GcpComputeFake`
is a :class:`~tests.fakes.gcp.server.GcpFake` that also answers POST and DELETE).

Served (``/compute/v1/projects/{project}/...``): ``zones/{z}/instances`` POST (insert) and GET (list),
``zones/{z}/instances/{name}`` GET and DELETE, ``aggregated/instances``, ``zones/{z}/operations`` GET (list),
``zones/{z}/operations/{op}`` GET and ``…/wait`` POST, ``global/firewalls`` POST and GET,
``global/firewalls/{name}`` GET and DELETE, ``global/operations/{op}`` GET and ``…/wait`` POST,
``regions/{region}`` GET. As GCE does:

- ``requestId`` is deduplicated: a request carrying an id seen before is answered with the operation the
  first one made (its error too), and does nothing else.
- An insert is validated (name, zone, machine type and accelerator types of the zone's catalog when
  ``strict_types``, labels, tags, SPOT scheduling, GPUs need ``onHostMaintenance: TERMINATE``); a bad one
  answers 400, a name in use 409 ``alreadyExists``, an unknown resource 404 ``notFound``.
- Creation, stockouts and quota failures are reported in the operation (``error.errors[].code``
  ZONE_RESOURCE_POOL_EXHAUSTED / QUOTA_EXCEEDED with ``errorDetails[].quotaInfo``), not in the HTTP answer.
- List filters: terms ``field = "value"``, ``field != value``, ``field:*`` / ``field:value`` joined by spaces
  or ``AND`` (``labels.KEY``, ``name``, ``status``, ``operationType``, ``targetLink`` …); anything else 400.
- Instances go PROVISIONING → STAGING → RUNNING over ``boot_s`` (0: RUNNING at once), with an external
  address (``natIP``): the hypervisor's ``new_address()``, else 127.0.1.N.

The hypervisor (``tests.fakes.vms.Hypervisor``, optional) boots the ``startup-script`` metadata of every
instance created (VM id :meth:`GcpComputeFake.vm_id`) and kills it when the instance is deleted, stopped or
preempted. With it, an instance's ``networkIP`` is its one (loopback) address too; without one, a private
address of its own in 10.128.0.0/16.

On faithful hosts (``GcpComputeFake(hypervisor=HostHypervisor(world, metadata))``, tests/fakes/cloudhosts.py;
any hypervisor with ``private_address``): an insert boots the VM with its zone's region
(``hypervisor.boot(vm_id, "gcp", script, address, region=region)``) as a host of the region's VPC; its
``networkIP`` is the host's private address and its ``natIP`` the public one. The network's firewall rules
become the hosts' admission rules (:meth:`GcpComputeFake.sync_firewalls`, after every insert, delete, stop,
preemption and firewall insert or delete): for each running VM, every INGRESS rule of its network whose
``targetTags`` it carries (a rule with none targets every VM) admits, per ``allowed`` entry (tcp/udp with
``ports`` "N" or "N-M", none meaning all; icmp; "all"), each of its ``sourceRanges`` and the private
address /32 of every running VM of that network carrying one of its ``sourceTags`` (as GCE matches
source tags on traffic inside the network only). Egress is not filtered; ``priority`` and deny rules are
not modelled (geotrain makes neither).

Knobs (attributes, settable while running): ``stockout`` (zone → error code of the inserts' operations
there), ``missing_images`` (boot-disk ``sourceImage`` links that do not exist: an insert naming one answers 404
``notFound`` "The resource '<link>' was not found", as GCE does), ``quota`` (region → (metric, limit): inserts
there fail QUOTA_EXCEEDED), ``http_errors`` (endpoint →
list of (status, reason) answers to give first, one per request, None = answer normally; :meth:`fail_next`),
``hang`` (endpoint →
list of seconds: the request is carried out, then the answer held that long, one per request),
``leave_on_error`` (a failed insert leaves its instance behind, stopped), ``op_delay_s`` (operations stay
RUNNING that long), ``strict_types``, ``boot_s``. Methods: :meth:`preempt` (GCE's spot reclaim: a
``compute.instances.preempted`` operation, the deletion, the VM killed; with ``notice_s`` the instance is
STOPPING and the metadata server says preempted meanwhile), :meth:`delete_behind_back` (another client's
plain delete), :meth:`stop_behind_back`. ``compute_log`` holds (method, endpoint, path, query, body) of every
compute request (they are in ``requests`` too); :meth:`compute_calls` counts them by endpoint.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.gcp.data import COMPUTE_BASE
from tests.fakes.gcp.server import GcpFake

_P = r"/compute/v1/projects/(?P<project>[^/]+)"
ROUTES = [
    ("POST", "instances.insert", _P + r"/zones/(?P<zone>[^/]+)/instances"),
    ("GET", "instances.list", _P + r"/zones/(?P<zone>[^/]+)/instances"),
    ("GET", "instances.get", _P + r"/zones/(?P<zone>[^/]+)/instances/(?P<name>[^/]+)"),
    ("DELETE", "instances.delete", _P + r"/zones/(?P<zone>[^/]+)/instances/(?P<name>[^/]+)"),
    ("GET", "instances.aggregatedList", _P + r"/aggregated/instances"),
    ("GET", "zoneOperations.list", _P + r"/zones/(?P<zone>[^/]+)/operations"),
    ("GET", "zoneOperations.get", _P + r"/zones/(?P<zone>[^/]+)/operations/(?P<op>[^/]+)"),
    ("POST", "zoneOperations.wait", _P + r"/zones/(?P<zone>[^/]+)/operations/(?P<op>[^/]+)/wait"),
    ("POST", "firewalls.insert", _P + r"/global/firewalls"),
    ("GET", "firewalls.list", _P + r"/global/firewalls"),
    ("GET", "firewalls.get", _P + r"/global/firewalls/(?P<name>[^/]+)"),
    ("DELETE", "firewalls.delete", _P + r"/global/firewalls/(?P<name>[^/]+)"),
    ("PATCH", "firewalls.patch", _P + r"/global/firewalls/(?P<name>[^/]+)"),
    ("GET", "globalOperations.get", _P + r"/global/operations/(?P<op>[^/]+)"),
    ("POST", "globalOperations.wait", _P + r"/global/operations/(?P<op>[^/]+)/wait"),
    ("GET", "regions.get", _P + r"/regions/(?P<region>[^/]+)"),
]
NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
LABEL = re.compile(r"^[a-z0-9_-]{0,63}$")
LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
GPU_MACHINE_PREFIXES = ("a2-", "a3-", "g2-")
STATUS_TEXT = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
               409: "ALREADY_EXISTS", 429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}
DEFAULT_MESSAGES = {
    "authError": "Request had invalid authentication credentials. Expected OAuth 2 access token.",
    "forbidden": "Required 'compute.instances.create' permission for 'projects/{project}'",
    "quotaExceeded": "Quota 'CPUS' exceeded. Limit: 24.0 in region {region}.",
    "rateLimitExceeded": "Quota exceeded for quota metric 'Queries' and limit 'Queries per minute' of service "
                         "'compute.googleapis.com'",
    "backendError": "Internal error. Please try again or contact Google Support.",
}
_TERM = re.compile(r'\s*\(?\s*([A-Za-z][\w.-]*)\s*(!=|=|:)\s*("(?:[^"\\]|\\.)*"|[^\s()"]+)\s*\)?\s*(?:AND\s+)?')
_ids = itertools.count(10**15)
_loopback = itertools.count(2)
_private = itertools.count(0)


def _on_hosts(hypervisor: object) -> bool:
    """Whether the hypervisor's VMs are faithful remote hosts (tests/fakes/cloudhosts.py)."""
    return hypervisor is not None and hasattr(hypervisor, "private_address")


def _firewall_kinds(allowed: dict[str, Any]) -> list[tuple[str, tuple[int, int]]]:
    """(protocol, ports) of a firewall rule's ``allowed`` entry as HostHypervisor.allow takes them."""
    proto = str(allowed.get("IPProtocol", "")).lower()
    if proto == "all":
        return [("all", (1, 65535))]
    if proto == "icmp":
        return [("icmp", (1, 65535))]
    if proto not in ("tcp", "udp"):
        return []
    ranges = []
    for port in allowed.get("ports") or ["1-65535"]:
        lo, _, hi = str(port).partition("-")
        ranges.append((proto, (max(int(lo), 1), min(int(hi or lo), 65535))))
    return ranges


def _stamp() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _tail(link: str) -> str:
    return link.rstrip("/").rsplit("/", 1)[-1]


def parse_filter(text: str) -> list[tuple[str, str, str]] | None:
    """[(field, op, value)] of a list filter, or None if it is not in the subset served."""
    terms, pos = [], 0
    while pos < len(text):
        match = _TERM.match(text, pos)
        if match is None or match.end() == pos:
            return None
        value = match[3][1:-1] if match[3].startswith('"') else match[3]
        terms.append((match[1], match[2], value))
        pos = match.end()
    return terms


def matches(obj: dict[str, Any], terms: list[tuple[str, str, str]]) -> bool:
    for path, op, value in terms:
        current: Any = obj
        for part in path.split("."):
            current = current.get(part) if isinstance(current, dict) else None
        if op == ":":
            if current is None or (value != "*" and str(current) != value):
                return False
        elif (str(current) == value if current is not None else False) != (op == "="):
            return False
    return True


@dataclass
class GcpComputeFake(GcpFake):
    """The catalog fake plus Compute Engine's instance side (see the module docstring)."""

    name = "gcp-compute-fake"
    methods = ("GET", "POST", "DELETE", "PATCH")

    hypervisor: Any = None
    strict_types: bool = True
    boot_s: float = 0.0
    op_delay_s: float = 0.0
    leave_on_error: bool = False
    stockout: dict[str, str] = field(default_factory=dict)
    missing_images: set[str] = field(default_factory=set)
    quota: dict[str, tuple[str, float]] = field(default_factory=dict)
    http_errors: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    hang: dict[str, list[float]] = field(default_factory=dict)
    compute_log: list[tuple[str, str, str, dict[str, str], Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._clock = threading.RLock()
        self.instances: dict[tuple[str, str], dict[str, Any]] = {}
        self.operations: dict[tuple[str, str], dict[str, Any]] = {}
        self.request_ids: dict[str, tuple[str, str]] = {}
        self.firewalls: dict[str, dict[str, Any]] = {}
        self._timers: list[threading.Timer] = []
        self._admitted: dict[str, set[tuple[str, str, tuple[int, int]]]] = {}  # vm id → rules in force (hosts)

    # ---- knobs and views ------------------------------------------------------------------------
    @staticmethod
    def vm_id(zone: str, name: str) -> str:
        return f"{zone}.{name}"

    def fail_next(self, endpoint: str, status: int, reason: str, times: int = 1) -> None:
        with self._clock:
            self.http_errors.setdefault(endpoint, []).extend([(status, reason)] * times)

    def find(self, name: str) -> tuple[str, dict[str, Any]] | None:
        with self._clock:
            return next(((z, i) for (z, n), i in self.instances.items() if n == name), None)

    def live_instances(self) -> list[dict[str, Any]]:
        """Instances that exist and are not stopped."""
        with self._clock:
            return [self._view(i) for i in self.instances.values() if i["status"] != "TERMINATED"]

    def compute_calls(self) -> Counter[str]:
        return Counter(endpoint for _, endpoint, _, _, _ in self.compute_log)

    def preempt(self, zone: str, name: str, *, notice_s: float = 0.0) -> None:
        """GCE takes a spot VM back: the preempted operation, then (after ``notice_s``) the deletion."""
        with self._clock:
            inst = self.instances[(zone, name)]
            if inst["scheduling"].get("provisioningModel") != "SPOT":
                raise ValueError(f"{name} is not a spot VM; GCE preempts only those")
            self._operation(zone, "compute.instances.preempted", inst, user="system",
                            status_message="Instance was preempted.")
            metadata = getattr(self.hypervisor, "metadata", None)
            if metadata is not None:
                metadata.notify(self.vm_id(zone, name))
            if notice_s <= 0:
                self._remove(zone, name)
                return
            inst["status"] = "STOPPING"
            timer = threading.Timer(notice_s, self._remove, args=(zone, name))
            timer.daemon = True
            self._timers.append(timer)
            timer.start()

    def delete_behind_back(self, zone: str, name: str) -> None:
        """Another client deletes the instance (a plain delete: no preemption recorded)."""
        with self._clock:
            self._operation(zone, "delete", self.instances[(zone, name)], user="someone-else@example.com")
            self._remove(zone, name)

    def stop_behind_back(self, zone: str, name: str) -> None:
        """Another client stops the instance: it stays (TERMINATED), its VM is killed."""
        with self._clock:
            inst = self.instances[(zone, name)]
            self._operation(zone, "stop", inst, user="someone-else@example.com")
            inst["status"] = "TERMINATED"
            if self.hypervisor is not None:
                self.hypervisor.kill(self.vm_id(zone, name))
            self.sync_firewalls()

    def sync_firewalls(self) -> None:
        """Make each running VM's admission rules those of its network's firewall rules (faithful hosts
        only; see the module docstring). Called after every change; tests may call it after changing
        ``firewalls`` directly."""
        hv: Any = self.hypervisor
        if not _on_hosts(hv):
            return
        with self._clock:
            live: dict[str, tuple[str, set[str], str]] = {}  # vm id → (network, tags, private address)
            for (zone, name), inst in self.instances.items():
                vm = self.vm_id(zone, name)
                if inst["status"] == "TERMINATED" or not hv.alive(vm):  # (a preempted VM keeps its rules
                    continue                                            # while it stops)
                nic = (inst.get("networkInterfaces") or [{}])[0]
                live[vm] = (nic.get("network", ""), set((inst.get("tags") or {}).get("items", [])),
                            hv.private_address(vm))
            for vm, (network, tags, _) in live.items():
                want: set[tuple[str, str, tuple[int, int]]] = set()
                for rule in self.firewalls.values():
                    if rule.get("direction", "INGRESS") != "INGRESS" or rule.get("disabled") or \
                            _tail(rule.get("network", "")) != _tail(network):
                        continue
                    targets = set(rule.get("targetTags") or [])
                    if targets and not targets & tags:
                        continue
                    sources = set(rule.get("sourceRanges") or [])
                    wanted_tags = set(rule.get("sourceTags") or [])
                    sources.update(f"{address}/32" for other, (net, other_tags, address) in live.items()
                                   if _tail(net) == _tail(network) and other_tags & wanted_tags)
                    for allowed in rule.get("allowed") or []:
                        for kind in _firewall_kinds(allowed):
                            want.update((cidr, *kind) for cidr in sources)
                have = self._admitted.get(vm, set())
                for cidr, protocol, ports in sorted(have - want):
                    hv.revoke(vm, cidr, protocol, ports)
                for cidr, protocol, ports in sorted(want - have):
                    hv.allow(vm, cidr, protocol, ports)
                self._admitted[vm] = want
            for vm in list(self._admitted):
                if vm not in live:
                    del self._admitted[vm]  # its host is gone, and its rules with it

    def reset(self) -> None:
        """Back to an empty project with no knob set (the catalog knobs too)."""
        with self._clock:
            for timer in self._timers:
                timer.cancel()
            if self.hypervisor is not None:
                for zone, name in list(self.instances):
                    self.hypervisor.kill(self.vm_id(zone, name))
            self.instances.clear()
            self.operations.clear()
            self.request_ids.clear()
            self.firewalls.clear()
            self._admitted.clear()
            self.compute_log.clear()
            self.stockout, self.quota, self.http_errors, self.hang = {}, {}, {}, {}
            self.missing_images = set()
            self.leave_on_error, self.strict_types, self.boot_s, self.op_delay_s = False, True, 0.0, 0.0
            self.page_size, self.regions = 200, None
            self.failing_regions, self.throttle, self.bad_shape, self.forbidden = set(), {}, set(), set()
        with self._lock:
            self.requests.clear()

    def stop(self) -> None:
        for timer in self._timers:
            timer.cancel()
        super().stop()

    # ---- request handling -----------------------------------------------------------------------
    def _handle(self, handler: BaseHTTPRequestHandler, method: str = "GET") -> None:
        parts = urlsplit(handler.path)
        route = next(((e, m.groupdict()) for verb, e, pattern in ROUTES if verb == method
                      for m in [re.fullmatch(pattern, parts.path)] if m), None)
        if route is None:
            if method == "GET":
                return super()._handle(handler, method)
            return self._send(handler, 404, self._error(404, "NOT_FOUND", f"no route {method} {parts.path}",
                                                        "notFound"))
        endpoint, args = route
        query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            return self._send(handler, 400, self._error(400, "INVALID_ARGUMENT", "Invalid JSON payload", "parseError"))
        with self._lock:
            self.requests.append((method, parts.path, query))
        with self._clock:
            self.compute_log.append((method, endpoint, parts.path, query, body))
            injected = self.http_errors.get(endpoint)
            failure = injected.pop(0) if injected else None
            hold = self.hang.get(endpoint)
            hold_s = hold.pop(0) if hold else 0.0
        if failure is not None:
            status, reason = failure
            message = DEFAULT_MESSAGES.get(reason, reason).format(project=self.project,
                                                                 region=args.get("zone", "x-x1-a")[:-2])
            return self._send(handler, status, self._error(status, STATUS_TEXT.get(status, "UNKNOWN"), message, reason))
        if args["project"] != self.project:
            return self._send(handler, 404, self._error(404, "NOT_FOUND", f"The resource 'projects/{args['project']}' "
                                                        "was not found", "notFound"))
        with self._clock:
            status, payload = getattr(self, "_" + endpoint.replace(".", "_"))(args, query, body)
        if status == 200 and endpoint.endswith(".wait"):
            payload = self._wait(args, payload)
        if hold_s:
            time.sleep(hold_s)
        try:
            return self._send(handler, status, payload)
        except OSError:  # the client gave up waiting (a hang knob)
            return None

    # ---- instances ------------------------------------------------------------------------------
    def _instances_insert(self, args: dict[str, str], query: dict[str, str], body: Any) -> tuple[int, Any]:
        zone = args["zone"]
        if query.get("requestId") in self.request_ids:
            return 200, self._op_view(self.operations[self.request_ids[query["requestId"]]])
        regions = dict(self.zones())
        if zone not in regions:
            return 404, self._error(404, "NOT_FOUND", f"The resource 'projects/{self.project}/zones/{zone}' was not "
                                    "found", "notFound")
        image = next((d.get("initializeParams", {}).get("sourceImage", "") for d in (body or {}).get("disks", [])
                      if isinstance(d, dict) and d.get("boot")), "") if isinstance(body, dict) else ""
        if image and image in self.missing_images:  # GCE: 404 notFound naming the image (or family) link
            return 404, self._error(404, "NOT_FOUND", f"The resource '{image}' was not found", "notFound")
        problem = self._invalid_instance(zone, regions[zone], body if isinstance(body, dict) else {})
        if problem:
            return 400, self._error(400, "INVALID_ARGUMENT", problem, "invalid")
        name = body["name"]
        if (zone, name) in self.instances:
            return 409, self._error(409, "ALREADY_EXISTS", f"The resource 'projects/{self.project}/zones/{zone}/"
                                    f"instances/{name}' already exists", "alreadyExists")
        inst = self._new_instance(zone, body)
        error = self._insert_error(zone, regions[zone], body)
        if error is not None:
            if self.leave_on_error:
                inst["status"] = "TERMINATED"
                self.instances[(zone, name)] = inst
            op = self._operation(zone, "insert", inst, error=error)
        else:
            self.instances[(zone, name)] = inst
            if self.hypervisor is not None:
                script = next((i.get("value", "") for i in inst["metadata"].get("items", [])
                               if i.get("key") == "startup-script"), "")
                vm = self.vm_id(zone, name)
                if _on_hosts(self.hypervisor):
                    self.hypervisor.boot(vm, "gcp", script, inst["_address"], region=regions[zone])
                    inst["networkInterfaces"][0]["networkIP"] = self.hypervisor.private_address(vm)
                    self.sync_firewalls()
                else:
                    self.hypervisor.boot(vm, "gcp", script, inst["_address"])
            op = self._operation(zone, "insert", inst)
        if query.get("requestId"):
            self.request_ids[query["requestId"]] = (zone, op["name"])
        return 200, self._op_view(op)

    def _invalid_instance(self, zone: str, region: str, body: dict[str, Any]) -> str | None:
        name = body.get("name", "")
        if not NAME.match(name):
            return (f"Invalid value for field 'resource.name': '{name}'. Must be a match of regex "
                    "'(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'")
        machine = body.get("machineType", "")
        found = re.fullmatch(r"(?:.*/)?zones/([^/]+)/machineTypes/([^/]+)", machine)
        mzone, mtype = (found[1], found[2]) if found else (None, None)
        if mzone != zone or (self.strict_types and mtype not in {m["name"] for m in self.machine_types(zone, region)}):
            return (f"Invalid value for field 'resource.machineType': '{machine}'. Machine type with name "
                    f"'{_tail(machine)}' does not exist in zone '{zone}'.")
        cards = {a["name"]: a["maximumCardsPerInstance"] for a in self.accelerator_types(zone, region)}
        for gpu in body.get("guestAccelerators", []):
            link, count = gpu.get("acceleratorType", ""), int(gpu.get("acceleratorCount", 0))
            if f"zones/{zone}/acceleratorTypes/" not in link or count < 1 or \
                    (self.strict_types and count > cards.get(_tail(link), 0)):
                return (f"Invalid value for field 'resource.guestAccelerators[0].acceleratorType': '{link}'. "
                        f"Accelerator type '{_tail(link)}' x{count} does not exist in zone '{zone}'.")
        for key, value in (body.get("labels") or {}).items():
            if not LABEL_KEY.match(key) or not LABEL.match(str(value)):
                return f"Invalid value for field 'resource.labels': '{key}={value}'"
        for tag in (body.get("tags") or {}).get("items", []):
            if not NAME.match(tag):
                return f"Invalid value for field 'resource.tags.items[0]': '{tag}'"
        scheduling = body.get("scheduling") or {}
        gpus = bool(body.get("guestAccelerators")) or (mtype or "").startswith(GPU_MACHINE_PREFIXES)
        if gpus and scheduling.get("onHostMaintenance", "MIGRATE") != "TERMINATE":
            return "Instances with guest accelerators do not support live migration."
        if scheduling.get("provisioningModel") == "SPOT" and (scheduling.get("automaticRestart", True) or
                                                              scheduling.get("onHostMaintenance") != "TERMINATE"):
            return "Invalid value for field 'resource.scheduling': Spot VMs need automaticRestart false and TERMINATE"
        if not body.get("disks") or not body.get("networkInterfaces"):
            return "Invalid value for field 'resource': an instance needs a boot disk and a network interface"
        return None

    def _insert_error(self, zone: str, region: str, body: dict[str, Any]) -> dict[str, Any] | None:
        if zone in self.stockout:
            code = self.stockout[zone]
            return {"code": code, "message": f"The zone 'projects/{self.project}/zones/{zone}' does not have enough "
                    "resources available to fulfill the request.  Try a different zone, or try again later.",
                    "http": 503}
        if region in self.quota:
            metric, limit = self.quota[region]
            return {"code": "QUOTA_EXCEEDED", "message": f"Quota '{metric}' exceeded.  Limit: {limit:.1f} in region "
                    f"{region}.", "http": 403, "errorDetails": [{"quotaInfo": {
                        "metricName": f"compute.googleapis.com/{metric.lower()}",
                        "limitName": f"{metric}-per-project-region",
                        "dimensions": {"region": region}, "limit": limit}}]}
        return None

    def _new_instance(self, zone: str, body: dict[str, Any]) -> dict[str, Any]:
        address = (self.hypervisor.new_address() if self.hypervisor is not None
                   else f"127.0.1.{next(_loopback) % 250 + 2}")
        private = next(_private) % (250 * 250)
        inst = json.loads(json.dumps(body))
        base = f"{COMPUTE_BASE}/projects/{self.project}/zones/{zone}"
        inst.update({
            "kind": "compute#instance", "id": str(next(_ids)), "creationTimestamp": _stamp(), "zone": base,
            "status": "PROVISIONING", "selfLink": f"{base}/instances/{body['name']}", "cpuPlatform": "Intel Broadwell",
            "machineType": f"{base}/machineTypes/{_tail(body['machineType'])}", "labelFingerprint": "42WmSpB8rSM=",
            "_created": time.monotonic(), "_address": address})
        inst.setdefault("labels", {})
        inst.setdefault("metadata", {}).update({"kind": "compute#metadata", "fingerprint": "fake="})
        for n, nic in enumerate(inst["networkInterfaces"]):
            nic.update({"name": f"nic{n}", "networkIP": address if self.hypervisor is not None and n == 0
                        else f"10.128.{private // 250}.{private % 250 + 2}",
                        "network": f"{COMPUTE_BASE}/projects/{self.project}/"
                                   f"{nic.get('network', 'global/networks/default')}"})
            for config in nic.get("accessConfigs", []):
                config.update({"kind": "compute#accessConfig", "natIP": address})
        for gpu in inst.get("guestAccelerators", []):
            gpu["acceleratorType"] = f"{COMPUTE_BASE}/projects/{self.project}/{gpu['acceleratorType']}"
        return inst

    def _view(self, inst: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in inst.items() if not k.startswith("_")}
        if inst["status"] in ("PROVISIONING", "STAGING"):
            elapsed = time.monotonic() - inst["_created"]
            out["status"] = ("RUNNING" if elapsed >= self.boot_s else "STAGING" if elapsed >= self.boot_s / 2
                             else "PROVISIONING")
        return out

    def _instances_get(self, args: dict[str, str], query: dict[str, str], body: Any) -> tuple[int, Any]:
        inst = self.instances.get((args["zone"], args["name"]))
        if inst is None:
            return 404, self._error(404, "NOT_FOUND", f"The resource 'projects/{self.project}/zones/{args['zone']}/"
                                    f"instances/{args['name']}' was not found", "notFound")
        return 200, self._view(inst)

    def _filtered(self, entries: list[dict[str, Any]], query: dict[str, str]) -> list[dict[str, Any]] | None:
        terms = parse_filter(query.get("filter", ""))
        return None if terms is None else [e for e in entries if matches(e, terms)]

    def _instances_list(self, args: dict[str, str], query: dict[str, str], body: Any) -> tuple[int, Any]:
        entries = self._filtered([self._view(i) for (z, _), i in sorted(self.instances.items()) if z == args["zone"]],
                                 query)
        return self._list_page("compute#instanceList", entries, query)

    def _instances_aggregatedList(self, args: dict[str, str], query: dict[str, str], body: Any) -> tuple[int, Any]:
        items: dict[str, Any] = {}
        for zone, _region in self.zones():
            entries = self._filtered([self._view(i) for (z, _), i in sorted(self.instances.items()) if z == zone],
                                     query)
            if entries is None:
                return 400, self._error(400, "INVALID_ARGUMENT", "Invalid value for field 'filter'", "invalid")
            items[f"zones/{zone}"] = {"instances": entries} if entries else {"warning": {
                "code": "NO_RESULTS_ON_PAGE", "message": f"There are no results for scope 'zones/{zone}' on this page.",
                "data": [{"key": "scope", "value": f"zones/{zone}"}]}}
        return 200, {"kind": "compute#instanceAggregatedList", "items": items,
                     "selfLink": f"{COMPUTE_BASE}/projects/{self.project}/aggregated/instances"}

    def _instances_delete(self, args: dict[str, str], query: dict[str, str], body: Any) -> tuple[int, Any]:
        if query.get("requestId") in self.request_ids:
            return 200, self._op_view(self.operations[self.request_ids[query["requestId"]]])
        key = (args["zone"], args["name"])
        if key not in self.instances:
            return self._instances_get(args, query, body)
        op = self._operation(args["zone"], "delete", self.instances[key])
        self._remove(*key)
        if query.get("requestId"):
            self.request_ids[query["requestId"]] = (args["zone"], op["name"])
        return 200, self._op_view(op)

    def _remove(self, zone: str, name: str) -> None:
        with self._clock:
            self.instances.pop((zone, name), None)
            if self.hypervisor is not None:
                self.hypervisor.kill(self.vm_id(zone, name))
            self.sync_firewalls()

    # ---- operations -----------------------------------------------------------------------------
    def _operation(self, scope: str, kind: str, target: dict[str, Any], *, user: str = "geotrain@fake.iam",
                   error: dict[str, Any] | None = None, status_message: str | None = None) -> dict[str, Any]:
        name = f"operation-{int(time.time() * 1000)}-{next(_ids):x}"
        where = f"{COMPUTE_BASE}/projects/{self.project}/" + ("global" if scope == "global" else f"zones/{scope}")
        op: dict[str, Any] = {
            "kind": "compute#operation", "id": str(next(_ids)), "name": name, "operationType": kind,
            "targetLink": target["selfLink"], "targetId": target["id"], "user": user, "progress": 100,
            "insertTime": _stamp(), "startTime": _stamp(), "endTime": _stamp(),
            "selfLink": f"{where}/operations/{name}",
            "_done_at": time.monotonic() + self.op_delay_s}
        if scope != "global":
            op["zone"] = where
        if status_message:
            op["statusMessage"] = status_message
        if error is not None:
            op["error"] = {"errors": [{k: v for k, v in error.items() if k != "http"}]}
            op["httpErrorStatusCode"] = error["http"]
            op["httpErrorMessage"] = {403: "FORBIDDEN", 503: "SERVICE UNAVAILABLE"}.get(error["http"], "ERROR")
        self.operations[(scope, name)] = op
        return op

    def _op_view(self, op: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in op.items() if not k.startswith("_")}
        if time.monotonic() < op["_done_at"]:
            out.update(status="RUNNING", progress=0)
            out.pop("endTime", None)
        else:
            out["status"] = "DONE"
        return out

    def _op_lookup(self, scope: str, name: str) -> tuple[int, Any]:
        op = self.operations.get((scope, name))
        if op is None:
            return 404, self._error(404, "NOT_FOUND", f"The resource 'projects/{self.project}/"
                                    f"{'global' if scope == 'global' else 'zones/' + scope}/operations/{name}' was not "
                                    "found", "notFound")
        return 200, self._op_view(op)

    def _zoneOperations_get(self, args: dict[str, str], query: dict[str, str], body: Any) -> tuple[int, Any]:
        return self._op_lookup(args["zone"], args["op"])

    _zoneOperations_wait = _zoneOperations_get

    def _globalOperations_get(self, args: dict[str, str], query: dict[str, str], body: Any) -> tuple[int, Any]:
        return self._op_lookup("global", args["op"])

    _globalOperations_wait = _globalOperations_get

    def _wait(self, args: dict[str, str], payload: dict[str, Any]) -> dict[str, Any]:
        """operations.wait: until done, at most 2 s here (GCE: about 2 minutes)."""
        scope = args.get("zone", "global")
        op = self.operations[(scope, args["op"])]
        time.sleep(max(0.0, min(2.0, op["_done_at"] - time.monotonic())))
        with self._clock:
            return self._op_view(op)

    def _zoneOperations_list(self, args: dict[str, str], query: dict[str, str], body: Any) -> tuple[int, Any]:
        entries = self._filtered([self._op_view(op) for (scope, _), op in self.operations.items()
                                  if scope == args["zone"]], query)
        return self._list_page("compute#operationList", entries, query)

    def _list_page(self, kind: str, entries: list[dict[str, Any]] | None, query: dict[str, str]) -> tuple[int, Any]:
        if entries is None:
            return 400, self._error(400, "INVALID_ARGUMENT", f"Invalid value for field 'filter': "
                                    f"'{query.get('filter')}'. Invalid list filter expression.", "invalid")
        start, size = int(query.get("pageToken") or 0), int(query.get("maxResults") or 500)
        payload: dict[str, Any] = {"kind": kind, "items": entries[start:start + size]}
        if start + size < len(entries):
            payload["nextPageToken"] = str(start + size)
        return 200, payload

    # ---- firewalls and regions ------------------------------------------------------------------
    def _firewalls_insert(self, args: dict[str, str], query: dict[str, str], body: Any) -> tuple[int, Any]:
        if query.get("requestId") in self.request_ids:
            return 200, self._op_view(self.operations[self.request_ids[query["requestId"]]])
        body = body if isinstance(body, dict) else {}
        name = body.get("name", "")
        problem = None if NAME.match(name) else f"Invalid value for field 'resource.name': '{name}'"
        try:
            for cidr in body.get("sourceRanges", []):
                ipaddress.ip_network(cidr)
        except ValueError:
            problem = f"Invalid value for field 'resource.sourceRanges': {body.get('sourceRanges')}"
        if not body.get("allowed") or not (body.get("sourceRanges") or body.get("sourceTags")):
            problem = problem or "Invalid value for field 'resource': a rule needs allowed and a source"
        if problem:
            return 400, self._error(400, "INVALID_ARGUMENT", problem, "invalid")
        if name in self.firewalls:
            return 409, self._error(409, "ALREADY_EXISTS", f"The resource 'projects/{self.project}/global/firewalls/"
                                    f"{name}' already exists", "alreadyExists")
        rule = dict(body, kind="compute#firewall", id=str(next(_ids)), creationTimestamp=_stamp(),
                    selfLink=f"{COMPUTE_BASE}/projects/{self.project}/global/firewalls/{name}")
        rule["network"] = f"{COMPUTE_BASE}/projects/{self.project}/{body.get('network', 'global/networks/default')}"
        self.firewalls[name] = rule
        self.sync_firewalls()
        op = self._operation("global", "insert", rule)
        if query.get("requestId"):
            self.request_ids[query["requestId"]] = ("global", op["name"])
        return 200, self._op_view(op)

    def _firewalls_get(self, args: dict[str, str], query: dict[str, str], body: Any) -> tuple[int, Any]:
        rule = self.firewalls.get(args["name"])
        if rule is None:
            return 404, self._error(404, "NOT_FOUND", f"The resource 'projects/{self.project}/global/firewalls/"
                                    f"{args['name']}' was not found", "notFound")
        return 200, rule

    def _firewalls_list(self, args: dict[str, str], query: dict[str, str], body: Any) -> tuple[int, Any]:
        return self._list_page("compute#firewallList", self._filtered(list(self.firewalls.values()), query), query)

    def _firewalls_delete(self, args: dict[str, str], query: dict[str, str], body: Any) -> tuple[int, Any]:
        if query.get("requestId") in self.request_ids:
            return 200, self._op_view(self.operations[self.request_ids[query["requestId"]]])
        status, rule = self._firewalls_get(args, query, body)
        if status != 200:
            return status, rule
        op = self._operation("global", "delete", self.firewalls.pop(args["name"]))
        self.sync_firewalls()
        if query.get("requestId"):
            self.request_ids[query["requestId"]] = ("global", op["name"])
        return 200, self._op_view(op)

    def _firewalls_patch(self, args: dict[str, str], query: dict[str, str], body: Any) -> tuple[int, Any]:
        """GCE's firewalls.patch: JSON merge patch of the rule (a field given replaces the rule's)."""
        if query.get("requestId") in self.request_ids:
            return 200, self._op_view(self.operations[self.request_ids[query["requestId"]]])
        status, rule = self._firewalls_get(args, query, body)
        if status != 200:
            return status, rule
        body = body if isinstance(body, dict) else {}
        if body.get("name", args["name"]) != args["name"]:
            return 400, self._error(400, "INVALID_ARGUMENT", "Invalid value for field 'resource.name'", "invalid")
        try:
            for cidr in body.get("sourceRanges", []):
                ipaddress.ip_network(cidr)
        except ValueError:
            return 400, self._error(400, "INVALID_ARGUMENT",
                                    f"Invalid value for field 'resource.sourceRanges': {body.get('sourceRanges')}",
                                    "invalid")
        rule.update({k: v for k, v in body.items() if k not in ("network", "selfLink", "id", "kind")})
        self.sync_firewalls()
        op = self._operation("global", "patch", rule)
        if query.get("requestId"):
            self.request_ids[query["requestId"]] = ("global", op["name"])
        return 200, self._op_view(op)

    def _regions_get(self, args: dict[str, str], query: dict[str, str], body: Any) -> tuple[int, Any]:
        zones = [z for z, r in self.zones() if r == args["region"]]
        if not zones:
            return 404, self._error(404, "NOT_FOUND", f"The resource 'projects/{self.project}/regions/"
                                    f"{args['region']}' was not found", "notFound")
        base = f"{COMPUTE_BASE}/projects/{self.project}"
        return 200, {"kind": "compute#region", "id": str(abs(hash(args["region"])) % 10**12), "name": args["region"],
                     "status": "UP", "zones": [f"{base}/zones/{z}" for z in zones],
                     "selfLink": f"{base}/regions/{args['region']}"}

"""The VM side of the Azure fake: ARM resource groups, networks and virtual machines, on the same server
as the catalog fake (:class:`AzureVmFake` extends :class:`tests.fakes.azure_server.AzureFake`).

It speaks ARM's published REST shapes, so azure-mgmt-resource, azure-mgmt-network and azure-mgmt-compute
work against it unchanged (only ``base_url`` and the credential point here):

- **Resource groups** ``PUT/GET/HEAD/DELETE /subscriptions/{s}/resourcegroups/{rg}`` (PUT answers 201 or 200
  at once; DELETE is a long-running operation that deletes everything in the group) and the list ``GET
  /subscriptions/{s}/resourcegroups``.
- **Resources** ``PUT/GET/DELETE .../resourceGroups/{rg}/providers/{namespace}/{type}/{name}`` and the list
  ``GET .../providers/{namespace}/{type}`` (``{"value": [...], "nextLink"}``) for
  ``Microsoft.Network/networkSecurityGroups``, ``virtualNetworks`` (subnets inline, and ``GET
  .../virtualNetworks/{v}/subnets/{s}``), ``publicIPAddresses``, ``networkInterfaces``,
  ``Microsoft.Compute/virtualMachines`` and ``disks`` (made by a VM for its OS disk). Every request needs
  an ``api-version`` query parameter (400 ``MissingApiVersionParameter``); names are case-insensitive.
- **Long-running operations** as ARM does them: a PUT answers 201 (200 for an update) with the resource in
  ``provisioningState`` Creating/Updating and an ``Azure-AsyncOperation`` header; a DELETE answers 202
  with ``Azure-AsyncOperation`` and ``Location`` (204 when the resource does not exist). The operation
  status ``GET /subscriptions/{s}/providers/{ns}/locations/{l}/operations/{id}`` answers ``{"status":
  "InProgress" | "Succeeded" | "Failed", "error"?}``; the ``Location`` URL (``.../operationResults/{id}``)
  202 while running, then 204. An operation finishes ``lro_delay_s`` after it began (0: at the next
  request; the delay in force when it is checked counts), checked at every request: nothing runs in the
  background.
- **Activity log** ``GET /subscriptions/{s}/providers/Microsoft.Insights/eventtypes/management/values``
  with a ``$filter`` of ``eventTimestamp ge/le`` and ``resourceUri eq`` or ``resourceGroupName eq``:
  ``{"value": [EventData...]}``. Writes and deletes are logged as category ``Administrative`` (the
  ``caller`` says who), a spot eviction as category ``ResourceHealth`` (``properties.title`` "Virtual
  machine preempted", ``cause`` PlatformInitiated, as the portal shows an eviction).
- Errors in ARM's shape ``{"error": {"code", "message"}}``: 401 ``InvalidAuthenticationToken`` without
  the fake's bearer token, 404 ``SubscriptionNotFound`` / ``ResourceGroupNotFound`` / ``ResourceNotFound``,
  400 ``InvalidResourceReference`` (a NIC's subnet or public IP, a VM's NIC, a subnet's NSG that does not
  exist), ``StandardSkuPublicIPAddressesCannotBeDynamic``, ``PublicIPAddressInUse``, ``NicInUse``,
  ``InUseSubnetCannotBeDeleted``, ``InUseNetworkSecurityGroupCannotBeDeleted`` (deleting what is in use),
  ``InvalidParameter`` (a VM body without what Azure requires: size, image, admin user, an SSH key when
  passwords are off, base64 custom data, an eviction policy for a spot VM).

What a VM does. When its create operation succeeds it is ``PowerState/running`` and, with a
``hypervisor`` (:class:`tests.fakes.vms.Hypervisor`), boots: its custom data (base64) is decoded and run as
the startup script, at its public IP address (the address a public IP gets is ``hypervisor.new_address()``,
or 127.0.0.N without a hypervisor). Deleting it kills the hypervisor's VM and deletes its OS disk and NICs
whose ``deleteOption`` is ``Delete`` (and a NIC's public IP whose ``deleteOption`` is ``Delete``).

On faithful hosts (``AzureVmFake(hypervisor=HostHypervisor(world, metadata))``, tests/fakes/cloudhosts.py;
any hypervisor with ``private_address``): a VM boots in its region (``hypervisor.boot(name, "azure",
script, public_ip, region=location)``) as a host of the region's network; its NIC's private IP becomes the
host's private address at boot (``hypervisor.private_address``; Azure gives it when the NIC is made, the
fake only knows it once the host is up: a provider reads it from the NIC once the VM runs), and its public
IP resource's address is the host's public address. The NSGs of the VM's subnet and NIC become the
host's admission rules (``hypervisor.allow`` / ``revoke``), kept in sync when a VM boots or goes and when
an NSG is written: inbound rules in priority order (Azure's default rules after them) up to the first
deny-everything rule; each Allow rule's source address prefix(es) as a CIDR (``*`` / ``Internet``:
0.0.0.0/0; the ``VirtualNetwork`` tag: the private /32s of the running VMs of the VNet; other tags and
partial Deny rules are not enforced), its protocol and destination port range(s). :meth:`evict` with
``notice_s`` shows the VM a Scheduled Events ``Preempt`` through the hypervisor's FakeMetadata first, and
evicts it that much later; an eviction or a delete pulls the plug (``hypervisor.kill``).

Knobs (attributes, settable while running), besides those of the catalog fake:

- ``failures``: resource type (``virtualMachines``, ``networkInterfaces``, ...) → list of
  :class:`ArmFailure`; the next creates of that type fail with them, in order: ``during="request"`` answers
  the PUT with the error (nothing is made), ``"operation"`` accepts the PUT and fails the operation (a VM
  then stays in ``provisioningState`` Failed, as an allocation failure leaves it).
- ``vm_put_delay_s``: the VM PUT is answered this late, after the VM was made (a client-side timeout).
- ``arm_throttle``: ``"<METHOD> <type>"`` (e.g. ``"PUT virtualMachines"``, ``"GET activityLog"``) → number
  of 429 ``TooManyRequests`` answers before the request goes through.
- ``arm_forbidden``: ``"<METHOD> <type>"`` keys answered 403 ``AuthorizationFailed``.
- ``lro_delay_s`` (see above), ``lro_delays`` (per resource type, e.g. ``{"virtualMachines": 60}``);
  ``retry_after_s``: a ``Retry-After`` header on operation answers (None: none).
- ``page_size_vms``: VMs per page of a list.

Test hooks: :meth:`evict` (a spot reclaim: with eviction policy Delete the VM, its disk and NIC go, as
Azure does; with Deallocate the VM stays ``PowerState/deallocated``; both log the ResourceHealth event and
are recorded in ``evictions``; ``notice_s``: a Scheduled Events notice that long before),
:meth:`delete_behind_back` (someone deletes the VM in the portal),
:meth:`vms`, :meth:`resources`, :meth:`vm`, ``events`` (the activity log) and ``requests`` (every request).
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.azure_server import AzureFake

TYPES = {  # lower-case namespace/type -> (canonical, short name)
    "microsoft.network/networksecuritygroups": ("Microsoft.Network/networkSecurityGroups", "networkSecurityGroups"),
    "microsoft.network/virtualnetworks": ("Microsoft.Network/virtualNetworks", "virtualNetworks"),
    "microsoft.network/publicipaddresses": ("Microsoft.Network/publicIPAddresses", "publicIPAddresses"),
    "microsoft.network/networkinterfaces": ("Microsoft.Network/networkInterfaces", "networkInterfaces"),
    "microsoft.compute/virtualmachines": ("Microsoft.Compute/virtualMachines", "virtualMachines"),
    "microsoft.compute/disks": ("Microsoft.Compute/disks", "disks"),
}
_SUB = r"/subscriptions/(?P<sub>[^/]+)"
_RG_PATH = re.compile(_SUB + r"/resourcegroups/(?P<rg>[^/]+)$", re.I)
_RGS_PATH = re.compile(_SUB + r"/resourcegroups$", re.I)
_RES_PATH = re.compile(_SUB + r"/resourcegroups/(?P<rg>[^/]+)/providers/(?P<ns>[^/]+)/(?P<type>[^/]+)"
                       r"(?:/(?P<name>[^/]+)(?:/subnets/(?P<subnet>[^/]+))?)?$", re.I)
_OP_PATH = re.compile(_SUB + r"/providers/(?P<ns>[^/]+)/locations/(?P<loc>[^/]+)/(?P<kind>operations|operationResults)"
                      r"/(?P<op>[^/]+)$", re.I)
_LOG_PATH = re.compile(_SUB + r"/providers/microsoft\.insights/eventtypes/management/values$", re.I)
OUR_CALLER = "geotrain-test@fake.example"  # who the fake's token belongs to
SOMEONE_ELSE = "someone.else@fake.example"


@dataclass(frozen=True)
class ArmFailure:
    """An error the fake answers: ``during`` "request" (the PUT is refused) or "operation" (the LRO fails);
    ``details``: inner (code, message) pairs, as ARM nests them under a wrapper code."""

    code: str
    message: str
    status: int = 409
    during: str = "request"
    details: tuple[tuple[str, str], ...] = ()

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            error["details"] = [{"code": c, "message": m} for c, m in self.details]
        return error


class _Reply(Exception):
    def __init__(self, status: int, payload: Any = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(status)
        self.status, self.payload, self.headers = status, payload, headers or {}


def _on_hosts(hypervisor: object) -> bool:
    return hypervisor is not None and hasattr(hypervisor, "private_address")


_PROTOCOLS = {"tcp": "tcp", "udp": "udp", "icmp": "icmp", "*": "all"}
_ANYWHERE = ("*", "internet", "0.0.0.0/0", "any")


def _ports(text: str) -> tuple[int, int]:
    if text.strip() == "*":
        return 1, 65535
    lo, _, hi = text.partition("-")
    return max(int(lo), 1), min(int(hi or lo), 65535)


def _admitted(nsg: dict[str, Any], vnet_addresses: set[str]) -> set[tuple[str, str, tuple[int, int]]]:
    """(source CIDR, protocol, ports) an NSG lets in (see the module docstring), as HostHypervisor.allow
    takes them."""
    rules = [r for r in (_props(nsg).get("securityRules") or []) + (_props(nsg).get("defaultSecurityRules") or [])
             if (r.get("properties") or {}).get("direction") == "Inbound"]
    rules.sort(key=lambda r: r["properties"]["priority"])
    out: set[tuple[str, str, tuple[int, int]]] = set()
    for rule in rules:
        p = rule["properties"]
        sources = [p["sourceAddressPrefix"]] if p.get("sourceAddressPrefix") else list(p.get("sourceAddressPrefixes")
                                                                                       or [])
        ranges = [p["destinationPortRange"]] if p.get("destinationPortRange") else list(p.get("destinationPortRanges")
                                                                                        or [])
        protocol = _PROTOCOLS.get(str(p.get("protocol", "*")).lower(), "all")
        if p.get("access") == "Deny":
            if protocol == "all" and any(s.lower() in _ANYWHERE for s in sources) and "*" in ranges:
                break  # nothing below it gets in
            continue  # a partial deny: not enforced
        for source in sources:
            if source.lower() in _ANYWHERE:
                cidrs = {"0.0.0.0/0"}
            elif source.lower() == "virtualnetwork":
                cidrs = set(vnet_addresses)
            elif source[:1].isdigit():
                cidrs = {source}
            else:
                continue  # another service tag: nothing of the test's world
            for cidr in cidrs:
                for ports in ranges:
                    out.add((cidr, protocol, (1, 65535) if protocol in ("all", "icmp") else _ports(ports)))
    return out


def _err(status: int, code: str, message: str) -> _Reply:
    return _Reply(status, {"error": {"code": code, "message": message}})


def _now_text() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _props(resource: dict[str, Any]) -> dict[str, Any]:
    return resource.setdefault("properties", {})


@dataclass
class AzureVmFake(AzureFake):
    """The catalog fake plus ARM's VM side. Use as a context manager, or call :meth:`start` / :meth:`stop`."""

    name = "azure-vm-fake"
    methods = ("GET", "POST", "PUT", "DELETE", "HEAD", "PATCH")

    hypervisor: Any = None
    lro_delay_s: float = 0.0
    lro_delays: dict[str, float] = field(default_factory=dict)
    retry_after_s: int | None = None
    failures: dict[str, list[ArmFailure]] = field(default_factory=dict)
    vm_put_delay_s: float = 0.0
    arm_throttle: dict[str, int] = field(default_factory=dict)
    arm_forbidden: set[str] = field(default_factory=set)
    page_size_vms: int = 50
    events: list[dict[str, Any]] = field(default_factory=list)
    evictions: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._arm = threading.RLock()
        self._groups: dict[str, dict[str, Any]] = {}  # lower name -> group
        self._res: dict[str, dict[str, Any]] = {}  # lower resource id -> resource
        self._ops: dict[str, dict[str, Any]] = {}
        self._runtime: dict[str, dict[str, Any]] = {}  # lower VM id -> {"power": ..., "script": ...}
        self._addresses = 0
        self.firewall: dict[str, set[tuple[str, str, tuple[int, int]]]] = {}  # VM name → rules in force (hosts)

    # ---- test hooks ------------------------------------------------------------------------------
    def resources(self, kind: str) -> list[dict[str, Any]]:
        """Every resource of a short type (``virtualMachines``, ``publicIPAddresses``, ...), as served."""
        with self._arm:
            self._advance()
            return [json.loads(json.dumps(r)) for r in self._res.values() if r["type"].split("/")[1] == kind]

    def vms(self) -> list[dict[str, Any]]:
        return self.resources("virtualMachines")

    def vm(self, name: str) -> dict[str, Any] | None:
        return next((v for v in self.vms() if v["name"].lower() == name.lower()), None)

    def groups(self) -> list[str]:
        with self._arm:
            return [g["name"] for g in self._groups.values()]

    def power_state(self, name: str) -> str | None:
        with self._arm:
            vm = self._find("virtualMachines", name)
            return None if vm is None else self._runtime.get(vm["id"].lower(), {}).get("power")

    def evict(self, name: str, *, policy: str | None = None, notice_s: float = 0.0) -> None:
        """Azure takes a spot VM back: per its eviction policy (or ``policy``, as if it had that one) it is
        deleted (with its disk and NIC per their deleteOption) or deallocated; the activity log gets the
        ResourceHealth event. With ``notice_s`` > 0 the VM's Scheduled Events show a ``Preempt`` first (if
        the hypervisor has a :class:`tests.fakes.metadata.FakeMetadata`; Azure gives 30 s) and the
        eviction comes ``notice_s`` seconds later."""
        if notice_s > 0:
            with self._arm:
                if self._find("virtualMachines", name) is None:
                    raise KeyError(name)
            metadata = getattr(self.hypervisor, "metadata", None)
            if metadata is not None:
                metadata.notify(name, "reclaim")
            timer = threading.Timer(notice_s, self._evict_later, args=(name, policy))
            timer.daemon = True
            timer.start()
            return
        with self._arm:
            self._advance()
            vm = self._find("virtualMachines", name)
            if vm is None:
                raise KeyError(name)
            self.evictions.append(vm["name"])
            self._event(vm, "ResourceHealth", "Microsoft.Resourcehealth/healthevent/Activated/action",
                        caller="Microsoft.Compute", level="Critical",
                        properties={"title": "Virtual machine preempted", "type": "Downtime",
                                    "cause": "PlatformInitiated", "currentHealthStatus": "Unavailable",
                                    "previousHealthStatus": "Available",
                                    "details": "The Azure Spot virtual machine was evicted because Azure needed "
                                               "the capacity."})
            if (policy or _props(vm).get("evictionPolicy")) == "Deallocate":
                self._runtime.setdefault(vm["id"].lower(), {})["power"] = "deallocated"
                self._kill(vm)
            else:
                self._remove_vm(vm)

    def _evict_later(self, name: str, policy: str | None) -> None:
        try:
            self.evict(name, policy=policy)
        except KeyError:
            pass  # deleted meanwhile

    def delete_behind_back(self, name: str) -> None:
        """Someone else deletes the VM (the portal, another tool): gone, as an API delete would leave it."""
        with self._arm:
            self._advance()
            vm = self._find("virtualMachines", name)
            if vm is None:
                raise KeyError(name)
            self._event(vm, "Administrative", "Microsoft.Compute/virtualMachines/delete", caller=SOMEONE_ELSE)
            self._remove_vm(vm)

    # ---- request handling ------------------------------------------------------------------------
    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(handler.path)
        path = parts.path
        if not any(p.search(path) for p in (_RG_PATH, _RGS_PATH, _RES_PATH, _OP_PATH, _LOG_PATH)):
            return super()._handle(handler, method)
        query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        with self._lock:
            self.requests.append((method, path, query))
        delay = 0.0
        try:
            with self._arm:
                self._advance()
                reply, delay = self._route(handler, method, path, query, body)
        except _Reply as exc:
            reply = exc
        if delay:
            time.sleep(delay)
        headers = dict(reply.headers)
        if reply.payload is None:
            self._send_empty(handler, reply.status, headers)
        else:
            self._send(handler, reply.status, reply.payload, headers=headers)

    @staticmethod
    def _send_empty(handler: BaseHTTPRequestHandler, status: int, headers: dict[str, str]) -> None:
        handler.send_response(status)
        handler.send_header("Content-Length", "0")
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.end_headers()

    def _route(self, handler: BaseHTTPRequestHandler, method: str, path: str, query: dict[str, str],
               body: bytes) -> tuple[_Reply, float]:
        if handler.headers.get("Authorization") != f"Bearer {self.token}":
            raise _err(401, "InvalidAuthenticationToken", "The access token is invalid.")
        sub = path.split("/")[2]
        if sub != self.subscription_id:
            raise _err(404, "SubscriptionNotFound", f"The subscription '{sub}' could not be found.")
        if "api-version" not in query:
            raise _err(400, "MissingApiVersionParameter", "The api-version query parameter (?api-version=) is required "
                                                          "for all requests.")
        if (m := _OP_PATH.search(path)) is not None:
            self._gate(method, "operations")
            return self._operation(m["op"], m["kind"].lower() == "operationresults"), 0.0
        if _LOG_PATH.search(path):
            self._gate(method, "activityLog")
            return self._activity_log(query), 0.0
        try:
            payload = json.loads(body) if body else None
        except ValueError:
            raise _err(400, "InvalidRequestContent", "The request content is not valid JSON.") from None
        if _RGS_PATH.search(path):
            self._gate(method, "resourceGroups")
            return _Reply(200, {"value": [self._groups[k] for k in sorted(self._groups)]}), 0.0
        if (m := _RG_PATH.search(path)) is not None:
            self._gate(method, "resourceGroups")
            return self._group(method, m["rg"], payload), 0.0
        m = _RES_PATH.search(path)
        assert m is not None
        key = f"{m['ns']}/{m['type']}".lower()
        if key not in TYPES:
            raise _err(404, "NoRegisteredProviderFound", f"No registered resource provider found for {key}.")
        kind = TYPES[key][1]
        self._gate(method, kind)
        group = self._groups.get(m["rg"].lower())
        if group is None:
            raise _err(404, "ResourceGroupNotFound", f"Resource group '{m['rg']}' could not be found.")
        if m["name"] is None:
            if method != "GET":
                raise _err(405, "MethodNotAllowed", f"{method} is not allowed on a collection")
            return self._list(path, group, kind, query), 0.0
        rid = self._rid(group["name"], key, m["name"])
        if m["subnet"] is not None:
            return self._subnet_get(rid, m["subnet"]), 0.0
        if method == "GET":
            resource = self._res.get(rid.lower())
            if resource is None:
                raise _err(404, "ResourceNotFound", f"The Resource '{TYPES[key][0]}/{m['name']}' under resource group "
                                                    f"'{group['name']}' was not found.")
            return _Reply(200, self._view(resource, query.get("$expand", ""))), 0.0
        if method == "PUT":
            if not isinstance(payload, dict):
                raise _err(400, "InvalidRequestContent", "The request content is missing or not an object.")
            return self._put(group, key, m["name"], rid, payload)
        if method == "DELETE":
            return self._delete(rid), 0.0
        raise _err(405, "MethodNotAllowed", f"{method} is not supported here")

    def _gate(self, method: str, kind: str) -> None:
        key = f"{method} {kind}"
        if key in self.arm_forbidden:
            raise _err(403, "AuthorizationFailed", f"The client '{OUR_CALLER}' does not have authorization to perform "
                                                   f"action '{kind}/{method.lower()}' over this scope.")
        if self.arm_throttle.get(key, 0) > 0:
            self.arm_throttle[key] -= 1
            raise _Reply(429, {"error": {"code": "TooManyRequests",
                                         "message": "The request is being throttled. Retry after 1 seconds."}},
                         {"Retry-After": "1"})

    def _rid(self, group: str, key: str, name: str) -> str:
        return f"/subscriptions/{self.subscription_id}/resourceGroups/{group}/providers/{TYPES[key][0]}/{name}"

    def _find(self, kind: str, name: str) -> dict[str, Any] | None:
        return next((r for r in self._res.values() if r["type"].split("/")[1] == kind
                     and r["name"].lower() == name.lower()), None)

    def _ref(self, rid: Any, kind: str, what: str) -> dict[str, Any]:
        resource = self._res.get(str(rid).lower()) if rid else None
        if resource is None or resource["type"].split("/")[1] != kind:
            raise _err(400, "InvalidResourceReference", f"Resource {rid} referenced by {what} was not found.")
        return resource

    # ---- resource groups -------------------------------------------------------------------------
    def _group(self, method: str, name: str, payload: Any) -> _Reply:
        existing = self._groups.get(name.lower())
        if method in ("GET", "HEAD"):
            if existing is None:
                if method == "HEAD":
                    return _Reply(404)
                raise _err(404, "ResourceGroupNotFound", f"Resource group '{name}' could not be found.")
            return _Reply(204 if method == "HEAD" else 200, None if method == "HEAD" else existing)
        if method == "PUT":
            if not isinstance(payload, dict) or not payload.get("location"):
                raise _err(400, "LocationRequired", "The location property is required for this definition.")
            group = {"id": f"/subscriptions/{self.subscription_id}/resourceGroups/{name}", "name": name,
                     "type": "Microsoft.Resources/resourceGroups",
                     "location": existing["location"] if existing else payload["location"],
                     "tags": payload.get("tags") or {}, "properties": {"provisioningState": "Succeeded"}}
            self._groups[name.lower()] = group
            return _Reply(200 if existing else 201, group)
        if method == "DELETE":
            if existing is None:
                return _Reply(404, {"error": {"code": "ResourceGroupNotFound",
                                              "message": f"Resource group '{name}' could not be found."}})
            prefix = existing["id"].lower() + "/"

            def done() -> None:
                for rid in [r for r in self._res if r.startswith(prefix)]:
                    resource = self._res.get(rid)
                    if resource is not None and resource["type"].endswith("virtualMachines"):
                        self._remove_vm(resource)
                for rid in [r for r in self._res if r.startswith(prefix)]:
                    self._res.pop(rid, None)
                self._groups.pop(name.lower(), None)

            return self._accepted(existing["location"], "Microsoft.Resources", done, delete=True)
        raise _err(405, "MethodNotAllowed", f"{method} is not supported on resource groups")

    # ---- long-running operations -----------------------------------------------------------------
    def _new_op(self, location: str, ns: str, on_done: Any, error: dict[str, Any] | None = None, *,
                kind: str = "") -> tuple[str, str]:
        op_id = str(uuid.uuid4())
        self._ops[op_id] = {"status": "InProgress", "began": time.monotonic(), "kind": kind, "on_done": on_done,
                            "error": error, "start": _now_text(), "end": None}
        base = f"{self.url}/subscriptions/{self.subscription_id}/providers/{ns}/locations/{location}"
        return (f"{base}/operations/{op_id}?api-version=2024-01-01",
                f"{base}/operationResults/{op_id}?api-version=2024-01-01")

    def _op_headers(self, async_url: str, location_url: str | None = None) -> dict[str, str]:
        headers = {"Azure-AsyncOperation": async_url}
        if location_url:
            headers["Location"] = location_url
        if self.retry_after_s is not None:
            headers["Retry-After"] = str(self.retry_after_s)
        return headers

    def _accepted(self, location: str, ns: str, on_done: Any, *, delete: bool, kind: str = "") -> _Reply:
        async_url, location_url = self._new_op(location, ns, on_done, kind=kind)
        return _Reply(202, None, self._op_headers(async_url, location_url if delete else None))

    def _advance(self) -> None:
        now = time.monotonic()
        for op in self._ops.values():
            delay = self.lro_delays.get(op["kind"], self.lro_delay_s)
            if op["status"] == "InProgress" and op["began"] + delay <= now:
                op["status"] = "Failed" if op["error"] else "Succeeded"
                op["end"] = _now_text()
                op["on_done"]()

    def _operation(self, op_id: str, result: bool) -> _Reply:
        op = self._ops.get(op_id)
        if op is None:
            raise _err(404, "OperationNotFound", f"Operation {op_id} was not found.")
        headers = {"Retry-After": str(self.retry_after_s)} if self.retry_after_s is not None else {}
        if result:
            return _Reply(202 if op["status"] == "InProgress" else 204, None, headers)
        answer = {"name": op_id, "status": op["status"], "startTime": op["start"]}
        if op["end"]:
            answer["endTime"] = op["end"]
        if op["status"] == "Failed":
            answer["error"] = op["error"]
        return _Reply(200, answer, headers)

    # ---- resources -------------------------------------------------------------------------------
    def _list(self, path: str, group: dict[str, Any], kind: str, query: dict[str, str]) -> _Reply:
        prefix = group["id"].lower() + "/"
        items = [self._view(r, "") for rid, r in sorted(self._res.items())
                 if rid.startswith(prefix) and r["type"].split("/")[1] == kind]
        start = int(query.get("$skiptoken", "0") or 0)
        size = self.page_size_vms if kind == "virtualMachines" else 1000
        answer: dict[str, Any] = {"value": items[start:start + size]}
        if start + size < len(items):
            answer["nextLink"] = f"{self.url}{path}?api-version={query['api-version']}&$skiptoken={start + size}"
        return _Reply(200, answer)

    def _subnet_get(self, vnet_id: str, name: str) -> _Reply:
        vnet = self._res.get(vnet_id.lower())
        subnet = None if vnet is None else next(
            (s for s in _props(vnet).get("subnets", []) if s["name"].lower() == name.lower()), None)
        if subnet is None:
            raise _err(404, "NotFound", f"Resource {vnet_id}/subnets/{name} not found.")
        return _Reply(200, subnet)

    def _view(self, resource: dict[str, Any], expand: str) -> dict[str, Any]:
        view = json.loads(json.dumps(resource))
        if resource["type"].endswith("virtualMachines") and expand.lower() == "instanceview":
            runtime = self._runtime.get(resource["id"].lower(), {})
            state = _props(resource)["provisioningState"]
            statuses = [{"code": f"ProvisioningState/{state.lower()}", "level": "Info",
                         "displayStatus": f"Provisioning {state.lower()}", "time": _now_text()}]
            if runtime.get("power"):
                statuses.append({"code": f"PowerState/{runtime['power']}", "level": "Info",
                                 "displayStatus": f"VM {runtime['power']}"})
            view["properties"]["instanceView"] = {"computerName": _props(resource).get("osProfile", {}).get(
                "computerName"), "osName": "ubuntu", "statuses": statuses}
        return view

    def _put(self, group: dict[str, Any], key: str, name: str, rid: str,
             payload: dict[str, Any]) -> tuple[_Reply, float]:
        canonical, kind = TYPES[key]
        existing = self._res.get(rid.lower())
        location = str(payload.get("location") or "").lower()
        if not location:
            raise _err(400, "LocationRequired", "The location property is required for this definition.")
        if existing is not None and _props(existing).get("provisioningState") in ("Deleting",):
            raise _err(409, "OperationNotAllowed", f"{kind} {name} is being deleted.")
        failures = self.failures.get(kind) or []
        failure = failures.pop(0) if failures and existing is None else None
        if failure is not None and failure.during == "request":
            raise _Reply(failure.status, {"error": failure.body()})
        resource = {"id": rid, "name": name, "type": canonical, "location": location,
                    "tags": dict(payload.get("tags") or {}), "properties": json.loads(json.dumps(
                        payload.get("properties") or {}))}
        for extra in ("zones", "sku", "identity"):
            if extra in payload:
                resource[extra] = payload[extra]
        validate = getattr(self, f"_check_{kind}")
        if existing is not None:
            if kind == "virtualMachines":  # an update: geotrain never changes a VM, so keep it as it is
                existing["tags"] = resource["tags"] or existing["tags"]
                return _Reply(200, self._view(existing, "")), 0.0
            validate(resource, existing)
        else:
            validate(resource, None)
        _props(resource)["provisioningState"] = "Updating" if existing else "Creating"
        self._res[rid.lower()] = resource
        error = None if failure is None else failure.body()
        ns = canonical.split("/")[0]

        def done() -> None:
            current = self._res.get(rid.lower())
            if current is None:
                return
            _props(current)["provisioningState"] = "Failed" if error else "Succeeded"
            if kind == "virtualMachines" and not error:
                self._start_vm(current)
            elif kind in ("networkSecurityGroups", "virtualNetworks", "networkInterfaces"):
                self.sync_firewalls()  # rules changed, or where they apply

        async_url, _ = self._new_op(location, ns, done, error, kind=kind)
        if kind == "virtualMachines":
            self._event(resource, "Administrative", "Microsoft.Compute/virtualMachines/write", caller=OUR_CALLER)
            self._runtime.setdefault(rid.lower(), {})["power"] = None if error else "starting"
        return (_Reply(200 if existing else 201, self._view(resource, ""), self._op_headers(async_url)),
                self.vm_put_delay_s if kind == "virtualMachines" else 0.0)

    def _check_networkSecurityGroups(self, nsg: dict[str, Any], existing: dict[str, Any] | None) -> None:  # noqa: N802
        seen: set[tuple[str, int]] = set()
        rules = _props(nsg).setdefault("securityRules", [])
        for rule in rules:
            p = rule.get("properties") or {}
            priority, direction = p.get("priority"), p.get("direction")
            if not isinstance(priority, int) or not 100 <= priority <= 4096 or direction not in ("Inbound", "Outbound") \
                    or p.get("access") not in ("Allow", "Deny") or p.get("protocol") not in ("Tcp", "Udp", "Icmp", "*"):
                raise _err(400, "SecurityRuleInvalid", f"Security rule {rule.get('name')} has an invalid priority, "
                                                      "direction, access or protocol.")
            if (direction, priority) in seen:
                raise _err(400, "SecurityRuleConflict", f"Two {direction} rules have priority {priority}.")
            seen.add((direction, priority))
            rule["id"] = f"{nsg['id']}/securityRules/{rule['name']}"
        _props(nsg)["defaultSecurityRules"] = [
            {"name": n, "properties": {"priority": pr, "direction": "Inbound", "access": a, "protocol": "*",
                                       "sourceAddressPrefix": s, "destinationAddressPrefix": "*",
                                       "sourcePortRange": "*", "destinationPortRange": "*"}}
            for n, pr, a, s in (("AllowVnetInBound", 65000, "Allow", "VirtualNetwork"),
                                ("AllowAzureLoadBalancerInBound", 65001, "Allow", "AzureLoadBalancer"),
                                ("DenyAllInBound", 65500, "Deny", "*"))]

    def _check_virtualNetworks(self, vnet: dict[str, Any], existing: dict[str, Any] | None) -> None:  # noqa: N802
        prefixes = (_props(vnet).get("addressSpace") or {}).get("addressPrefixes") or []
        try:
            nets = [ipaddress.ip_network(p) for p in prefixes]
        except ValueError:
            nets = []
        if not nets:
            raise _err(400, "InvalidAddressPrefixFormat", "The virtual network needs addressSpace.addressPrefixes.")
        old = {s["name"].lower(): s for s in _props(existing).get("subnets", [])} if existing else {}
        for subnet in _props(vnet).setdefault("subnets", []):
            p = subnet.setdefault("properties", {})
            try:
                net = ipaddress.ip_network(p.get("addressPrefix", ""))
            except ValueError:
                net = None
            if net is None or not any(net.subnet_of(n) for n in nets):
                raise _err(400, "NetcfgInvalidSubnet", f"Subnet {subnet.get('name')} is not valid in the virtual "
                                                       "network's address space.")
            if p.get("networkSecurityGroup"):
                self._ref(p["networkSecurityGroup"].get("id"), "networkSecurityGroups", f"subnet {subnet['name']}")
            subnet["id"] = f"{vnet['id']}/subnets/{subnet['name']}"
            p["provisioningState"] = "Succeeded"
            p["ipConfigurations"] = (old.get(subnet["name"].lower()) or {}).get("properties", {}).get(
                "ipConfigurations", [])
        kept = {s["name"].lower() for s in _props(vnet)["subnets"]}
        for name, subnet in old.items():
            if name not in kept and subnet["properties"].get("ipConfigurations"):
                raise _err(400, "InUseSubnetCannotBeDeleted", f"Subnet {subnet['name']} is in use and cannot be deleted.")

    def _check_publicIPAddresses(self, pip: dict[str, Any], existing: dict[str, Any] | None) -> None:  # noqa: N802
        p = _props(pip)
        if (pip.get("sku") or {}).get("name") == "Standard" and p.get("publicIPAllocationMethod") != "Static":
            raise _err(400, "StandardSkuPublicIPAddressesCannotBeDynamic",
                       "Standard sku publicIp addresses cannot be created with Dynamic allocation method.")
        if existing is not None:
            p["ipAddress"] = _props(existing).get("ipAddress")
            p["ipConfiguration"] = _props(existing).get("ipConfiguration")
        else:
            p["ipAddress"] = self._new_address()

    def _check_networkInterfaces(self, nic: dict[str, Any], existing: dict[str, Any] | None) -> None:  # noqa: N802
        configs = _props(nic).get("ipConfigurations") or []
        if not configs:
            raise _err(400, "InvalidRequestFormat", "A network interface needs an IP configuration.")
        if _props(nic).get("networkSecurityGroup"):
            self._ref(_props(nic)["networkSecurityGroup"].get("id"), "networkSecurityGroups", f"NIC {nic['name']}")
        for config in configs:
            p = config.setdefault("properties", {})
            subnet_id = str((p.get("subnet") or {}).get("id") or "")
            vnet_id, _, subnet_name = subnet_id.rpartition("/subnets/")
            vnet = self._ref(vnet_id, "virtualNetworks", f"NIC {nic['name']}")
            subnet = next((s for s in _props(vnet)["subnets"] if s["name"].lower() == subnet_name.lower()), None)
            if subnet is None:
                raise _err(400, "InvalidResourceReference", f"Subnet {subnet_id} referenced by NIC {nic['name']} was "
                                                            "not found.")
            config["id"] = f"{nic['id']}/ipConfigurations/{config['name']}"
            if p.get("publicIPAddress"):
                pip = self._ref(p["publicIPAddress"].get("id"), "publicIPAddresses", f"NIC {nic['name']}")
                holder = (_props(pip).get("ipConfiguration") or {}).get("id", "")
                if holder and not holder.lower().startswith(nic["id"].lower() + "/"):
                    raise _err(400, "PublicIPAddressInUse", f"Public IP address {pip['name']} is in use by {holder}.")
                _props(pip)["ipConfiguration"] = {"id": config["id"]}
                delete_option = (p["publicIPAddress"].get("properties") or {}).get("deleteOption")
                if delete_option:
                    _props(pip)["deleteOption"] = delete_option
            configs_of_subnet = subnet["properties"].setdefault("ipConfigurations", [])
            if {"id": config["id"]} not in configs_of_subnet:
                configs_of_subnet.append({"id": config["id"]})
            net = ipaddress.ip_network(subnet["properties"]["addressPrefix"])
            p["privateIPAddress"] = str(net.network_address + 3 + len(configs_of_subnet))
            p["privateIPAllocationMethod"] = "Dynamic"
        if existing is not None:
            _props(nic)["virtualMachine"] = _props(existing).get("virtualMachine")

    def _check_virtualMachines(self, vm: dict[str, Any], existing: dict[str, Any] | None) -> None:  # noqa: N802
        p = _props(vm)
        size = (p.get("hardwareProfile") or {}).get("vmSize")
        image = (p.get("storageProfile") or {}).get("imageReference")
        os_profile = p.get("osProfile") or {}
        if not size:
            raise _err(400, "InvalidParameter", "Required parameter 'hardwareProfile.vmSize' is missing.")
        if not image:
            raise _err(400, "InvalidParameter", "Required parameter 'storageProfile.imageReference' is missing.")
        if not os_profile.get("adminUsername") or not os_profile.get("computerName"):
            raise _err(400, "InvalidParameter", "Required parameter 'osProfile.adminUsername' (or computerName) is "
                                                "missing.")
        linux = os_profile.get("linuxConfiguration") or {}
        keys = ((linux.get("ssh") or {}).get("publicKeys")) or []
        if linux.get("disablePasswordAuthentication") and not any(str(k.get("keyData", "")).startswith("ssh-")
                                                                  for k in keys):
            raise _err(400, "InvalidParameter", "An SSH public key is required when password authentication is "
                                                "disabled.")
        if not linux.get("disablePasswordAuthentication") and not os_profile.get("adminPassword"):
            raise _err(400, "InvalidParameter", "Required parameter 'adminPassword' is missing.")
        try:
            script = base64.b64decode(os_profile.get("customData") or "", validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise _err(400, "InvalidParameter", "customData must be base64-encoded.") from None
        if p.get("priority") == "Spot" and p.get("evictionPolicy") not in ("Deallocate", "Delete"):
            raise _err(400, "InvalidParameter", "A Spot VM needs evictionPolicy Deallocate or Delete.")
        nics = (p.get("networkProfile") or {}).get("networkInterfaces") or []
        if not nics:
            raise _err(400, "InvalidParameter", "Required parameter 'networkProfile.networkInterfaces' is missing.")
        for ref in nics:
            nic = self._ref(ref.get("id"), "networkInterfaces", f"virtual machine {vm['name']}")
            holder = (_props(nic).get("virtualMachine") or {}).get("id")
            if holder and holder.lower() != vm["id"].lower():
                raise _err(400, "NicInUse", f"Network interface {nic['name']} is used by virtual machine {holder}.")
        for ref in nics:
            _props(self._res[ref["id"].lower()])["virtualMachine"] = {"id": vm["id"]}
        os_disk = (p.get("storageProfile") or {}).setdefault("osDisk", {})
        disk_name = os_disk.get("name") or f"{vm['name']}_OsDisk_1_{uuid.uuid4().hex}"
        os_disk["name"] = disk_name
        disk_id = self._rid(vm["id"].split("/")[4], "microsoft.compute/disks", disk_name)
        os_disk.setdefault("managedDisk", {})["id"] = disk_id
        self._res[disk_id.lower()] = {"id": disk_id, "name": disk_name, "type": "Microsoft.Compute/disks",
                                      "location": vm["location"], "tags": {}, **({"zones": vm["zones"]} if vm.get(
                                          "zones") else {}),
                                      "managedBy": vm["id"], "properties": {"provisioningState": "Succeeded",
                                                                            "diskState": "Attached"}}
        p["vmId"] = str(uuid.uuid4())
        p["timeCreated"] = _now_text()
        self._runtime[vm["id"].lower()] = {"power": None, "script": script}

    def _check_disks(self, disk: dict[str, Any], existing: dict[str, Any] | None) -> None:
        raise _err(400, "InvalidParameter", "This fake makes disks only as a VM's OS disk.")

    # ---- VM life ---------------------------------------------------------------------------------
    def _start_vm(self, vm: dict[str, Any]) -> None:
        runtime = self._runtime.setdefault(vm["id"].lower(), {})
        runtime["power"] = "running"
        hv: Any = self.hypervisor
        if hv is not None and runtime.get("script") is not None:
            if _on_hosts(hv):
                hv.boot(vm["name"], "azure", runtime["script"], self._address_of(vm), region=vm["location"])
                private = hv.private_address(vm["name"])
                for config in self._ip_configs(vm):
                    config["properties"]["privateIPAddress"] = private
                self.sync_firewalls()
            else:
                hv.boot(vm["name"], "azure", runtime["script"], self._address_of(vm))

    def _ip_configs(self, vm: dict[str, Any]) -> list[dict[str, Any]]:
        configs: list[dict[str, Any]] = []
        for ref in (_props(vm).get("networkProfile") or {}).get("networkInterfaces") or []:
            nic = self._res.get(ref["id"].lower())
            if nic is not None:
                configs += _props(nic).get("ipConfigurations") or []
        return configs

    def sync_firewalls(self) -> None:
        """Make each running VM's admission rules those of the NSGs of its subnet and NIC (faithful hosts
        only; see the module docstring). Called after every change; tests may call it after their own."""
        hv: Any = self.hypervisor
        if not _on_hosts(hv):
            return
        with self._arm:
            live: dict[str, tuple[dict[str, Any], list[str], set[str]]] = {}  # name → (vm, NSG ids, VNet ids)
            for vm in [r for r in self._res.values() if r["type"].endswith("virtualMachines")]:
                if self._runtime.get(vm["id"].lower(), {}).get("power") != "running" or not hv.alive(vm["name"]):
                    continue
                nsgs: list[str] = []
                vnets: set[str] = set()
                for ref in (_props(vm).get("networkProfile") or {}).get("networkInterfaces") or []:
                    nic = self._res.get(ref["id"].lower())
                    if nic is None:
                        continue
                    if _props(nic).get("networkSecurityGroup"):
                        nsgs.append(_props(nic)["networkSecurityGroup"]["id"].lower())
                    for config in _props(nic).get("ipConfigurations") or []:
                        subnet_id = config["properties"]["subnet"]["id"].lower()
                        vnet_id, _, subnet_name = subnet_id.rpartition("/subnets/")
                        vnets.add(vnet_id)
                        vnet = self._res.get(vnet_id)
                        for subnet in _props(vnet).get("subnets", []) if vnet else []:
                            ref_nsg = (subnet["properties"].get("networkSecurityGroup") or {}).get("id")
                            if subnet["name"].lower() == subnet_name and ref_nsg:
                                nsgs.append(ref_nsg.lower())
                live[vm["name"]] = (vm, nsgs, vnets)
            members: dict[str, set[str]] = {}  # VNet id → private /32s of its running VMs
            for name, (_, _, vnets) in live.items():
                for vnet_id in vnets:
                    members.setdefault(vnet_id, set()).add(f"{hv.private_address(name)}/32")
            for name, (vm, nsgs, vnets) in live.items():
                want: set[tuple[str, str, tuple[int, int]]] = set()
                for nsg_id in dict.fromkeys(nsgs):
                    nsg = self._res.get(nsg_id)
                    if nsg is not None:
                        want |= _admitted(nsg, {a for v in vnets for a in members.get(v, ())})
                have = self.firewall.get(name, set())
                for cidr, protocol, ports in sorted(have - want):
                    hv.revoke(name, cidr, protocol, ports)
                for cidr, protocol, ports in sorted(want - have):
                    hv.allow(name, cidr, protocol, ports)
                self.firewall[name] = want
            for name in list(self.firewall):
                if name not in live:
                    del self.firewall[name]  # its host is gone, and its rules with it

    def _address_of(self, vm: dict[str, Any]) -> str:
        for ref in (_props(vm).get("networkProfile") or {}).get("networkInterfaces") or []:
            nic = self._res.get(ref["id"].lower())
            for config in (_props(nic).get("ipConfigurations") or []) if nic else []:
                pip_ref = config["properties"].get("publicIPAddress")
                pip = self._res.get(pip_ref["id"].lower()) if pip_ref else None
                if pip is not None:
                    return _props(pip)["ipAddress"]
                return config["properties"]["privateIPAddress"]
        return "127.0.0.1"

    def _new_address(self) -> str:
        if self.hypervisor is not None:
            return self.hypervisor.new_address()
        self._addresses += 1
        return f"127.0.0.{10 + self._addresses % 240}"

    def _kill(self, vm: dict[str, Any]) -> None:
        if self.hypervisor is not None:
            self.hypervisor.kill(vm["name"])  # the plug pulled
            self.sync_firewalls()  # its peers' VirtualNetwork rules lose its address

    def _remove_vm(self, vm: dict[str, Any]) -> None:
        """The VM goes; its OS disk and NICs go with it per their deleteOption (Azure's default: Detach)."""
        self._kill(vm)
        self._res.pop(vm["id"].lower(), None)
        self._runtime.pop(vm["id"].lower(), None)
        p = _props(vm)
        os_disk = (p.get("storageProfile") or {}).get("osDisk") or {}
        disk_id = ((os_disk.get("managedDisk") or {}).get("id") or "").lower()
        if disk_id in self._res:
            if os_disk.get("deleteOption") == "Delete":
                self._res.pop(disk_id)
            else:
                self._res[disk_id].pop("managedBy", None)
                self._res[disk_id]["properties"]["diskState"] = "Unattached"
        for ref in (p.get("networkProfile") or {}).get("networkInterfaces") or []:
            nic = self._res.get(ref["id"].lower())
            if nic is None:
                continue
            _props(nic).pop("virtualMachine", None)
            if (ref.get("properties") or {}).get("deleteOption") == "Delete":
                self._remove_nic(nic, cascade=True)

    def _remove_nic(self, nic: dict[str, Any], *, cascade: bool) -> None:
        self._res.pop(nic["id"].lower(), None)
        for config in _props(nic).get("ipConfigurations") or []:
            p = config["properties"]
            vnet_id = p["subnet"]["id"].rpartition("/subnets/")[0].lower()
            vnet = self._res.get(vnet_id)
            for subnet in _props(vnet).get("subnets", []) if vnet else []:
                subnet["properties"]["ipConfigurations"] = [c for c in subnet["properties"].get("ipConfigurations", [])
                                                            if c["id"].lower() != config["id"].lower()]
            pip = self._res.get(p["publicIPAddress"]["id"].lower()) if p.get("publicIPAddress") else None
            if pip is not None:
                _props(pip).pop("ipConfiguration", None)
                if cascade and _props(pip).get("deleteOption") == "Delete":
                    self._res.pop(pip["id"].lower(), None)

    def _delete(self, rid: str) -> _Reply:
        resource = self._res.get(rid.lower())
        if resource is None:
            return _Reply(204)
        kind = resource["type"].split("/")[1]
        p = _props(resource)
        if kind == "networkInterfaces" and p.get("virtualMachine"):
            raise _err(400, "NicInUse", f"Network interface {resource['name']} is in use by virtual machine "
                                        f"{p['virtualMachine']['id']}.")
        if kind == "publicIPAddresses" and p.get("ipConfiguration"):
            raise _err(400, "PublicIPAddressInUse", f"Public IP address {resource['name']} is in use by "
                                                    f"{p['ipConfiguration']['id']}.")
        if kind == "virtualNetworks" and any(s["properties"].get("ipConfigurations") for s in p.get("subnets", [])):
            raise _err(400, "InUseSubnetCannotBeDeleted", f"Subnet of {resource['name']} is in use and cannot be "
                                                          "deleted.")
        if kind == "networkSecurityGroups":
            users = [s["id"] for v in self._res.values() if v["type"].endswith("virtualNetworks")
                     for s in _props(v).get("subnets", [])
                     if ((s["properties"].get("networkSecurityGroup") or {}).get("id") or "").lower() == rid.lower()]
            if users:
                raise _err(400, "InUseNetworkSecurityGroupCannotBeDeleted",
                           f"Network security group {resource['name']} cannot be deleted because it is in use by "
                           f"{', '.join(users)}.")
        if kind == "disks" and resource.get("managedBy"):
            raise _err(409, "OperationNotAllowed", f"Disk {resource['name']} is attached to {resource['managedBy']}.")
        p["provisioningState"] = "Deleting"
        if kind == "virtualMachines":
            self._event(resource, "Administrative", "Microsoft.Compute/virtualMachines/delete", caller=OUR_CALLER)

        def done() -> None:
            current = self._res.get(rid.lower())
            if current is None:
                return
            if kind == "virtualMachines":
                self._remove_vm(current)
            elif kind == "networkInterfaces":
                self._remove_nic(current, cascade=False)
            else:
                self._res.pop(rid.lower(), None)

        return self._accepted(resource["location"], resource["type"].split("/")[0], done, delete=True, kind=kind)

    # ---- activity log ----------------------------------------------------------------------------
    def _event(self, resource: dict[str, Any], category: str, operation: str, *, caller: str,
               level: str = "Informational", properties: dict[str, Any] | None = None) -> None:
        self.events.append({
            "authorization": {"action": operation, "scope": resource["id"]}, "caller": caller,
            "category": {"value": category, "localizedValue": category}, "eventDataId": str(uuid.uuid4()),
            "eventName": {"value": "EndRequest", "localizedValue": "End request"}, "eventTimestamp": _now_text(),
            "id": f"{resource['id']}/events/{uuid.uuid4()}", "level": level,
            "operationName": {"value": operation, "localizedValue": operation},
            "properties": properties or {}, "resourceGroupName": resource["id"].split("/")[4],
            "resourceId": resource["id"], "resourceProviderName": {"value": resource["type"].split("/")[0]},
            "resourceType": {"value": resource["type"]}, "status": {"value": "Succeeded"},
            "subscriptionId": self.subscription_id,
        })

    def _activity_log(self, query: dict[str, str]) -> _Reply:
        text = query.get("$filter", "")
        since = re.search(r"eventTimestamp\s+ge\s+'([^']+)'", text, re.I)
        if since is None:
            raise _err(400, "BadRequest", "The $filter needs at least eventTimestamp ge '<start>'.")
        until = re.search(r"eventTimestamp\s+le\s+'([^']+)'", text, re.I)
        uri = re.search(r"resourceUri\s+eq\s+'([^']+)'", text, re.I)
        group = re.search(r"resourceGroupName\s+eq\s+'([^']+)'", text, re.I)

        def when(value: str) -> datetime:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))

        try:
            start, end = when(since[1]), when(until[1]) if until else None
        except ValueError:
            raise _err(400, "BadRequest", "eventTimestamp is not an ISO 8601 time.") from None
        events = [e for e in self.events if when(e["eventTimestamp"]) >= start
                  and (end is None or when(e["eventTimestamp"]) <= end)
                  and (uri is None or e["resourceId"].lower() == uri[1].lower())
                  and (group is None or e["resourceGroupName"].lower() == group[1].lower())]
        return _Reply(200, {"value": events})

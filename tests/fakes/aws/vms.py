"""The instance side of the AWS fake: moto's EC2 instances as local "VMs", with the knobs a launch test needs.

:class:`AwsVms` (``FakeAws.vms``) sits in front of moto's EC2 dispatcher for a few actions, and lets
moto do the rest (DescribeInstances, security groups, tags, VPCs, SSM):

- **RunInstances.** Honours ``ClientToken`` as AWS does and moto does not (moto 5.2.5 makes a new
  instance for every call): a request whose token was seen before gets the answer of the first one,
  and ``IdempotentParameterMismatch`` (400) if its other parameters differ. The check and the create
  hold one lock, so concurrent requests with one token make one instance. Each instance moto makes
  gets a public IP of 127.0.0.N (``hypervisor.new_address()``, or the fake's own counter from
  127.0.0.2 when there is no hypervisor), written into moto's network interface and into the answer;
  with a hypervisor, its user data (base64-decoded) is booted as the VM's startup script:
  ``hypervisor.boot(instance_id, "aws", script, address)``.
- **On faithful hosts** (``FakeAws(hypervisor=HostHypervisor(world, metadata))``, tests/fakes/cloudhosts.py;
  any hypervisor with ``private_address``): the VM boots with its region
  (``hypervisor.boot(instance_id, "aws", script, address, region=region)``) as a host of the region's
  VPC; moto's instance gets the host's public address and its private address (network interface,
  ``PrivateIpAddress``, ``PrivateDnsName``, in the answer too). Security groups become the hosts'
  admission rules, kept in step after RunInstances, TerminateInstances, a reclaim or forget, and
  Authorize/RevokeSecurityGroupIngress and ModifyInstanceAttribute (moto answers those; this layer then
  syncs): for each running VM, every IPv4 ingress rule of its groups (tcp/udp port ranges, icmp, all
  traffic "-1"; other protocols and IPv6 are left out) admits its ``CidrIp``; a rule naming a group
  (``UserIdGroupPairs``) admits each running instance of that group in the region by its *private*
  address /32, as a VPC's group reference matches only traffic inside the VPC (a connection to a
  public address arrives from the sender's public address and does not match). Egress rules are not
  enforced (everything goes out).
- **TerminateInstances.** moto terminates; then every instance of the request this fake made is
  killed on the hypervisor (``hypervisor.kill``) before the answer goes back.
- **DeleteSecurityGroup.** ``DependencyViolation`` (400) while a pending or running instance of this
  fake uses the group, as AWS answers (moto deletes it anyway).
- **SSM.** moto has no Deep Learning AMI parameters; on the first SSM request for a region the fake
  registers :data:`DLAMI_PARAMETER` in moto's SSM backend there, pointing at :data:`DLAMI_IMAGE_ID`
  (``ami-dca37ea5``, moto's bundled "Deep Learning AMI Ubuntu Linux - 2.4_Oct2017", owner
  898082745236, which moto serves in every region).

Knobs (attributes; :meth:`reset` puts them back):

- ``run_errors``: error codes (or ``(code, message)``) that the next RunInstances requests answer,
  one each, in order, before moto sees them (so no instance is made). The HTTP status is AWS's:
  500 for the Insufficient*Capacity codes and InternalError, 503 for Unavailable and
  RequestLimitExceeded, 401 AuthFailure, 403 UnauthorizedOperation, 400 otherwise.
- ``run_timeouts``: how many RunInstances answers are held back ``run_delay_s`` seconds (default 3)
  *after* the instance was made, so that a client with a shorter read timeout gives up while the
  instance exists (the "timeout with unknown outcome").
- :meth:`reclaim`: a spot reclaim by AWS: the instance is terminated with StateReason
  ``Server.SpotInstanceTermination`` and its VM killed; with ``notice_s``, the VM's metadata shows the
  spot instance-action notice that long before (through the hypervisor's FakeMetadata).
- :meth:`forget`: AWS no longer lists the instance (as it drops terminated ones after about an hour).

Records: ``run_requests`` (the form parameters of every RunInstances request that reached this
layer, as sent: ``InstanceMarketOptions.MarketType`` …), ``made`` (instance id → region, every
instance made through this fake). :meth:`live` counts those still pending or running in moto.
"""

from __future__ import annotations

from geotrain.providers.aws.provider import DEFAULT_IMAGE_PARAMETER

import base64
import binascii
import re
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qs

from werkzeug.wrappers import Response

from tests.fakes.aws.data import ACCOUNT_ID
from tests.fakes.aws.wire import ec2_error

if TYPE_CHECKING:
    from tests.fakes.aws.server import FakeAws

DLAMI_PARAMETER = DEFAULT_IMAGE_PARAMETER  # the provider's default image
DLAMI_IMAGE_ID = "ami-dca37ea5"  # moto's bundled "Deep Learning AMI Ubuntu Linux - 2.4_Oct2017"
SPOT_RECLAIM_CODE = "Server.SpotInstanceTermination"
ERROR_STATUS = {"InsufficientInstanceCapacity": 500, "InsufficientCapacity": 500, "InsufficientHostCapacity": 500,
                "InternalError": 500, "Unavailable": 503, "RequestLimitExceeded": 503, "AuthFailure": 401,
                "UnauthorizedOperation": 403}
_INSTANCE_ID = re.compile(rb"<instanceId>(i-[0-9a-f]+)</instanceId>")


class Hypervisor(Protocol):  # tests/fakes/vms.py
    def new_address(self) -> str: ...
    def boot(self, vm_id: str, cloud: str, script: str, address: str) -> None: ...
    def kill(self, vm_id: str) -> None: ...
    def alive(self, vm_id: str) -> bool: ...


class HostsHypervisor(Protocol):  # tests/fakes/cloudhosts.py: VMs on faithful hosts
    def new_address(self) -> str: ...
    def boot(self, vm_id: str, cloud: str, script: str, address: str, *, region: str) -> None: ...
    def kill(self, vm_id: str) -> None: ...
    def alive(self, vm_id: str) -> bool: ...
    def private_address(self, vm_id: str) -> str: ...
    def allow(self, vm_id: str, source_cidr: str, protocol: str, ports: tuple[int, int]) -> object: ...
    def revoke(self, vm_id: str, source_cidr: str, protocol: str, ports: tuple[int, int]) -> None: ...


def _on_hosts(hypervisor: object) -> bool:
    return hypervisor is not None and hasattr(hypervisor, "private_address")


_SYNC_AFTER = ("AuthorizeSecurityGroupIngress", "RevokeSecurityGroupIngress", "ModifyInstanceAttribute",
               "ModifyNetworkInterfaceAttribute")
FirewallRule = tuple[str, str, tuple[int, int]]  # (source CIDR, protocol, ports): HostHypervisor.allow's arguments


class AwsVms:
    """See the module docstring."""

    def __init__(self, fake: FakeAws, hypervisor: Hypervisor | HostsHypervisor | None = None) -> None:
        self.fake = fake
        self.hypervisor = hypervisor
        self.run_errors: list[str | tuple[str, str]] = []
        self.run_timeouts = 0
        self.run_delay_s = 3.0
        self.run_requests: list[dict[str, str]] = []
        self.made: dict[str, str] = {}  # instance id → region
        self._tokens: dict[tuple[str, str], tuple[dict[str, str], int, bytes]] = {}  # (region, token) → answer
        self._ssm_regions: set[str] = set()
        self._next = 2
        self._lock = threading.Lock()  # RunInstances: token check and create together
        self._state_lock = threading.Lock()
        self._firewall_lock = threading.Lock()
        self._view_lock = threading.Lock()  # a reclaim's change and a DescribeInstances answer: one before the other
        self.firewall: dict[str, set[FirewallRule]] = {}  # instance id → the rules its host has (faithful hosts)

    def reset(self) -> None:
        with self._state_lock:
            self.run_errors, self.run_timeouts, self.run_delay_s = [], 0, 3.0
            self.run_requests = []

    # ------------------------------------------------------------------ what tests look at

    def instance(self, instance_id: str) -> Any:
        """moto's Instance object (KeyError if this fake did not make it, or AWS forgot it)."""
        region = self.made[instance_id]
        for reservation in _backend(region).reservations.values():
            for inst in reservation.instances:
                if inst.id == instance_id:
                    return inst
        raise KeyError(instance_id)

    def live(self) -> int:
        """Instances made through this fake that moto holds as pending or running."""
        count = 0
        for instance_id in list(self.made):
            try:
                count += self.instance(instance_id).state in ("pending", "running")
            except KeyError:
                continue
        return count

    # ------------------------------------------------------------------ knobs

    def reclaim(self, instance_id: str, *, notice_s: float = 0.0) -> None:
        """Take a spot instance back as AWS does: terminated, StateReason Server.SpotInstanceTermination,
        the VM killed. With ``notice_s`` > 0 the VM's metadata shows the instance-action notice first
        (if the hypervisor has a :class:`tests.fakes.metadata.FakeMetadata`) and the reclaim comes
        ``notice_s`` seconds later (AWS gives 120)."""
        from moto.ec2.models.instances import StateReason

        inst = self.instance(instance_id)
        if inst.lifecycle != "spot":
            raise ValueError(f"{instance_id} is not a spot instance; AWS reclaims only spot instances")
        if notice_s > 0:
            metadata = getattr(self.hypervisor, "metadata", None)
            if metadata is not None:
                metadata.notify(instance_id, "reclaim")
            timer = threading.Timer(notice_s, self.reclaim, args=(instance_id,))
            timer.daemon = True
            timer.start()
            return
        # moto's Instance.terminate() without its user-initiated reason, while no DescribeInstances is answered
        with self._view_lock:
            if inst.state not in ("pending", "running"):
                return  # ended meanwhile
            for nic in inst.nics.values():
                nic.stop()
                if nic.delete_on_termination:
                    nic.delete()
            inst.teardown_defaults()
            inst.state_reason = StateReason(f"{SPOT_RECLAIM_CODE}: Spot instance termination", SPOT_RECLAIM_CODE)
            inst._reason = f"Service initiated ({time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())})"  # noqa: SLF001
            inst._state.name, inst._state.code = "terminated", 48  # noqa: SLF001 - moto's field
        self._kill([instance_id])

    def forget(self, instance_id: str) -> None:
        """AWS no longer lists the instance (its VM, if still running, is killed too)."""
        backend = _backend(self.made[instance_id])
        for rid, reservation in list(backend.reservations.items()):
            reservation.instances = [i for i in reservation.instances if i.id != instance_id]
            if not reservation.instances:
                del backend.reservations[rid]
        self._kill([instance_id])

    # ------------------------------------------------------------------ the hooks (server.py)

    def before_ssm(self, region: str) -> None:
        """Register the Deep Learning AMI parameter in moto's SSM backend of ``region`` (once)."""
        if not region or region in self._ssm_regions:
            return
        from moto.core.utils import utcnow
        from moto.ssm.models import Parameter, ssm_backends

        params = ssm_backends[ACCOUNT_ID][region]._parameters  # noqa: SLF001 - moto's store
        if not params[DLAMI_PARAMETER]:
            params[DLAMI_PARAMETER].append(Parameter(
                account_id=ACCOUNT_ID, name=DLAMI_PARAMETER, value=DLAMI_IMAGE_ID, parameter_type="String",
                description=None, allowed_pattern=None, keyid=None, last_modified_date=utcnow(), version=1,
                data_type="aws:ec2:image"))
        self._ssm_regions.add(region)

    def ec2(self, action: str, body: bytes, region: str, environ: dict[str, Any],
            start_response: Any) -> Iterable[bytes] | None:
        """Answer ``action`` here, or None to let moto answer it."""
        on_hosts = _on_hosts(self.hypervisor) and action in _SYNC_AFTER
        if action not in ("RunInstances", "TerminateInstances", "DeleteSecurityGroup", "DescribeInstances") \
                and not on_hosts:
            return None
        form = {k: v[0] for k, v in parse_qs(body.decode("utf-8")).items()}
        if form.get("DryRun", "").lower() == "true":
            return None
        if action == "DescribeInstances":
            # moto writes StateReason before State: a reclaim landing between the two would read as a
            # terminated instance with no spot reason, which AWS never shows
            with self._view_lock:
                status, answer = _moto(self.fake, environ)
            response = Response(answer, status, content_type="text/xml")
        elif on_hosts:
            status, answer = _moto(self.fake, environ)
            if status == 200:
                self.sync_firewalls()
            response = Response(answer, status, content_type="text/xml")
        elif action == "RunInstances":
            response = self._run(form, region, environ)
        elif action == "TerminateInstances":
            response = self._terminate(form, environ)
        else:
            response = self._delete_group(form, region, environ)
        return response(environ, start_response)

    def _run(self, form: dict[str, str], region: str, environ: dict[str, Any]) -> Response:
        with self._state_lock:
            self.run_requests.append(dict(form))
            error = self.run_errors.pop(0) if self.run_errors else None
        if error is not None:
            code, message = error if isinstance(error, tuple) else (error, f"{error} (fake run_errors knob)")
            return ec2_error(code, ERROR_STATUS.get(code, 400), message)
        token = form.get("ClientToken")
        params = {k: v for k, v in form.items() if k != "ClientToken"}
        with self._lock:
            seen = self._tokens.get((region, token)) if token else None
            if seen is not None:
                first, status, answer = seen
                if first != params:
                    return ec2_error("IdempotentParameterMismatch", 400,
                                     f"Arguments on this idempotent request are inconsistent with arguments used "
                                     f"in previous request(s) with client token {token}.")
                return Response(answer, status, content_type="text/xml")
            status, answer = _moto(self.fake, environ)
            if status == 200:
                answer = self._made(answer, region, form)
                if token:
                    self._tokens[(region, token)] = (params, status, answer)
        with self._state_lock:
            held = self.run_timeouts > 0 and status == 200
            if held:
                self.run_timeouts -= 1
        if held:
            time.sleep(self.run_delay_s)  # the client has given up by now; the instance exists
        return Response(answer, status, content_type="text/xml")

    def _made(self, answer: bytes, region: str, form: dict[str, str]) -> bytes:
        script = _user_data(form.get("UserData"))
        for raw_id in _INSTANCE_ID.findall(answer):
            instance_id = raw_id.decode()
            self.made[instance_id] = region
            inst = self.instance(instance_id)
            address = self.hypervisor.new_address() if self.hypervisor is not None else self._address()
            old = inst.public_ip
            inst.nics[0].public_ip = address
            if old:
                answer = answer.replace(old.encode(), address.encode())
                answer = answer.replace(old.replace(".", "-").encode(), address.replace(".", "-").encode())
            hv: Any = self.hypervisor
            if _on_hosts(hv):
                hv.boot(instance_id, "aws", script, address, region=region)
                answer = self._private(inst, hv.private_address(instance_id), answer)
            elif hv is not None:
                hv.boot(instance_id, "aws", script, address)
        if _on_hosts(self.hypervisor):
            self.sync_firewalls()
        return answer

    @staticmethod
    def _private(inst: Any, address: str, answer: bytes) -> bytes:
        """Give moto's instance the host's private address (and put it in the RunInstances answer)."""
        nic = inst.nics[0]
        old = nic.private_ip_address
        nic.private_ip_address = address
        nic.private_ip_addresses = [{"Primary": True, "PrivateIpAddress": address}]
        if old and old != address:
            dashed_old, dashed_new = old.replace(".", "-"), address.replace(".", "-")
            for a, b in ((f">{old}<", f">{address}<"), (f"ip-{dashed_old}.", f"ip-{dashed_new}.")):
                answer = answer.replace(a.encode(), b.encode())
        return answer

    def sync_firewalls(self) -> None:
        """Make each running VM's admission rules those of its security groups (faithful hosts only; see the
        module docstring). Called after every change; tests may call it after changing moto directly."""
        hv: Any = self.hypervisor
        if not _on_hosts(hv):
            return
        with self._firewall_lock:
            live: dict[str, tuple[str, Any]] = {}
            for instance_id, region in list(self.made.items()):
                if not hv.alive(instance_id):
                    continue
                try:
                    inst = self.instance(instance_id)
                except KeyError:
                    continue
                if inst.state in ("pending", "running"):
                    live[instance_id] = (region, inst)
            members: dict[tuple[str, str], set[str]] = {}  # (region, group id) → private addresses of its VMs
            for instance_id, (region, inst) in live.items():
                for group in inst.security_groups:
                    members.setdefault((region, group.id), set()).add(hv.private_address(instance_id))
            for instance_id, (region, inst) in live.items():
                want: set[FirewallRule] = set()
                for group in inst.security_groups:
                    current = _backend(region).get_security_group_from_id(group.id) or group
                    for rule in current.ingress_rules:
                        kind = _protocol(rule)
                        if kind is None:
                            continue
                        cidr = (rule.ip_range or {}).get("CidrIp")
                        if cidr:
                            want.add((cidr, *kind))
                        source = (rule.source_group or {}).get("GroupId")
                        if source:
                            want.update((f"{a}/32", *kind) for a in members.get((region, source), ()))
                have = self.firewall.get(instance_id, set())
                for cidr, protocol, ports in sorted(have - want):
                    hv.revoke(instance_id, cidr, protocol, ports)
                for cidr, protocol, ports in sorted(want - have):
                    hv.allow(instance_id, cidr, protocol, ports)
                self.firewall[instance_id] = want
            for instance_id in list(self.firewall):
                if instance_id not in live:
                    del self.firewall[instance_id]  # its host is gone, and its rules with it

    def _terminate(self, form: dict[str, str], environ: dict[str, Any]) -> Response:
        status, answer = _moto(self.fake, environ)
        if status == 200:
            self._kill([v for k, v in form.items() if k.startswith("InstanceId.")])
        return Response(answer, status, content_type="text/xml")

    def _delete_group(self, form: dict[str, str], region: str, environ: dict[str, Any]) -> Response:
        group_id = form.get("GroupId")
        for instance_id, where in list(self.made.items()):
            if where != region:
                continue
            try:
                inst = self.instance(instance_id)
            except KeyError:
                continue
            if inst.state in ("pending", "running") and any(g.id == group_id for g in inst.security_groups):
                return ec2_error("DependencyViolation", 400, f"resource {group_id} has a dependent object")
        status, answer = _moto(self.fake, environ)
        return Response(answer, status, content_type="text/xml")

    def _kill(self, instance_ids: list[str]) -> None:
        if self.hypervisor is None:
            return
        for instance_id in instance_ids:
            if instance_id in self.made:
                self.hypervisor.kill(instance_id)
        self.sync_firewalls()  # others' rules naming a group of these instances lose their addresses

    def _address(self) -> str:
        with self._state_lock:
            while self._next % 256 in (0, 255):
                self._next += 1
            n, self._next = self._next, self._next + 1
        return f"127.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}"


def _backend(region: str) -> Any:
    from moto.ec2.models import ec2_backends
    return ec2_backends[ACCOUNT_ID][region]


def _moto(fake: FakeAws, environ: dict[str, Any]) -> tuple[int, bytes]:
    """moto's answer to the request in ``environ`` (its body was put back by the server layer)."""
    status: list[str] = []

    def start_response(line: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        status.append(line)
        return lambda data: None

    chunks = fake._moto_app(environ, start_response)  # noqa: SLF001 - the fake's own moto
    try:
        answer = b"".join(chunks)
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    return int(status[0].split()[0]), answer


def _protocol(rule: Any) -> tuple[str, tuple[int, int]] | None:
    """(protocol, ports) of a moto ingress rule as HostHypervisor.allow takes them; None: not enforced."""
    proto = rule.ip_protocol
    if proto == "-1":
        return "all", (1, 65535)
    if proto == "icmp":
        return "icmp", (1, 65535)
    if proto in ("tcp", "udp"):
        lo = rule.from_port if rule.from_port is not None and rule.from_port >= 0 else 0
        hi = rule.to_port if rule.to_port is not None and rule.to_port >= 0 else 65535
        return proto, (max(lo, 1), max(min(hi, 65535), max(lo, 1)))
    return None


def _user_data(value: str | None) -> str:
    if not value:
        return ""
    try:
        return base64.b64decode(value).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return value

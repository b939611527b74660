"""A hypervisor for the fake clouds whose VMs are faithful remote hosts (:mod:`tests.fakes.hosts`).

:class:`HostHypervisor` is a drop-in for :class:`tests.fakes.vms.Hypervisor` (``new_address``, ``boot``,
``kill``, ``alive``, ``running``, ``close``) that boots each VM as a :class:`~tests.fakes.hosts.Host` of a
:class:`~tests.fakes.hosts.World` instead of a process tree on this machine's loopback::

    with World() as world, FakeMetadata() as metadata:
        hv = HostHypervisor(world, metadata)
        with FakeAws(hypervisor=hv) as aws:       # RunInstances boots hosts, security groups are their rules
            ...
        hv.close()

- **One VPC per (cloud, region)**, as AWS VPCs and Azure VNets are, and one for all of GCP (a GCP VPC
  network is global: its regional subnets route to each other on private addresses; here one range
  serves every region): the first VM of ``("aws", "us-east-1")`` makes a public LAN
  ``aws-us-east-1`` of the world (1:1 NAT to public addresses, inbound closed), with ``intra_lan=False``:
  VMs of one VPC reach each other only where a rule admits it (a security group / firewall rule), as
  on a real cloud where the default network's "allow internal" rule is a rule like any other.
- **Addresses**: :meth:`new_address` takes a public address of the world's pool
  (:meth:`World.reserve_public`); :meth:`boot` gives the VM exactly that public address, and
  :meth:`private_address` is its address inside the VPC (what the cloud reports as the private IP).
  The world's pool has 14 public addresses and they are not reused: at most 14 VMs per world.
- **Boot**: the startup script (user data) is written to ``/run/cloud-init/user-data`` inside the VM and
  run there as root, as cloud-init runs it: with ``/`` as working directory, root's clean environment
  (the image first on PATH), its shebang if it has one (else bash), stdout and stderr to the VM's console
  (:meth:`console`; a file on the launcher's disk, outside the VM). No ``GEOTRAIN_*`` variable is set:
  the script and the node agent see what they would on the cloud. :meth:`script_exit` is its exit
  status once it ended. The VM is up from then until :meth:`kill` (a finished script does not end it).
- **Metadata inside the VPC**: with a :class:`tests.fakes.metadata.FakeMetadata`, each VPC's router
  answers on ``169.254.169.254:80`` (the address every cloud's metadata service has; GCP VMs get
  ``metadata.google.internal`` for it in their ``/etc/hosts``) with a relay that passes each TCP
  connection, byte for byte, to the FakeMetadata's Unix socket (``world.root_dir/metadata.sock``,
  hidden from the hosts) behind a PROXY protocol line with the VM's private address; FakeMetadata
  answers with the notices of the VM that has that address. So ``geotrain.node.notices`` with its
  default base URL works unchanged on the VM, and ``metadata.notify(vm_id, ...)`` reaches that VM only.
- **Firewall**: :meth:`allow` / :meth:`revoke` admit new connections to the VM from a source CIDR
  (``Lan.allow``: protocol tcp/udp with a port range, icmp, or all); the cloud fake maps its security
  groups / firewall rules onto them (``tests.fakes.aws.vms`` does it for AWS).
- :meth:`kill` pulls the plug (``Host.kill_all``): every process of the VM dies at once, peers time out.

Not faithful (beyond :mod:`tests.fakes.hosts`): no egress rules (a VM reaches every address the world
routes), a killed VM's public address is not reused, a VM's disk stays readable by the launcher until
the world closes, the VM's hostname is its id (not ``ip-10-...``), instance types have no meaning (every
VM is this machine), and the metadata service answers only the notice paths FakeMetadata knows.
"""

from __future__ import annotations

import contextlib
import re
import select
import shlex
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from geotrain.domain import GLOBAL_NETWORK_CLOUDS
from tests.fakes.hosts import Host, HostClosed, Lan, Rule, World, _ip, _nft_cmd

if TYPE_CHECKING:
    from tests.fakes.metadata import FakeMetadata

METADATA_ADDRESS = "169.254.169.254"
GCP_METADATA_NAME = "metadata.google.internal"
USER_DATA = "/run/cloud-init/user-data"  # inside the VM

# The relay in a VPC's router namespace: each TCP connection to 169.254.169.254:80 becomes a
# connection to the metadata Unix socket, led by a PROXY v1 line naming the VM's address; then bytes
# both ways, unchanged.
_RELAY = r"""
import asyncio, sys

LISTEN, SOCK = sys.argv[1], sys.argv[2]

async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (OSError, RuntimeError):
        pass

async def handle(client_r, client_w):
    src, sport = client_w.get_extra_info("peername")[:2]
    dst, dport = client_w.get_extra_info("sockname")[:2]
    try:
        up_r, up_w = await asyncio.open_unix_connection(SOCK)
    except OSError:
        client_w.close()
        return
    up_w.write(f"PROXY TCP4 {src} {dst} {sport} {dport}\r\n".encode())
    try:
        await asyncio.gather(pipe(client_r, up_w), pipe(up_r, client_w))
    finally:
        up_w.close()
        client_w.close()

async def main():
    server = await asyncio.start_server(handle, LISTEN, 80, reuse_address=True)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()

asyncio.run(main())
"""


def _host_name(vm_id: str, taken: set[str]) -> str:
    """A hostname (hosts.py's rule: [a-z0-9-], at most 32) for a VM id, unique in the world."""
    base = re.sub(r"[^a-z0-9-]+", "-", vm_id.lower()).strip("-")[:32].strip("-") or "vm"
    name, n = base, 1
    while name in taken:
        n += 1
        suffix = f"-{n}"
        name = base[:32 - len(suffix)].rstrip("-") + suffix
    return name


DL_IMAGE_PYTHON_HOME = "/opt/pytorch"  # the image's Python, as on AWS's Deep Learning AMI (PyTorch)


class HostHypervisor:
    """See the module docstring. ``world``: the test's World (closed by the test, after :meth:`close`);
    ``metadata``: the FakeMetadata the VMs' 169.254.169.254 answers from (None: nothing listens there)."""

    def __init__(self, world: World, metadata: FakeMetadata | None = None,
                 mounts: dict[str, Path] | None = None) -> None:
        self.world = world
        self.metadata = metadata
        self.mounts = dict(mounts or {})  # target in every VM → folder here (an EFS / Filestore share the image mounts)
        self.hosts: dict[str, Host] = {}  # vm id → its host
        self.addresses: dict[str, str] = {}  # vm id → public address
        self.regions: dict[str, tuple[str, str]] = {}  # vm id → (cloud, region)
        self.booted: list[str] = []
        self.boot_s: dict[str, float] = {}  # vm id → seconds boot() took (the host built, the script started)
        self._lans: dict[tuple[str, str], Lan] = {}
        self._relays: list[subprocess.Popen[bytes]] = []
        self._scripts: dict[str, subprocess.Popen[bytes]] = {}
        self._by_private: dict[str, str] = {}  # private address → vm id
        self._socket = world.root_dir / "metadata.sock"
        self._serving = False
        self._closed = False
        self._lock = threading.RLock()

    def __enter__(self) -> HostHypervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the Hypervisor interface

    def new_address(self) -> str:
        """A public address for a VM about to boot (the world's pool; see the module docstring)."""
        with self._lock:
            return self.world.reserve_public()

    def boot(self, vm_id: str, cloud: str, script: str, address: str, *, region: str) -> None:
        """Boot VM ``vm_id`` of ``cloud`` in ``region`` with public address ``address`` (from
        :meth:`new_address`) and run ``script`` in it as root. Returns once the host is up and the script
        started (the script runs on meanwhile)."""
        started = time.monotonic()
        with self._lock:
            if self._closed:
                raise HostClosed("the hypervisor is closed")
            if vm_id in self.hosts:
                return
            lan = self.lan(cloud, region)
            name = _host_name(vm_id, {h.name for h in self.world.hosts})
            host = lan.host(name, public_address=address)
            self.hosts[vm_id] = host
            self.addresses[vm_id] = address
            self.regions[vm_id] = (cloud, region)
            self._by_private[host.private_address] = vm_id
            if self.metadata is not None:
                self.metadata.public_addresses[vm_id] = address
            if cloud == "gcp":
                with host.path("/etc/hosts").open("a") as f:
                    f.write(f"{METADATA_ADDRESS}\t{GCP_METADATA_NAME}\n")
            # a deep-learning image's Python with torch where AWS's PyTorch DLAMI has it (/opt/pytorch)
            host.mount_share(host.image, DL_IMAGE_PYTHON_HOME)
            for target, source in self.mounts.items():
                host.mount_share(source, target)
            self._start_script(vm_id, host, script)
            self.booted.append(vm_id)
            self.boot_s[vm_id] = time.monotonic() - started

    def alive(self, vm_id: str) -> bool:
        host = self.hosts.get(vm_id)
        return host is not None and not host.closed

    def kill(self, vm_id: str) -> None:
        """Pull the plug on the VM (nothing of it survives; its address times out)."""
        with self._lock:
            host = self.hosts.get(vm_id)
            if host is not None:
                host.kill_all()
            proc = self._scripts.get(vm_id)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)

    def running(self) -> list[str]:
        return [vm_id for vm_id in self.hosts if self.alive(vm_id)]

    def close(self) -> None:
        """Kill every VM and the metadata relays (the world itself is the test's to close)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for vm_id in list(self.hosts):
                self.kill(vm_id)
            for proc in self._relays:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(5)
            if self._serving and self.metadata is not None:
                self.metadata.stop_unix()

    # ------------------------------------------------------------------ what the fake clouds and tests use

    def host(self, vm_id: str) -> Host:
        return self.hosts[vm_id]

    def private_address(self, vm_id: str) -> str:
        """The VM's address inside its VPC (what the cloud reports as its private IP)."""
        return self.hosts[vm_id].private_address

    def lan(self, cloud: str, region: str) -> Lan:
        """The VPC of (cloud, region), made on first use; GCP's spans its regions (one network)."""
        with self._lock:
            key = (cloud, "" if cloud in GLOBAL_NETWORK_CLOUDS else region)
            if key not in self._lans:
                name = f"{cloud}-{region}" if key[1] else f"{cloud}-net"
                self._lans[key] = self.world.lan(name, public=True, intra_lan=False)
                if self.metadata is not None:
                    self._start_relay(self._lans[key])
            return self._lans[key]

    def console(self, vm_id: str) -> str:
        """What the startup script wrote so far (the cloud's serial console / GetConsoleOutput)."""
        path = self.hosts[vm_id].disk / "console.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_console(self, vm_id: str, text: str, timeout_s: float = 30.0) -> str:
        """Wait until the console shows ``text``; returns the console (AssertionError on timeout)."""
        deadline = time.monotonic() + timeout_s
        while text not in (out := self.console(vm_id)):
            if time.monotonic() > deadline:
                raise AssertionError(f"VM {vm_id}: {text!r} not on its console after {timeout_s}s:\n{out[-2000:]}")
            time.sleep(0.05)
        return out

    def script_exit(self, vm_id: str) -> int | None:
        """The startup script's exit status, None while it runs (or when there was none)."""
        proc = self._scripts.get(vm_id)
        return None if proc is None else proc.poll()

    def allow(self, vm_id: str, source_cidr: str, protocol: str = "tcp",
              ports: tuple[int, int] = (1, 65535)) -> Rule:
        """Admit new connections from ``source_cidr`` to the VM (a firewall / security group rule)."""
        with self._lock:
            host = self.hosts[vm_id]
            return host.lan.allow(host, source_cidr, protocol, ports)

    def revoke(self, vm_id: str, source_cidr: str, protocol: str = "tcp",
               ports: tuple[int, int] = (1, 65535)) -> None:
        """Remove a rule :meth:`allow` added (connections it admitted stay up)."""
        with self._lock:
            host = self.hosts[vm_id]
            host.lan.revoke(host, source_cidr, protocol, ports)

    def rules(self, vm_id: str) -> tuple[Rule, ...]:
        """The VM's rules in force."""
        host = self.hosts[vm_id]
        return tuple(r for r in host.lan.rules if r.host_address == host.private_address)

    # ------------------------------------------------------------------ inside

    def _start_script(self, vm_id: str, host: Host, script: str) -> None:
        console = host.disk / "console.log"
        if not script.strip():
            console.write_text("(no user data)\n")
            return
        inside = Path(USER_DATA)
        there = host.path(str(inside))
        there.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        there.write_text(script)
        there.chmod(0o700)
        argv = [str(inside)] if script.startswith("#!") else ["/bin/bash", str(inside)]
        with open(console, "ab") as out:
            self._scripts[vm_id] = host.popen(argv, root=True, cwd="/", stdout=out, stderr=subprocess.STDOUT)

    def _vm_of(self, source: str) -> str | None:
        return self._by_private.get(source)

    def _start_relay(self, lan: Lan) -> None:
        assert self.metadata is not None
        if not self._serving:
            self.metadata.serve_unix(self._socket, self._vm_of)
            self._serving = True
        ns = lan.router_ns
        _ip("addr", "add", f"{METADATA_ADDRESS}/32", "dev", "lo", ns=ns)
        # the router's input chain drops what is not answered traffic: let the VPC's VMs ask the metadata
        _nft_cmd(ns, "insert", "rule", "ip", "gtr", "filter_input", "iifname", "br0", "ip", "daddr",
                 METADATA_ADDRESS, "tcp", "dport", "80", "accept")
        log = self.world.root_dir / f"relay-{ns}.log"
        with open(log, "ab") as err:
            proc = subprocess.Popen(["ip", "netns", "exec", ns, "/usr/bin/python3", "-u", "-c", _RELAY,
                                     METADATA_ADDRESS, str(self._socket)], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=err, start_new_session=True,
                                    env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"})
        self._relays.append(proc)
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 20.0)
        line = proc.stdout.readline() if ready else b""
        proc.stdout.close()
        if line.strip() != b"ready":
            proc.kill()
            proc.wait(5)
            raise RuntimeError(f"metadata relay in {shlex.quote(ns)} did not start: "
                               f"{log.read_text(errors='replace')[-2000:]}")

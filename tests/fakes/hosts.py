"""Test hosts that are "another machine": their own network, hostname, disk view, user and Python image.

A :class:`World` is one private network of namespaces on this machine::

    launcher (the test process, root namespace)
        | veth gt{idx}l 10.P.0.1  --  l0 10.P.0.2          (only the world's prefixes are routed here)
    "internet" namespace gt{idx}-i   (SNATs the launcher to world.launcher_public; drops every new
        |                           connection toward the launcher; no default route anywhere)
        +-- uplink -- router namespace gt{idx}-r{k} (bridge br0 10.P.k.1/24 = one LAN / VPC)
                          +-- veth -- host namespace gt{idx}-h{n} (eth0 10.P.k.{10+n}, default via 10.P.k.1)

``P`` is ``160 + idx``; ``idx`` is the world's index (0..31), claimed with a non-blocking ``flock`` on
``/run/geotrain-test-hosts/world-{idx}.lock`` and held until :meth:`World.close`, so worlds built at once by
several pytest-xdist workers never share a name or an address. Whoever takes an index whose earlier owner
died first removes that owner's leftovers (:func:`cleanup_stale` does it for every free index).

Usage::

    with World() as world:
        site = world.lan("site")                  # an on-prem LAN: the launcher reaches 10.P.k.x directly
        vpc = world.lan("aws", public=True)       # a cloud VPC: 1:1 NAT to public addresses, closed inbound
        a, c = site.host("node-a"), vpc.host("vm-1")
        c.run("python3 -c 'import torch'")        # as c's own unprivileged user, image first on PATH
        ssh = c.start_sshd(pubkey_line)
        vpc.allow(c, f"{world.launcher_public}/32", "tcp", (22, 22))   # a security group rule
        # ssh -o UserKnownHostsFile=<(ssh.known_hosts_line(c.public_address)) user@c.public_address
        c.kill_all()                              # the VM disappears

Addresses: LAN ``k`` (1..63) is ``10.P.k.0/24``; routers' uplinks are ``10.P.0.{4k+1}/30`` (internet side)
and ``10.P.0.{4k+2}``; public addresses come from ``198.51.100.0/24`` (idx 0..15) or ``203.0.113.0/24``
(idx 16..31), one /28 per world (14 hosts; an address is not reused; ``world.reserve_public()`` takes
one before its host exists, ``lan.host(..., public_address=...)`` gives it to the host); the launcher's
public address is ``192.0.2.{64+idx}`` (documentation ranges; it exists only as the internet namespace's
SNAT address). Before routing anything :class:`World`
checks that none of its prefixes overlaps an address or a route of the root namespace, and refuses
otherwise. Nothing is routed toward a real interface: the internet namespace has no default route; the
root namespace gets two routes, the world's ``10.P.0.0/16`` and its public /28, both through the world's
own veth (so a VPC's private address, unroutable on the internet, gets "network unreachable" instead of
leaving by the default route), and an nft table ``inet gt{idx}`` there drops whatever new arrives from
that veth, whatever the root namespace would forward into it, and rejects any packet for the world's
addresses (the launcher's public one included) that would leave by another interface.

What is faithful
----------------
* Network: a host has its own network namespace; it reaches only what the routes and nftables rules
  (``nft``; ``scripts/ensure_hosts.sh`` installs it) let it. The launcher is behind NAT: a host sees its
  connections coming from ``world.launcher_public`` and cannot open one toward it, neither to that
  address, to the veth address, nor to anything in the root namespace (its 127.0.0.1 is its own
  loopback). New connections to the launcher's public address are dropped silently (a timeout, as at a
  real NAT), not refused.
* Public LANs (cloud VPCs): a host knows only its private address; the router 1:1-NATs its public
  address (DNAT inbound, SNAT outbound). Inbound is closed unless :meth:`Lan.allow` admits a source
  CIDR/protocol/port range (a security group / firewall rule); hosts without a public address have no
  way out of the VPC. Traffic to a public address of the same VPC goes out and back in through the
  "internet", so it is NATed and filtered like any other (the source is the sender's public address).
* Non-public LANs (on-prem sites): the launcher reaches the hosts on their private addresses (the user's
  LAN/VPN); other sites and VPCs cannot, unless :meth:`Lan.allow` says so. Hosts of one LAN reach each
  other on private addresses unless ``intra_lan=False``, where the allow rules govern that too.
* A host that :meth:`Host.kill_all` pulled the plug on: every process of it dies at once (its PID
  namespace's init is SIGKILLed), its network namespace is deleted and its router drops packets to its
  address: peers see a silent timeout (or, on the same LAN, an ARP failure: "no route to host").
* Processes: a host has its own PID namespace (its ``/proc`` shows only its processes), UTS namespace
  (its hostname), and mount namespace in which tmpfs hides the launcher's files: every entry of ``/``
  but the system's own folders (``SYSTEM_ROOT_ENTRIES``: so ``/root``, ``/opt``, ``/mnt`` and wherever the
  launcher's checkout lies, ``/work`` or ``/check``), ``/var/tmp``, ``/dev/shm`` and
  ``/var/lib/geotrain-test-hosts`` (where the hosts' own files live); ``/tmp``, ``/run`` and ``/home/USER`` are the host's own
  directories, kept on this machine's disk under ``/var/lib/geotrain-test-hosts/gt{idx}-h{n}/``
  (:meth:`Host.path` maps a host path to it, so a test can look at what a host left after it died;
  it maps ``/etc`` too).
  ``/etc`` is the host's own copy of this machine's ``/etc``, made when the host is built (after its user
  exists), so root inside a host can ``useradd`` or write ``/etc/...`` as on a VM (cloud-init's user
  data does) and only that host sees it; ``/etc/hosts`` maps its hostname to its private address
  (gloo's hostname lookup gives that address); ``/etc/resolv.conf`` names no nameserver (name lookups
  other than ``/etc/hosts`` fail fast).
* Users: each host has its own unprivileged user (``useradd``, ``gt{idx}u{n}``, unlocked for key login,
  removed at close) with its own home; commands run with a clean environment (HOME, USER, LOGNAME,
  SHELL, LANG, PATH with the image first).
* Image: ``/var/cache/geotrain-test-image/<key>/`` is a Python 3.11 venv with torch 2.13.0 (CPU), numpy
  and fsspec, built once per machine under a lock, readable by everyone, first on every host's PATH
  (also for ssh sessions: sshd's ``SetEnv`` and the user's ``.profile``/``.bashrc``). geotrain is not in it.
* sshd: :meth:`Host.start_sshd` runs the system's ``/usr/sbin/sshd`` inside the host on its private
  address: public-key login for the host's user only (no password, no PAM, no root login).

What is not faithful
--------------------
* Same kernel, same clock, same CPUs and memory (no limits unless a test adds a cgroup), same ``/usr``
  and ``/var/cache/geotrain-test-image``; a host's ``/etc`` starts as a copy of this machine's (its
  ``/etc/passwd`` lists the users of the hosts built before it; secrets in ``/etc`` are root's only),
  and a user that root adds inside a host may get a uid that another host's user has outside (harmless:
  neither sees the other's processes or files); the rest of the root file system (``/var``, ``/usr`` ...)
  is this machine's, visible read-only to the host's user by the ordinary permissions (what root made
  world-readable there, a host can read), and writable by root inside a host.
* Root inside a host is root on this machine: it can unmount the tmpfs, enter other namespaces, kill
  anything. Only the host's unprivileged user is confined; run untrusted commands as that user.
* No latency, loss or bandwidth limit (add tc/tbf or a delay line, see environment notes section 7); no
  IPv6 (disabled in every namespace); no DNS server; no metadata service (``tests.fakes.cloudhosts`` adds
  one per VPC); MTU 1500 veths.
* A killed host's disk (its home, /tmp and /run) stays readable by the launcher until close; a cloud's
  terminated VM loses it.
* The holders die with the thread that built the world (``PR_SET_PDEATHSIG``); build a world in the
  main thread or in a thread that lives as long as the world.

Command line: ``python -m tests.fakes.hosts image`` builds the image, ``... cleanup`` removes leftovers
of crashed runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import ipaddress
import json
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

STATE_DIR = Path("/run/geotrain-test-hosts")  # world locks
HOSTS_DIR = Path("/var/lib/geotrain-test-hosts")  # the hosts' own files (root-only, hidden in every host)
IMAGE_ROOT = Path("/var/cache/geotrain-test-image")
IMAGE_PYTHON = "/usr/bin/python3.11"
IMAGE_PACKAGES = ("torch==2.13.0", "numpy", "fsspec")
MAX_WORLDS = 32
MAX_LANS = 63
MAX_HOSTS_PER_LAN = 200
SSHD = "/usr/sbin/sshd"
GECOS = "geotrain test host"
# What a host sees of this machine's root: the system's own folders. Every other entry of ``/`` (the
# launcher's checkout, wherever it lies: /work, /check, /home/runner ...) is hidden under an empty tmpfs,
# or an empty file where the entry is a file.
SYSTEM_ROOT_ENTRIES = frozenset({"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "dev", "proc",
                                 "sys", "tmp", "run", "home", "var", "boot"})
_PR_SET_PDEATHSIG = 1


def _hide_command(entry: str) -> str:
    """The shell line that hides ``/entry`` from a host (a real directory, not a symlink into /usr)."""
    path = shlex.quote(f"/{entry}")
    if os.path.islink(f"/{entry}"):
        return f": {path} is a link"
    if os.path.isdir(f"/{entry}"):
        mode = "0700" if entry == "root" else "0755"
        return f"mount -t tmpfs -o mode={mode},nosuid,nodev tmpfs {path}"
    return f"[ -f {path} ] && mount --bind /dev/null {path} || true"


class HostsUnavailable(RuntimeError):
    """The machine cannot build test hosts (not root, or a tool is missing: run scripts/ensure_hosts.sh)."""


class HostClosed(RuntimeError):
    """The host was killed or its world closed."""


# ----------------------------------------------------------------------------------------------- helpers


def _sh(argv: Sequence[str], *, input: str | None = None, check: bool = True,
        timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), input=input, text=True, capture_output=True, timeout=timeout,
                          stdin=None if input is not None else subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def _ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _sh(["ip", *(["-n", ns] if ns else []), *args], check=check)


def _nft(script: str, ns: str | None = None) -> None:
    argv = ["ip", "netns", "exec", ns, "nft", "-f", "-"] if ns else ["nft", "-f", "-"]
    _sh(argv, input=script)


def _nft_cmd(ns: str | None, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _sh([*(["ip", "netns", "exec", ns] if ns else []), "nft", *args], check=check)


def _sysctls(ns: str, pairs: Sequence[tuple[str, str | int]]) -> None:
    _sh(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", *(f"{k}={v}" for k, v in pairs)])


def require() -> None:
    """Raise :class:`HostsUnavailable` unless this process can build hosts (root, tools installed)."""
    if os.geteuid() != 0:
        raise HostsUnavailable("test hosts need root (network, mount and PID namespaces, useradd)")
    missing = [t for t in ("ip", "nft", "nsenter", "unshare", "setpriv", "useradd", "usermod", "userdel",
                           "sysctl", "mount", "ssh-keygen") if shutil.which(t) is None]
    missing += [p for p in (SSHD, IMAGE_PYTHON) if not os.access(p, os.X_OK)]
    if missing:
        raise HostsUnavailable(f"missing {', '.join(missing)}: run scripts/ensure_hosts.sh (and scripts/ensure_sshd.sh)")


@contextlib.contextmanager
def _flock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _users_lock() -> contextlib.AbstractContextManager[None]:
    # useradd/userdel of several workers at once fail on /etc/passwd's lock: take turns
    return _flock(STATE_DIR / "users.lock")


def _set_pdeathsig() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


# ------------------------------------------------------------------------------------------------- image


def image_key() -> str:
    version = _sh([IMAGE_PYTHON, "-c", "import sys; print(sys.version)"]).stdout.strip()
    return hashlib.sha256(json.dumps([version, IMAGE_PACKAGES]).encode()).hexdigest()[:16]


def ensure_image() -> Path:
    """The hosts' Python image (a venv of /usr/bin/python3.11 with torch 2.13.0, numpy, fsspec), built once
    per machine: under a lock, at its final path (a venv is not relocatable), complete once ``.complete``
    exists (written last, atomically). Everyone can read and run it."""
    if not os.access(IMAGE_PYTHON, os.X_OK):
        raise HostsUnavailable(f"{IMAGE_PYTHON} is missing: install python3.11 (and python3.11-venv)")
    image = IMAGE_ROOT / image_key()
    if (image / ".complete").exists():
        return image
    IMAGE_ROOT.mkdir(parents=True, exist_ok=True)
    IMAGE_ROOT.chmod(0o755)
    with _flock(IMAGE_ROOT / ".lock"):
        if (image / ".complete").exists():
            return image
        shutil.rmtree(image, ignore_errors=True)  # a build that died half-way
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/root", "LANG": "C.UTF-8",
               "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
        old_umask = os.umask(0o022)
        try:
            subprocess.run([IMAGE_PYTHON, "-m", "venv", str(image)], check=True, env=env,
                           stdin=subprocess.DEVNULL, capture_output=True)
            pip = subprocess.run([str(image / "bin" / "python"), "-m", "pip", "install", "--quiet",
                                  *IMAGE_PACKAGES], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                                 text=True)
            if pip.returncode != 0:
                raise RuntimeError(f"building the host image failed: {pip.stderr[-3000:]}")
            _sh(["chmod", "-R", "a+rX", str(image)])
            tmp = image / ".complete.tmp"
            tmp.write_text(json.dumps({"packages": IMAGE_PACKAGES, "built": time.time()}))
            os.replace(tmp, image / ".complete")
        except BaseException:
            shutil.rmtree(image, ignore_errors=True)
            raise
        finally:
            os.umask(old_umask)
    return image


# ------------------------------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Rule:
    """One admission rule of a LAN's router (a security group / firewall rule)."""

    host_address: str  # the private address it admits traffic to
    source_cidr: str
    protocol: str  # "tcp", "udp", "icmp" or "all"
    ports: tuple[int, int]

    def comment(self) -> str:
        return f"allow {self.host_address} {self.source_cidr} {self.protocol} {self.ports[0]}-{self.ports[1]}"

    def nft_argv(self) -> list[str]:
        """The rule as ``nft add rule`` arguments."""
        argv = ["ip", "daddr", self.host_address, "ip", "saddr", self.source_cidr]
        if self.protocol in ("tcp", "udp"):
            lo, hi = self.ports
            argv += [self.protocol, "dport", str(lo) if lo == hi else f"{lo}-{hi}"]
        elif self.protocol == "icmp":
            argv += ["meta", "l4proto", "icmp"]
        return [*argv, "accept", "comment", f'"{self.comment()}"']


@dataclass(frozen=True)
class SSHAccess:
    """What an ssh client needs to log into a host's sshd."""

    user: str
    port: int
    private_address: str
    public_address: str | None
    host_key_public: str  # "ssh-ed25519 AAAA..." (no host name)

    def known_hosts_line(self, address: str | None = None) -> str:
        address = address or self.public_address or self.private_address
        name = address if self.port == 22 else f"[{address}]:{self.port}"
        return f"{name} {self.host_key_public}\n"


# ------------------------------------------------------------------------------------------------- world


class World:
    """A private network of namespaces: an "internet", LANs (:meth:`lan`) and hosts on them. Close it
    (or use it as a context manager): :meth:`close` removes everything it made, even after failures."""

    def __init__(self) -> None:
        require()
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        STATE_DIR.chmod(0o700)
        self.index, self._lock_fd = _claim_index()
        self._closed = False
        self._lans: list[Lan] = []
        self._hosts: list[Host] = []
        self._image: Path | None = None
        idx = self.index
        self.name = f"gt{idx}"
        self._octet = 160 + idx
        self.inet_ns = f"gt{idx}-i"
        self.root_link = f"gt{idx}l"
        self.launcher_address = f"10.{self._octet}.0.1"  # the launcher's end of the world's veth
        self._inet_address = f"10.{self._octet}.0.2"
        self.launcher_public = f"192.0.2.{64 + idx}"
        base = ipaddress.ip_address("198.51.100.0" if idx < 16 else "203.0.113.0") + (idx % 16) * 16
        self.public_block = ipaddress.ip_network(f"{base}/28")
        self._public_free = [str(a) for a in list(self.public_block.hosts())]
        self._public_reserved: set[str] = set()  # handed out by reserve_public, no host yet
        self.private_block = ipaddress.ip_network(f"10.{self._octet}.0.0/16")
        self.root_dir = HOSTS_DIR / self.name
        try:
            _cleanup_index(idx)  # whatever a dead owner of this index left
            self._check_no_overlap()
            self._build_internet()
        except BaseException:
            self.close()
            raise

    # -- context manager
    def __enter__(self) -> World:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def hosts(self) -> tuple[Host, ...]:
        return tuple(self._hosts)

    @property
    def image(self) -> Path:
        if self._image is None:
            self._image = ensure_image()
        return self._image

    def _check_no_overlap(self) -> None:
        mine = [self.private_block, self.public_block]
        routes = json.loads(_sh(["ip", "-j", "-4", "route", "show", "table", "all"]).stdout or "[]")
        addrs = json.loads(_sh(["ip", "-j", "-4", "addr", "show"]).stdout or "[]")
        theirs: list[ipaddress.IPv4Network] = []
        for r in routes:
            dst = r.get("dst", "")
            if dst and dst != "default" and r.get("dev") != self.root_link and r.get("type") not in ("broadcast",):
                with contextlib.suppress(ValueError):
                    net = ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False)
                    if not net.is_loopback:
                        theirs.append(net)
        for link in addrs:
            for a in link.get("addr_info", []):
                net = ipaddress.ip_network(f"{a['local']}/{a['prefixlen']}", strict=False)
                if not net.is_loopback:
                    theirs.append(net)
        clash = sorted({f"{m} vs {t}" for m in mine for t in theirs if m.overlaps(t)})
        if clash:
            raise HostsUnavailable(f"world {self.name}'s prefixes overlap this machine's network: {', '.join(clash)}")

    def _build_internet(self) -> None:
        ns, link = self.inet_ns, self.root_link
        self.root_dir.mkdir(parents=True, exist_ok=True)
        HOSTS_DIR.chmod(0o700)
        _ip("netns", "add", ns)
        _isolate_ns(ns, forward=True)
        _ip("link", "add", link, "type", "veth", "peer", "name", "l0", "netns", ns)
        _sh(["sysctl", "-q", "-w", f"net.ipv6.conf.{link}.disable_ipv6=1"])
        _ip("addr", "add", f"{self.launcher_address}/30", "dev", link)
        _ip("link", "set", link, "up")
        _ip("addr", "add", f"{self._inet_address}/30", "dev", "l0", ns=ns)
        _ip("link", "set", "l0", "up", ns=ns)
        # new connections toward the launcher's public address are routed (then dropped below), not
        # refused for want of a route: a NAT is silent
        _ip("route", "add", f"{self.launcher_public}/32", "via", self.launcher_address, "dev", "l0", ns=ns)
        _nft(f"""
table ip gtw {{
    chain post {{ type nat hook postrouting priority srcnat; policy accept;
        ip saddr {self.launcher_address} snat to {self.launcher_public}
    }}
    chain filter_forward {{ type filter hook forward priority filter; policy accept;
        ct state established,related accept
        ct state invalid drop
        oifname "l0" drop
    }}
    chain filter_input {{ type filter hook input priority filter; policy accept;
        ct state established,related accept
        iifname != "lo" drop
    }}
}}
""", ns)
        # the launcher's side: nothing new comes in from the world, nothing is forwarded into it
        _nft(f"""
table inet {self.name} {{
    chain filter_input {{ type filter hook input priority filter; policy accept;
        iifname "{link}" ct state established,related accept
        iifname "{link}" drop
    }}
    chain filter_forward {{ type filter hook forward priority filter; policy accept;
        iifname "{link}" drop
        oifname "{link}" drop
    }}
    chain guard {{ type filter hook output priority filter; policy accept;
        ip daddr {{ {self.private_block}, {self.public_block}, {self.launcher_public} }} oifname != "{link}" reject
    }}
}}
""")
        # the world's addresses and nothing else go into the world (the VPCs' private /24s too: the
        # internet namespace answers "unreachable" for them, as the real internet would not carry them)
        for prefix in (self.private_block, self.public_block):
            _ip("route", "add", str(prefix), "via", self._inet_address, "dev", link)

    def lan(self, name: str, *, public: bool = False, intra_lan: bool = True) -> Lan:
        """A LAN behind its own router: ``public=True`` for a cloud VPC (hosts get public addresses by
        1:1 NAT, inbound closed until :meth:`Lan.allow`), else an on-prem site the launcher reaches on
        private addresses. ``intra_lan=False``: hosts of the LAN reach each other only where allowed."""
        self._check_open()
        k = len(self._lans) + 1
        if k > MAX_LANS:
            raise ValueError(f"at most {MAX_LANS} LANs per world")
        if any(lan.name == name for lan in self._lans):
            raise ValueError(f"a LAN named {name!r} exists already")
        lan = Lan(self, name, k, public=public, intra_lan=intra_lan)
        self._lans.append(lan)
        lan._build()
        return lan

    def _check_open(self) -> None:
        if self._closed:
            raise HostClosed(f"world {self.name} is closed")

    def close(self) -> None:
        """Remove every namespace, veth, route, nft table, user, process and file the world made."""
        if self._closed:
            return
        self._closed = True
        errors: list[str] = []
        for host in self._hosts:
            try:
                host._destroy()
            except Exception as exc:  # noqa: BLE001 - go on removing the rest
                errors.append(f"{host.name}: {exc}")
        try:
            _cleanup_index(self.index)
        except Exception as exc:  # noqa: BLE001
            errors.append(str(exc))
        os.close(self._lock_fd)
        if errors:
            raise RuntimeError(f"closing world {self.name}: {'; '.join(errors)}")

    def _next_public(self) -> str:
        if not self._public_free:
            raise RuntimeError(f"world {self.name} has no public address left ({self.public_block})")
        return self._public_free.pop(0)

    def reserve_public(self) -> str:
        """Take a public address of the world's pool now, for a host made later with
        ``lan.host(..., public_address=...)`` (as a cloud names an instance's address before it boots)."""
        self._check_open()
        address = self._next_public()
        self._public_reserved.add(address)
        return address

    def _take_public(self, address: str) -> str:
        if address in self._public_reserved:
            self._public_reserved.discard(address)
        elif address in self._public_free:
            self._public_free.remove(address)
        else:
            raise ValueError(f"{address} is not a free public address of world {self.name} ({self.public_block})")
        return address


def _isolate_ns(ns: str, *, forward: bool) -> None:
    _ip("link", "set", "lo", "up", ns=ns)
    _sysctls(ns, [("net.ipv6.conf.all.disable_ipv6", 1), ("net.ipv6.conf.default.disable_ipv6", 1),
                  ("net.ipv4.ip_forward", 1 if forward else 0), ("net.ipv4.conf.all.send_redirects", 0),
                  ("net.ipv4.conf.default.send_redirects", 0), ("net.ipv4.conf.all.accept_redirects", 0),
                  ("net.ipv4.conf.default.accept_redirects", 0)])


def _claim_index() -> tuple[int, int]:
    for idx in range(MAX_WORLDS):
        fd = os.open(STATE_DIR / f"world-{idx}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                continue
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return idx, fd
    raise RuntimeError(f"all {MAX_WORLDS} world indices are in use")


def _netns_list() -> list[str]:
    out = _sh(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _users_of(idx: int) -> list[str]:
    names = []
    with open("/etc/passwd") as f:
        for line in f:
            parts = line.split(":")
            if len(parts) > 4 and re.fullmatch(rf"gt{idx}u\d+", parts[0]) and parts[4].startswith(GECOS):
                names.append(parts[0])
    return names


def _cleanup_index(idx: int) -> list[str]:
    """Remove what world ``idx`` made (the caller holds its lock). Returns what it removed."""
    removed: list[str] = []
    prefix = f"gt{idx}-"
    namespaces = [n for n in _netns_list() if n.startswith(prefix)]
    for ns in namespaces:  # processes first: a host's init takes its whole PID namespace with it
        pids = _sh(["ip", "netns", "pids", ns], check=False).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
    for ns in sorted(namespaces, key=lambda n: (n.endswith("-i"), n)):  # hosts, routers, then the internet
        _wait_netns_empty(ns, 5.0)
        if _ip("netns", "del", ns, check=False).returncode == 0:
            removed.append(f"netns {ns}")
    if _ip("link", "show", f"gt{idx}l", check=False).returncode == 0:
        _ip("link", "del", f"gt{idx}l", check=False)
        removed.append(f"link gt{idx}l")
    if _nft_cmd(None, "list", "table", "inet", f"gt{idx}", check=False).returncode == 0:
        _nft_cmd(None, "delete", "table", "inet", f"gt{idx}")
        removed.append(f"nft table inet gt{idx}")
    users = _users_of(idx)
    if users:
        with _users_lock():
            for user in users:
                if _sh(["userdel", "-f", user], check=False).returncode in (0, 6):
                    removed.append(f"user {user}")
    world_dir = HOSTS_DIR / f"gt{idx}"
    if world_dir.exists():
        shutil.rmtree(world_dir, ignore_errors=True)
        removed.append(str(world_dir))
    return removed


def _wait_netns_empty(ns: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while _sh(["ip", "netns", "pids", ns], check=False).stdout.strip() and time.monotonic() < deadline:
        time.sleep(0.02)


def cleanup_stale() -> list[str]:
    """Remove the leftovers of worlds whose owner died (namespaces, links, nft tables, users, files with
    the ``gt{idx}`` names of a world index nobody holds). Returns what it removed."""
    require()
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    removed: list[str] = []
    for idx in range(MAX_WORLDS):
        fd = os.open(STATE_DIR / f"world-{idx}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue
            removed += _cleanup_index(idx)
        finally:
            os.close(fd)
    return removed


# --------------------------------------------------------------------------------------------------- LAN


class Lan:
    """A LAN / VPC: a bridge in a router namespace attached to the world's internet."""

    def __init__(self, world: World, name: str, k: int, *, public: bool, intra_lan: bool) -> None:
        self.world, self.name, self.k = world, name, k
        self.public, self.intra_lan = public, intra_lan
        o = world._octet
        self.subnet = ipaddress.ip_network(f"10.{o}.{k}.0/24")
        self.gateway = f"10.{o}.{k}.1"
        self.router_ns = f"gt{world.index}-r{k}"
        self._uplink_inet = f"10.{o}.0.{4 * k + 1}"
        self._uplink_router = f"10.{o}.0.{4 * k + 2}"
        self._hosts: list[Host] = []
        self._rules: list[Rule] = []

    @property
    def hosts(self) -> tuple[Host, ...]:
        return tuple(self._hosts)

    @property
    def rules(self) -> tuple[Rule, ...]:
        return tuple(self._rules)

    def _build(self) -> None:
        w, ns = self.world, self.router_ns
        _ip("netns", "add", ns)
        _isolate_ns(ns, forward=True)
        # bridged IP traffic goes through the ip family's hooks (conntrack, the forward chain below)
        _sysctls(ns, [("net.bridge.bridge-nf-call-iptables", 1), ("net.bridge.bridge-nf-call-arptables", 0)])
        _ip("link", "add", f"u{self.k}", "type", "veth", "peer", "name", "up0", "netns", ns, ns=w.inet_ns)
        _ip("addr", "add", f"{self._uplink_inet}/30", "dev", f"u{self.k}", ns=w.inet_ns)
        _ip("link", "set", f"u{self.k}", "up", ns=w.inet_ns)
        _ip("addr", "add", f"{self._uplink_router}/30", "dev", "up0", ns=ns)
        _ip("link", "set", "up0", "up", ns=ns)
        _ip("link", "add", "br0", "type", "bridge", ns=ns)
        _ip("addr", "add", f"{self.gateway}/24", "dev", "br0", ns=ns)
        _ip("link", "set", "br0", "up", ns=ns)
        _ip("route", "add", "default", "via", self._uplink_inet, ns=ns)
        outbound = 'iifname "br0" oifname "up0" ip saddr @haspub accept' if self.public else \
            'iifname "br0" oifname "up0" accept'
        vpn = "" if self.public else f"ip saddr {w.launcher_public} accept"  # the launcher's LAN / VPN
        _nft(f"""
table ip gtr {{
    map pub2priv {{ type ipv4_addr : ipv4_addr; }}
    map priv2pub {{ type ipv4_addr : ipv4_addr; }}
    set haspub {{ type ipv4_addr; }}
    set dead {{ type ipv4_addr; }}
    chain pre {{ type nat hook prerouting priority dstnat; policy accept;
        iifname "up0" dnat to ip daddr map @pub2priv
    }}
    chain post {{ type nat hook postrouting priority srcnat; policy accept;
        oifname "up0" snat to ip saddr map @priv2pub
    }}
    chain filter_forward {{ type filter hook forward priority filter; policy drop;
        ip daddr @dead drop
        ct state established,related accept
        ct state invalid drop
        iifname "br0" oifname "br0" jump intra
        {outbound}
        iifname "up0" oifname "br0" jump admit
    }}
    chain intra {{
        {"accept" if self.intra_lan else "jump admit"}
    }}
    chain admit {{
        {vpn}
    }}
    chain filter_input {{ type filter hook input priority filter; policy accept;
        ct state established,related accept
        iifname "lo" accept
        drop
    }}
}}
""", ns)
        if not self.public:
            # the launcher (and only through its veth) routes this site's private /24
            _ip("route", "add", str(self.subnet), "via", self._uplink_router, ns=w.inet_ns)

    def host(self, name: str, *, public_ip: bool | None = None, account: Host | None = None,
             public_address: str | None = None) -> Host:
        """A new host on this LAN, with hostname ``name``. On a public LAN it gets a public address
        unless ``public_ip=False``; on an on-prem LAN it never does. ``account``: the host's user is that
        host's (same name and uid, as a site's central accounts give one user on every machine), with
        a home of its own. ``public_address``: this address of the world's pool (free, or taken with
        :meth:`World.reserve_public`) rather than the next one."""
        w = self.world
        w._check_open()
        if not re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?", name):
            raise ValueError(f"host name {name!r}: lowercase letters, digits and '-', at most 32")
        if any(h.name == name for h in w._hosts):
            raise ValueError(f"a host named {name!r} exists already")
        if len(self._hosts) >= MAX_HOSTS_PER_LAN:
            raise ValueError(f"at most {MAX_HOSTS_PER_LAN} hosts per LAN")
        if (public_ip or public_address) and not self.public:
            raise ValueError(f"LAN {self.name} is not public: its hosts have no public address")
        if public_address is not None and public_ip is False:
            raise ValueError("public_address with public_ip=False")
        image = w.image
        n = len(w._hosts) + 1
        address = f"10.{w._octet}.{self.k}.{10 + len(self._hosts)}"
        if public_address is not None:
            public = w._take_public(public_address)
        else:
            public = w._next_public() if (self.public if public_ip is None else public_ip) else None
        host = Host(self, name, n, address, public, image, account)
        w._hosts.append(host)
        self._hosts.append(host)
        host._build()
        return host

    def allow(self, host: Host, source_cidr: str, protocol: str = "tcp",
              ports: tuple[int, int] = (1, 65535)) -> Rule:
        """Admit new connections from ``source_cidr`` to ``host`` (tcp/udp with a port range, icmp, or all)."""
        rule = self._rule(host, source_cidr, protocol, ports)
        if rule not in self._rules:
            _nft_cmd(self.router_ns, "add", "rule", "ip", "gtr", "admit", *rule.nft_argv())
            self._rules.append(rule)
        return rule

    def revoke(self, host: Host, source_cidr: str, protocol: str = "tcp",
               ports: tuple[int, int] = (1, 65535)) -> None:
        """Remove a rule :meth:`allow` added (connections it admitted before stay up, as with a cloud's
        stateful firewall)."""
        rule = self._rule(host, source_cidr, protocol, ports)
        listing = _nft_cmd(self.router_ns, "-a", "list", "chain", "ip", "gtr", "admit").stdout
        for line in listing.splitlines():
            if f'comment "{rule.comment()}"' in line:
                handle = line.rsplit("# handle ", 1)[1].strip()
                _nft_cmd(self.router_ns, "delete", "rule", "ip", "gtr", "admit", "handle", handle)
        if rule in self._rules:
            self._rules.remove(rule)

    def _rule(self, host: Host, source_cidr: str, protocol: str, ports: tuple[int, int]) -> Rule:
        if host.lan is not self:
            raise ValueError(f"{host.name} is not on LAN {self.name}")
        if protocol not in ("tcp", "udp", "icmp", "all"):
            raise ValueError(f"protocol {protocol!r}: tcp, udp, icmp or all")
        lo, hi = ports
        if not 0 < lo <= hi <= 65535:
            raise ValueError(f"ports {ports!r}")
        cidr = str(ipaddress.ip_network(source_cidr, strict=False))
        if protocol not in ("tcp", "udp"):
            lo, hi = 0, 0
        return Rule(host.private_address, cidr, protocol, (lo, hi))


# -------------------------------------------------------------------------------------------------- host

_INIT = r"""
import os, signal
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
while True:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
    signal.sigtimedwait({signal.SIGCHLD}, 60)
"""


class Host:
    """A machine on a LAN: its own network, PID, UTS and mount namespaces, user and image."""

    def __init__(self, lan: Lan, name: str, n: int, private_address: str, public_address: str | None,
                 image: Path, account: Host | None = None) -> None:
        w = lan.world
        self.lan, self.world, self.name, self.n = lan, w, name, n
        self.private_address, self.public_address = private_address, public_address
        self.image = image
        self.netns = f"gt{w.index}-h{n}"
        self.account = account
        self.user = account.user if account is not None else f"gt{w.index}u{n}"
        self.home = f"/home/{self.user}"
        self.disk = w.root_dir / f"h{n}"  # this host's own files, on the launcher's disk
        self.uid = self.gid = -1
        self._holder: subprocess.Popen[bytes] | None = None
        self._init_pid = 0
        self._pidns = ""
        self._closed = False
        self._children: list[subprocess.Popen] = []

    def __repr__(self) -> str:
        return f"Host({self.name!r}, {self.private_address}, public={self.public_address}, user={self.user})"

    @property
    def closed(self) -> bool:
        return self._closed or self.world.closed

    @property
    def path_env(self) -> str:
        return f"{self.image}/bin:/usr/local/bin:/usr/bin:/bin"

    def path(self, inside: str) -> Path:
        """Where a path under the host's home, /tmp, /run or /etc lies on the launcher's disk."""
        p = Path(inside)
        for mount, there in ((Path(self.home), self.disk / "home"), (Path("/tmp"), self.disk / "tmp"),
                             (Path("/run"), self.disk / "run"), (Path("/etc"), self.disk / "etc")):
            if p == mount or mount in p.parents:
                return there / p.relative_to(mount)
        raise ValueError(f"{inside} is not under {self.home}, /tmp, /run or /etc")

    # -- build
    def _build(self) -> None:
        lan, w = self.lan, self.world
        if self.account is None:
            with _users_lock():
                _sh(["useradd", "--no-create-home", "--home-dir", self.home, "--shell", "/bin/bash", "--user-group",
                     "--comment", f"{GECOS} {w.name}", self.user])
                _sh(["usermod", "-p", "*", self.user])  # unlocked (sshd refuses locked users), no password
        import pwd
        entry = pwd.getpwnam(self.user)
        self.uid, self.gid = entry.pw_uid, entry.pw_gid
        d = self.disk
        for sub, mode in (("home", 0o700), ("tmp", 0o1777), ("run", 0o755), ("run/sshd", 0o755),
                          ("run/geotrain-host", 0o700), ("etc", 0o755), ("home/.ssh", 0o700)):
            (d / sub).mkdir(parents=True, exist_ok=True)
            (d / sub).chmod(mode)
        profile = f'case ":$PATH:" in *":{self.image}/bin:"*) ;; *) export PATH="{self.image}/bin:$PATH" ;; esac\n'
        (d / "home" / ".profile").write_text(profile)
        (d / "home" / ".bashrc").write_text(profile)
        for p in (d / "home", d / "home" / ".ssh", d / "home" / ".profile", d / "home" / ".bashrc"):
            os.chown(p, self.uid, self.gid)
        # the host's own /etc: this machine's as it is now (the host's user included), then its own
        # hosts, hostname and resolv.conf (regular files: unlinked first, a symlink would lead outside)
        for attempt in range(5):  # another process's useradd may make and remove lock files meanwhile
            copied = _sh(["cp", "-a", "/etc/.", str(d / "etc")], check=attempt == 4)
            if copied.returncode == 0:
                break
            time.sleep(0.2)
        for f, text in (("hosts", f"127.0.0.1\tlocalhost\n{self.private_address}\t{self.name}\n"),
                        ("hostname", f"{self.name}\n"),
                        ("resolv.conf", "# no nameserver on a test host\noptions timeout:1 attempts:1\n")):
            (d / "etc" / f).unlink(missing_ok=True)
            (d / "etc" / f).write_text(text)
            (d / "etc" / f).chmod(0o644)
        # network
        ns = self.netns
        _ip("netns", "add", ns)
        _isolate_ns(ns, forward=False)
        port = f"h{self.n}"
        _ip("link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns, ns=lan.router_ns)
        _ip("link", "set", port, "master", "br0", ns=lan.router_ns)
        _ip("link", "set", port, "up", ns=lan.router_ns)
        _ip("addr", "add", f"{self.private_address}/24", "dev", "eth0", ns=ns)
        _ip("link", "set", "eth0", "up", ns=ns)
        _ip("route", "add", "default", "via", lan.gateway, ns=ns)
        if self.public_address:
            _nft(f"""
add element ip gtr pub2priv {{ {self.public_address} : {self.private_address} }}
add element ip gtr priv2pub {{ {self.private_address} : {self.public_address} }}
add element ip gtr haspub {{ {self.private_address} }}
""", lan.router_ns)
            _ip("route", "add", f"{self.public_address}/32", "via", lan._uplink_router, ns=w.inet_ns)
        self._start_holder()

    def _start_holder(self) -> None:
        d = self.disk
        q = shlex.quote
        hide = "\n".join(_hide_command(entry) for entry in sorted(os.listdir("/"))
                         if entry not in SYSTEM_ROOT_ENTRIES)
        setup = f"""set -e
mount --make-rprivate /
mount -t sysfs -o ro sysfs /sys 2>/dev/null || true
mount --bind {q(str(d / 'etc'))} /etc
mount --bind {q(str(d / 'tmp'))} /tmp
mount --bind {q(str(d / 'run'))} /run
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /home
mkdir -m 0755 {q(self.home)}
mount --bind {q(str(d / 'home'))} {q(self.home)}
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /var/tmp
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm
{hide}
mount -t tmpfs -o mode=0700,nosuid,nodev tmpfs {q(str(HOSTS_DIR))}
hostname {q(self.name)}
echo ready
exec /usr/bin/python3 -c {q(_INIT)}
"""
        argv = ["nsenter", f"--net=/run/netns/{self.netns}", "--", "unshare", "--mount", "--uts", "--pid",
                "--fork", "--kill-child", "--mount-proc", "--propagation", "private", "--", "/bin/sh", "-c", setup]
        log = open(d / "holder.log", "wb")  # noqa: SIM115 - the holder keeps it
        pdeath = _set_pdeathsig if threading.current_thread() is threading.main_thread() else None
        try:
            self._holder = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                                            preexec_fn=pdeath, start_new_session=True,
                                            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"})
        finally:
            log.close()
        assert self._holder.stdout is not None
        ready, _, _ = select.select([self._holder.stdout], [], [], 20.0)
        line = self._holder.stdout.readline() if ready else b""
        self._holder.stdout.close()
        if line.strip() != b"ready":
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._holder.pid, signal.SIGKILL)
            self._holder.wait(5)
            raise RuntimeError(f"host {self.name} did not start: {(d / 'holder.log').read_text(errors='replace')[-2000:]}")
        deadline = time.monotonic() + 5
        while True:
            children = Path(f"/proc/{self._holder.pid}/task/{self._holder.pid}/children").read_text().split()
            if children:
                self._init_pid = int(children[0])
                with contextlib.suppress(OSError):
                    self._pidns = os.readlink(f"/proc/{self._init_pid}/ns/pid")
                    if os.readlink(f"/proc/{self._init_pid}/exe").endswith("sh"):
                        raise OSError("not exec'd yet")
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"host {self.name}: no init process")
            time.sleep(0.005)

    # -- commands
    def _argv(self, cmd: Sequence[str] | str, root: bool, env: Mapping[str, str] | None,
              cwd: str | None) -> list[str]:
        if self.closed:
            raise HostClosed(f"host {self.name} is gone")
        argv = ["/bin/bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        if root:
            base = {"HOME": "/root", "USER": "root", "LOGNAME": "root",
                    "PATH": f"{self.image}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
            drop: list[str] = []
        else:
            base = {"HOME": self.home, "USER": self.user, "LOGNAME": self.user, "PATH": self.path_env}
            drop = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--init-groups",
                    "--inh-caps=-all", "--"]
        base.update({"SHELL": "/bin/bash", "LANG": "C.UTF-8"})
        base.update(env or {})
        wd = cwd or ("/root" if root else self.home)
        return ["nsenter", "-t", str(self._init_pid), "-n", "-m", "-u", "-p", "--", *drop,
                "/usr/bin/env", "-i", f"--chdir={wd}", *(f"{k}={v}" for k, v in base.items()), *argv]

    def run(self, cmd: Sequence[str] | str, *, root: bool = False, env: Mapping[str, str] | None = None,
            input: str | None = None, timeout: float = 60.0, cwd: str | None = None,
            check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run ``cmd`` (an argv, or a bash script) inside the host, as its user (or root), in a clean
        environment (HOME, USER, LOGNAME, SHELL, LANG, PATH with the image first) plus ``env``."""
        return subprocess.run(self._argv(cmd, root, env, cwd), input=input, text=True, capture_output=True,
                              timeout=timeout, check=check,
                              stdin=None if input is not None else subprocess.DEVNULL)

    def popen(self, cmd: Sequence[str] | str, *, root: bool = False, env: Mapping[str, str] | None = None,
              cwd: str | None = None, **kwargs: object) -> subprocess.Popen:
        """Start ``cmd`` inside the host like :meth:`run`; keyword arguments go to ``subprocess.Popen``.
        The process dies with the host (:meth:`kill_all`, :meth:`World.close`)."""
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        proc = subprocess.Popen(self._argv(cmd, root, env, cwd), **kwargs)  # type: ignore[call-overload]
        self._children.append(proc)
        return proc

    def mount_share(self, source: Path, target: str) -> None:
        """Mount ``source`` (a folder of this machine outside the hidden ones, e.g. under /var/lib) at
        ``target`` inside the host, as a site's NFS share is mounted on each of its machines: the only
        files the hosts that mount it share (the launcher does not see ``target``)."""
        if self.closed:
            raise HostClosed(f"host {self.name} is gone")
        subprocess.run(["nsenter", "-t", str(self._init_pid), "-m", "--", "/bin/sh", "-c",
                        f"mkdir -p {shlex.quote(target)} && mount --bind {shlex.quote(str(source))} "
                        f"{shlex.quote(target)}"], check=True, capture_output=True, text=True, timeout=30)

    def pids(self) -> list[int]:
        """The host's processes, as PIDs of this (the launcher's) PID namespace."""
        if not self._pidns:
            return []
        out = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{entry}/ns/pid") == self._pidns:
                        out.append(int(entry))
        return out

    # -- sshd
    def start_sshd(self, authorized_keys: str, host_key: Path | None = None, port: int = 22) -> SSHAccess:
        """Run the system's sshd inside the host on its private address: public-key login for the host's
        user with ``authorized_keys`` (the lines of ``~/.ssh/authorized_keys``), nothing else. ``host_key``:
        a private host key to use (default: a new ed25519 key)."""
        if not os.access(SSHD, os.X_OK):
            raise HostsUnavailable(f"{SSHD} is missing: run scripts/ensure_sshd.sh")
        conf_dir = self.disk / "run" / "geotrain-host"
        key = conf_dir / f"ssh_host_key_{port}"
        if host_key is not None:
            shutil.copyfile(host_key, key)
            key.chmod(0o600)
            pub = _sh(["ssh-keygen", "-y", "-f", str(key)]).stdout.strip()
        else:
            key.unlink(missing_ok=True)
            _sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", self.name, "-f", str(key)])
            pub = key.with_name(key.name + ".pub").read_text().strip()
        ak = self.disk / "home" / ".ssh" / "authorized_keys"
        ak.write_text(authorized_keys if authorized_keys.endswith("\n") else authorized_keys + "\n")
        ak.chmod(0o600)
        os.chown(ak, self.uid, self.gid)
        inside = "/run/geotrain-host"
        (conf_dir / f"sshd_config_{port}").write_text(f"""\
ListenAddress {self.private_address}:{port}
HostKey {inside}/{key.name}
PidFile none
AuthorizedKeysFile .ssh/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin no
AllowUsers {self.user}
StrictModes yes
X11Forwarding no
PrintMotd no
SetEnv PATH={self.path_env}
Subsystem sftp /usr/lib/openssh/sftp-server
LogLevel VERBOSE
""")
        log = conf_dir / f"sshd_{port}.log"
        log.unlink(missing_ok=True)
        self.popen([SSHD, "-D", "-e", "-f", f"{inside}/sshd_config_{port}", "-E", f"{inside}/{log.name}"],
                   root=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while "Server listening on" not in (log.read_text(errors="replace") if log.exists() else ""):
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd on {self.name} did not start: "
                                   f"{log.read_text(errors='replace') if log.exists() else '(no log)'}")
            time.sleep(0.02)
        return SSHAccess(self.user, port, self.private_address, self.public_address, pub)

    def sshd_log(self, port: int = 22) -> str:
        with contextlib.suppress(OSError):
            return (self.disk / "run" / "geotrain-host" / f"sshd_{port}.log").read_text(errors="replace")
        return ""

    # -- the end
    def kill_all(self) -> None:
        """Pull the plug: every process of the host dies at once, its network goes away, and its router
        drops what still comes for its address (peers time out). The host cannot be used afterwards."""
        if self._closed:
            return
        self._closed = True
        if self._init_pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._init_pid, signal.SIGKILL)
        if self._holder is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._holder.wait(10)
        deadline = time.monotonic() + 10
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.01)
        for proc in self._children:  # the nsenter parents end as their child did
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        if not self.world.closed:
            _nft_cmd(self.lan.router_ns, "add", "element", "ip", "gtr", "dead", f"{{ {self.private_address} }}",
                     check=False)
        _ip("netns", "del", self.netns, check=False)

    def _destroy(self) -> None:
        self.kill_all()
        if self.pids():
            raise RuntimeError(f"processes of {self.name} survived: {self.pids()}")


# ---------------------------------------------------------------------------------------------- commands


def main(argv: Sequence[str]) -> int:
    if argv[:1] == ["image"]:
        print(ensure_image())
        return 0
    if argv[:1] == ["cleanup"]:
        for item in cleanup_stale():
            print(f"removed {item}")
        return 0
    print("usage: python -m tests.fakes.hosts image|cleanup", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Network namespaces of an emulated WAN: one per endpoint, named ``gt-<tag>-<endpoint>``.

The tag (6–8 lowercase hex characters) marks one run: every namespace it made carries it, so a run's
leftovers can be found by name alone. Nothing here touches the root namespace's addresses or routes.
"""

from __future__ import annotations

import functools
import os
import re
import secrets
import shutil
import signal
import time
from pathlib import Path

from geotrain.errors import InputError
from geotrain.wan.system import WanError, run

PREFIX = "gt-"
NETNS_DIR = Path("/run/netns")
TAG_RE = re.compile(r"^[0-9a-f]{6,8}$")
ENDPOINT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
NAME_RE = re.compile(r"^gt-([0-9a-f]{6,8})-([A-Za-z0-9][A-Za-z0-9_.-]{0,39})$")
KILL_WAIT_S = 10.0

_CAP_NET_ADMIN = 12
_CAP_SYS_ADMIN = 21


def new_tag() -> str:
    """A fresh run tag: 8 random hex characters."""
    return secrets.token_hex(4)


def check_tag(tag: str) -> str:
    """``tag`` itself when it is 6–8 lowercase hex characters; else :class:`InputError`."""
    if not TAG_RE.match(tag):
        raise InputError(f"WAN tag {tag!r} is not 6–8 lowercase hex characters (e.g. 'a1b2c3d4').")
    return tag


def check_endpoint(name: str) -> str:
    """``name`` itself when it fits a namespace name (letters, digits, ``_.-``, at most 40); else
    :class:`InputError`."""
    if not ENDPOINT_RE.match(name):
        raise InputError(f"endpoint name {name!r} must be 1–40 letters, digits, '_', '.' or '-', "
                         "starting with a letter or digit.")
    return name


def namespace_name(tag: str, endpoint: str) -> str:
    """The namespace of ``endpoint`` in the run ``tag``: ``gt-<tag>-<endpoint>``."""
    return f"{PREFIX}{check_tag(tag)}-{check_endpoint(endpoint)}"


def parse_name(namespace: str) -> tuple[str, str] | None:
    """(tag, endpoint) of a namespace this package names, or None for any other name."""
    match = NAME_RE.match(namespace)
    return (match.group(1), match.group(2)) if match else None


def list_namespaces(tag: str | None = None) -> list[str]:
    """Namespaces this package names (``gt-<tag>-<endpoint>``), only those of ``tag`` when given, sorted."""
    try:
        names = os.listdir(NETNS_DIR)
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        parsed = parse_name(name)
        if parsed is not None and (tag is None or parsed[0] == tag):
            out.append(name)
    return sorted(out)


def exists(namespace: str) -> bool:
    """Whether the named namespace exists."""
    return (NETNS_DIR / namespace).exists()


def create(namespace: str) -> None:
    """Make the namespace (named as :func:`namespace_name` names them) and bring its ``lo`` up."""
    if parse_name(namespace) is None:
        raise InputError(f"namespace {namespace!r} is not named gt-<tag>-<endpoint>.")
    run(["ip", "netns", "add", namespace], scope=namespace)
    try:
        run(["ip", "-n", namespace, "link", "set", "lo", "up"], scope=namespace)
    except WanError:
        delete(namespace)
        raise


def delete(namespace: str) -> bool:
    """Delete the namespace (its devices go with it); False when there was none. Processes still in
    it keep it alive, unnamed, until they exit: call :func:`kill_all` first."""
    if not exists(namespace):
        return False
    done = run(["ip", "netns", "del", namespace], scope=namespace, check=False)
    if done.returncode != 0 and exists(namespace):
        raise WanError(f"could not delete namespace {namespace}: {done.stderr.strip()}", scope=namespace)
    return True


def pids(namespace: str) -> list[int]:
    """Processes running in the namespace (``ip netns pids``); empty when it does not exist."""
    if not exists(namespace):
        return []
    done = run(["ip", "netns", "pids", namespace], scope=namespace, check=False)
    return sorted(int(word) for word in done.stdout.split() if word.isdigit())


def kill_all(namespace: str, *, wait_s: float = KILL_WAIT_S) -> list[int]:
    """SIGKILL every process in the namespace and wait until none is left; returns the pids killed.
    Raises :class:`WanError` when some survive ``wait_s``."""
    killed: set[int] = set()
    deadline = time.monotonic() + wait_s
    pause_s = 0.005
    while True:
        found = [pid for pid in pids(namespace) if pid != os.getpid()]
        if not found:
            return sorted(killed)
        if time.monotonic() > deadline:
            raise WanError(f"processes {found} in {namespace} survived SIGKILL for {wait_s:g} s.",
                           scope=namespace)
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass
        time.sleep(pause_s)
        pause_s = min(pause_s * 2, 0.1)


def exec_prefix(namespace: str) -> list[str]:
    """The argv prefix that runs a command inside the namespace."""
    return ["ip", "netns", "exec", namespace]


def _capabilities() -> int:
    """This process's effective capability bits (0 when they cannot be read)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    except (OSError, ValueError):
        pass
    return 0


@functools.cache
def privileges() -> str | None:
    """None when this process can create namespaces, TUN devices and tc qdiscs (checked by making a
    throw-away namespace with an htb qdisc in it); else why not, in words."""
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` not found (install iproute2)"
    caps = _capabilities()
    if os.geteuid() != 0 and not caps >> _CAP_NET_ADMIN & 1:
        return "not root (needs CAP_NET_ADMIN)"
    if not caps >> _CAP_SYS_ADMIN & 1:
        return "no CAP_SYS_ADMIN (needed to create network namespaces)"
    if not Path("/dev/net/tun").exists():
        return "no /dev/net/tun"
    try:
        os.close(os.open("/dev/net/tun", os.O_RDWR))
    except OSError as exc:
        return f"cannot open /dev/net/tun ({exc.strerror})"
    probe = namespace_name(new_tag(), "probe")
    try:
        create(probe)
        run(["tc", "-n", probe, "qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb"], scope=probe)
    except WanError as exc:
        return f"cannot set up a namespace with an htb qdisc ({exc.message})"
    finally:
        try:
            delete(probe)
        except WanError:
            pass
    return None


CLONE_NEWNET = 0x40000000


def run_inside(namespace: str, fn, *args):  # noqa: ANN001, ANN201
    """``fn(*args)`` on a thread that has entered ``namespace``'s network (setns(2)); what it returns.

    Sockets keep the namespace they were made in, so a listener or a client made here serves and
    connects inside ``namespace`` from any thread afterwards, while this process stays in its own."""
    import ctypes
    import threading

    libc = ctypes.CDLL(None, use_errno=True)
    outcome: dict[str, object] = {}

    def body() -> None:
        try:
            fd = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns into {namespace}: {os.strerror(err)}")
            finally:
                os.close(fd)
            outcome["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            outcome["error"] = exc

    thread = threading.Thread(target=body, name=f"in-{namespace}", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome.get("value")

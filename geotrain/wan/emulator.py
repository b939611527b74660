"""An emulated WAN between network namespaces, owned by one process (the launcher).

Each endpoint (a node) gets a namespace ``gt-<tag>-<name>`` with one TUN device, address 10.78.x.y/16.
Packets between endpoints pass through the run's delay line (one process), which holds each directed
pair's packets for half the pair's round-trip time, and leave the sender's device through an htb class
at the directed link's rate. Byte counters per directed link come from those tc classes.

A :class:`Link` describes one direction: ``link_to(other)`` is the new endpoint → ``other`` and
``link_from(other)`` is ``other`` → the new endpoint. Each direction's one-way delay is half its
``rtt_ms``, so a pair's round trip is ``(to.rtt_ms + from.rtt_ms) / 2``: ``rtt_ms`` itself when both
agree. ``rtt_ms`` 0 forwards at once (two endpoints in one zone); ``rate_mbit`` ``math.inf`` leaves a
direction unshaped (the delay line's own ceiling then binds).

Teardown: :meth:`EmulatedWan.close` (also run at exit and on SIGTERM) removes everything. If the owner
dies without it, even by SIGKILL, the delay line sees its pipe close, kills every process in the run's
namespaces and deletes them; :func:`cleanup` removes what is left of runs whose owner is dead, found
through their state files.
"""

from __future__ import annotations

import atexit
import collections
import math
import os
import signal
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from geotrain.errors import InputError, NotFoundError
from geotrain.wan import addresses, cpu, namespaces, shaping, state
from geotrain.wan.delayline_client import DelayLineClient, find_delaylines, kill_process
from geotrain.wan.system import WanError
from geotrain.wan.tun import DEFAULT_MTU_BYTES


@dataclass(frozen=True)
class Link:
    """One directed link: its round-trip time (half of it is this direction's delay) and its rate."""

    rtt_ms: float
    rate_mbit: float

    def __post_init__(self) -> None:
        if not (self.rtt_ms >= 0 and math.isfinite(self.rtt_ms)):
            raise InputError(f"a link's rtt_ms must be finite and ≥ 0, not {self.rtt_ms}.")
        if not self.rate_mbit > 0:
            raise InputError(f"a link's rate_mbit must be > 0 (math.inf: unshaped), not {self.rate_mbit}.")

    @property
    def one_way_ms(self) -> float:
        """This direction's delay."""
        return self.rtt_ms / 2


@dataclass(frozen=True)
class Endpoint:
    """One endpoint: its namespace, its address there and the TUN device that carries it."""

    name: str
    namespace: str
    address: str
    device: str
    egress_mbit: float | None = None


_OPEN: weakref.WeakSet[EmulatedWan] = weakref.WeakSet()
_SIGNAL_LOCK = threading.Lock()


def _on_sigterm(signum: int, frame: object) -> None:
    """Close every open emulation, then die of SIGTERM as the process would have."""
    for wan in list(_OPEN):
        try:
            wan.close()
        except Exception:  # noqa: BLE001 - dying anyway; the delay line cleans up what is left
            pass
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _install_sigterm() -> None:
    """Close open emulations on SIGTERM, where nobody else handles it (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return
    with _SIGNAL_LOCK:
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)


class EmulatedWan:
    """The owner of one emulation (a context manager): adds, kills and removes endpoints, reads the
    byte counters of every directed link, and tears it all down on :meth:`close`."""

    def __init__(self, tag: str | None = None, state_dir: Path | None = None, *,
                 mtu_bytes: int = DEFAULT_MTU_BYTES) -> None:
        why_not = namespaces.privileges()
        if why_not is not None:
            raise WanError(f"cannot emulate a WAN here: {why_not}.")
        self.tag = namespaces.check_tag(tag) if tag is not None else namespaces.new_tag()
        if namespaces.list_namespaces(self.tag) or find_delaylines(self.tag):
            raise InputError(f"WAN tag {self.tag} is in use already; pick another.")
        self.state_dir = Path(state_dir) if state_dir is not None else state.default_state_dir()
        self.mtu_bytes = mtu_bytes
        self._owner_pid = os.getpid()
        self._owner = state.ProcessId.of(self._owner_pid)
        self._endpoints: dict[str, Endpoint] = {}
        self._address_names: dict[str, str] = {}   # every address ever given → its endpoint's name
        self._retired: collections.Counter[tuple[str, str]] = collections.Counter()
        self._next_index = 0
        self._closed = False
        self._lock = threading.RLock()
        self._delayline: DelayLineClient | None = None
        self._record()
        self._delayline = DelayLineClient(self.tag, mtu_bytes=mtu_bytes)
        self._record()
        _OPEN.add(self)
        atexit.register(self.close)
        _install_sigterm()

    def __enter__(self) -> EmulatedWan:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- endpoints --------------------------------------------------------------------------------

    def add(self, name: str, link_to: Callable[[str], Link], link_from: Callable[[str], Link],
            egress_mbit: float | None = None) -> Endpoint:
        """A new endpoint ``name`` joined to every endpoint there is (also while traffic flows):
        ``link_to(other)`` is its link to ``other``, ``link_from(other)`` the link back; ``egress_mbit``
        caps all it sends. Returns the endpoint; its namespace is empty, ready for processes."""
        with self._lock:
            self._check_open()
            namespaces.check_endpoint(name)
            if name in self._endpoints:
                raise InputError(f"endpoint {name} is in the emulation already; remove it first.")
            if egress_mbit is not None and not egress_mbit > 0:
                raise InputError(f"egress_mbit must be > 0, not {egress_mbit}.")
            others = list(self._endpoints.values())
            links = {other.name: (link_to(other.name), link_from(other.name)) for other in others}
            namespace = namespaces.namespace_name(self.tag, name)
            address = addresses.address_of(self._next_index)
            self._next_index += 1
            namespaces.create(namespace)
            self._record(extra=namespace)
            try:
                for other in others:
                    shaping.add_destination(other.namespace, other.device, address,
                                            rate_mbit=links[other.name][1].rate_mbit,
                                            egress_mbit=other.egress_mbit, mtu_bytes=self.mtu_bytes)
                assert self._delayline is not None
                reply = self._delayline.request({
                    "op": "add", "name": name, "namespace": namespace, "address": address,
                    "delay_ms": {o: to.one_way_ms for o, (to, _) in links.items()},
                    "delay_from_ms": {o: back.one_way_ms for o, (_, back) in links.items()}})
                endpoint = Endpoint(name, namespace, address, str(reply["device"]), egress_mbit)
                shaping.setup(namespace, endpoint.device, egress_mbit=egress_mbit, mtu_bytes=self.mtu_bytes)
                for other in others:
                    shaping.add_destination(namespace, endpoint.device, other.address,
                                            rate_mbit=links[other.name][0].rate_mbit,
                                            egress_mbit=egress_mbit, mtu_bytes=self.mtu_bytes)
            except BaseException:
                self._undo_add(name, namespace, address, others)
                raise
            self._endpoints[name] = endpoint
            self._address_names[address] = name
            self._record()
            return endpoint

    def _undo_add(self, name: str, namespace: str, address: str, others: list[Endpoint]) -> None:
        for other in others:
            shaping.remove_destination(other.namespace, other.device, address)
        if self._delayline is not None:
            try:
                self._delayline.request({"op": "remove", "name": name})
            except WanError:
                pass
        namespaces.kill_all(namespace)
        namespaces.delete(namespace)
        self._record()

    def endpoint(self, name: str) -> Endpoint:
        """The endpoint called ``name`` (:class:`NotFoundError` if there is none now)."""
        try:
            return self._endpoints[name]
        except KeyError:
            raise NotFoundError(f"no endpoint {name} in WAN {self.tag}.") from None

    def endpoints(self) -> list[Endpoint]:
        """Every endpoint there is now, in the order they were added."""
        return list(self._endpoints.values())

    def exec_prefix(self, name: str) -> list[str]:
        """The argv prefix that runs a command inside endpoint ``name``'s namespace."""
        return namespaces.exec_prefix(self.endpoint(name).namespace)

    def kill(self, name: str) -> None:
        """A preemption: every process in ``name``'s namespace dies (SIGKILL); the endpoint stays."""
        namespaces.kill_all(self.endpoint(name).namespace)

    def remove(self, name: str) -> None:
        """Kill everything in ``name``'s namespace and take the namespace and its links away. Its byte
        counters keep their last reading in :meth:`bytes_sent`."""
        with self._lock:
            self._check_open()
            gone = self.endpoint(name)
            namespaces.kill_all(gone.namespace)
            for (src, dst), sent in self._read_counters(only=gone).items():
                self._retired[(src, dst)] += sent
            for other in self._endpoints.values():
                if other is not gone:
                    shaping.remove_destination(other.namespace, other.device, gone.address)
            del self._endpoints[name]
            assert self._delayline is not None
            self._delayline.request({"op": "remove", "name": name})
            namespaces.delete(gone.namespace)
            self._record()

    # -- counters ---------------------------------------------------------------------------------

    def bytes_sent(self) -> dict[tuple[str, str], int]:
        """(source, destination) → bytes the source's device sent on that directed link (IP packets,
        headers included, from the tc class counters), removed endpoints included at their last
        reading."""
        with self._lock:
            totals = collections.Counter(self._retired)
            if not self._closed:
                for pair, sent in self._read_counters().items():
                    totals[pair] += sent
            return dict(totals)

    def device_bytes(self, name: str) -> shaping.DeviceBytes:
        """Endpoint ``name``'s device tx/rx byte counters (everything it sent and received)."""
        endpoint = self.endpoint(name)
        return shaping.device_bytes(endpoint.namespace, endpoint.device)

    def delayline_stats(self) -> dict:
        """The delay line's own count of packets and bytes forwarded per pair, dropped and queued."""
        self._check_open()
        assert self._delayline is not None
        return self._delayline.request({"op": "stats"})

    def _read_counters(self, only: Endpoint | None = None) -> dict[tuple[str, str], int]:
        """Current class counters of every live directed link (only those to or from ``only``)."""
        out: dict[tuple[str, str], int] = {}
        for source in self._endpoints.values():
            if only is not None and source is not only:
                readings = {only.address: shaping.class_bytes(source.namespace, source.device).get(only.address, 0)}
            else:
                readings = shaping.class_bytes(source.namespace, source.device)
            for address, sent in readings.items():
                target = self._address_names.get(address)
                if target is not None and target != source.name and (
                        address in {e.address for e in self._endpoints.values()}):
                    out[(source.name, target)] = out.get((source.name, target), 0) + sent
        return out

    # -- lifetime ---------------------------------------------------------------------------------

    @property
    def delayline_pid(self) -> int | None:
        """The delay line's process id (None once closed)."""
        return None if self._delayline is None else self._delayline.pid

    def _check_open(self) -> None:
        if self._closed:
            raise InputError(f"WAN {self.tag} is closed.")

    def _record(self, extra: str | None = None) -> None:
        names = {e.namespace for e in self._endpoints.values()} | ({extra} if extra else set())
        delayline = None if self._delayline is None else state.ProcessId.of(self._delayline.pid)
        assert self._owner is not None
        state.write(self.state_dir, state.RunRecord(self.tag, self._owner, delayline, tuple(sorted(names))))

    def close(self) -> None:
        """Tear everything down: the delay line, every process in the run's namespaces, the
        namespaces, the state file. Idempotent; does nothing in a forked child of the owner."""
        if os.getpid() != self._owner_pid:
            return
        with self._lock:
            if self._closed:
                return
            try:
                self._retired = collections.Counter(self.bytes_sent())
            except WanError:
                pass
            self._closed = True
            _OPEN.discard(self)
            atexit.unregister(self.close)
            if self._delayline is not None:
                self._delayline.stop()
                self._delayline = None
            for namespace in namespaces.list_namespaces(self.tag):
                namespaces.kill_all(namespace)
                namespaces.delete(namespace)
            for pid in find_delaylines(self.tag):
                kill_process(pid)
            self._endpoints.clear()
            state.forget(self.state_dir, self.tag)


def cleanup(state_dir: Path | None = None, *, everything: bool = False) -> list[str]:
    """Remove the namespaces, delay lines and CPU control groups (``geotrain.wan.cpu``) of runs whose
    owner process is dead (recorded under ``state_dir``); with ``everything``, every ``gt-<tag>-*``
    namespace, delay line and ``geotrain-<tag>`` control group there is, live owner or not. Returns what
    was removed: namespace names, ``delay line <pid>`` and ``cpu group <folder>`` entries."""
    state_dir = Path(state_dir) if state_dir is not None else state.default_state_dir()
    removed: list[str] = []
    tags = set()
    for record in state.read_all(state_dir):
        if record.owner.alive() and not everything:
            continue
        tags.add(record.tag)
        if record.delayline is not None and record.delayline.alive():
            kill_process(record.delayline.pid)
            removed.append(f"delay line {record.delayline.pid}")
    for tag in sorted(tags):
        for pid in find_delaylines(tag):
            kill_process(pid)
            removed.append(f"delay line {pid}")
    if everything:
        for pid in find_delaylines():
            kill_process(pid)
            removed.append(f"delay line {pid}")
    for namespace in namespaces.list_namespaces():
        parsed = namespaces.parse_name(namespace)
        if parsed is not None and (everything or parsed[0] in tags):
            namespaces.kill_all(namespace)
            if namespaces.delete(namespace):
                removed.append(namespace)
    removed += [f"cpu group {folder}" for folder in cpu.remove_groups(None if everything else tags)]
    for tag in sorted(tags):
        state.forget(state_dir, tag)
    return removed

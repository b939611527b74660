"""Provider faults on demand: a wrapper that makes any provider fail the way clouds do.

``FaultInjector(inner, faults)`` is a :class:`~geotrain.providers.base.Provider` that passes every call
to ``inner`` except those a :class:`Fault` matches, and records every call it saw (``calls``). The
local provider gets it from ``launch --preempt-trace`` (events with a ``fault:`` key), so the demo and
the tests meet the failures a cloud launch meets every day; ``geotrain.testing.FakeProvider`` is the
same wrapper around a local provider, for tests.

Fault kinds (each matches launches of offers inside its ``scope``: a cloud, ``cloud/region``, a zone
scope or an offer id; none = every launch), after skipping the first ``after`` matching launches, for
``times`` launches:

=====================  ===========================================================================
``capacity``           CapacityError scoped to the offer's zone; no node is made
``quota``              QuotaError scoped to the fault's scope (default: the offer's cloud); no node
``throttle``           ThrottledError; no node (a retry with the same request id may succeed)
``timeout``            the launch times out and its outcome is unknown (ProviderTimeoutError); with
                       ``made`` (the default) the node was made anyway, as a cloud may do
``boot``               the node fails to boot: ProviderError scoped to its zone; no node is left
``dies_booting``       the launch returns, but the node is already gone (lost) when listed
``dies_before_start``  the node dies when its first command is started (ProviderError from start)
=====================  ===========================================================================
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from geotrain.errors import CapacityError, InputError, ProviderError, ProviderTimeoutError, QuotaError, ThrottledError
from geotrain.providers.base import (Capabilities, LaunchRequest, NodeDirs, NodeInfo, NodeProcess, PeerRules, Preempting,
                                     Provider, ServesClouds)


class FaultKind(StrEnum):
    CAPACITY = "capacity"
    QUOTA = "quota"
    THROTTLE = "throttle"
    TIMEOUT = "timeout"
    BOOT = "boot"
    DIES_BOOTING = "dies_booting"
    DIES_BEFORE_START = "dies_before_start"


@dataclass(frozen=True, slots=True)
class Fault:
    kind: FaultKind
    scope: str | None = None  # cloud, cloud/region, zone scope or offer id; None: any launch
    times: int = 1  # matching launches that fail
    after: int = 0  # matching launches that pass first
    made: bool = True  # timeout: whether the node was made anyway

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", FaultKind(self.kind))
        if self.times < 1 or self.after < 0:
            raise InputError(f"fault {self.kind}: times must be >= 1 and after >= 0")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "kind": self.kind.value}

    def matches(self, request: LaunchRequest) -> bool:
        if self.scope is None:
            return True
        loc = request.offer.location
        return self.scope in (loc.cloud, loc.region_scope, loc.zone_scope, request.offer.offer_id)


def fault_from_dict(data: dict[str, Any]) -> Fault:
    return Fault(FaultKind(data["kind"]), data.get("scope"), int(data.get("times", 1)), int(data.get("after", 0)),
                 bool(data.get("made", True)))


@dataclass(frozen=True, slots=True)
class Call:
    """One call the wrapper saw: ``method``, what it was about, and how it ended."""

    method: str
    target: str  # request id (launch) or node id
    outcome: str  # "ok", "node <id>", or the fault / error it raised


@dataclass
class _Armed:
    fault: Fault
    seen: int = 0
    fired: int = 0


@dataclass
class FaultInjector:
    """A provider that fails on demand; see the module docstring."""

    inner: Provider
    faults: tuple[Fault, ...] = ()
    calls: list[Call] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._armed = [_Armed(f) for f in self.faults]
        self._doomed: set[str] = set()  # nodes that die at their first start
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    def check_credentials(self) -> None:
        self.inner.check_credentials()

    def launch(self, request: LaunchRequest) -> NodeInfo:
        fault = self._due(request)
        target = request.request_id
        offer = request.offer
        zone = offer.location.zone_scope
        if fault is None:
            node = self.inner.launch(request)
            self._record("launch", target, f"node {node.node_id}")
            return node
        kind = fault.kind
        self._record("launch", target, f"fault {kind.value}")
        if kind is FaultKind.CAPACITY:
            raise CapacityError(f"no capacity for {offer.shape.instance_type} in {zone} right now (injected)",
                                scope=zone)
        if kind is FaultKind.QUOTA:
            scope = fault.scope if fault.scope and fault.scope.count("/") <= 1 else offer.location.cloud
            raise QuotaError(f"the {scope} quota for {offer.shape.instance_type} is exhausted (injected)", scope=scope)
        if kind is FaultKind.THROTTLE:
            raise ThrottledError("the provider's API is rate-limiting requests (injected)", scope=offer.location.cloud)
        if kind is FaultKind.BOOT:
            raise ProviderError(f"the node for {target} failed to boot in {zone} (injected)", scope=zone)
        if kind is FaultKind.TIMEOUT:
            if fault.made:
                self.inner.launch(request)
            raise ProviderTimeoutError(f"launching {target} timed out; whether the node exists is unknown "
                                       "(injected)", scope=zone)
        node = self.inner.launch(request)
        if kind is FaultKind.DIES_BOOTING:
            self.inner.terminate(node.node_id, reason="lost")
        else:
            self._doomed.add(node.node_id)
        return node  # as launched: the provider has not noticed yet

    def list(self, run_id: str | None = None) -> list[NodeInfo]:
        return self.inner.list(run_id)

    def terminate(self, node_id: str, *, reason: str = "terminated") -> None:
        self._record("terminate", node_id, reason)
        self.inner.terminate(node_id, reason=reason)

    def start(self, node_id: str, argv: list[str], env: dict[str, str], log_path: Path,
              cwd: Path | str | None = None, files: Mapping[str, str] | None = None) -> NodeProcess:
        if node_id in self._doomed:
            self._doomed.discard(node_id)
            self.inner.terminate(node_id, reason="lost")
            self._record("start", node_id, "fault dies_before_start")
        return self.inner.start(node_id, argv, env, log_path, cwd=cwd, files=files)

    def booted(self, node_id: str) -> bool | None:
        """The inner provider's :class:`~geotrain.providers.bootwatch.BootWatch` (ready, where it has none);
        a node doomed to die before its start still boots: ``start`` ends it."""
        from geotrain.providers.bootwatch import BootWatch

        return self.inner.booted(node_id) if isinstance(self.inner, BootWatch) else True

    def preempt(self, node_id: str, *, notice_s: float = 0.0) -> None:
        if not isinstance(self.inner, Preempting):
            raise ProviderError(f"provider {self.name} cannot preempt its nodes on request")
        self._record("preempt", node_id, f"notice {notice_s:g} s")
        self.inner.preempt(node_id, notice_s=notice_s)

    def node_dir(self, node_id: str) -> Path | None:
        return self.inner.node_dir(node_id) if isinstance(self.inner, NodeDirs) else None

    def served_clouds(self) -> frozenset[str]:
        return self.inner.served_clouds() if isinstance(self.inner, ServesClouds) else frozenset({self.inner.name})

    # -- bookkeeping ------------------------------------------------------------------------------

    def _due(self, request: LaunchRequest) -> Fault | None:
        with self._lock:
            matching = [armed for armed in self._armed if armed.fault.matches(request)]
            for armed in matching:
                armed.seen += 1
            for armed in matching:
                if armed.seen > armed.fault.after and armed.fired < armed.fault.times:
                    armed.fired += 1
                    return armed.fault
        return None

    def _record(self, method: str, target: str, outcome: str) -> None:
        with self._lock:
            self.calls.append(Call(method, target, outcome))


class LinkedFaultInjector(FaultInjector):
    """A fault injector over a provider that reaches its nodes over the launcher's own connection
    (:class:`~geotrain.providers.base.NodeLink`): so does the injector."""

    def ship(self, node_id: str, sources: Sequence[tuple[Path, str]]) -> None:
        self.inner.ship(node_id, sources)  # type: ignore[attr-defined]

    def store_address(self, node_id: str, local_port: int) -> tuple[str, int]:
        return self.inner.store_address(node_id, local_port)  # type: ignore[attr-defined]

    def admit_peers(self, run_id: str, addresses: Sequence[str]) -> None:
        if isinstance(self.inner, PeerRules):
            self.inner.admit_peers(run_id, addresses)

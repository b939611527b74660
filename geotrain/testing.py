"""Public helpers for testing code that drives geotrain (as ``typer.testing`` is for typer apps).

``FakeProvider`` is a real provider — the local one, whose nodes are processes on this machine, so
real workers train on them — wrapped in :class:`~geotrain.providers.faults.FaultInjector`: it records
every call and fails on demand the way clouds do (capacity in a zone, quota in a cloud, throttling, a
timeout whose outcome is unknown, a node that dies while booting or before its worker starts), and it
preempts nodes with or without notice. Its checks answer what a failure must never cause: a node
launched twice for one request, or a node left running after the run.

    provider = FakeProvider([Fault(FaultKind.CAPACITY, scope="aws/us-east-1/use1-az1")])
    outcome = Launcher(plan, provider, options=LaunchOptions(...)).run()
    assert provider.leaked(outcome.run_id) == [] and provider.untracked(outcome.run_id, ledger_node_ids) == []
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from geotrain.providers.base import NodeInfo
from geotrain.providers.faults import Call, Fault, FaultInjector, FaultKind
from geotrain.providers.local import LocalProvider

__all__ = ["Call", "FakeProvider", "Fault", "FaultKind"]


class FakeProvider(FaultInjector):
    """A local provider that records its calls and fails on demand (see the module docstring)."""

    def __init__(self, faults: Iterable[Fault] = (), *, home: Path | None = None) -> None:
        super().__init__(LocalProvider(home), tuple(faults))

    def launches(self) -> list[Call]:
        return [c for c in self.calls if c.method == "launch"]

    def nodes_made(self, run_id: str) -> list[NodeInfo]:
        """Every node the provider holds for the run, ended ones included."""
        return self.inner.list(run_id)

    def untracked(self, run_id: str, known: Iterable[str]) -> list[str]:
        """Nodes the provider made for the run that ``known`` (e.g. the ledger's node ids) lacks: a node
        launched behind the caller's back, as a second launch after an unknown outcome would make."""
        known = set(known)
        return [n.node_id for n in self.inner.list(run_id) if n.node_id not in known]

    def made_per_offer(self, run_id: str) -> Counter:
        return Counter(n.offer_id for n in self.inner.list(run_id))

    def leaked(self, run_id: str) -> list[str]:
        """Nodes of the run still running."""
        return [n.node_id for n in self.inner.list(run_id) if not n.ended]

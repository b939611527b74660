"""Harnesses for the provider contract suite: one per Provider implementation.

A harness wraps a provider with what the suite needs to check it from the outside: a second
instance on the same backend state (a restarted launcher, ``geotrain stop`` in another process),
how many nodes the backend really holds, whether a node's processes are gone, and a way to kill a
node behind the provider's back. A cloud provider plugs in by adding a harness factory to
``HARNESSES`` (e.g. one driving moto or a local HTTP fake).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from geotrain.domain import Location, Market
from geotrain.providers.base import LaunchRequest, NodeInfo, Provider
from geotrain.procs import group_alive
from geotrain.providers.local import AGENT_MODULE, AGENT_PID_FILE, LocalProvider
from tests.perf_helpers import US, offer


@dataclass
class Harness:
    name: str
    make: Callable[[], Provider]  # a new provider instance on the same backend state
    backend_nodes: Callable[[], int]  # nodes the backend really runs (not what the provider says)
    node_gone: Callable[[Provider, NodeInfo], bool]  # nothing of the node runs any more
    kill_behind_back: Callable[[Provider, NodeInfo], None]  # the node dies without the provider
    provider: Provider = field(init=False)
    instances: list[Provider] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    location: Location = US  # where the harness's offers are (a cloud provider launches only its own cloud's)

    def __post_init__(self) -> None:
        self.provider = self.new_instance()

    def new_instance(self) -> Provider:
        provider = self.make()
        self.instances.append(provider)
        return provider

    def new_run(self) -> str:
        run_id = f"run-{uuid.uuid4().hex[:8]}"
        self.runs.append(run_id)
        return run_id

    def request(self, run_id: str, n: int = 0, *, market: Market = Market.SPOT) -> LaunchRequest:
        test_offer = offer(self.location, market=market)
        return LaunchRequest(f"{run_id}/{test_offer.offer_id}/{n}", run_id, test_offer)


# -- local provider ------------------------------------------------------------------------------


def _agent_pids(home: Path) -> list[int]:
    """Live (non-zombie) local node agents whose node directory lies under ``home``."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        state = stat[stat.rindex(")") + 2]
        args = [a.decode(errors="replace") for a in cmdline]
        if state not in "ZX" and AGENT_MODULE in args and any(a.startswith(str(home)) for a in args):
            pids.append(int(name))
    return pids


def _local_pgid(provider: Provider, node: NodeInfo) -> int:
    provider = getattr(provider, "inner", provider)  # a FakeProvider wraps a local one
    assert isinstance(provider, LocalProvider)
    return int((provider.node_dir(node.node_id) / AGENT_PID_FILE).read_text())


def _local_gone(provider: Provider, node: NodeInfo) -> bool:
    """Nothing of the node's group runs. (A process orphaned by an agent killed alone is reparented to
    init and killed with the group; it stays a zombie until init reaps it, which a container's init
    may never do: zombies do not run.)"""
    return not group_alive(_local_pgid(provider, node))


def _local_kill(provider: Provider, node: NodeInfo) -> None:
    os.killpg(_local_pgid(provider, node), signal.SIGKILL)


def local_harness(home: Path) -> Harness:
    made = []

    def make() -> Provider:
        # The first instance finds GEOTRAIN_HOME at call time, later ones are given it: both ways.
        made.append(None)
        return LocalProvider() if len(made) == 1 else LocalProvider(home)

    return Harness(
        name="local",
        make=make,
        backend_nodes=lambda: len(_agent_pids(home)),
        node_gone=_local_gone,
        kill_behind_back=_local_kill,
    )


def fake_harness(home: Path) -> Harness:
    """geotrain.testing.FakeProvider with no fault armed: the wrapper keeps the contract too."""
    from geotrain.testing import FakeProvider

    local = local_harness(home)
    local.name = "fake"
    local.make = lambda: FakeProvider(home=home)
    local.instances.clear()
    local.provider = local.new_instance()
    return local


def _cloud(module: str, factory: str) -> Callable[[Path], Harness]:
    def make(home: Path) -> Harness:
        import importlib

        return getattr(importlib.import_module(f"tests.contract.{module}"), factory)(home)

    return make


HARNESSES: dict[str, Callable[[Path], Harness]] = {
    "local": local_harness, "fake": fake_harness,
    "aws": _cloud("harness_aws", "make_aws_harness"),  # boto3 against moto server, instances booted as local VMs
    "onprem": _cloud("harness_onprem", "make_onprem_harness"),  # ssh to a real sshd on loopback
    "gcp": _cloud("harness_gcp", "make_gcp_harness"),  # google-cloud-compute against the Compute Engine fake
    "azure": _cloud("harness_azure", "make_azure_harness"),  # azure-mgmt-* against the ARM fake
}


def _provided(name: str, home: Path) -> Iterator[Harness]:
    """Harness ``name``; every node of the test's runs is terminated at teardown."""
    h = HARNESSES[name](home)
    try:
        yield h
    finally:
        cleaner = h.new_instance()
        for run_id in h.runs:
            for node in cleaner.list(run_id):
                cleaner.terminate(node.node_id)
        deadline = time.monotonic() + 5
        while h.backend_nodes() and time.monotonic() < deadline:
            time.sleep(0.01)
        left = h.backend_nodes()
        for instance in h.instances:
            with contextlib.suppress(Exception):
                instance.close()  # type: ignore[attr-defined]
        for close in (getattr(h, "teardown", None), getattr(h, "close", None)):  # a cloud harness's fake
            if callable(close):
                close()
        assert left == 0, "nodes left behind after terminating every node of the test's runs"


@pytest.fixture(params=sorted(HARNESSES))
def harness(request: pytest.FixtureRequest, geotrain_home: Path) -> Iterator[Harness]:
    """A provider under test."""
    yield from _provided(request.param, geotrain_home)


PROCESS_HARNESSES = ("fake", "local")  # their nodes are process groups on this machine; preemptions can be injected


@pytest.fixture(params=PROCESS_HARNESSES)
def process_harness(request: pytest.FixtureRequest, geotrain_home: Path) -> Iterator[Harness]:
    """A provider whose nodes are this machine's processes: the promises about those processes and
    injected preemptions."""
    yield from _provided(request.param, geotrain_home)


def wait_until(predicate: Callable[[], bool], timeout_s: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.01)

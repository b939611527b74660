"""The local provider with a node network that holds its nodes to CPU shares (``launch --emulate-wan``):
the agent is handed to the network before it starts anything, and a node whose agent cannot be held
is not launched, leaves no process and no namespace behind."""

from __future__ import annotations

import pytest

from geotrain.errors import ProviderError
from geotrain.procs import pid_alive
from geotrain.providers.base import LaunchRequest
from geotrain.providers.local import LocalProvider
from tests.perf_helpers import US, offer


class Network:
    """A node network that makes no namespace (the agent runs here) and records what it is asked."""

    def __init__(self, refuse: bool) -> None:
        self.refuse = refuse
        self.attached: list[str] = []
        self.held: dict[str, int] = {}
        self.detached: list[str] = []

    def attach(self, node_id, location):  # noqa: ANN001, ANN201
        self.attached.append(node_id)

    def hold(self, node_id: str, pid: int) -> None:
        self.held[node_id] = pid
        if self.refuse:
            raise ProviderError(f"cannot put process {pid} into the cpu control group of {node_id}")

    def prefix(self, node_id: str) -> list[str]:
        return []

    def env(self, node_id: str) -> dict[str, str]:
        return {}

    def has(self, node_id: str) -> bool:
        return node_id in self.attached and node_id not in self.detached

    def kill(self, node_id: str) -> None:
        pass

    def detach(self, node_id: str) -> None:
        self.detached.append(node_id)


def _request(n: int = 0) -> LaunchRequest:
    o = offer(US)
    return LaunchRequest(f"run-cpu/{o.offer_id}/{n}", "run-cpu", o)


def test_the_agent_is_held_before_it_runs_anything(tmp_path):
    network = Network(refuse=False)
    provider = LocalProvider(tmp_path, network=network)
    node = provider.launch(_request())
    try:
        assert network.held == {node.node_id: network.held[node.node_id]}
        assert int((tmp_path / "providers/local/nodes" / node.node_id / "agent.pid").read_text()) == \
            network.held[node.node_id]  # the agent itself: what it starts inherits its group
    finally:
        provider.terminate(node.node_id)


def test_a_node_that_cannot_be_held_is_not_launched_and_leaves_nothing(tmp_path):
    network = Network(refuse=True)
    provider = LocalProvider(tmp_path, network=network)
    with pytest.raises(ProviderError, match="cpu control group"):
        provider.launch(_request())
    (node_id,) = network.attached
    assert network.detached == [node_id]
    pid = network.held[node_id]
    assert not pid_alive(pid)  # killed and reaped
    assert provider.list("run-cpu") == []

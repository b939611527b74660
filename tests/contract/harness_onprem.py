"""The provider contract's harness for the on-prem provider: a real OpenSSH server on loopback
(tests.fakes.sshd) stands for the user's machines, 127.0.0.5 .. 127.0.0.8, and the real node agent
(geotrain.node.agent, this checkout's Python) runs on them, started over SSH. ``start()`` therefore
works end to end (commands run through the agent's HTTP API), as on a real site.

Register it in ``tests/contract/conftest.py``::

    from tests.contract.harness_onprem import make_onprem_harness
    HARNESSES["onprem"] = make_onprem_harness

Teardown: one sshd serves every harness of the test process (started on first use, stopped at exit
by ``atexit``); each harness keeps its machines' node directories under its ``home``, so tests never
see each other's nodes. The suite's own teardown terminates the test's nodes and checks
``backend_nodes() == 0``; ``harness.close()`` (optional) kills whatever node process is left anyway.
``harness.fake`` is the :class:`~tests.fakes.sshd.FakeSSHD`.

The contract suite launches ``tests.perf_helpers.offer(US)`` (a GCP location and instance type): the
harness lists its four "machines" under that region and instance type. The provider keys machines by
(site = region, instance_type) and does not insist on the cloud being ``onprem``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from pathlib import Path

from geotrain.providers.base import NodeInfo, Provider
from geotrain.providers.onprem import Host, OnPremProvider
from tests.contract.conftest import Harness
from tests.fakes.sshd import FakeSSHD, node_processes, start_sshd
from tests.perf_helpers import US, offer

ADDRESSES = ("127.0.0.5", "127.0.0.6", "127.0.0.7", "127.0.0.8")

_server: FakeSSHD | None = None
_server_lock = threading.Lock()


def shared_sshd() -> FakeSSHD:
    """The process's sshd for the harness (raises SSHDMissing, saying to run scripts/ensure_sshd.sh)."""
    global _server
    with _server_lock:
        if _server is None or not _server.alive():
            if _server is not None:
                _server.close()
            _server = start_sshd(ADDRESSES)
            atexit.register(_server.close)
        return _server


def make_onprem_harness(home: Path) -> Harness:
    server = shared_sshd()
    root = Path(home) / "onprem-hosts"
    kind = offer(US).shape.instance_type
    hosts = {(US.region, kind): [Host(a, server.user, server.port, str(server.client_key), sys.executable, str(root))
                                 for a in ADDRESSES]}
    settings = {"known_hosts": server.known_hosts, "ssh_config": "none", "connect_timeout_s": 5.0,
                "agent_ready_timeout_s": 30.0}
    made: list[None] = []

    def make() -> Provider:
        # The first instance finds GEOTRAIN_HOME at call time, later ones are given it: both ways.
        made.append(None)
        return OnPremProvider(hosts, **settings) if len(made) == 1 else \
            OnPremProvider(hosts, home=home, **settings)  # type: ignore[arg-type]

    def node_dir(provider: Provider, node: NodeInfo) -> Path:
        assert isinstance(provider, OnPremProvider)
        return Path(provider.agent_of(node.node_id)["node_dir"])

    def kill(provider: Provider, node: NodeInfo) -> None:  # the machine loses the node: agent and commands
        for pid in node_processes(node_dir(provider, node)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    harness = Harness(
        name="onprem",
        make=make,
        backend_nodes=lambda: sum(1 for what in node_processes(root).values() if what == "agent"),
        node_gone=lambda provider, node: not node_processes(node_dir(provider, node)),
        kill_behind_back=kill,
    )

    def close() -> None:
        for pid in node_processes(root):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    harness.fake = server  # type: ignore[attr-defined]
    harness.close = close  # type: ignore[attr-defined]
    return harness

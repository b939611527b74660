"""The contract harness of the GCP provider: GcpProvider through the real google-cloud-compute clients against
the local Compute Engine fake (``tests.fakes.gcp.GcpComputeFake``), whose instances are local "VMs" of a
``tests.fakes.vms.Hypervisor``: each runs its startup script (an sshd of geotrain's own, for this machine's
user, on the VM's loopback address), so the provider sets the VM up over SSH and ``start()`` works end to
end.

Register with ``HARNESSES["gcp"] = make_gcp_harness`` (tests/contract/conftest.py).

Teardown: each harness starts its own fake server, metadata server and hypervisor (under ``home``). They are
stopped by
``harness.close()`` (an attribute of the returned harness; safe to call twice), and else when the harness
is garbage collected or the test process exits (a ``weakref.finalize``), which also kills any VM left running.
``harness.fake``, ``harness.hypervisor`` and ``harness.metadata`` are there for tests that drive them (e.g.
``harness.fake.preempt(zone, node_id, notice_s=...)``).
The fixture's own teardown (terminate every node of the test's runs) deletes the instances first.

The contract's offers are named ``vm-T4x1`` (tests.perf_helpers.offer), which no GCE zone sells: the fake
runs with ``strict_types = False`` so that any machine type name is accepted.
"""

from __future__ import annotations

import getpass
import weakref
from pathlib import Path

from google.auth.credentials import AnonymousCredentials

from geotrain.providers.base import NodeInfo, Provider
from geotrain.providers.cloudnodes import CloudNodes
from geotrain.providers.gcp import ComputeClients, GcpProvider
from geotrain.providers.remote import AgentChannel
from tests.contract.conftest import Harness
from tests.fakes.gcp import PROJECT, GcpComputeFake
from tests.fakes.metadata import FakeMetadata
from tests.fakes.vms import Hypervisor


# tests.fakes.vms's "VMs" are processes of this machine: their sshd lets in this machine's user
LOOPBACK_NODES = CloudNodes("gcp", node_user=getpass.getuser(), connect_timeout_s=5.0)


def _shutdown(fake: GcpComputeFake, hypervisor: Hypervisor, metadata: FakeMetadata) -> None:
    try:
        fake.stop()
    finally:
        hypervisor.close()
        metadata.stop()


def make_gcp_harness(home: Path) -> Harness:
    metadata = FakeMetadata().start()  # GCP's instance/preempted, for the node agents (fake.preempt notifies it)
    hypervisor = Hypervisor(Path(home) / "gcp-vms", metadata)
    fake = GcpComputeFake(hypervisor=hypervisor, strict_types=False).start()
    made: list[None] = []

    def make() -> Provider:
        # The first instance finds GEOTRAIN_HOME at call time, later ones are given it: both ways.
        made.append(None)
        clients = ComputeClients.build(AnonymousCredentials(), api_endpoint=fake.url)
        return GcpProvider(PROJECT, clients=clients, home=None if len(made) == 1 else home,
                           control_cidr="127.0.0.0/8", channel=AgentChannel(ready_timeout_s=60), poll_s=0.05,
                           nodes=LOOPBACK_NODES)

    def node_gone(provider: Provider, node: NodeInfo) -> bool:
        vms = [vm for vm in hypervisor.vms if vm.endswith(f".{node.node_id}")]
        return fake.find(node.node_id) is None and not any(hypervisor.alive(vm) for vm in vms)

    def kill_behind_back(provider: Provider, node: NodeInfo) -> None:
        found = fake.find(node.node_id)
        assert found is not None, f"{node.node_id} is not an instance of the fake"
        fake.delete_behind_back(found[0], node.node_id)

    harness = Harness(name="gcp", make=make, backend_nodes=lambda: len(fake.instances), node_gone=node_gone,
                      kill_behind_back=kill_behind_back)
    finalizer = weakref.finalize(harness, _shutdown, fake, hypervisor, metadata)
    harness.close = finalizer  # type: ignore[attr-defined]
    harness.fake = fake  # type: ignore[attr-defined]
    harness.hypervisor = hypervisor  # type: ignore[attr-defined]
    harness.metadata = metadata  # type: ignore[attr-defined]
    return harness

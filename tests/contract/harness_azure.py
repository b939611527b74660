"""The Azure provider's contract harness: :class:`geotrain.providers.azure.AzureProvider` through the real
Azure SDK against :class:`tests.fakes.azure_vms.AzureVmFake` on 127.0.0.1, whose VMs a
:class:`tests.fakes.vms.Hypervisor` boots (their custom data runs as a local "VM": geotrain's sshd on the
VM's loopback address, for this machine's user), so ``start`` works end to end over SSH. Its offers are
in :data:`AZURE_LOCATION` (``harness.location``): the provider refuses other clouds' offers.

Teardown: the fake and the hypervisor go when the harness is garbage-collected (a ``weakref.finalize``,
which also runs at interpreter exit); ``harness.teardown()`` does it at once. ``harness.fake`` and
``harness.hypervisor`` are there for tests that want to look.
"""

from __future__ import annotations

import getpass
import shutil
import tempfile
import time
import weakref
from pathlib import Path

from azure.core.credentials import AccessToken, AccessTokenInfo

from geotrain.domain import Continent, Location
from geotrain.providers.azure import AzureProvider
from geotrain.providers.base import NodeInfo, Provider
from geotrain.providers.cloudnodes import CloudNodes
from geotrain.providers.remote import AgentChannel
from tests.contract.conftest import Harness
from tests.fakes.azure_server import FAKE_TOKEN, SUBSCRIPTION_ID
from tests.fakes.azure_vms import AzureVmFake
from tests.fakes.vms import Hypervisor


AZURE_LOCATION = Location("azure", "eastus", "1", Continent.NORTH_AMERICA)


class FakeCredential:
    """A TokenCredential whose token the fake accepts."""

    def get_token(self, *scopes: str, **kwargs: object) -> AccessToken:
        return AccessToken(FAKE_TOKEN, int(time.time()) + 3600)

    def get_token_info(self, *scopes: str, options: object = None) -> AccessTokenInfo:
        return AccessTokenInfo(FAKE_TOKEN, int(time.time()) + 3600)


# tests.fakes.vms's "VMs" are processes of this machine: their sshd lets in this machine's user
LOOPBACK_NODES = CloudNodes("azure", node_user=getpass.getuser(), connect_timeout_s=5.0)


def azure_provider(fake: AzureVmFake, home: Path | None, **settings: object) -> AzureProvider:
    """A provider on ``fake`` as the tests build it: from_environment with the fake's endpoint and token,
    the SSH port open to 127.0.0.0/8 and the loopback VMs' node user (give ``nodes`` for other VMs)."""
    options: dict[str, object] = dict(credential=FakeCredential(), subscription_id=SUBSCRIPTION_ID, arm_url=fake.url,
                                      enforce_https=False, retry_total=0, request_timeout_s=10.0,
                                      control_cidr="127.0.0.0/8", polling_interval_s=0.0, launch_timeout_s=30.0,
                                      delete_timeout_s=30.0, nodes=LOOPBACK_NODES,
                                      channel=AgentChannel(ready_timeout_s=60.0))
    if home is not None:
        options["home"] = home
    options.update(settings)
    return AzureProvider.from_environment(**options)


def _stop(fake: AzureVmFake, hypervisor: Hypervisor, root: Path) -> None:
    hypervisor.close()
    fake.stop()
    shutil.rmtree(root, ignore_errors=True)


def make_azure_harness(home: Path) -> Harness:
    root = Path(tempfile.mkdtemp(prefix="gt-azure-vms-"))
    hypervisor = Hypervisor(root)
    fake = AzureVmFake(regions=set(), hypervisor=hypervisor).start()
    made: list[None] = []

    def make() -> Provider:
        # The first instance finds GEOTRAIN_HOME at call time, later ones are given it: both ways.
        made.append(None)
        return azure_provider(fake, None if len(made) == 1 else home)

    def node_gone(provider: Provider, node: NodeInfo) -> bool:
        return fake.vm(node.node_id) is None and not hypervisor.alive(node.node_id)

    def kill_behind_back(provider: Provider, node: NodeInfo) -> None:
        fake.delete_behind_back(node.node_id)  # someone deletes the VM in the portal

    harness = Harness(name="azure", make=make, backend_nodes=lambda: len(fake.vms()), node_gone=node_gone,
                      kill_behind_back=kill_behind_back)
    harness.location = AZURE_LOCATION  # the provider launches Azure offers only
    finalizer = weakref.finalize(harness, _stop, fake, hypervisor, root)
    harness.fake = fake  # type: ignore[attr-defined]
    harness.hypervisor = hypervisor  # type: ignore[attr-defined]
    harness.teardown = finalizer  # type: ignore[attr-defined]
    return harness

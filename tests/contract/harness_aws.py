"""The AWS provider's contract harness: :class:`geotrain.providers.aws.AwsProvider` through real boto3
clients against :class:`tests.fakes.aws.FakeAws` (moto server on 127.0.0.1), whose instances a
:class:`tests.fakes.vms.Hypervisor` boots (their user data runs as a local "VM" with the node agent, a
:class:`tests.fakes.metadata.FakeMetadata` as its instance metadata), so ``start`` works end to end.

The harness is an :class:`AwsHarness`: its ``request`` launches AWS offers (``tests.perf_helpers.AWS_US``,
us-west-2 / usw2-az1, instance type ``vm-T4x1``, which moto accepts as it validates no types), since the
AWS provider refuses offers of other clouds; ``location`` says which.

Backend: ``backend_nodes`` counts the instances this fake made that moto holds as pending or running;
``node_gone``: the VM's processes are gone and AWS shows the instance ended (or no longer lists it);
``kill_behind_back``: a plain ``terminate_instances`` by another boto3 client (the console, another
tool), which the provider must see as "lost".

Teardown: the fake, the metadata server and the hypervisor go when the harness is garbage-collected (a
``weakref.finalize``, which also runs at interpreter exit); ``harness.teardown()`` does it at once.
``harness.fake``, ``harness.hypervisor`` and ``harness.metadata`` are there for tests that want to look
(e.g. ``harness.fake.vms.reclaim(node_id)``, a spot reclaim).
"""

from __future__ import annotations

import getpass
import shutil
import tempfile
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from geotrain.domain import Location, Market
from geotrain.providers.aws import AwsProvider
from geotrain.providers.base import LaunchRequest, NodeInfo, Provider
from geotrain.providers.cloudnodes import CloudNodes
from geotrain.providers.remote import AgentChannel
from tests.contract.conftest import Harness
from tests.fakes.aws import FakeAws
from tests.fakes.metadata import FakeMetadata
from tests.fakes.vms import Hypervisor
from tests.perf_helpers import AWS_US, offer


def aws_client(fake: FakeAws, service: str, region: str) -> Any:
    return boto3.client(service, region_name=region, endpoint_url=fake.endpoint_url,
                        config=Config(retries={"total_max_attempts": 1}, connect_timeout=5, read_timeout=30),
                        aws_access_key_id="testing", aws_secret_access_key="testing")


# tests.fakes.vms's "VMs" are processes of this machine: their sshd lets in this machine's user
LOOPBACK_NODES = CloudNodes("aws", node_user=getpass.getuser(), connect_timeout_s=5.0)


def aws_provider(fake: FakeAws, home: Path | None, **settings: Any) -> AwsProvider:
    """A provider on ``fake`` as the tests build it (the SSH port open to 127.0.0.0/8)."""
    settings.setdefault("control_cidr", "127.0.0.0/8")
    settings.setdefault("channel", AgentChannel(ready_timeout_s=60.0))
    settings.setdefault("nodes", LOOPBACK_NODES)
    return AwsProvider(lambda service, region: aws_client(fake, service, region), home=home, **settings)


@dataclass
class AwsHarness(Harness):
    location: Location = field(default=AWS_US)

    def request(self, run_id: str, n: int = 0, *, market: Market = Market.SPOT) -> LaunchRequest:
        test_offer = offer(self.location, market=market)
        return LaunchRequest(f"{run_id}/{test_offer.offer_id}/{n}", run_id, test_offer)


def _stop(fake: FakeAws, hypervisor: Hypervisor, metadata: FakeMetadata, root: Path) -> None:
    hypervisor.close()
    fake.stop()
    metadata.stop()
    shutil.rmtree(root, ignore_errors=True)


def make_aws_harness(home: Path) -> Harness:
    root = Path(tempfile.mkdtemp(prefix="gt-aws-vms-"))
    metadata = FakeMetadata().start()
    hypervisor = Hypervisor(root, metadata)
    fake = FakeAws(hypervisor=hypervisor)
    other = aws_client(fake, "ec2", AWS_US.region)  # someone else's client
    made: list[None] = []

    def make() -> Provider:
        # The first instance finds GEOTRAIN_HOME at call time, later ones are given it: both ways.
        made.append(None)
        return aws_provider(fake, None if len(made) == 1 else home)

    def node_gone(provider: Provider, node: NodeInfo) -> bool:
        try:
            state = fake.vms.instance(node.node_id).state
        except KeyError:
            state = "gone"
        return state not in ("pending", "running") and not hypervisor.alive(node.node_id)

    def kill_behind_back(provider: Provider, node: NodeInfo) -> None:
        other.terminate_instances(InstanceIds=[node.node_id])

    harness = AwsHarness(name="aws", make=make, backend_nodes=fake.vms.live, node_gone=node_gone,
                         kill_behind_back=kill_behind_back)
    finalizer = weakref.finalize(harness, _stop, fake, hypervisor, metadata, root)
    harness.fake = fake  # type: ignore[attr-defined]
    harness.hypervisor = hypervisor  # type: ignore[attr-defined]
    harness.metadata = metadata  # type: ignore[attr-defined]
    harness.teardown = finalizer  # type: ignore[attr-defined]
    return harness

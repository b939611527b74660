"""End to end on two clouds: plan → launch on AWS and GCP in one run → an instance terminated behind the
launcher's back → detected → re-planned → a replacement launched → the run completes; nothing is left
running, and the ledger and the cost report show every instance.

The clouds are the real SDKs (boto3, google-cloud-compute) against the local fakes (moto server, the
Compute Engine fake); each instance the fakes make runs its startup script as a local "VM"
(``tests.fakes.vms``), so the node agent, the training workers and their gloo traffic are real
processes on loopback addresses of their own.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import boto3
import pytest
from google.auth.credentials import AnonymousCredentials

from geotrain.billing import run_cost
from geotrain.domain import JobSpec, Objective, SyncSettings, SyncStrategyName
from geotrain.launcher.loop import Launcher
from geotrain.launcher.options import LaunchOptions
from geotrain.ledger import EventKind, Ledger
from geotrain.planning.planner import PlanOptions, plan_for_nodes
from geotrain.pricing.snapshot import bundled_snapshot
from geotrain.providers.base import NodeState
from geotrain.providers.gcp import ComputeClients, GcpProvider
from geotrain.providers.registry import Router
from geotrain.providers.remote import AgentChannel
from tests.contract.harness_aws import aws_provider
from tests.contract.harness_gcp import LOOPBACK_NODES as GCP_LOOPBACK_NODES
from tests.fakes.aws import FakeAws
from tests.fakes.gcp import PROJECT, GcpComputeFake
from tests.fakes.metadata import FakeMetadata
from tests.fakes.vms import Hypervisor

pytestmark = pytest.mark.slow

# local SGD over two clouds in Oregon: the pair trains ~102 samples/s by the perf model, one node alone ~81,
# so losing one calls for a replacement
NODES = "aws/usw2-az1/g4dn.xlarge=1,gcp/us-west1-b/n1-standard-8+T4=1"
STEPS = 48


@pytest.fixture
def clouds(tmp_path: Path, geotrain_home: Path):  # noqa: ANN201
    metadata = FakeMetadata().start()
    hypervisor = Hypervisor(tmp_path / "vms", metadata)
    aws = FakeAws(hypervisor=hypervisor)
    gcp = GcpComputeFake(hypervisor=hypervisor).start()
    try:
        yield aws, gcp, hypervisor
    finally:
        hypervisor.close()
        aws.stop()
        gcp.stop()
        metadata.stop()


def router(aws: FakeAws, gcp: GcpComputeFake, home: Path) -> Router:
    channel = AgentChannel(ready_timeout_s=60)
    gcp_provider = GcpProvider(PROJECT, clients=ComputeClients.build(AnonymousCredentials(), api_endpoint=gcp.url),
                               control_cidr="127.0.0.0/8", channel=channel, poll_s=0.05, nodes=GCP_LOOPBACK_NODES)
    return Router({"aws": aws_provider(aws, None, channel=channel), "gcp": gcp_provider})


def plan():  # noqa: ANN201
    job = JobSpec("two-clouds", "convnext-large", Objective.MIN_COST, target_samples_per_s=10,
                  sync=SyncSettings(SyncStrategyName.LOCAL_SGD, local_steps=8))  # averaged as often as saved
    return plan_for_nodes(job, bundled_snapshot(), NODES, options=PlanOptions(frontier_points=0))


def test_a_run_on_aws_and_gcp_survives_an_instance_terminated_behind_its_back(clouds, tmp_path, geotrain_home):
    aws, gcp, hypervisor = clouds
    the_plan = plan()
    assert {i.offer.location.cloud for i in the_plan.items} == {"aws", "gcp"}
    provider = router(aws, gcp, geotrain_home)
    # the fake VMs have no T4: they train the built-in stand-in (a recorded substitution) on the CPU
    options = LaunchOptions(train_workload="tiny-cnn", steps=STEPS, checkpoint_every=8, progress_every=2, block_s=600,
                            checkpoint_url=str(tmp_path / "ckpt"), control_address="127.0.0.1", backoff_s=0.05)
    launcher = Launcher(the_plan, provider, options=options)
    run_id = launcher.start()
    killed: list[str] = []

    def saboteur() -> None:  # someone else's client terminates the AWS instance once training is under way
        ledger = Ledger()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            last = ledger.last_progress(run_id)
            if last is not None and last.step >= 12:
                break
            time.sleep(0.1)
        instance = next(n for n in provider.list(run_id) if n.location.cloud == "aws" and not n.ended)
        ec2 = boto3.client("ec2", region_name="us-west-2", endpoint_url=aws.endpoint_url,
                           aws_access_key_id="testing", aws_secret_access_key="testing")
        ec2.terminate_instances(InstanceIds=[instance.node_id])
        killed.append(instance.node_id)

    thread = threading.Thread(target=saboteur, daemon=True)
    thread.start()
    outcome = launcher.run()
    thread.join(timeout=5)
    assert outcome.status == "completed", outcome
    assert killed, "the instance was not terminated behind the launcher's back"

    # the instances: made in the planned zones with spot options and the startup script
    reservations = boto3.client("ec2", region_name="us-west-2", endpoint_url=aws.endpoint_url,
                                aws_access_key_id="testing", aws_secret_access_key="testing").describe_instances(
        Filters=[{"Name": "tag:geotrain-run", "Values": [run_id]}])["Reservations"]
    instances = [i for r in reservations for i in r["Instances"]]
    assert instances and all(i["InstanceLifecycle"] == "spot" for i in instances)
    ledger = Ledger()
    nodes = {n.node_id: n for n in ledger.nodes(run_id)}
    lost = nodes[killed[0]]
    assert lost.end_reason == "lost"
    events = [(e.kind, {k: v for k, v in e.detail.items() if k != "offers"}) for e in ledger.events(run_id)]
    assert len(nodes) >= 3, f"no replacement was launched: {events}"
    assert ledger.events(run_id, kinds=(EventKind.REPLANNED,)) or ledger.events(run_id, kinds=(EventKind.FELL_BACK,))
    assert {n.offer_id.split("/")[0] for n in nodes.values()} == {"aws", "gcp"}

    # the workers' records came through the launcher's store (their environment has no GEOTRAIN_HOME)
    assert ledger.progress_rows(run_id)[-1].step == STEPS
    assert ledger.events(run_id, kinds=(EventKind.CHECKPOINT_SAVED,)) and ledger.events(
        run_id, kinds=(EventKind.CHECKPOINT_RESTORED,)), events
    assert ledger.events(run_id, kinds=(EventKind.TRAINING_FINISHED,))
    assert cost.nodes if (cost := run_cost(ledger, run_id)) else False

    # nothing is left running: every node ended in the provider, every VM's processes gone
    assert all(n.state.ended for n in provider.list(run_id))
    assert all(n.ended_at is not None for n in nodes.values())
    assert hypervisor.running() == []

    # the cost report bills every instance the ledger knows
    cost = run_cost(ledger, run_id)
    assert {u.node_id for u in cost.nodes} == set(nodes)
    assert cost.total_usd > 0 and set(cost.by(lambda i: i.cloud)) >= {"aws", "gcp"}
    assert [n for n in provider.list(run_id) if n.state == NodeState.RUNNING] == []

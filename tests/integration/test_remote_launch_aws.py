"""A SkyPilot task on AWS spot VMs, launched as a user would (`geotrain plan` and `geotrain launch`
in processes of their own, boto3 against the AWS fake through AWS_ENDPOINT_URL) from a launcher behind
NAT. Each VM is a faithful remote host (tests/fakes/cloudhosts.py): its user data runs as root there
and starts only geotrain's sshd; it has an image with torch but no geotrain, cannot read the
launcher's files nor connect to it, and is reached at its public address only where its security
group lets the launcher in.

The launcher ships geotrain over SSH, copies the workdir and file mount, and runs torchrun DDP across
two VMs in two regions (two VPCs): each VM's user data puts its public address (from its metadata
service) on an interface of its own, the workers bind it (GLOO_SOCKET_IFNAME), and each region's
security group admits the other VM's public address /32. One VM gets AWS's two-minute spot notice
(here a few seconds) through its metadata service: the script checkpoints, the VM is reclaimed, the
launcher launches a replacement and the task resumes from the checkpoint, in a share that every VM
mounts (tests/remote_task.py; EFS is one region's: across regions it stands for object storage). The
run completes, and nothing is left running.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

from geotrain.ledger import EventKind, Ledger
from tests.fakes import hosts as H
from tests.fakes.aws import FakeAws
from tests.fakes.cloudhosts import HostHypervisor
from tests.remote_task import (
    check_resumed_and_done, check_setup_failed, faithful_cloud, launch_failing_setup, plan_and_launch, user_folder,
)

pytestmark = pytest.mark.slow

TWO_REGIONS = "aws/use1-az1/g4dn.xlarge,aws/usw2-az1/g4dn.xlarge"  # two VPCs: the nodes meet at public addresses
EFS = "/mnt/efs"  # where every VM mounts the shared file system (the launcher does not)


@pytest.fixture
def cloud() -> Iterator[tuple[H.World, HostHypervisor, FakeAws, Path]]:
    with faithful_cloud(EFS) as (world, hv, share), FakeAws(hypervisor=hv) as fake:
        yield world, hv, fake, share


def reclaim(hv: HostHypervisor, aws: FakeAws, first: list[str]) -> None:
    """Check the first generation's two VMs (two regions, each holding its public address, each admitting
    the other's), then have AWS take one back, with notice."""
    assert {hv.regions[vm] for vm in first} == {("aws", "us-east-1"), ("aws", "us-west-2")}
    for vm in first:
        assert f"geotrain: public address {hv.addresses[vm]} on gtpub" in hv.console(vm), hv.console(vm)
        others = {f"{hv.addresses[o]}/32" for o in first if o != vm}
        assert others <= {r.source_cidr for r in hv.rules(vm)}, hv.rules(vm)
    aws.vms.reclaim(first[1], notice_s=4.0)


def test_a_task_trains_on_spot_vms_behind_their_firewall_and_survives_a_reclaim(cloud, tmp_path: Path) -> None:
    world, hv, aws, share = cloud
    work = user_folder(tmp_path, "infra: aws\naccelerators: T4:1\nuse_spot: true\n", "the bucket's data\n")
    env = {**os.environ, "AWS_ENDPOINT_URL": aws.endpoint_url, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    env.pop("COLUMNS", None)
    launched = plan_and_launch(
        work, env, ["--nodes", TWO_REGIONS], ["--provider", "aws", "--checkpoint-url", f"file://{EFS}/checkpoints",
                        "--control-address", world.launcher_public],
        event=lambda run_id, first: reclaim(hv, aws, first),
        checkpoints=share / "checkpoints")
    print(f"\nboot (VM, sshd, ship + install, agent, setup) to first step: {launched.first_step_s:.1f} s; "
          f"notice to completion: {launched.after_event_s:.1f} s")
    check_resumed_and_done(launched, "the bucket's data")
    events = Ledger().events(launched.run_id)
    assert any(e.kind == EventKind.PREEMPTED and e.node_id == launched.first_nodes[1] for e in events)
    assert "preemption notice, checkpointed step" in launched.logs()
    regions = set()
    for region in ("us-east-1", "us-west-2"):
        ec2 = boto3.client("ec2", region_name=region, endpoint_url=aws.endpoint_url, aws_access_key_id="testing",
                           aws_secret_access_key="testing", config=Config(retries={"max_attempts": 1}))
        states = [i["State"]["Name"] for r in ec2.describe_instances(Filters=[
            {"Name": "tag:geotrain-run", "Values": [launched.run_id]}])["Reservations"] for i in r["Instances"]]
        assert set(states) <= {"terminated", "shutting-down"}, states  # nothing left running
        regions |= {region} if states else set()
    assert regions == {"us-east-1", "us-west-2"}  # the run had nodes in both


def test_a_failed_setup_ends_the_run_at_once_with_exit_5_and_no_vm_left(cloud, tmp_path: Path) -> None:
    world, hv, aws, share = cloud
    env = {**os.environ, "AWS_ENDPOINT_URL": aws.endpoint_url, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    env.pop("COLUMNS", None)
    done, took = launch_failing_setup(tmp_path, "infra: aws\naccelerators: T4:1\nuse_spot: true\n", env,
                                      ["--nodes", TWO_REGIONS], ["--provider", "aws", "--checkpoint-url",
                                                                 f"file://{EFS}/checkpoints", "--control-address",
                                                                 world.launcher_public])
    print(f"\nlaunch to exit 5 (boot, ship, failed setup, release): {took:.1f} s")
    run_id = check_setup_failed(done)
    for region in ("us-east-1", "us-west-2"):
        ec2 = boto3.client("ec2", region_name=region, endpoint_url=aws.endpoint_url, aws_access_key_id="testing",
                           aws_secret_access_key="testing", config=Config(retries={"max_attempts": 1}))
        states = [i["State"]["Name"] for r in ec2.describe_instances(Filters=[
            {"Name": "tag:geotrain-run", "Values": [run_id]}])["Reservations"] for i in r["Instances"]]
        assert set(states) <= {"terminated", "shutting-down"}, states

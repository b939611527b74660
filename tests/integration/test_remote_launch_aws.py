"""A SkyPilot task on AWS spot VMs, launched as a user would (`geotrain plan` and `geotrain launch`
in processes of their own, boto3 against the AWS fake through AWS_ENDPOINT_URL) from a launcher behind
NAT. Each VM is a faithful remote host (tests/fakes/cloudhosts.py): its user data runs as root there
and starts only geotrain's sshd; it has an image with torch but no geotrain, cannot read the
launcher's files nor connect to it, and is reached at its public address only where its security
group lets the launcher in.

The launcher ships geotrain over SSH, copies the workdir and file mount, and runs torchrun DDP across
two VMs of one VPC (their private addresses). One VM gets AWS's two-minute spot notice (here a few
seconds) through its metadata service: the script checkpoints, the VM is reclaimed, the launcher
launches a replacement in another zone and the task resumes from the checkpoint, in an EFS-like share
that every VM mounts (tests/remote_task.py). The run completes, and nothing is left running.
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
from tests.remote_task import check_resumed_and_done, faithful_cloud, plan_and_launch, user_folder

pytestmark = pytest.mark.slow

EFS = "/mnt/efs"  # where every VM mounts the shared file system (the launcher does not)


@pytest.fixture
def cloud() -> Iterator[tuple[H.World, HostHypervisor, FakeAws, Path]]:
    with faithful_cloud(EFS) as (world, hv, share), FakeAws(hypervisor=hv) as fake:
        yield world, hv, fake, share


def test_a_task_trains_on_spot_vms_behind_their_firewall_and_survives_a_reclaim(cloud, tmp_path: Path) -> None:
    world, hv, aws, share = cloud
    work = user_folder(tmp_path, "infra: aws/us-east-1\naccelerators: T4:1\nuse_spot: true\n", "the bucket's data\n")
    env = {**os.environ, "AWS_ENDPOINT_URL": aws.endpoint_url, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    env.pop("COLUMNS", None)
    launched = plan_and_launch(
        work, env, [], ["--provider", "aws", "--checkpoint-url", f"file://{EFS}/checkpoints",
                        "--control-address", world.launcher_public],
        event=lambda run_id, first: aws.vms.reclaim(first[1], notice_s=4.0),  # AWS takes the VM back, with notice
        checkpoints=share / "checkpoints")
    print(f"\nboot (VM, sshd, ship + install, agent, setup) to first step: {launched.first_step_s:.1f} s; "
          f"notice to completion: {launched.after_event_s:.1f} s")
    check_resumed_and_done(launched, "the bucket's data")
    events = Ledger().events(launched.run_id)
    assert any(e.kind == EventKind.PREEMPTED and e.node_id == launched.first_nodes[1] for e in events)
    assert "preemption notice, checkpointed step" in launched.logs()
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=aws.endpoint_url, aws_access_key_id="testing",
                       aws_secret_access_key="testing", config=Config(retries={"max_attempts": 1}))
    states = [i["State"]["Name"] for r in ec2.describe_instances(Filters=[
        {"Name": "tag:geotrain-run", "Values": [launched.run_id]}])["Reservations"] for i in r["Instances"]]
    assert states and set(states) <= {"terminated", "shutting-down"}, states  # nothing left running

"""A SkyPilot task on spot VMs of two clouds at once, AWS (boto3 against the AWS fake) and GCP
(google-cloud-compute against the Compute Engine fake), launched as a user would (`geotrain plan --nodes`
and `geotrain launch --provider aws,gcp` in processes of their own) from a launcher behind NAT, on
faithful remote hosts (tests/fakes/cloudhosts.py) of one world.

The two VMs are in two networks (an AWS VPC, the GCP network): each binds its public address (from its
metadata service) on an interface of its own, the workers meet there (GLOO_SOCKET_IFNAME), and each cloud's
firewall admits the other VM's public address /32 (the AWS group's rule, the GCP run's ``-public`` rule).
The GCP VM is preempted; the launcher launches a replacement and the task resumes from the checkpoint, in a
share every VM mounts (standing in for object storage). The run completes, and nothing is left running.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes import hosts as H
from tests.fakes.aws import FakeAws
from tests.fakes.cloudhosts import HostHypervisor
from tests.fakes.gcp import PROJECT, GcpComputeFake
from tests.remote_task import check_resumed_and_done, faithful_cloud, plan_and_launch, user_folder

pytestmark = pytest.mark.slow

TWO_CLOUDS = "aws/usw2-az1/g4dn.xlarge,gcp/us-west1-b/n1-standard-8+T4"
SHARE = "/mnt/share"


@pytest.fixture
def clouds() -> Iterator[tuple[H.World, HostHypervisor, FakeAws, GcpComputeFake, Path]]:
    with faithful_cloud(SHARE) as (world, hv, share), FakeAws(hypervisor=hv) as aws, \
            GcpComputeFake(hypervisor=hv) as gcp:
        yield world, hv, aws, gcp, share


def test_a_task_trains_across_two_clouds_at_their_public_addresses_and_survives_a_preemption(
        clouds, tmp_path: Path) -> None:
    world, hv, aws, gcp, share = clouds
    work = user_folder(tmp_path, "accelerators: T4:1\nuse_spot: true\n", "the data\n")
    env = {**os.environ, "AWS_ENDPOINT_URL": aws.endpoint_url, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-west-2",
           "GEOTRAIN_GCP_ENDPOINT": gcp.url, "GOOGLE_CLOUD_PROJECT": PROJECT}
    env.pop("COLUMNS", None)

    def preempt(run_id: str, first: list[str]) -> None:
        vms = {name: (gcp.vm_id(gcp.find(name)[0], name) if gcp.find(name) else name) for name in first}
        assert {hv.regions[vm][0] for vm in vms.values()} == {"aws", "gcp"}
        for vm in vms.values():
            assert f"geotrain: public address {hv.addresses[vm]} on gtpub" in hv.console(vm), hv.console(vm)
            others = {f"{hv.addresses[o]}/32" for o in vms.values() if o != vm}
            assert others <= {r.source_cidr for r in hv.rules(vm)}, hv.rules(vm)
        name = next(n for n in first if gcp.find(n))
        gcp.preempt(gcp.find(name)[0], name, notice_s=4.0)

    launched = plan_and_launch(work, env, ["--nodes", TWO_CLOUDS],
                               ["--provider", "aws,gcp", "--checkpoint-url", f"file://{SHARE}/checkpoints",
                                "--control-address", world.launcher_public],
                               event=preempt, checkpoints=share / "checkpoints")
    print(f"\nboot (VMs on two clouds, sshd, ship + install, agent, setup) to first step: {launched.first_step_s:.1f} s; "
          f"notice to completion: {launched.after_event_s:.1f} s")
    check_resumed_and_done(launched, "the data")
    assert not [i["name"] for i in gcp.live_instances() if i["labels"].get("geotrain-run") == launched.run_id]
    assert not hv.running(), hv.running()

"""A SkyPilot task on GCP spot VMs, launched as a user would (`geotrain plan` and `geotrain launch`
in processes of their own, google-cloud-compute against the Compute Engine fake through
GEOTRAIN_GCP_ENDPOINT and GOOGLE_CLOUD_PROJECT) from a launcher behind NAT. Each VM is a faithful remote
host (tests/fakes/cloudhosts.py): its startup-script runs as root there and starts only geotrain's sshd;
it has an image with torch but no geotrain, cannot read the launcher's files nor connect to it, and is
reached at its external address only where the run's firewall rules let the launcher in.

The launcher ships geotrain over SSH, copies the workdir and file mount, and runs torchrun DDP across
two VMs in two regions of one network (a GCP VPC network is global: their private addresses, admitted
by the run's source-tag rule). One VM is
preempted: GCE's `instance/preempted` turns TRUE in its metadata server and, after the notice (GCE's
30 s, here a few), the VM is gone; the launcher launches a replacement and the task resumes from the
checkpoint, in a Filestore-like share that every VM mounts. The run completes, and nothing is left
running.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from geotrain.ledger import EventKind, Ledger
from tests.fakes import hosts as H
from tests.fakes.cloudhosts import HostHypervisor
from tests.fakes.gcp import PROJECT, GcpComputeFake
from tests.remote_task import (
    check_resumed_and_done, check_setup_failed, faithful_cloud, launch_failing_setup, plan_and_launch, user_folder,
)

pytestmark = pytest.mark.slow

TWO_REGIONS = "gcp/us-central1-a/n1-standard-8+T4,gcp/us-west1-b/n1-standard-8+T4"  # one network, two regions
SHARE = "/mnt/filestore"  # where every VM mounts the shared file system (the launcher does not)


@pytest.fixture
def cloud() -> Iterator[tuple[H.World, HostHypervisor, GcpComputeFake, Path]]:
    with faithful_cloud(SHARE) as (world, hv, share), GcpComputeFake(hypervisor=hv) as fake:
        yield world, hv, fake, share


def test_a_task_trains_on_spot_vms_behind_their_firewall_and_survives_a_preemption(cloud, tmp_path: Path) -> None:
    world, hv, gcp, share = cloud
    work = user_folder(tmp_path, "infra: gcp\naccelerators: T4:1\nuse_spot: true\n", "the bucket's data\n")
    env = {**os.environ, "GEOTRAIN_GCP_ENDPOINT": gcp.url, "GOOGLE_CLOUD_PROJECT": PROJECT}
    env.pop("COLUMNS", None)

    def preempt(run_id: str, first: list[str]) -> None:
        found = gcp.find(first[1])
        assert found is not None, first
        # the VMs' private addresses are what GCE reports, and the run's rules admit the launcher to SSH alone
        vms = {name: gcp.vm_id(gcp.find(name)[0], name) for name in first}
        assert {gcp.find(name)[0].rsplit("-", 1)[0] for name in first} == {"us-central1", "us-west1"}  # two regions
        for name, vm in vms.items():
            assert gcp.find(name)[1]["networkInterfaces"][0]["networkIP"] == hv.private_address(vm)
            peers = {f"{hv.private_address(v)}/32" for n, v in vms.items() if n != name}
            assert {(r.source_cidr, r.protocol, r.ports) for r in hv.rules(vm)} >= \
                {(f"{world.launcher_public}/32", "tcp", (7422, 7422))} | {(p, "tcp", (1, 65535)) for p in peers}
        gcp.preempt(found[0], first[1], notice_s=4.0)  # GCE takes the VM back: instance/preempted, then it is gone

    launched = plan_and_launch(work, env, ["--nodes", TWO_REGIONS], ["--provider", "gcp", "--checkpoint-url", f"file://{SHARE}/checkpoints",
                                               "--control-address", world.launcher_public],
                               event=preempt, checkpoints=share / "checkpoints")
    print(f"\nboot (VM, sshd, ship + install, agent, setup) to first step: {launched.first_step_s:.1f} s; "
          f"notice to completion: {launched.after_event_s:.1f} s")
    check_resumed_and_done(launched, "the bucket's data")
    events = Ledger().events(launched.run_id)
    assert any(e.kind == EventKind.PREEMPTED and e.node_id == launched.first_nodes[1] for e in events)
    assert "preemption notice, checkpointed step" in launched.logs()
    assert not [i["name"] for i in gcp.live_instances()
                if i["labels"].get("geotrain-run") == launched.run_id], "nothing left running"
    assert not hv.running(), hv.running()


def test_a_failed_setup_ends_the_run_at_once_with_exit_5_and_no_vm_left(cloud, tmp_path: Path) -> None:
    world, hv, gcp, share = cloud
    env = {**os.environ, "GEOTRAIN_GCP_ENDPOINT": gcp.url, "GOOGLE_CLOUD_PROJECT": PROJECT}
    env.pop("COLUMNS", None)
    done, took = launch_failing_setup(tmp_path, "infra: gcp\naccelerators: T4:1\nuse_spot: true\n", env,
                                      ["--nodes", TWO_REGIONS], ["--provider", "gcp", "--checkpoint-url",
                                                                 f"file://{SHARE}/checkpoints", "--control-address",
                                                                 world.launcher_public])
    print(f"\nlaunch to exit 5 (boot, ship, failed setup, release): {took:.1f} s")
    run_id = check_setup_failed(done)
    assert not [i["name"] for i in gcp.live_instances() if i["labels"].get("geotrain-run") == run_id]
    assert not hv.running(), hv.running()

"""A SkyPilot task on Azure spot VMs, launched as a user would (`geotrain plan` and `geotrain launch` in
processes of their own) from a launcher behind NAT. Each VM is a faithful remote host
(tests/fakes/cloudhosts.py): its custom data runs as root there and starts only geotrain's sshd; it has an
image with torch but no geotrain, cannot read the launcher's files nor connect to it, and is reached at
its public address only where its NSG lets the launcher in.

geotrain's Azure provider reads no ARM endpoint from the environment (DefaultAzureCredential, and
management.azure.com over https), so the launch process is `geotrain launch` whose
``AzureProvider.from_environment`` is given the ARM fake's endpoint and a credential it accepts (see
``LAUNCH``); everything else is the CLI's.

The launcher ships geotrain over SSH, copies the workdir and file mount, and runs torchrun DDP across two
VMs in two regions (two VNets): each binds its public address (from its metadata service) on an interface
of its own, and each region's NSG admits the other VM's public address /32. One VM gets Azure's
Scheduled Events ``Preempt`` notice (30 s on Azure, here a few seconds) through its metadata service: the
script checkpoints, the VM is evicted, the launcher launches a replacement and the task resumes from the
checkpoint, in an Azure-Files-like share that every VM mounts. The run completes, and nothing is left
running.
"""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("azure.mgmt.compute")

from geotrain.ledger import EventKind, Ledger  # noqa: E402
from tests.fakes import hosts as H  # noqa: E402
from tests.fakes.azure_vms import AzureVmFake  # noqa: E402
from tests.fakes.cloudhosts import HostHypervisor  # noqa: E402
from tests.remote_task import (  # noqa: E402
    check_resumed_and_done, check_setup_failed, faithful_cloud, launch_failing_setup, plan_and_launch, user_folder,
)

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
TWO_REGIONS = "azure/eastus/Standard_NC4as_T4_v3,azure/westus2/Standard_NC4as_T4_v3"  # two VNets
SHARE = "/mnt/azfiles"  # where every VM mounts the Azure Files share (the launcher does not)

# `geotrain launch`, its Azure provider pointed at the ARM fake (GEOTRAIN_TEST_ARM_URL)
LAUNCH = textwrap.dedent('''
    import os, sys
    from geotrain.providers.azure import AzureProvider
    from tests.contract.harness_azure import FakeCredential
    from tests.fakes.azure_server import SUBSCRIPTION_ID

    made = AzureProvider.from_environment.__func__

    def from_environment(cls, **settings):
        settings.update(credential=FakeCredential(), subscription_id=SUBSCRIPTION_ID,
                        arm_url=os.environ["GEOTRAIN_TEST_ARM_URL"], enforce_https=False, polling_interval_s=0.5)
        return made(cls, **settings)

    AzureProvider.from_environment = classmethod(from_environment)
    from geotrain.cli import main
    sys.argv[0] = "geotrain"
    main()
''')

@pytest.fixture
def cloud() -> Iterator[tuple[H.World, HostHypervisor, AzureVmFake, Path]]:
    with faithful_cloud(SHARE) as (world, hv, share), AzureVmFake(regions=set(), hypervisor=hv) as fake:
        yield world, hv, fake, share


def test_a_task_trains_on_spot_vms_behind_their_nsg_and_survives_an_eviction(cloud, tmp_path: Path) -> None:
    world, hv, azure, share = cloud
    work = user_folder(tmp_path, "infra: azure\naccelerators: T4:1\nuse_spot: true\n", "the share's data\n")
    env = {**os.environ, "GEOTRAIN_TEST_ARM_URL": azure.url,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("COLUMNS", None)

    def evict(run_id: str, first: list[str]) -> None:
        # the NSG is each VM's firewall: geotrain's SSH port from the launcher, all TCP from the run's nodes
        # in other regions, at their public addresses (each VM holds its own on gtpub)
        assert {hv.regions[vm] for vm in first} == {("azure", "eastus"), ("azure", "westus2")}
        for vm in first:
            assert f"geotrain: public address {hv.addresses[vm]} on gtpub" in hv.console(vm), hv.console(vm)
            rules = {(r.source_cidr, r.protocol, r.ports) for r in hv.rules(vm)}
            other = next(f"{hv.addresses[o]}/32" for o in first if o != vm)
            assert {(f"{world.launcher_public}/32", "tcp", (7422, 7422)), (other, "tcp", (1, 65535))} <= rules, rules
        azure.evict(first[1], notice_s=4.0)  # Azure takes the VM back, with a Scheduled Events notice

    launched = plan_and_launch(work, env, ["--nodes", TWO_REGIONS], ["--provider", "azure", "--checkpoint-url", f"file://{SHARE}/checkpoints",
                                               "--control-address", world.launcher_public],
                               event=evict, checkpoints=share / "checkpoints", geotrain=(sys.executable, "-c", LAUNCH))
    print(f"\nboot (VM, sshd, ship + install, agent, setup) to first step: {launched.first_step_s:.1f} s; "
          f"notice to completion: {launched.after_event_s:.1f} s")
    check_resumed_and_done(launched, "the share's data")
    events = Ledger().events(launched.run_id)
    assert any(e.kind == EventKind.PREEMPTED and e.node_id == launched.first_nodes[1] for e in events)
    assert azure.evictions == [launched.first_nodes[1]]
    assert "preemption notice, checkpointed step" in launched.logs()
    assert [vm["name"] for vm in azure.vms()] == [], "VMs left"  # nothing left running
    assert hv.running() == [], hv.running()


def test_a_failed_setup_ends_the_run_at_once_with_exit_5_and_no_vm_left(cloud, tmp_path: Path) -> None:
    world, hv, azure, share = cloud
    env = {**os.environ, "GEOTRAIN_TEST_ARM_URL": azure.url,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("COLUMNS", None)
    done, took = launch_failing_setup(tmp_path, "infra: azure\naccelerators: T4:1\nuse_spot: true\n", env,
                                      ["--nodes", TWO_REGIONS], ["--provider", "azure", "--checkpoint-url",
                                                                 f"file://{SHARE}/checkpoints", "--control-address",
                                                                 world.launcher_public],
                                      geotrain=(sys.executable, "-c", LAUNCH))
    print(f"\nlaunch to exit 5 (boot, ship, failed setup, release): {took:.1f} s")
    check_setup_failed(done)
    assert [vm["name"] for vm in azure.vms()] == [], "VMs left"
    assert hv.running() == [], hv.running()

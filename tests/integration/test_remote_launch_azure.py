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
VMs of one VNet (their private addresses, let in by the NSG's VirtualNetwork rule). One VM gets Azure's
Scheduled Events ``Preempt`` notice (30 s on Azure, here a few seconds) through its metadata service: the
script checkpoints, the VM is evicted, the launcher launches a replacement and the task resumes from the
checkpoint, in an Azure-Files-like share that every VM mounts. The run completes, and nothing is left
running.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("azure.mgmt.compute")

from geotrain.ledger import EventKind, Ledger  # noqa: E402
from tests.fakes import hosts as H  # noqa: E402
from tests.fakes.azure_vms import AzureVmFake  # noqa: E402
from tests.fakes.cloudhosts import HostHypervisor  # noqa: E402
from tests.fakes.metadata import FakeMetadata  # noqa: E402

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
GEOTRAIN = str(Path(sys.executable).with_name("geotrain"))
SHARE = "/mnt/azfiles"  # where every VM mounts the Azure Files share (the launcher does not)
STEPS = 40

MAIN = textwrap.dedent('''
    """DDP on every node; a checkpoint every 5 steps and at once on a preemption notice (geotrain.train.api)."""
    import os, socket, sys, time
    import torch
    import torch.distributed as dist
    from geotrain.train import api

    notice = []
    api.on_preemption_notice(lambda: notice.append(time.time()))
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    data = open(os.path.expanduser("~/data/input.txt")).read().strip()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    store = api.checkpoint_store()
    start = 0
    latest = store.latest()
    if latest is not None:
        state = store.load(latest)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = int(state["step"])
    print(f"rank {rank}/{world} on {socket.gethostname()} starts at step {start}, data {data!r}", flush=True)
    torch.manual_seed(1000 + start * 7 + rank)
    for step in range(start + 1, STEPS + 1):
        x = torch.randn(16, 8)
        loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        api.report_progress(samples=16 * world)
        if (step % 5 == 0 or notice) and rank == 0:
            store.save(step, {"model": model.module.state_dict(), "optimizer": opt.state_dict(), "step": step})
        if notice:
            print(f"rank {rank}: preemption notice, checkpointed step {step}", flush=True)
            sys.exit(0)
        time.sleep(0.4)
    weights = sum(p.double().sum().item() for p in model.parameters())
    print(f"rank {rank}/{world} done at step {STEPS}, weights {weights:.6f}", flush=True)
    dist.destroy_process_group()
''').replace("STEPS", str(STEPS))


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

TASK = textwrap.dedent('''
    name: ddp-on-spot
    num_nodes: 2
    resources:
      infra: azure/eastus
      accelerators: T4:1
      use_spot: true
    workdir: ./code
    file_mounts:
      ~/data/input.txt: ./input.txt
    setup: |
      echo "setup on $(hostname) as $(whoami), python $(command -v python)"
    run: |
      MASTER=$(echo "$SKYPILOT_NODE_IPS" | head -n1)
      torchrun --nnodes=$SKYPILOT_NUM_NODES --nproc_per_node=1 --master_addr=$MASTER \\
        --master_port=$MASTER_PORT --node_rank=$SKYPILOT_NODE_RANK main.py
''')


@pytest.fixture
def cloud() -> Iterator[tuple[H.World, HostHypervisor, AzureVmFake, Path]]:
    try:
        H.require()
    except H.HostsUnavailable as exc:
        pytest.fail(f"{exc} (run scripts/ensure_hosts.sh as root)")
    with H.World() as world, FakeMetadata() as metadata:
        share = Path(f"/var/lib/geotrain-test-shares/{world.name}")  # the Azure Files share
        shutil.rmtree(share, ignore_errors=True)
        share.mkdir(parents=True)
        share.chmod(0o1777)
        hv = HostHypervisor(world, metadata, mounts={SHARE: share})
        try:
            with AzureVmFake(regions=set(), hypervisor=hv) as azure:
                yield world, hv, azure, share
        finally:
            hv.close()
            shutil.rmtree(share, ignore_errors=True)


def test_a_task_trains_on_spot_vms_behind_their_nsg_and_survives_an_eviction(cloud, tmp_path: Path) -> None:
    world, hv, azure, share = cloud
    work = tmp_path / "user"
    (work / "code").mkdir(parents=True)
    (work / "code" / "main.py").write_text(MAIN)
    (work / "input.txt").write_text("the share's data\n")
    (work / "task.yaml").write_text(TASK)
    env = {**os.environ, "GEOTRAIN_TEST_ARM_URL": azure.url,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("COLUMNS", None)
    planned = subprocess.run([GEOTRAIN, "plan", "task.yaml", "-o", "plan.json"], cwd=work, env=env,
                             capture_output=True, text=True, timeout=300)
    assert planned.returncode == 0, planned.stderr
    started = time.monotonic()
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCH, "launch", "plan.json", "--provider", "azure", "--yes",
                                 "--checkpoint-url", f"file://{SHARE}/checkpoints", "--control-address",
                                 world.launcher_public, "--block-min", "0.1"], cwd=work, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ledger = Ledger()
    first_step_s = None
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and launcher.poll() is None:
            runs = ledger.runs()
            last = ledger.last_progress(runs[-1].run_id) if runs else None
            if last is not None and first_step_s is None:
                first_step_s = time.monotonic() - started
            if last is not None and last.step >= 12 and any((share / "checkpoints").glob("ckpt-*")):
                break
            time.sleep(0.5)
        assert first_step_s is not None, launcher.communicate(timeout=60)[0][-4000:]
        run_id = ledger.runs()[-1].run_id
        first = ledger.events(run_id, kinds=(EventKind.GENERATION_STARTED,))[0].detail["nodes"]
        # the NSG is each VM's firewall: geotrain's SSH port from the launcher, all TCP from its VNet peers
        peers = {f"{hv.private_address(vm)}/32" for vm in first}
        rules = {(r.source_cidr, r.protocol, r.ports) for r in hv.rules(first[0])}
        assert rules == {(f"{world.launcher_public}/32", "tcp", (7422, 7422))} | {(p, "tcp", (1, 65535))
                                                                                 for p in peers}, rules
        azure.evict(first[1], notice_s=4.0)  # Azure takes the VM back, with a Scheduled Events notice
        noticed = time.monotonic()
        out, _ = launcher.communicate(timeout=420)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    took_s = time.monotonic() - started
    print(f"\nboot (VM, sshd, ship + install, agent, setup) to first step: {first_step_s:.1f} s; "
          f"notice to completion: {time.monotonic() - noticed:.1f} s; whole run: {took_s:.1f} s")
    assert launcher.returncode == 0, out[-4000:]
    events = ledger.events(run_id)
    generations = [e for e in events if e.kind == EventKind.GENERATION_STARTED]
    assert len(generations) >= 2 and set(generations[-1].detail["nodes"]) != set(first), [e.kind for e in events]
    assert any(e.kind == EventKind.PREEMPTED and e.node_id == first[1] for e in events)
    assert azure.evictions == [first[1]]
    logs = "".join(p.read_text() for p in sorted((Path(os.environ["GEOTRAIN_HOME"]) / "runs" / run_id / "logs")
                                                  .glob("gen*")))
    assert "the share's data" in logs and "setup on " in logs
    assert "preemption notice, checkpointed step" in logs, logs[-3000:]
    assert [line for line in logs.splitlines() if "starts at step" in line and "starts at step 0" not in line]
    done = {line.split("weights ")[1] for line in logs.splitlines() if f"done at step {STEPS}" in line}
    assert len(done) == 1, logs[-3000:]  # DDP: both ranks of the last generation hold the same weights
    assert [vm["name"] for vm in azure.vms()] == [], "VMs left"  # nothing left running
    assert hv.running() == [], hv.running()

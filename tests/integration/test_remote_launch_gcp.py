"""A SkyPilot task on GCP spot VMs, launched as a user would (`geotrain plan` and `geotrain launch`
in processes of their own, google-cloud-compute against the Compute Engine fake through
GEOTRAIN_GCP_ENDPOINT and GOOGLE_CLOUD_PROJECT) from a launcher behind NAT. Each VM is a faithful remote
host (tests/fakes/cloudhosts.py): its startup-script runs as root there and starts only geotrain's sshd;
it has an image with torch but no geotrain, cannot read the launcher's files nor connect to it, and is
reached at its external address only where the run's firewall rules let the launcher in.

The launcher ships geotrain over SSH, copies the workdir and file mount, and runs torchrun DDP across
two VMs of one network (their private addresses, admitted by the run's source-tag rule). One VM is
preempted: GCE's `instance/preempted` turns TRUE in its metadata server and, after the notice (GCE's
30 s, here a few), the VM is gone; the launcher launches a replacement and the task resumes from the
checkpoint, in a Filestore-like share that every VM mounts. The run completes, and nothing is left
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

from geotrain.ledger import EventKind, Ledger
from tests.fakes import hosts as H
from tests.fakes.cloudhosts import HostHypervisor
from tests.fakes.gcp import PROJECT, GcpComputeFake
from tests.fakes.metadata import FakeMetadata

pytestmark = pytest.mark.slow

GEOTRAIN = str(Path(sys.executable).with_name("geotrain"))
SHARE = "/mnt/filestore"  # where every VM mounts the shared file system (the launcher does not)
STEPS = 40

MAIN = textwrap.dedent('''
    """DDP on every node; a checkpoint every 5 steps and at once on a spot notice (geotrain.train.api)."""
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
            print(f"rank {rank}: spot notice, checkpointed step {step}", flush=True)
            sys.exit(0)
        time.sleep(0.4)
    weights = sum(p.double().sum().item() for p in model.parameters())
    print(f"rank {rank}/{world} done at step {STEPS}, weights {weights:.6f}", flush=True)
    dist.destroy_process_group()
''').replace("STEPS", str(STEPS))

TASK = textwrap.dedent('''
    name: ddp-on-spot
    num_nodes: 2
    resources:
      infra: gcp/us-central1
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
def cloud() -> Iterator[tuple[H.World, HostHypervisor, GcpComputeFake, Path]]:
    try:
        H.require()
    except H.HostsUnavailable as exc:
        pytest.fail(f"{exc} (run scripts/ensure_hosts.sh as root)")
    with H.World() as world, FakeMetadata() as metadata:
        share = Path(f"/var/lib/geotrain-test-shares/{world.name}")  # the Filestore share
        shutil.rmtree(share, ignore_errors=True)
        share.mkdir(parents=True)
        share.chmod(0o1777)
        hv = HostHypervisor(world, metadata, mounts={SHARE: share})
        try:
            with GcpComputeFake(hypervisor=hv) as gcp:
                yield world, hv, gcp, share
        finally:
            hv.close()
            shutil.rmtree(share, ignore_errors=True)


def test_a_task_trains_on_spot_vms_behind_their_firewall_and_survives_a_preemption(cloud, tmp_path: Path) -> None:
    world, hv, gcp, share = cloud
    work = tmp_path / "user"
    (work / "code").mkdir(parents=True)
    (work / "code" / "main.py").write_text(MAIN)
    (work / "input.txt").write_text("the bucket's data\n")
    (work / "task.yaml").write_text(TASK)
    env = {**os.environ, "GEOTRAIN_GCP_ENDPOINT": gcp.url, "GOOGLE_CLOUD_PROJECT": PROJECT}
    env.pop("COLUMNS", None)
    planned = subprocess.run([GEOTRAIN, "plan", "task.yaml", "-o", "plan.json"], cwd=work, env=env,
                             capture_output=True, text=True, timeout=300)
    assert planned.returncode == 0, planned.stderr
    started = time.monotonic()
    launcher = subprocess.Popen([GEOTRAIN, "launch", "plan.json", "--provider", "gcp", "--yes", "--checkpoint-url",
                                 f"file://{SHARE}/checkpoints", "--control-address", world.launcher_public,
                                 "--block-min", "0.1"], cwd=work, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
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
        found = gcp.find(first[1])
        assert found is not None, first
        zone = found[0]
        # the VMs' private addresses are what GCE reports, and the run's rules admit the launcher to SSH alone
        vms = {name: gcp.vm_id(gcp.find(name)[0], name) for name in first}
        for name, vm in vms.items():
            assert gcp.find(name)[1]["networkInterfaces"][0]["networkIP"] == hv.private_address(vm)
            peers = {f"{hv.private_address(v)}/32" for n, v in vms.items() if n != name}
            assert {(r.source_cidr, r.protocol, r.ports) for r in hv.rules(vm)} >= \
                {(f"{world.launcher_public}/32", "tcp", (7422, 7422))} | {(p, "tcp", (1, 65535)) for p in peers}
        gcp.preempt(zone, first[1], notice_s=4.0)  # GCE takes the VM back: instance/preempted, then it is gone
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
    logs = "".join(p.read_text() for p in sorted((Path(os.environ["GEOTRAIN_HOME"]) / "runs" / run_id / "logs")
                                                  .glob("gen*")))
    assert "the bucket's data" in logs and "setup on " in logs
    assert "spot notice, checkpointed step" in logs, logs[-3000:]
    assert [line for line in logs.splitlines() if "starts at step" in line and "starts at step 0" not in line]
    done = {line.split("weights ")[1] for line in logs.splitlines() if f"done at step {STEPS}" in line}
    assert len(done) == 1, logs[-3000:]  # DDP: both ranks of the last generation hold the same weights
    assert not [i["name"] for i in gcp.live_instances()
                if i["labels"].get("geotrain-run") == run_id], "nothing left running"
    assert not hv.running(), hv.running()

"""The SkyPilot task the end-to-end remote launch tests run (tests/integration/test_remote_launch_*.py),
and how they launch it and watch it as a user would: `geotrain plan` and `geotrain launch` in processes of
their own.

The task trains a small DDP model with torchrun on every node, reads its file mount, checkpoints every 5
steps and at once on a preemption notice (``geotrain.train.api``), and resumes from the newest checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from geotrain.ledger import EventKind, Ledger

GEOTRAIN = str(Path(sys.executable).with_name("geotrain"))
STEPS = 40

MAIN = textwrap.dedent('''
    """DDP on every node; a checkpoint every 5 steps and at once on a preemption notice."""
    import os, socket, time
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
            api.finish(0)
        time.sleep(0.4)
    weights = sum(p.double().sum().item() for p in model.parameters())
    print(f"rank {rank}/{world} done at step {STEPS}, weights {weights:.6f}", flush=True)
    dist.destroy_process_group()
    api.finish()
''').replace("STEPS", str(STEPS))


def task_yaml(resources: str) -> str:
    """The task file, with ``resources`` (YAML lines, indented by 2) where it goes."""
    return textwrap.dedent('''
        name: ddp
        num_nodes: 2
        resources:
        RESOURCES
        workdir: ./code
        file_mounts:
          ~/data/input.txt: ./input.txt
        setup: |
          echo "setup on $(hostname) as $(whoami), python $(command -v python)"
        run: |
          MASTER=$(echo "$SKYPILOT_NODE_IPS" | head -n1)
          torchrun --nnodes=$SKYPILOT_NUM_NODES --nproc_per_node=1 --master_addr=$MASTER \\
            --master_port=$MASTER_PORT --node_rank=$SKYPILOT_NODE_RANK main.py
    ''').replace("RESOURCES", textwrap.indent(textwrap.dedent(resources).strip(), "  "))


def user_folder(root: Path, resources: str, data: str = "the data\n") -> Path:
    """The folder a user launches from: the task file, its workdir (``code/main.py``) and its file mount."""
    work = root / "user"
    (work / "code").mkdir(parents=True)
    (work / "code" / "main.py").write_text(MAIN)
    (work / "input.txt").write_text(data)
    (work / "task.yaml").write_text(task_yaml(resources))
    return work


@dataclass
class Launched:
    run_id: str
    returncode: int
    output: str
    first_step_s: float  # from `geotrain launch` to the first step the ledger shows
    after_event_s: float  # from the event (a lost or reclaimed node) to the launch's end
    first_nodes: list[str]  # the first generation's nodes

    def logs(self) -> str:
        folder = Path(os.environ["GEOTRAIN_HOME"]) / "runs" / self.run_id / "logs"
        return "".join(p.read_text(errors="replace") for p in sorted(folder.glob("gen*")))

    def generations(self) -> list[list[str]]:
        return [e.detail["nodes"] for e in Ledger().events(self.run_id, kinds=(EventKind.GENERATION_STARTED,))]


def plan_and_launch(work: Path, env: dict[str, str], plan_args: list[str], launch_args: list[str], *,
                    event, checkpoints: Path, timeout_s: float = 300,  # noqa: ANN001
                    geotrain: tuple[str, ...] = (GEOTRAIN,)) -> Launched:
    """Plan the task, launch it (``geotrain``: the command that runs the CLI), and once it has trained 12
    steps and a checkpoint exists call ``event(run_id, first_generation_nodes)`` (lose or preempt a
    node); then wait for the launch to end."""
    planned = subprocess.run([GEOTRAIN, "plan", "task.yaml", "-o", "plan.json", *plan_args], cwd=work, env=env,
                             capture_output=True, text=True, timeout=300)
    assert planned.returncode == 0, planned.stderr
    started = time.monotonic()
    launcher = subprocess.Popen([*geotrain, "launch", "plan.json", "--yes", "--block-min", "0.1", *launch_args],
                                cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ledger = Ledger()
    first_step_s = None
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and launcher.poll() is None:
            runs = ledger.runs()
            last = ledger.last_progress(runs[-1].run_id) if runs else None
            if last is not None and first_step_s is None:
                first_step_s = time.monotonic() - started
            if last is not None and last.step >= 12 and any(checkpoints.glob("ckpt-*")):
                break
            time.sleep(0.5)
        assert first_step_s is not None, launcher.communicate(timeout=60)[0][-4000:]
        run_id = ledger.runs()[-1].run_id
        first = ledger.events(run_id, kinds=(EventKind.GENERATION_STARTED,))[0].detail["nodes"]
        event(run_id, first)
        happened = time.monotonic()
        out, _ = launcher.communicate(timeout=420)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    return Launched(run_id, launcher.returncode, out, first_step_s, time.monotonic() - happened, first)


def check_resumed_and_done(launched: Launched, data: str = "the data") -> None:
    """The run completed on a new set of nodes, resumed from a checkpoint, and both ranks of its last
    generation end with the same weights (DDP)."""
    assert launched.returncode == 0, launched.output[-4000:]
    generations = launched.generations()
    assert len(generations) >= 2 and set(generations[-1]) != set(launched.first_nodes), generations
    logs = launched.logs()
    assert data in logs and "setup on " in logs, logs[-3000:]
    assert [line for line in logs.splitlines() if "starts at step" in line and "starts at step 0" not in line], \
        logs[-3000:]
    done = {line.split("weights ")[1] for line in logs.splitlines() if f"done at step {STEPS}" in line}
    assert len(done) == 1, logs[-3000:]


@contextlib.contextmanager
def shared_folder(world) -> Iterator[Path]:  # noqa: ANN001 - tests.fakes.hosts.World
    """A folder every host may write (a site's NFS export, EFS, Filestore, Azure Files), outside the
    folders the hosts do not see; removed afterwards."""
    share = Path(f"/var/lib/geotrain-test-shares/{world.name}")
    shutil.rmtree(share, ignore_errors=True)
    share.mkdir(parents=True)
    share.chmod(0o1777)
    try:
        yield share
    finally:
        shutil.rmtree(share, ignore_errors=True)


@contextlib.contextmanager
def faithful_cloud(mount_at: str) -> Iterator[tuple]:
    """A world of faithful hosts, a metadata service and a hypervisor whose VMs all mount one shared
    folder at ``mount_at``: (world, hypervisor, the folder as this machine sees it). Needs root and nft."""
    import pytest

    from tests.fakes import hosts as H
    from tests.fakes.cloudhosts import HostHypervisor
    from tests.fakes.metadata import FakeMetadata

    try:
        H.require()
    except H.HostsUnavailable as exc:
        pytest.fail(f"{exc} (run scripts/ensure_hosts.sh as root)")
    with H.World() as world, FakeMetadata() as metadata, shared_folder(world) as share:
        hv = HostHypervisor(world, metadata, mounts={mount_at: share})
        try:
            yield world, hv, share
        finally:
            hv.close()


FAILING_SETUP = '''
name: broken
num_nodes: 2
resources:
RESOURCES
setup: |
  echo "installing on $(hostname)"
  echo "ERROR: no matching distribution found for torchh" >&2
  exit 9
run: echo "run must not start"
'''


def launch_failing_setup(root: Path, resources: str, env: dict[str, str], plan_args: list[str],
                         launch_args: list[str], timeout_s: float = 300,
                         geotrain: tuple[str, ...] = (GEOTRAIN,)) -> tuple[subprocess.CompletedProcess, float]:
    """Plan and launch a two-node task whose setup fails (exit 9); the launch's result and how long it took."""
    work = root / "broken"
    work.mkdir()
    (work / "task.yaml").write_text(FAILING_SETUP.replace(
        "RESOURCES", textwrap.indent(textwrap.dedent(resources).strip(), "  ")))
    planned = subprocess.run([GEOTRAIN, "plan", "task.yaml", "-o", "plan.json", *plan_args], cwd=work, env=env,
                             capture_output=True, text=True, timeout=300)
    assert planned.returncode == 0, planned.stderr
    started = time.monotonic()
    done = subprocess.run([*geotrain, "launch", "plan.json", "--yes", *launch_args], cwd=work, env=env,
                          capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    return done, time.monotonic() - started


def check_setup_failed(done: subprocess.CompletedProcess) -> str:
    """The launch ended at the first failed setup: exit 5, naming setup and its exit code, with the setup's
    last lines; the setup's output streamed by launch; run never started; no second generation."""
    said = done.stdout + done.stderr
    assert done.returncode == 5, said[-4000:]
    assert "the task's setup failed on node" in said and "(exit 9)" in said, said[-4000:]
    assert "no matching distribution found for torchh" in said and "installing on " in said, said[-4000:]
    assert "run must not start" not in said
    run_id = Ledger().runs()[-1].run_id
    assert len(Ledger().events(run_id, kinds=(EventKind.GENERATION_STARTED,))) == 1
    return run_id

"""A SkyPilot task on the user's own machines, launched as a user would (`geotrain plan` and `geotrain
launch` in processes of their own) from a launcher behind NAT onto hosts that are other machines
(tests/fakes/hosts.py): each has its own user, home, network and a Python with torch but no geotrain;
none can read the launcher's files or open a connection to it.

The launch ships this geotrain as a wheel over SSH and installs it on each host, copies the task's
workdir and file mount there, and runs torchrun DDP across two hosts. Midway one host dies (the plug
is pulled: every process on it, its network gone); the launcher finds the node lost, takes the site's
third machine and resumes from the newest checkpoint, in the site's shared folder (as an NFS share
mounted at the same path on every host: the one thing the hosts share). The run completes.
"""

from __future__ import annotations

import json
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

pytestmark = pytest.mark.slow

GEOTRAIN = str(Path(sys.executable).with_name("geotrain"))
SHARE = "/mnt/lab-share"  # where every host of the site mounts the site's share (the launcher does not)
STEPS = 40

MAIN = textwrap.dedent('''
    """DDP on every node, resuming from the run's checkpoint store (geotrain.train.api)."""
    import os, socket, time
    import torch
    import torch.distributed as dist
    from geotrain.train import api

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
        if step % 5 == 0 and rank == 0:
            store.save(step, {"model": model.module.state_dict(), "optimizer": opt.state_dict(), "step": step})
        time.sleep(0.4)
    weights = sum(p.double().sum().item() for p in model.parameters())
    print(f"rank {rank}/{world} done at step {STEPS}, weights {weights:.6f}", flush=True)
    dist.destroy_process_group()
''').replace("STEPS", str(STEPS))

TASK = textwrap.dedent('''
    name: ddp-on-the-lab
    num_nodes: 2
    resources:
      infra: onprem/lab
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
def lab() -> Iterator[tuple[H.World, list[H.Host], Path]]:
    try:
        H.require()
    except H.HostsUnavailable as exc:
        pytest.fail(f"{exc} (run scripts/ensure_hosts.sh as root)")
    with H.World() as world:
        site = world.lan("lab")
        first = site.host("ws0")
        hosts = [first, *(site.host(f"ws{n}", account=first) for n in (1, 2))]  # one account on every machine
        share = Path(f"/var/lib/geotrain-test-shares/{world.name}")  # the site's NFS server's export
        shutil.rmtree(share, ignore_errors=True)
        share.mkdir(parents=True)
        share.chmod(0o1777)  # every host's user writes there
        try:
            for host in hosts:
                host.mount_share(share, SHARE)
            yield world, hosts, share
        finally:
            shutil.rmtree(share, ignore_errors=True)


def _user_side(tmp_path: Path, hosts: list[H.Host]) -> tuple[dict[str, str], Path]:
    """The launching user's key, known_hosts, inventory, task folder and environment."""
    home = Path(os.environ["HOME"])
    ssh = home / ".ssh"
    ssh.mkdir(mode=0o700, exist_ok=True)
    key = ssh / f"id_lab_{tmp_path.name}"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    lines = []
    for host in hosts:
        access = host.start_sshd(key.with_suffix(".pub").read_text())
        lines.append(access.known_hosts_line(host.private_address))
    known = ssh / f"known_hosts_{tmp_path.name}"
    known.write_text("".join(lines))
    machines = "\n".join(f"          - {{host: {h.private_address}, user: {h.user}, key: {key}}}" for h in hosts)
    work = tmp_path / "user"
    (work / "code").mkdir(parents=True)
    (work / "code" / "main.py").write_text(MAIN)
    (work / "input.txt").write_text("the lab's data\n")
    (work / "task.yaml").write_text(TASK)
    (work / "sites.yaml").write_text(textwrap.dedent(f"""
        sites:
          - site: lab
            continent: europe
            uplink_gbps: 1
            machines:
              - instance_type: ws
                count: {len(hosts)}
                vcpus: 2
                memory_gib: 8
                hosts:
        """) + machines + "\n")
    env = {**os.environ, "GEOTRAIN_ONPREM_INVENTORY": str(work / "sites.yaml")}
    env.pop("COLUMNS", None)
    # the provider checks host keys against ~/.ssh/known_hosts: this test's file is that one
    shutil.copyfile(known, ssh / "known_hosts")
    return env, work


def test_a_task_trains_on_machines_that_share_nothing_with_the_launcher_and_survives_losing_one(
        lab: tuple[H.World, list[H.Host], Path], tmp_path: Path) -> None:
    world, hosts, share = lab
    env, work = _user_side(tmp_path, hosts)
    for host in hosts:  # the hosts have no geotrain of their own
        assert host.run(["python3", "-c", "import geotrain"], cwd="/").returncode != 0
    planned = subprocess.run([GEOTRAIN, "plan", "task.yaml", "--onprem", "sites.yaml", "-o", "plan.json"], cwd=work,
                             env=env, capture_output=True, text=True, timeout=300)
    assert planned.returncode == 0, planned.stderr
    checkpoints = share / "checkpoints"  # what the hosts see as file:///mnt/lab-share/checkpoints
    started = time.monotonic()
    launcher = subprocess.Popen([GEOTRAIN, "launch", "plan.json", "--provider", "onprem", "--yes", "--checkpoint-url",
                                 f"file://{SHARE}/checkpoints", "--block-min", "0.1"], cwd=work, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        ledger = Ledger()
        first_step_s = None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and launcher.poll() is None:
            runs = ledger.runs()
            if runs:
                last = ledger.last_progress(runs[-1].run_id)
                if last is not None and first_step_s is None:
                    first_step_s = time.monotonic() - started
                if last is not None and last.step >= 12 and any(checkpoints.rglob("*")):
                    break
            time.sleep(0.5)
        assert first_step_s is not None, launcher.communicate(timeout=60)[0][-3000:]
        run_id = ledger.runs()[-1].run_id
        first = ledger.events(run_id, kinds=(EventKind.GENERATION_STARTED,))[0].detail["nodes"]
        from geotrain.providers.onprem import OnPremProvider
        provider = OnPremProvider.from_environment()
        lost = next(h for h in hosts if h.private_address == provider.agent_of(first[1])["host"])
        lost.kill_all()  # the machine is gone: its processes, its network
        print(f"\n{lost.name} lost at step {ledger.last_progress(run_id).step}, "
              f"{time.monotonic() - started:.1f} s into the launch", flush=True)
        out, _ = launcher.communicate(timeout=420)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    took_s = time.monotonic() - started
    print(f"\nboot (ship + install + agent + setup) to first step: {first_step_s:.1f} s; run with one host lost: "
          f"{took_s:.1f} s")
    assert launcher.returncode == 0, out[-4000:]
    generations = ledger.events(run_id, kinds=(EventKind.GENERATION_STARTED,))
    assert len(generations) >= 2, [e.kind for e in ledger.events(run_id)]
    assert set(generations[-1].detail["nodes"]) != set(first)  # the third machine stands in for the lost one
    logs = "".join(p.read_text() for p in sorted((Path(os.environ["GEOTRAIN_HOME"]) / "runs" / run_id / "logs").glob("*")))
    assert "the lab's data" in logs and "setup on ws" in logs
    resumed = [line for line in logs.splitlines() if "starts at step" in line and "starts at step 0" not in line]
    assert resumed, logs[-3000:]
    done = sorted({line.split("weights ")[1] for line in logs.splitlines() if f"done at step {STEPS}" in line})
    assert len(done) == 1, logs[-3000:]  # DDP: both ranks of the last generation hold the same weights
    for host in hosts:  # what the launch left on the hosts: a venv of this geotrain, nothing of the launcher's
        if host is lost:
            continue
        listed = host.run("ls -d ~/.geotrain-node/venv-*", cwd="/")
        assert listed.stdout.split(), (host.name, listed.stderr)

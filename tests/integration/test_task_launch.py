"""``geotrain launch task.yaml`` on the local provider: SkyPilot's hello task and its multi-node DDP task
(torchrun over two nodes) run unchanged; setup once per node, run in the workdir copy, envs and
file mounts in place, nothing left running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from geotrain.ledger import Ledger
from geotrain.providers.local import LocalProvider
from tests.helpers import processes_of_run

pytestmark = pytest.mark.slow

GEOTRAIN = str(Path(sys.executable).with_name("geotrain"))
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"


def launch(task: Path, *extra: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([GEOTRAIN, "launch", str(task), *extra], capture_output=True, text=True, timeout=timeout,
                          cwd=task.parent, stdin=subprocess.DEVNULL, env=os.environ.copy())


def logs_of(run_id: str) -> dict[str, str]:
    from geotrain.files import geotrain_home

    folder = geotrain_home() / "runs" / run_id / "logs"
    return {p.name: p.read_text() for p in sorted(folder.glob("gen*.log"))}


def only_run() -> str:
    [run] = Ledger(create=False).runs()
    return run.run_id


def test_hello_asks_first_then_runs_setup_and_run_in_its_workdir_with_its_envs_and_mounts(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.txt").write_text("forty-two\n")
    (tmp_path / "notes.md").write_text("in the workdir\n")
    task = tmp_path / "hello.yaml"
    task.write_text(textwrap.dedent("""\
        resources:
          infra: aws
          accelerators: V100:1
        workdir: .
        file_mounts:
          ~/data: ./data
        envs:
          GREETING: Hello
        setup: |
          echo "Running setup."
        run: |
          echo "$GREETING, SkyPilot!"
          cat notes.md ~/data/x.txt
          echo "pwd=$PWD rank=$SKYPILOT_NODE_RANK of $SKYPILOT_NUM_NODES"
        """))
    refused = launch(task)  # no terminal to ask on and no --yes: nothing is bought
    assert refused.returncode == 2 and "--yes" in refused.stderr, refused.stderr
    assert not (Path(os.environ["GEOTRAIN_HOME"]) / "ledger.sqlite").exists()

    done = launch(task, "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "p3.2xlarge" in done.stdout and "completed" in done.stdout  # the plan is shown before the run
    run_id = only_run()
    [log] = logs_of(run_id).values()
    assert log.count("Running setup.") == 1
    assert "Hello, SkyPilot!" in log and "in the workdir" in log and "forty-two" in log
    assert "/sky_workdir rank=0 of 1" in log
    assert not processes_of_run(run_id)
    assert all(n.state.ended for n in LocalProvider().list(run_id))


def test_the_multi_node_ddp_task_trains_with_torchrun_over_two_nodes(tmp_path):
    task = EXAMPLES / "ddp.yaml"  # the README's example, as shipped
    done = launch(task, "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    run_id = only_run()
    logs = logs_of(run_id)
    assert len(logs) == 2, (logs, [(e.kind, e.detail) for e in Ledger(create=False).events(run_id)])
    lines = [line for text in logs.values() for line in text.splitlines() if line.startswith("rank ")]
    assert sorted(line.split()[1] for line in lines) == ["0/2", "1/2"], logs
    assert len({line.split()[-1] for line in lines}) == 1  # DDP: both ranks end with the same weights
    assert sum("setup on node" in text for text in logs.values()) == 2  # once on each node
    nodes = LocalProvider().list(run_id)
    assert len(nodes) == 2 and all(n.state.ended for n in nodes)
    assert len({n.offer_id for n in nodes}) == 1  # a gang in one zone
    assert not processes_of_run(run_id)


WORKER = """\
import os, signal, time
signal.signal(signal.SIGUSR1, lambda *_: print("heard the notice", flush=True))
print("worker", os.getpid(), flush=True)
time.sleep(300)
"""


@pytest.mark.parametrize("how", ["stop", "down", "agent killed", "notice"])
def test_a_torchrun_worker_in_a_session_of_its_own_ends_with_its_node(tmp_path, how):
    """torchrun starts its workers in sessions of their own, out of reach of the node's process group:
    they must still hear a preemption notice and end with the node, whether the run is stopped or the
    node's agent dies."""
    (tmp_path / "sleep.py").write_text(WORKER)
    task = tmp_path / "t.yaml"
    task.write_text("resources: {infra: aws, accelerators: T4}\nworkdir: .\n"
                    "run: torchrun --nnodes=1 --nproc_per_node=1 --master_port=$MASTER_PORT sleep.py\n")
    launcher = subprocess.Popen([GEOTRAIN, "launch", str(task), "--yes", "--max-restarts", "0"], cwd=tmp_path,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        worker = None
        while worker is None and time.monotonic() < deadline:
            time.sleep(0.3)
            runs = Ledger(create=False).runs() if (Path(os.environ["GEOTRAIN_HOME"]) / "ledger.sqlite").exists() else []
            for text in (logs_of(runs[0].run_id).values() if runs else ()):
                words = [line.split() for line in text.splitlines() if line.startswith("worker ")]
                worker = int(words[0][1]) if words else None
        assert worker is not None, "the torchrun worker did not start"
        run_id = runs[0].run_id
        assert os.getsid(worker) == worker  # a session of its own: no killpg of the node reaches it
        if how == "notice":
            [node] = LocalProvider().list(run_id)
            LocalProvider().preempt(node.node_id, notice_s=30)
            deadline = time.monotonic() + 15
            while not any("heard the notice" in t for t in logs_of(run_id).values()) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert any("heard the notice" in t for t in logs_of(run_id).values()), logs_of(run_id)
            subprocess.run([GEOTRAIN, "stop", run_id], check=True, capture_output=True, timeout=60)
        elif how in ("stop", "down"):  # down: SkyPilot's word for it
            subprocess.run([GEOTRAIN, how, run_id], check=True, capture_output=True, timeout=60)
        else:
            [node] = LocalProvider().list(run_id)
            agent = int((Path(os.environ["GEOTRAIN_HOME"]) / "providers" / "local" / "nodes" / node.node_id
                         / "agent.pid").read_text())
            os.kill(agent, signal.SIGKILL)  # the "VM" dies; the launcher finds the node lost
            subprocess.run([GEOTRAIN, "stop", run_id], capture_output=True, timeout=60)
        deadline = time.monotonic() + 15
        while processes_of_run(run_id) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not processes_of_run(run_id)
    finally:
        launcher.kill()
        launcher.wait()


def test_a_failed_setup_ends_the_run_at_once_with_exit_5_naming_setup_and_its_last_lines(tmp_path):
    task = tmp_path / "broken.yaml"
    task.write_text(textwrap.dedent("""\
        num_nodes: 2
        envs:
          WHO: setup-of-broken
        setup: |
          echo "installing for $WHO"
          echo "pip: no matching distribution for torchh" >&2
          exit 7
        run: |
          echo "run must not start"
        """))
    started = time.monotonic()
    done = launch(task, "--yes", "--env", "WHO=from-the-flag")
    took = time.monotonic() - started
    assert done.returncode == 5, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert "setup failed on node" in said and "exit 7" in said and "no matching distribution for torchh" in said
    assert "installing for from-the-flag" in said  # launch streamed the task's output, and --env reached it
    assert "run must not start" not in said and "restart" not in said.split("setup failed")[1][:200]
    run = only_run()
    logs = logs_of(run)
    assert len([n for n in logs if n.startswith("gen001")]) == 2 and not [n for n in logs if n.startswith("gen002")]
    assert not processes_of_run(run)  # its nodes released
    assert took < 60, took


def test_a_pipeline_plans_each_task_and_launches_them_one_after_the_other(tmp_path):
    task = tmp_path / "pipeline.yaml"
    task.write_text(textwrap.dedent("""\
        name: train-eval
        ---
        name: train
        resources: {accelerators: T4}
        run: echo "training" > ~/../trained.txt; echo "train done"
        ---
        name: eval
        envs: {SPLIT: test}
        run: echo "eval on $SPLIT"
        """))
    done = launch(task, "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert "task 1 of 2: train" in said and "task 2 of 2: eval" in said
    assert "train done" in said and "eval on test" in said and said.index("train done") < said.index("eval on test")
    runs = Ledger(create=False).runs()
    assert [r.status for r in runs] == ["completed", "completed"]
    failing = tmp_path / "failing.yaml"
    failing.write_text("name: p\n---\nrun: exit 4\n---\nrun: echo never\n")
    stopped = launch(failing, "--yes", "--max-restarts", "0")
    assert stopped.returncode == 5 and "the pipeline stops at task 1 of 2" in stopped.stderr, stopped.stderr
    assert "never" not in stopped.stdout + stopped.stderr

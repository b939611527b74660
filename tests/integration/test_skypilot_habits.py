"""A SkyPilot user's habits on the local provider, each through the CLI as a user types it:
``launch -c NAME -d`` returns once the run has started; ``status`` is a table of live runs (``--all``:
history), ``queue NAME`` the runs of a name; ``exec NAME 'shell string'`` and ``exec NAME task.yaml`` run
in ~/sky_workdir with the SKYPILOT_* variables; ``launch -c NAME other.yaml`` on the live run runs its
setup and run there; ``down NAME`` ends it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from geotrain.ledger import Ledger
from tests.helpers import processes_of_run

pytestmark = pytest.mark.slow

GEOTRAIN = str(Path(sys.executable).with_name("geotrain"))


def geotrain(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([GEOTRAIN, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          stdin=subprocess.DEVNULL, env=os.environ.copy())


def test_launch_detached_by_name_then_status_queue_exec_reuse_and_down(tmp_path):
    (tmp_path / "notes.txt").write_text("from the workdir\n")
    release = tmp_path / "release"
    (tmp_path / "task.yaml").write_text(textwrap.dedent(f"""\
        num_nodes: 2
        workdir: .
        envs:
          WHO: null
        setup: echo "setup for $WHO"
        run: |
          echo "run for $WHO on rank $SKYPILOT_NODE_RANK"
          for i in $(seq 600); do [ -e {release} ] && break; sleep 0.1; done
        """))
    (tmp_path / "other.yaml").write_text(textwrap.dedent("""\
        envs:
          COLOR: green
        setup: echo "other setup"
        run: echo "other run $COLOR rank=$SKYPILOT_NODE_RANK of $SKYPILOT_NUM_NODES"
        """))
    started = time.monotonic()
    out = geotrain("launch", "task.yaml", "-c", "demo", "-d", "--yes", "--env", "WHO=me", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert time.monotonic() - started < 90 and "detached" in out.stdout
    [run] = Ledger(create=False).runs()
    try:
        table = geotrain("status", cwd=tmp_path)
        assert table.returncode == 0 and run.run_id in table.stdout and "demo" in table.stdout, table.stdout
        assert len(table.stdout.strip().splitlines()) == 2  # a header and one line per live run
        assert run.run_id in geotrain("queue", "demo", cwd=tmp_path).stdout

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # both nodes' setups ran: the run is in its run
            shown = geotrain("exec", "demo", "echo $SKYPILOT_NODE_RANK/$SKYPILOT_NUM_NODES; pwd; cat notes.txt",
                             cwd=tmp_path)
            if shown.returncode == 0:
                break
            time.sleep(0.5)
        assert shown.returncode == 0, shown.stdout + shown.stderr
        lines = shown.stdout.splitlines()
        assert sorted(line.split(" | ")[1] for line in lines if "/2" in line) == ["0/2", "1/2"], shown.stdout
        assert sum(line.endswith("/sky_workdir") for line in lines) == 2, shown.stdout
        assert sum(line.endswith("from the workdir") for line in lines) == 2, shown.stdout

        by_task = geotrain("exec", "demo", "other.yaml", cwd=tmp_path)  # its run only, as sky exec
        assert by_task.returncode == 0 and "other run green" in by_task.stdout and "other setup" not in by_task.stdout

        reuse = geotrain("launch", "other.yaml", "-c", "demo", cwd=tmp_path)  # the live run: setup, then run
        assert reuse.returncode == 0, reuse.stdout + reuse.stderr
        assert reuse.stdout.count("other setup") == 2 and reuse.stdout.count("other run green") == 2
        assert len(Ledger(create=False).runs()) == 1  # nothing else was launched

        failing = geotrain("exec", "demo", "exit 3", cwd=tmp_path)
        assert failing.returncode == 3
    finally:
        down = geotrain("down", "demo", cwd=tmp_path)
    assert down.returncode == 0, down.stdout + down.stderr
    deadline = time.monotonic() + 20
    while processes_of_run(run.run_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not processes_of_run(run.run_id)
    after = geotrain("status", cwd=tmp_path)
    assert "No live runs; 1 earlier" in after.stdout, after.stdout
    assert run.run_id in geotrain("status", "--all", cwd=tmp_path).stdout
    logs = geotrain("logs", "demo", cwd=tmp_path)  # the name works wherever a run id does
    assert "setup for me" in logs.stdout and "run for me on rank 1" in logs.stdout

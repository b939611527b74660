"""``geotrain launch -d``: the launch goes on in a process of its own, and the command returns once the run
has started (as ``sky launch -d``).

The plan (a task file's, already shown and confirmed) is saved under ``GEOTRAIN_HOME/plans`` and a new
session runs ``python -m geotrain.app.detach`` with the plan, the provider and the launch options as JSON
on its standard input; its own output goes to ``GEOTRAIN_HOME/runs/detached-<pid>.log``. The caller waits
until the ledger holds a run whose launcher is that process (then: the run id), or the process ends first
(then: its last lines, as an error).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from geotrain.domain import Plan
from geotrain.errors import GeotrainError, NotFoundError, RunError
from geotrain.files import PRIVATE_DIR, geotrain_home
from geotrain.launcher.options import LaunchOptions
from geotrain.ledger import Ledger

START_TIMEOUT_S = 900.0  # a run starts when its first node is bought: a cloud may take minutes


def detach(plan: Plan, options: LaunchOptions, *, provider_name: str | None, poll_s: float = 0.2,
           timeout_s: float = START_TIMEOUT_S) -> tuple[str, Path]:
    """Start the launch in a session of its own; (run id, its output file) once the run has started."""
    from geotrain.planning.planfile import save_plan

    plans = geotrain_home() / "plans"
    plans.mkdir(mode=PRIVATE_DIR, exist_ok=True)
    path = plans / f"{plan.plan_id}.json"
    save_plan(plan, path)
    runs = geotrain_home() / "runs"
    runs.mkdir(mode=PRIVATE_DIR, exist_ok=True)
    payload = json.dumps({"plan": str(path), "provider": provider_name, "options": options.to_dict()})
    log = runs / f"detached-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    with open(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as out:
        child = subprocess.Popen([sys.executable, "-m", "geotrain.app.detach"], stdin=subprocess.PIPE, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True, env=os.environ.copy())
    child.stdin.write(payload.encode())
    child.stdin.close()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run_id = _run_of(child.pid)
        if run_id is not None:
            return run_id, log
        if child.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-5:]
            raise RunError("the detached launch ended before its run started: " + " | ".join(tail))
        time.sleep(poll_s)
    raise RunError(f"the detached launch (pid {child.pid}) has not started a run in {timeout_s:.0f} s; see {log}")


def _run_of(pid: int) -> str | None:
    try:
        ledger = Ledger(create=False)
    except NotFoundError:
        return None
    return next((r.run_id for r in reversed(ledger.runs()) if r.launcher_pid == pid), None)


def main() -> int:
    from geotrain.app.launch import launch

    given = json.loads(sys.stdin.read())
    try:
        outcome = launch(Path(given["plan"]), LaunchOptions.from_dict(given["options"]),
                         provider_name=given["provider"], on_note=print)
    except GeotrainError as exc:
        print(f"error: {exc}", flush=True)
        return exc.exit_code
    print(f"run {outcome.run_id} {outcome.status}: {outcome.reason}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

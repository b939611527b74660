"""``geotrain launch -c NAME task.yaml`` while a run named NAME is live: as ``sky launch -c`` on an existing
cluster, the task's ``setup`` and then its ``run`` go to the run's nodes (``geotrain exec``'s path: every
node that is up, in ``~/sky_workdir`` when the run's task has a workdir, with the SKYPILOT_* variables
and the new task's envs). Nothing is bought. The workdir and file mounts are not copied again (the run's
own were copied when its nodes started)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from geotrain.app.nodes import exec_on_nodes, first_failure
from geotrain.errors import InputError, NotFoundError
from geotrain.ledger import Ledger, RunStatus
from geotrain.procs import pid_alive


def live_run_named(name: str) -> str | None:
    """The id of the live run named ``name`` (running, its launcher alive), or None."""
    try:
        ledger = Ledger(create=False)
    except NotFoundError:
        return None
    live = [r for r in ledger.runs() if r.options.get("name") == name and r.status == RunStatus.RUNNING
            and r.launcher_pid and pid_alive(r.launcher_pid)]
    return live[-1].run_id if live else None


def run_task_on(run_id: str, task_path: Path, envs: dict[str, str], *, emit: Callable[[str, str], None],
                skipped: Callable[[str, str], None]) -> int:
    """Run the task's setup, then its run, on the run's nodes; the first non-zero exit code, else 0."""
    from geotrain.app.plan import task_of

    task = task_of(task_path, envs)
    if task is None or not task.run:
        raise InputError(f"{task_path}: a task with a run: is needed to run it on run {run_id}'s nodes")
    script = (f"( {task.setup}\n) || exit $?\n" if task.setup else "") + task.run
    return first_failure(exec_on_nodes(run_id, None, ["bash", "-c", script], emit=emit, skipped=skipped,
                                       envs=dict(task.envs)))

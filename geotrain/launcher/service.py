"""What ``geotrain launch``, ``geotrain status`` and ``geotrain stop`` do."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from geotrain.errors import InputError, NotFoundError
from geotrain.procs import pid_alive
from geotrain.launcher.ledger import Ledger
from geotrain.launcher.loop import LaunchOptions, Launcher, RunOutcome, Status, run_cost_so_far
from geotrain.planning.planfile import load_plan, plan_from_dict
from geotrain.providers.base import NodeState, Provider

PROVIDERS = ("local",)


def get_provider(name: str) -> Provider:
    """A provider by name (imported on demand: cloud SDKs load only when asked for)."""
    if name == "local":
        from geotrain.providers.local import LocalProvider

        return LocalProvider()
    raise InputError(f"--provider: {name!r} is not available; providers: {', '.join(PROVIDERS)}")


def launch(plan_path: Path, options: LaunchOptions, *, provider_name: str = "local",
           on_status: Callable[[Status], None] | None = None, on_start: Callable[[str], None] | None = None) -> RunOutcome:
    plan = load_plan(plan_path)
    provider = get_provider(provider_name)
    provider.check_credentials()
    launcher = Launcher(plan, provider, options=options, on_status=on_status)
    run_id = launcher.start()
    if on_start:
        on_start(run_id)
    return launcher.run()


def resume(run_id: str, *, on_status: Callable[[Status], None] | None = None) -> RunOutcome:
    ledger = Ledger()
    row = ledger.run(run_id)
    if row.status in ("completed", "stopped"):
        raise InputError(f"run {run_id} is {row.status}; nothing to resume")
    if row.launcher_pid and pid_alive(row.launcher_pid) and row.status == "running" and row.launcher_pid != os.getpid():
        raise InputError(f"run {run_id} still has a launcher (pid {row.launcher_pid}); stop it first or wait")
    plan = plan_from_dict(json.loads(row.plan_json), f"ledger run {run_id}")
    options = LaunchOptions.from_dict(json.loads(row.options_json))
    provider = get_provider(row.provider)
    launcher = Launcher(plan, provider, options=options, ledger=ledger, on_status=on_status)
    launcher.adopt(run_id)
    return launcher.run()


@dataclass(frozen=True, slots=True)
class RunSummary:
    run_id: str
    status: str
    reason: str | None
    created_at: str
    workload: str
    step: int
    target_steps: int | None
    samples: int
    samples_per_s: float | None
    nodes_up_by_region: dict[str, int]
    nodes_total: int
    preemptions: int
    usd_so_far: float
    last_events: list[str]


def status(run_id: str | None = None) -> list[RunSummary]:
    ledger = Ledger()
    rows = [ledger.run(run_id)] if run_id else ledger.runs()
    out = []
    for row in rows:
        nodes = ledger.nodes(row.run_id)
        up = Counter(f"{n.cloud}/{n.region}" for n in nodes if n.ended_at is None)
        last = ledger.last_progress(row.run_id)
        events = ledger.events(row.run_id)
        out.append(RunSummary(
            run_id=row.run_id, status=_effective_status(row), reason=row.reason, created_at=row.created_at,
            workload=row.workload, step=last[2] if last else 0, target_steps=row.target_steps,
            samples=last[3] if last else 0, samples_per_s=last[5] if last else None, nodes_up_by_region=dict(up),
            nodes_total=len(nodes), preemptions=sum(1 for e in events if e.kind == "preempted"),
            usd_so_far=run_cost_so_far(ledger, row.run_id),
            last_events=[f"{time.strftime('%H:%M:%S', time.localtime(e.at))} {e.kind}"
                         + (f" {e.node_id}" if e.node_id else "") for e in events[-5:]],
        ))
    return out


def _effective_status(row) -> str:  # noqa: ANN001
    if row.status == "running" and row.launcher_pid and not pid_alive(row.launcher_pid):
        return "orphaned (launcher gone; `geotrain launch --resume` or `geotrain stop`)"
    return row.status


def stop(run_id: str, *, wait_s: float = 30.0) -> str:
    """Stop a run: ask its launcher to stop, or, when the launcher is gone, terminate its nodes here."""
    ledger = Ledger()
    row = ledger.run(run_id)
    if row.launcher_pid and pid_alive(row.launcher_pid) and row.launcher_pid != os.getpid() and row.status == "running":
        os.kill(row.launcher_pid, signal.SIGTERM)
        deadline = time.time() + wait_s
        while time.time() < deadline:
            if ledger.run(run_id).status != "running":
                return f"stopped run {run_id} (its launcher terminated every node)"
            time.sleep(0.2)
    provider = get_provider(row.provider)
    terminated = 0
    for node in provider.list(run_id):
        if node.state in (NodeState.RUNNING, NodeState.PENDING):
            provider.terminate(node.node_id, reason="stopped")
            terminated += 1
        ledger.end_node(node.node_id, node.end_reason or "stopped",
                        at=node.ended_at.timestamp() if node.ended_at else None)
    if ledger.run(run_id).status == "running":
        ledger.finish_run(run_id, "stopped", "geotrain stop")
        ledger.event(run_id, "stopped", reason="geotrain stop")
    return f"stopped run {run_id}: terminated {terminated} node{'s' if terminated != 1 else ''}"


def latest_run() -> str:
    run_id = Ledger().latest_run_id()
    if run_id is None:
        raise NotFoundError("no run yet; start one with `geotrain launch plan.json`")
    return run_id

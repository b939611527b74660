"""``geotrain status``: every run's progress, nodes up, cost so far (the one cost function) and events."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

from geotrain.billing import run_cost
from geotrain.errors import NotFoundError
from geotrain.ledger import EventKind, Ledger, RunRow, RunStatus
from geotrain.procs import pid_alive


@dataclass(frozen=True, slots=True)
class RunSummary:
    run_id: str
    name: str | None  # ``launch -c NAME``
    status: str
    reason: str | None
    created_at: str
    workload: str
    substitutions: tuple[str, ...]
    step: int
    target_steps: int | None
    samples: int
    samples_per_s: float | None
    nodes_up_by_region: dict[str, int]
    nodes_total: int
    preemptions: int
    usd_so_far: float
    last_events: list[str]


def run_named(ledger: Ledger, key: str) -> RunRow:
    """The run ``key`` names: a run id, or a run's name (``launch -c NAME``): the live run of that name, else
    its latest. NotFoundError when neither."""
    try:
        return ledger.run(key)
    except NotFoundError:
        named = [r for r in ledger.runs() if r.options.get("name") == key]
        if not named:
            raise
        live = [r for r in named if r.status == RunStatus.RUNNING]
        return (live or named)[-1]


def status(run_id: str | None = None, *, name: str | None = None, everything: bool = True) -> list[RunSummary]:
    """The runs (one: ``run_id``, an id or a name; ``name``: the runs of that name, ``queue``); without
    ``everything``, only the live ones (running, or orphaned by a launcher that died)."""
    try:
        ledger = Ledger(create=False)
    except NotFoundError:
        if run_id is None:
            return []
        raise NotFoundError(f"no run {run_id!r}: geotrain has not run anything here yet") from None
    rows = [run_named(ledger, run_id)] if run_id else ledger.runs()
    if name is not None:
        rows = [r for r in rows if r.options.get("name") == name or r.run_id == name]
    if not everything and run_id is None:
        rows = [r for r in rows if r.status == RunStatus.RUNNING]
    out = []
    for row in rows:
        nodes = ledger.nodes(row.run_id)
        up = Counter(f"{n.cloud}/{n.region}" for n in nodes if n.ended_at is None)
        last = ledger.last_progress(row.run_id)
        events = ledger.events(row.run_id)
        out.append(RunSummary(
            run_id=row.run_id, name=row.options.get("name"), status=_effective_status(row), reason=row.reason, created_at=row.created_at,
            workload=row.workload, substitutions=row.substitutions, step=last.step if last else 0,
            target_steps=row.target_steps, samples=last.samples if last else 0,
            samples_per_s=last.samples_per_s if last else None, nodes_up_by_region=dict(up),
            nodes_total=len(nodes), preemptions=sum(1 for e in events if e.kind == EventKind.PREEMPTED),
            usd_so_far=run_cost(ledger, row.run_id).total_usd,
            last_events=[f"{time.strftime('%H:%M:%S', time.localtime(e.at))} {e.kind}"
                         + (f" {e.node_id}" if e.node_id else "") for e in events[-5:]],
        ))
    return out


def _effective_status(row: RunRow) -> str:
    if row.status == RunStatus.RUNNING and row.launcher_pid and not pid_alive(row.launcher_pid):
        return "orphaned (launcher gone; `geotrain launch --resume` or `geotrain stop`)"
    return row.status


def latest_run() -> str:
    run_id = Ledger(create=False).latest_run_id()
    if run_id is None:
        raise NotFoundError("no run yet; start one with `geotrain launch plan.json`")
    return run_id

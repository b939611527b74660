"""``geotrain stop``: end a run and every node of it."""

from __future__ import annotations

import os
import signal
import time

from geotrain.app.launch import get_provider
from geotrain.app.status import run_named
from geotrain.launcher.options import LaunchOptions
from geotrain.ledger import EventKind, Ledger, RunStatus
from geotrain.procs import pid_alive
from geotrain.providers.base import NodeState


def stop(run_id: str, *, wait_s: float = 30.0) -> str:
    """Stop a run: ask its launcher to stop, or, when the launcher is gone, terminate its nodes here."""
    ledger = Ledger(create=False)
    row = run_named(ledger, run_id)  # an id, or a run's name (launch -c NAME)
    run_id = row.run_id
    if row.launcher_pid and pid_alive(row.launcher_pid) and row.launcher_pid != os.getpid() \
            and row.status == RunStatus.RUNNING:
        os.kill(row.launcher_pid, signal.SIGTERM)
        deadline = time.time() + wait_s
        while time.time() < deadline:
            if ledger.run(run_id).status != RunStatus.RUNNING:
                return f"stopped run {run_id} (its launcher terminated every node)"
            time.sleep(0.2)
    provider = get_provider(row.provider, LaunchOptions.from_dict(row.options))
    terminated = 0
    for node in provider.list(run_id):
        if node.state in (NodeState.RUNNING, NodeState.PENDING):
            provider.terminate(node.node_id, reason="stopped")
            terminated += 1
    for node in provider.list(run_id):
        ledger.end_node(node.node_id, node.end_reason or "stopped",
                        at=node.ended_at.timestamp() if node.ended_at else None)
    if ledger.run(run_id).status == RunStatus.RUNNING:
        ledger.finish_run(run_id, RunStatus.STOPPED, "geotrain stop")
        ledger.event(run_id, EventKind.STOPPED, reason="geotrain stop")
    return f"stopped run {run_id}: terminated {terminated} node{'s' if terminated != 1 else ''}"

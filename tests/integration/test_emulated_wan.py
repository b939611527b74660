"""``geotrain launch --emulate-wan`` through the command a user types: two nodes in two regions,
each in a network namespace of its own, linked with the perf model's figures; the run trains the
plan's strategy over the emulated link, its link bytes are the wire's (tc counters), and no
namespace, delay line or process is left after success, a preemption or Ctrl-C.

Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN), /dev/net/tun and iproute2; skipped otherwise (CI runs as root)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from geotrain.ledger import EventKind, Ledger
from geotrain.wan import privileges
from geotrain.wan.cpu import CGROUP_ROOT, cores_per_node
from geotrain.wan.delayline_client import find_delaylines
from geotrain.wan.namespaces import list_namespaces
from tests.integration.test_launch import assert_no_orphans
from tests.integration.test_plan_is_the_contract import NODES, geotrain

REASON = privileges()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(REASON is not None, reason=f"no emulated WAN here: {REASON}")]


@pytest.fixture()
def plan(tmp_path):
    path = tmp_path / "plan.json"
    geotrain("plan", "--workload", "tiny-lm", "--strategy", "ma", "--averaging-pushes", "4", "--provider", "local",
             "--target-sps", "10", "--nodes", NODES, "-o", str(path))
    return path


def _cpu_groups() -> set[Path]:
    """The runs' CPU control groups (geotrain.wan.cpu), cgroup v1 or v2."""
    return {*CGROUP_ROOT.glob("geotrain-*/"), *(CGROUP_ROOT / "cpu").glob("geotrain-*/")}


def _nothing_left(before: set[str], groups_before: set[Path]) -> None:
    deadline = time.time() + 10
    while time.time() < deadline and (set(list_namespaces()) - before or find_delaylines()
                                      or _cpu_groups() - groups_before):
        time.sleep(0.1)
    assert set(list_namespaces()) - before == set() and find_delaylines() == []
    assert _cpu_groups() - groups_before == set()


def test_a_run_over_emulated_links_trains_and_bills_the_wire_bytes(plan):
    before, groups = set(list_namespaces()), _cpu_groups()
    launched = geotrain("launch", str(plan), "--steps", "16", "--checkpoint-every", "8", "--emulate-wan")
    assert "completed" in launched.stdout
    planned = sum(item["count"] for item in json.loads(plan.read_text())["items"])
    # each node in a CPU group of its own, an equal share of the cores (2 nodes on 2 cores: 0.90 each)
    assert f"each node held to {cores_per_node(planned):.2f} of this machine's cores" in launched.stderr
    ledger = Ledger()
    run_id = ledger.latest_run_id()
    rounds = [e for e in ledger.events(run_id, kinds=(EventKind.SYNC_ROUNDS,))]
    assert {e.detail["strategy"] for e in rounds} == {"ma"}
    sent = {}
    for row in ledger.link_bytes(run_id):
        sent[(row.src_node, row.dst_node)] = row.bytes
    # 4 averages of the tiny-lm's fp16 parameters each way, headers and gloo's own traffic on top
    import torch

    from geotrain.train.sync import parameter_bytes
    from geotrain.train.workloads import WORKLOADS

    W = parameter_bytes(WORKLOADS["tiny-lm"].build_model(), torch.float16)
    assert len(sent) == 2 and all(4 * W <= b <= 4 * W * 1.5 + 200_000 for b in sent.values()), (sent, W)
    report = geotrain("cost-report", run_id)
    assert "between nodes: cross_region" in report.stdout
    assert_no_orphans(run_id)
    _nothing_left(before, groups)


def test_a_preemption_and_ctrl_c_leave_nothing_behind(plan):
    before, groups = set(list_namespaces()), _cpu_groups()
    proc = subprocess.Popen([sys.executable, "-m", "geotrain", "launch", str(plan), "--steps", "100000",
                             "--emulate-wan", "--preempt-at", "6"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "COLUMNS": "200"})
    try:
        deadline = time.time() + 120
        ledger = None
        while time.time() < deadline:
            try:
                ledger = Ledger(create=False)
                run_id = ledger.latest_run_id()
                if run_id and any(e.detail.get("generation", 0) >= 2 for e in
                                  ledger.events(run_id, kinds=(EventKind.GENERATION_STARTED,))):
                    break
            except Exception:  # noqa: BLE001 - the ledger is not there yet
                pass
            time.sleep(0.5)
        else:
            raise AssertionError("no second generation after the injected preemption")
        assert ledger.events(run_id, kinds=(EventKind.PREEMPTED,))
        # every live node's processes are in its CPU group, the replacement's too
        (folder,) = _cpu_groups() - groups
        nodes = {n.node_id for n in ledger.nodes(run_id) if n.ended_at is None}
        held = {g.name for g in folder.iterdir() if g.is_dir() and (g / "cgroup.procs").read_text().split()}
        assert nodes and nodes <= held, (nodes, held)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 130, out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert_no_orphans(run_id)
    _nothing_left(before, groups)

"""Hivemind's elastic membership, as a user sees it: three local nodes train a user's ResNet-18
script (``examples/train/resnet.py``) with hivemind on the Hivemind library; one node is preempted
mid-run. The referee is the scripts' own output and the ledger: the two survivors' step counts go on
with no stall and no new generation; the replacement joins the same generation, loads its state from
its peers, and within its first rounds its parameters are a peer's at that step; every
peer ends at the run's step count on one model. And the plan's group size bounds the library's averaging
groups: three peers with a group size of two average in pairs."""

from __future__ import annotations

import re

import pytest

from geotrain.files import geotrain_home
from geotrain.ledger import EventKind, Ledger
from tests.integration.test_user_training_api import NODES, geotrain, assert_no_orphans

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STEPS = 16
LINE = re.compile(r"step (\d+) loss [0-9.]+ parameters sum (-?[0-9.]+)")
AVERAGED = re.compile(r"parameters as averaged with the group \(epoch \d+, at ([0-9.]+)\): sum (-?[0-9.]+)")
AVERAGED_WITH_PEERS = re.compile(r"Averaged parameters with [23] peers\n(?:(?!Averaged parameters).*\n)*?"
                                 r".*parameters as averaged with the group \(epoch \d+, at ([0-9.]+)\): sum (-?[0-9.]+)")
ROUND_S = 15.0  # the peers of one averaging load its result within a round of each other (rounds here: 3-6 s)
DONE = re.compile(r"done: (\d+) steps, (\d+) samples, parameters sum (-?[0-9.]+)")


@pytest.mark.slow
def test_a_preempted_hivemind_peer_is_replaced_while_the_others_train_on(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("name: mine\nworkload: resnet18\nstrategy: hivemind\nsync: {target_batch_size: 96}\n")
    plan = tmp_path / "plan.json"
    geotrain("plan", str(job), "--target-sps", "1", "--nodes", NODES, "-o", str(plan))
    trace = tmp_path / "preemptions.yaml"
    trace.write_text("- {at_step: 2, node: 1}\n")
    result = geotrain("launch", str(plan), "--yes", "--preempt-trace", str(trace), "--checkpoint-every", "5",
                      "--", sys.executable, str(ROOT / "examples/train/resnet.py"), "--steps", str(STEPS),
                      "--log-every", "1")
    ledger = Ledger()
    run_id = ledger.latest_run_id()
    assert ledger.run(run_id).status == "completed", result.stdout
    kinds = lambda *k: ledger.events(run_id, kinds=k)  # noqa: E731
    assert len(kinds(EventKind.PREEMPTED)) == 1
    left, joined = kinds(EventKind.PEER_LEFT), kinds(EventKind.PEER_JOINED)
    assert left and left[0].detail["peers"] == 2
    assert len(joined) == 1 and joined[0].detail["generation"] == 1
    assert {e.detail["generation"] for e in kinds(EventKind.GENERATION_STARTED)} == {1}, "a new generation started"
    # nobody went back to a checkpoint (at the end every peer but the first takes the run's final one)
    assert not [e for e in kinds(EventKind.CHECKPOINT_RESTORED) if "purpose" not in e.detail]

    logs = sorted((geotrain_home() / "runs" / run_id / "logs").glob("gen*-rank*.log"))
    assert all(p.name.startswith("gen001-") for p in logs), logs
    steps = {p.name: {int(k): float(c) for k, c in LINE.findall(p.read_text())} for p in logs}
    lost, joiner = left[0].node_id, joined[0].node_id
    survivors = [name for name in steps if lost not in name and joiner not in name]
    assert len(survivors) == 2
    # a peer still short of the end when the others have ended is stopped (PEER_LEFT at the end)
    stopped = {e.node_id for e in left[1:] if "still short" in e.detail.get("reason", "")}
    for name in survivors:  # one process each, from step 0 on through the loss to the end
        assert re.findall(r"from step (\d+)", (logs[0].parent / name).read_text()) == ["0"], name
        last = STEPS - 2 if any(node in name for node in stopped) else STEPS  # a straggler at the end
        assert max(steps[name]) >= last, (name, sorted(steps[name]))
    mine = steps[next(name for name in steps if joiner in name)]
    first = min(mine)
    assert joined[0].detail["step"] < first <= STEPS
    # it loaded its peers' state and trains with them: its first averaging of the parameters with a
    # survivor or both (its node's log says so) leaves it the parameters a survivor was left by an averaging
    # within a round of it, to the rounding of the plan's fp16 wire (the peers of one group differ by
    # about 1e-5 of the sum: each gets the others' parts of the average rounded to fp16). The lines that
    # say it are the averaged parameters as each peer loads them (geotrain's line after Hivemind's), not
    # the step count's: Hivemind's groups form by time, and a joiner may average with peers an epoch or
    # two ahead of it (it counts behind them until the library finds it out of sync and reloads). On a
    # busy machine the groups of three peers are often pairs (a replacement that boots late may see only
    # pairs before the run ends), so a pair with a survivor counts as much as the three
    text = next(p for p in logs if joiner in p.name).read_text()
    first_group = AVERAGED_WITH_PEERS.search(text)
    assert first_group, "the replacement never averaged its parameters with a survivor"
    at, total = float(first_group.group(1)), float(first_group.group(2))
    theirs = [(float(a), float(t)) for name in survivors for a, t in AVERAGED.findall((logs[0].parent / name).read_text())]
    near = min((abs(total - t) / abs(t) for a, t in theirs if abs(a - at) <= ROUND_S), default=None)
    assert near is not None and near <= 5e-5, (at, total, sorted(theirs))
    ended = [DONE.findall(steps_log.read_text())[-1] for steps_log in logs if DONE.search(steps_log.read_text())]
    assert len(ended) == 3 - len(stopped) >= 2 and {int(s) for s, _, _ in ended} == {STEPS}, (ended, stopped)
    assert len({c for _, _, c in ended}) == 1, ended  # the run's final checkpoint on every peer

    # no stall: the run's progress (rank 0's reports) kept its pace through the loss
    rows = [r for r in ledger.progress_rows(run_id)]
    gaps = [b.at - a.at for a, b in zip(rows, rows[1:])]
    assert gaps and max(gaps) < 4 * sorted(gaps)[len(gaps) // 2] + 10, gaps
    assert_no_orphans(run_id)


GROUP = re.compile(r"Averaged (?:gradients|parameters) with (\d+) peers")


@pytest.mark.slow
def test_the_averaging_groups_are_no_larger_than_the_plans_group_size(tmp_path):
    """Hivemind's matchmaking forms groups of at most the plan's ``group_size`` (its target_group_size):
    three peers with a group size of two average in pairs, never all three, and still train to the end."""
    job = tmp_path / "job.yaml"
    job.write_text("name: mine\nworkload: resnet18\nstrategy: hivemind\nsync: {target_batch_size: 96, group_size: 2}\n")
    plan = tmp_path / "plan.json"
    geotrain("plan", str(job), "--target-sps", "1", "--nodes", NODES, "-o", str(plan))
    steps = 8
    result = geotrain("launch", str(plan), "--yes", "--", sys.executable, str(ROOT / "examples/train/resnet.py"),
                      "--steps", str(steps), "--log-every", "1")
    ledger = Ledger()
    run_id = ledger.latest_run_id()
    assert ledger.run(run_id).status == "completed", result.stdout
    logs = sorted((geotrain_home() / "runs" / run_id / "logs").glob("gen*-rank*.log"))
    sizes = [int(n) for p in logs for n in GROUP.findall(p.read_text())]
    assert sizes and set(sizes) == {2}, sizes  # pairs formed, and no group of three
    ended = [DONE.findall(p.read_text())[-1] for p in logs if DONE.search(p.read_text())]
    assert len(ended) >= 2 and {int(s) for s, _, _ in ended} == {steps}, ended
    assert_no_orphans(run_id)

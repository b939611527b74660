"""A user's own training script (``examples/train/``: a torchvision ResNet-18 and a small Hugging Face
transformer) trains on three local nodes in two regions with each of the five planned strategies
through ``geotrain.train.api``, as a user launches it: ``geotrain launch PLAN -- python script.py``.

The referee is what the user sees and what cannot agree by accident: every peer's final parameters
(their sum, printed by the script) are the same, the ledger's rounds name the planned strategy and
no substitution, the steps are the script's; and a run that loses a node mid-way resumes from its
checkpoint in a new generation and still ends on one model."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from geotrain.domain import SyncStrategyName
from geotrain.files import geotrain_home
from geotrain.ledger import EventKind, Ledger
from tests.integration.test_launch import assert_no_orphans

ROOT = Path(__file__).resolve().parents[2]
NODES = "aws/usw2-az1/g4dn.xlarge,aws/usw2-az2/g4dn.xlarge,aws/use1-az1/g4dn.xlarge"  # 3 nodes, 2 regions
STEPS = 12
SCRIPTS = {"resnet18": ROOT / "examples/train/resnet.py", "transformer": ROOT / "examples/train/transformer.py"}
DONE = re.compile(r"done: (\d+) steps, (\d+) samples, parameters sum (-?[0-9.]+)")


def geotrain(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "geotrain", *args], capture_output=True, text=True, timeout=600,
                            cwd=ROOT, env={**os.environ, "COLUMNS": "200"})
    if check and result.returncode != 0:
        raise AssertionError(f"geotrain {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def plan(tmp_path: Path, strategy: str, workload: str) -> Path:
    job = tmp_path / "job.yaml"
    job.write_text(f"name: mine\nworkload: {workload}\nstrategy: {strategy}\n"
                   "sync: {target_batch_size: 48, local_steps: 4, accumulation_steps: 2, averaging_pushes: 3}\n")
    out = tmp_path / "plan.json"
    geotrain("plan", str(job), "--target-sps", "1", "--nodes", NODES, "-o", str(out))
    return out


def finals(run_id: str) -> list[tuple[int, int, float]]:
    """What each rank's script printed last: steps, samples, the sum of its parameters."""
    logs = sorted((geotrain_home() / "runs" / run_id / "logs").glob("gen*-rank*.log"))
    found = [DONE.findall(p.read_text()) for p in logs]
    return [(int(s), int(n), float(c)) for hits in found if hits for s, n, c in hits[-1:]]


def check_run(run_id: str, strategy: str, ranks: int = 3) -> list[tuple[int, int, float]]:
    ledger = Ledger()
    ended = finals(run_id)
    assert len(ended) == ranks, ended
    sums = [c for _, _, c in ended]
    assert len({round(c, 3) for c in sums}) == 1, f"the peers end on different models: {ended}"
    rounds = ledger.events(run_id, kinds=(EventKind.SYNC_ROUNDS,))
    assert rounds and {e.detail["strategy"] for e in rounds} == {strategy}
    assert not ledger.events(run_id, kinds=(EventKind.SUBSTITUTED,))
    assert_no_orphans(run_id)
    return ended


def launch(plan_file: Path, script: Path, *extra: str) -> tuple[str, subprocess.CompletedProcess]:
    result = geotrain("launch", str(plan_file), "--yes", *extra, "--", sys.executable, str(script),
                      "--steps", str(STEPS))
    return Ledger().latest_run_id(), result


# not slow: one user script with one strategy in the fast suite; the other nine in make test-all
FAST = {("resnet18", "allreduce")}
CASES = [pytest.param(w, s.value, marks=() if (w, s.value) in FAST else pytest.mark.slow, id=f"{w}-{s.value}")
         for w in SCRIPTS for s in SyncStrategyName]


@pytest.mark.parametrize(("script", "strategy"), CASES)
def test_a_user_script_trains_on_three_nodes_with_the_planned_strategy(tmp_path, script, strategy):
    workload = "resnet18" if script == "resnet18" else "roberta-base"  # the plan's model; the script trains its own
    run_id, result = launch(plan(tmp_path, strategy, workload), SCRIPTS[script])
    assert f"with {strategy} (" in " ".join(result.stdout.split()), result.stdout  # however the lines wrap
    ended = check_run(run_id, strategy)
    if strategy != SyncStrategyName.ASGD_GA:  # asgd-ga's regions take the steps their pace allows
        assert {s for s, _, _ in ended} == {STEPS}, ended


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["allreduce", "local-sgd"])
def test_a_user_script_resumes_from_its_checkpoint_after_a_preemption(tmp_path, strategy):
    trace = tmp_path / "preemptions.yaml"
    trace.write_text("- {at_step: 6, node: 1}\n")
    run_id, _ = launch(plan(tmp_path, strategy, "resnet18"), SCRIPTS["resnet18"], "--preempt-trace", str(trace),
                       "--checkpoint-every", "4")
    ledger = Ledger()
    assert len(ledger.events(run_id, kinds=(EventKind.PREEMPTED,))) == 1
    restored = ledger.events(run_id, kinds=(EventKind.CHECKPOINT_RESTORED,))
    assert restored and restored[-1].detail["step"] in (4, 6, 8), restored  # the last checkpoint before the loss
    ended = check_run(run_id, strategy)
    assert {s for s, _, _ in ended} == {STEPS}


@pytest.mark.slow
@pytest.mark.parametrize("workload", ["resnet50", "roberta-base"])
def test_launch_of_a_planned_model_trains_that_model(tmp_path, workload):
    """No stand-in: a plan for resnet50 (or roberta-base) launches the built-in runtime on torchvision's
    ResNet-50 (Hugging Face's RoBERTa-base), small synthetic inputs on the CPU, and checkpoints it."""
    from geotrain.train.checkpoint import CheckpointStore
    from geotrain.train.workloads import workload_named

    out = tmp_path / "plan.json"
    geotrain("plan", "--workload", workload, "--strategy", "allreduce", "--target-sps", "1",
             "--nodes", "aws/usw2-az1/g4dn.xlarge,aws/usw2-az2/g4dn.xlarge", "-o", str(out))
    result = geotrain("launch", str(out), "--yes", "--steps", "3", "--checkpoint-every", "3")
    run_id = Ledger().latest_run_id()
    said = " ".join(result.stdout.split())  # however the lines wrap
    assert f"trains {workload} with allreduce" in said and "substituted" not in said, result.stdout
    assert Ledger().run(run_id).workload == workload
    store = CheckpointStore(Ledger().run(run_id).checkpoint_url)
    state = store.load(store.latest())
    model = workload_named(workload).build_model()
    assert state["step"] == 3 and set(state["model"]) == set(model.state_dict())  # that model's weights
    assert_no_orphans(run_id)

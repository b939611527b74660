"""Chaos runs of the launcher as a user meets them: injected preemptions in every phase, the launcher
killed with SIGKILL in every phase and resumed with ``geotrain launch --resume`` from a new session;
then the checks every such run must pass.

A scenario launches ``geotrain launch`` as a process of its own session (as ``setsid`` would), injects
preemptions from a trace, kills the launcher when the ledger shows the chosen phase, resumes from
another session, and checks: the run completed; the final weights equal an uninterrupted run's
(``--deterministic``); the ledger counts every preemption exactly once; no preemption lost more than
the steps since the last committed checkpoint; no node was launched twice and none is left; no process
of the run is alive; no temporary file is left.

Used by ``tests/integration/test_chaos.py`` and ``bench/chaos.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import processes_of_run

NODES = "aws/usw2-az1/g4dn.xlarge,aws/use1-az1/g4dn.xlarge"
STEPS = 40
CHECKPOINT_EVERY = 8
KILL_PHASES = ("launching", "training", "checkpoint", "recovery", "replacement", "finishing")


@dataclass
class Scenario:
    name: str
    trace: list[dict] = field(default_factory=list)  # preemption events (the trace file's YAML list)
    kill_at: str | None = None  # a phase of KILL_PHASES, or None: no launcher kill
    kills: int = 1  # how many times the launcher is killed (at that phase, each resume)
    max_restarts: int = 3
    steps: int = STEPS


@dataclass
class Result:
    scenario: str
    run_id: str
    injected: int
    recorded: int  # PREEMPTED events
    preempted_nodes: int  # nodes that ended preempted or lost
    recovered: bool
    lost_steps: list[int]  # per restore: steps trained past the restored checkpoint
    since_commit: list[int]  # per restore: steps between the restored checkpoint and the last before it
    kills: int
    leaked: list[str]
    duplicated: list[str]
    untracked: list[str]
    alive: list[int]
    temp_files: list[str]
    weights_equal: bool | None
    failures: list[str]


def write_plan(path: Path) -> None:
    from geotrain.domain import JobSpec, Objective, SyncSettings, SyncStrategyName
    from geotrain.planning.planfile import save_plan
    from geotrain.planning.planner import PlanOptions, plan_for_nodes
    from geotrain.pricing.snapshot import bundled_snapshot

    job = JobSpec("chaos", "tiny-cnn", Objective.MIN_COST, target_samples_per_s=10,
                  sync=SyncSettings(SyncStrategyName.ALLREDUCE, precision="fp32", micro_batches=2))
    save_plan(plan_for_nodes(job, bundled_snapshot(), NODES, options=PlanOptions(frontier_points=0, provider="local")),
              path)


def _geotrain(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    handle = open(log, "ab")  # noqa: SIM115 - kept open by the child
    return subprocess.Popen([sys.executable, "-m", "geotrain", *args], stdout=handle, stderr=subprocess.STDOUT,
                            env=env, start_new_session=True)  # each launcher in a session of its own


def _phase_reached(ledger, run_id: str, phase: str, steps: int) -> bool:  # noqa: ANN001
    from geotrain.ledger import EventKind

    events = ledger.events(run_id)
    kinds = [e.kind for e in events]
    last = ledger.last_progress(run_id)
    step = last.step if last else 0
    if phase == "launching":  # the first nodes are being launched (a node may be booting)
        return EventKind.RUN_STARTED in kinds and EventKind.GENERATION_STARTED not in kinds
    if phase == "training":
        return step >= CHECKPOINT_EVERY + 3
    if phase == "finishing":
        return step >= steps - 4
    if phase == "checkpoint":
        saved = {(e.node_id, e.detail.get("step")) for e in events if e.kind == EventKind.CHECKPOINT_SAVED}
        return any(e.kind == EventKind.CHECKPOINT_WRITE_STARTED and (e.node_id, e.detail.get("step")) not in saved
                   and e.detail.get("step", 0) > 0 for e in events)
    if phase in ("recovery", "replacement"):
        for n, e in enumerate(events):
            if e.kind == EventKind.PREEMPTED:
                later = kinds[n + 1:]
                if EventKind.GENERATION_STARTED in later:
                    continue
                # recovery: the preemption is recorded; replacement: the new mix is chosen (the plan's
                # fallback for the zone, or a re-plan) and its node boots
                return phase == "recovery" or EventKind.REPLANNED in later or EventKind.FELL_BACK in later
        return False
    raise ValueError(phase)


def run_scenario(scenario: Scenario, workdir: Path, reference: dict | None, *, timeout_s: float = 240) -> Result:
    """Run one scenario in ``workdir`` (GEOTRAIN_HOME is the caller's environment's)."""
    from geotrain.ledger import Ledger

    workdir.mkdir(parents=True, exist_ok=True)
    plan, trace, ckpt = workdir / "plan.json", workdir / "trace.yaml", workdir / "ckpt"
    write_plan(plan)
    trace.write_text(json.dumps(scenario.trace) if scenario.trace else "[]\n")
    env = {**os.environ, "GEOTRAIN_FAULT_CHECKPOINT_DELAY_S": "0.5" if scenario.kill_at == "checkpoint" else "0"}
    args = ["launch", str(plan), "--steps", str(scenario.steps), "--checkpoint-every", str(CHECKPOINT_EVERY),
            "--deterministic", "--checkpoint-url", str(ckpt), "--max-restarts", str(scenario.max_restarts),
            "--block-min", "30"]
    if scenario.trace:
        args += ["--preempt-trace", str(trace)]
    ledger = Ledger()
    before = set(r.run_id for r in ledger.runs())
    proc = _geotrain(args, workdir / "launch.log", env)
    deadline = time.time() + timeout_s
    run_id = ""
    while not run_id and time.time() < deadline:
        new = [r.run_id for r in Ledger().runs() if r.run_id not in before]
        run_id = new[0] if new else ""
        if proc.poll() is not None and not run_id:
            break
        time.sleep(0.02)
    failures: list[str] = []
    kills = 0
    if not run_id:
        return _failed(scenario, "the launch never started a run: " + (workdir / "launch.log").read_text()[-400:])
    while kills < (scenario.kills if scenario.kill_at else 0) and time.time() < deadline:
        while proc.poll() is None and not _phase_reached(Ledger(), run_id, scenario.kill_at, scenario.steps):
            time.sleep(0.01)
        if proc.poll() is not None:
            break  # it ended before the phase came
        os.kill(proc.pid, signal.SIGKILL)  # the launcher dies; its nodes (like VMs) do not
        proc.wait()
        kills += 1
        proc = _geotrain(["launch", "--resume", run_id], workdir / f"resume-{kills}.log", env)
    try:
        proc.wait(timeout=max(1.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        failures.append("timed out")
    return check(scenario, run_id, ckpt, reference, kills, failures)


def _failed(scenario: Scenario, why: str) -> Result:
    return Result(scenario.name, "", 0, 0, 0, False, [], [], 0, [], [], [], [], [], None, [why])


def check(scenario: Scenario, run_id: str, ckpt: Path, reference: dict | None, kills: int,
          failures: list[str]) -> Result:
    from geotrain.ledger import EventKind, Ledger
    from geotrain.providers.local import LocalProvider

    ledger = Ledger()
    run = ledger.run(run_id)
    events = ledger.events(run_id)
    if run.status != "completed":
        failures.append(f"run {run.status}: {run.reason}")
    injected = sum(1 for e in events if e.kind == EventKind.PREEMPTION_INJECTED)
    provider = LocalProvider()
    nodes = provider.list(run_id)
    # every node that ended under the run (preempted, or lost: e.g. one being launched when the launcher
    # was killed) is recorded exactly once, with the reason the provider gives
    recorded = sorted((e.node_id, e.detail.get("reason")) for e in events if e.kind == EventKind.PREEMPTED)
    ended = sorted((n.node_id, n.end_reason) for n in nodes if n.end_reason in ("preempted", "lost"))
    if recorded != ended:
        failures.append(f"preemptions recorded {recorded}, nodes that ended so {ended}")
    rows = ledger.nodes(run_id)
    requests = [r.request_id for r in rows]
    duplicated = sorted({q for q in requests if requests.count(q) > 1})
    untracked = sorted({n.node_id for n in nodes} - {r.node_id for r in rows})
    leaked = [n.node_id for n in nodes if not n.ended]
    alive = processes_of_run(run_id)
    lost, since = _restores(ledger, run_id)
    for a, b in zip(lost, since, strict=True):
        if a > b:
            failures.append(f"a restore lost {a} steps, more than the {b} since the last commit")
    temp = [str(p) for p in ckpt.rglob("*") if ".tmp-" in p.name] if ckpt.exists() else []
    weights_equal = None
    if reference is not None and run.status == "completed":
        weights_equal = _weights_equal(ckpt, reference, scenario.steps)
        if not weights_equal:
            failures.append("final weights differ from the uninterrupted run's")
    for what, value in (("leaked", leaked), ("duplicated", duplicated), ("untracked", untracked), ("alive", alive),
                        ("temp files", temp)):
        if value:
            failures.append(f"{what}: {value[:3]}")
    return Result(scenario.name, run_id, injected, len(recorded), len(ended), run.status == "completed", lost, since,
                  kills, leaked, duplicated, untracked, alive, temp, weights_equal, failures)


def _restores(ledger, run_id: str) -> tuple[list[int], list[int]]:  # noqa: ANN001
    """Per generation that restored a checkpoint: steps trained past it before the interruption, and the
    checkpoint interval the guarantee allows (the steps from the restored commit to the next due one)."""
    from geotrain.ledger import EventKind

    progress = ledger.progress_rows(run_id)
    reached: dict[int, int] = {}
    for row in progress:
        reached[row.generation] = max(reached.get(row.generation, 0), row.step)
    lost, since = [], []
    gens = sorted({e.detail["generation"] for e in ledger.events(run_id, kinds=(EventKind.GENERATION_STARTED,))})
    restored = {e.detail.get("generation"): e.detail.get("step", 0)
                for e in ledger.events(run_id, kinds=(EventKind.CHECKPOINT_RESTORED,))}
    for prev, gen in zip(gens, gens[1:], strict=False):
        if prev in reached and gen in reached:  # both trained: what the next one redid is what was lost
            lost.append(max(0, reached[prev] - restored.get(gen, 0)))  # no restore: from step 0
            since.append(CHECKPOINT_EVERY + 2)  # a commit every CHECKPOINT_EVERY steps, + progress granularity
    return lost, since


def _weights_equal(ckpt: Path, reference: dict, steps: int) -> bool:
    import torch

    from geotrain.train.checkpoint import CheckpointStore

    store = CheckpointStore(str(ckpt))
    latest = store.latest()
    if latest is None or latest.step != steps:
        return False
    weights = store.load(latest)["model"]
    return weights.keys() == reference.keys() and all(torch.equal(weights[k], reference[k]) for k in weights)


def reference_weights(workdir: Path, steps: int = STEPS) -> dict:
    """An uninterrupted run of the chaos plan: the weights every scenario must end with."""
    result = run_scenario(Scenario("reference", steps=steps), workdir, None)
    if result.failures:
        raise AssertionError(f"the reference run failed: {result.failures}")
    from geotrain.train.checkpoint import CheckpointStore

    store = CheckpointStore(str(workdir / "ckpt"))
    return store.load(store.latest())["model"]

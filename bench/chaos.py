"""A chaos campaign: many runs with preemptions in every phase and the launcher killed in every phase,
resumed from a new session each time (``tests/chaos.py``). Prints one row per run and the totals:
preemptions injected, recorded by the ledger, nodes the provider says were preempted, whether the run
recovered (completed with the uninterrupted run's weights), the most steps a restore lost against the
steps the checkpoint interval allows, leaked and duplicated nodes, live processes and temporary files
left (targets: recorded = preempted, every run recovered, lost ≤ allowed, 0 leaked/duplicated/left).

    .venv/bin/python bench/chaos.py [--runs 16] [--seed 7]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.chaos import KILL_PHASES, STEPS, Scenario, reference_weights, run_scenario  # noqa: E402


def random_scenario(rng: random.Random, n: int) -> Scenario:
    events = []
    for _ in range(rng.randint(2, 5)):
        trigger = rng.choice(["at_step", "at_step", "at_s", "during_checkpoint"])
        event: dict = {}
        if trigger == "at_step":
            event["at_step"] = rng.randint(1, STEPS - 2)
        elif trigger == "at_s":
            event["at_s"] = round(rng.uniform(0, 12), 1)
        else:
            event.update(during_checkpoint=True, at_step=rng.randint(0, STEPS - 10))
        if rng.random() < 0.6:
            event["node"] = rng.randint(0, 1)
        if rng.random() < 0.5:
            event["notice_s"] = round(rng.uniform(0.3, 2.0), 1)
        events.append(event)
    kill = KILL_PHASES[n % len(KILL_PHASES)] if rng.random() < 0.85 else None
    return Scenario(f"run {n + 1}", trace=events, kill_at=kill, kills=rng.choice([1, 1, 2]) if kill else 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["GEOTRAIN_HOME"] = str(Path(tmp) / "home")
        started = time.time()
        reference = reference_weights(Path(tmp) / "reference")
        print(f"{'run':<8} {'kill at':<12} {'kills':>5} {'inj':>4} {'rec':>4} {'pre':>4} {'ok':>3} "
              f"{'lost/allowed':>12} {'leak':>4} {'dup':>4} {'left':>4}  failures", flush=True)
        totals = dict(injected=0, recorded=0, preempted=0, recovered=0, kills=0, leaked=0, duplicated=0, left=0,
                      worst_lost=0, allowed=0, failed=0)
        for n in range(args.runs):
            scenario = random_scenario(rng, n)
            result = run_scenario(scenario, Path(tmp) / f"run-{n}", reference)
            lost = max(result.lost_steps, default=0)
            allowed = max(result.since_commit, default=0)
            left = len(result.alive) + len(result.temp_files) + len(result.untracked)
            print(f"{scenario.name:<8} {scenario.kill_at or '-':<12} {result.kills:>5} {result.injected:>4} "
                  f"{result.recorded:>4} {result.preempted_nodes:>4} {'yes' if result.recovered and result.weights_equal else 'NO':>3} "
                  f"{f'{lost}/{allowed}':>12} {len(result.leaked):>4} {len(result.duplicated):>4} {left:>4}  "
                  f"{'; '.join(result.failures)}", flush=True)
            totals["injected"] += result.injected
            totals["recorded"] += result.recorded
            totals["preempted"] += result.preempted_nodes
            totals["recovered"] += bool(result.recovered and result.weights_equal)
            totals["kills"] += result.kills
            totals["leaked"] += len(result.leaked)
            totals["duplicated"] += len(result.duplicated)
            totals["left"] += left
            totals["worst_lost"] = max(totals["worst_lost"], lost)
            totals["allowed"] = max(totals["allowed"], allowed)
            totals["failed"] += bool(result.failures)
        print(f"{args.runs} runs in {time.time() - started:.0f} s: {totals['kills']} launcher kills resumed from a new "
              f"session, {totals['injected']} preemptions injected, {totals['recorded']} recorded, "
              f"{totals['preempted']} nodes preempted; {totals['recovered']}/{args.runs} recovered with the "
              f"uninterrupted weights; worst restore lost {totals['worst_lost']} steps (allowed "
              f"{totals['allowed']}); leaked {totals['leaked']}, duplicated {totals['duplicated']}, left "
              f"{totals['left']}; runs with a failure: {totals['failed']}")


if __name__ == "__main__":
    main()

"""Recovery time per preemption, by sync strategy: what one lost node costs a run in wall time.

For each strategy (allreduce and local-sgd by default): ``geotrain launch`` of a 3-node plan (two
regions) on the local provider, the built-in runtime training the plan's model (resnet18 by
default: torchvision's, small synthetic images on the CPU), checkpoints every ``--checkpoint-every``
steps, and one node preempted at ``--at-step`` (without a notice, or with ``--notice-s`` of
warning: then the warned node writes an emergency checkpoint first). Measured from the ledger:

- ``restart_s``: from the preemption to the new generation's first step (the survivors and the
  replacement start, rendezvous, load the checkpoint);
- ``redo_steps``: steps trained again (the preemption's step less the restored checkpoint's);
- ``recovery_s``: from the preemption until the run is back at the step it had reached (restart
  and the redone steps): the wall time the preemption cost;
- ``step_s``: the run's mean step time before the preemption, for scale.

Every generation restarts the whole gang from the last checkpoint, whatever the strategy (the
launcher's recovery); the figures say what that costs per strategy on this machine.

    .venv/bin/python bench/recovery.py [--strategies allreduce,local-sgd] [--workload resnet18]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NODES = "aws/usw2-az1/g4dn.xlarge,aws/usw2-az2/g4dn.xlarge,aws/use1-az1/g4dn.xlarge"


def geotrain(home: Path, *args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "geotrain", *args], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "GEOTRAIN_HOME": str(home)}, timeout=1800)
    if result.returncode != 0:
        raise SystemExit(f"geotrain {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def measure(strategy: str, args: argparse.Namespace) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        os.environ["GEOTRAIN_HOME"] = str(home)
        plan, trace = Path(tmp) / "plan.json", Path(tmp) / "trace.yaml"
        notice = f", notice_s: {args.notice_s}" if args.notice_s else ""
        trace.write_text(f"- {{at_step: {args.at_step}, node: 1{notice}}}\n")
        geotrain(home, "plan", "--workload", args.workload, "--strategy", strategy, "--target-sps", "1",
                 "--nodes", NODES, "-o", str(plan))
        geotrain(home, "launch", str(plan), "--yes", "--steps", str(args.steps), "--checkpoint-every",
                 str(args.checkpoint_every), "--preempt-trace", str(trace))
        from geotrain.ledger import EventKind, Ledger

        ledger = Ledger()
        run_id = ledger.latest_run_id()
        [preempted] = ledger.events(run_id, kinds=(EventKind.PREEMPTED,))
        rows = ledger.progress_rows(run_id)
        before = [r for r in rows if r.generation == 1]
        lost_at = max(r.step for r in before)
        restored = ledger.events(run_id, kinds=(EventKind.CHECKPOINT_RESTORED,))
        from_step = restored[-1].detail["step"] if restored else 0
        after = [r for r in rows if r.generation > 1]
        first = min(r.at for r in after)
        back = min(r.at for r in after if r.step >= lost_at)
        steps_before = [r for r in before if r.step >= 5]  # after the first progress (the rendezvous, the first step)
        step_s = ((steps_before[-1].at - steps_before[0].at) / (steps_before[-1].step - steps_before[0].step)
                  if len(steps_before) > 1 else float("nan"))
        return {"restart_s": first - preempted.at, "redo_steps": lost_at - from_step,
                "recovery_s": back - preempted.at, "step_s": step_s}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--strategies", default="allreduce,local-sgd")
    parser.add_argument("--workload", default="resnet18")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--at-step", type=int, default=15)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--notice-s", type=float, default=0.0)
    args = parser.parse_args()
    print(f"recovery per preemption: {args.workload}, 3 local nodes in 2 regions, checkpoint every "
          f"{args.checkpoint_every} steps, one node lost at step {args.at_step}"
          + (f" with {args.notice_s:g} s of notice" if args.notice_s else " without notice"))
    print(f"{'strategy':<10} {'restart_s':>10} {'redo_steps':>10} {'recovery_s':>10} {'step_s':>8} {'recovery/step':>14}")
    for strategy in args.strategies.split(","):
        m = measure(strategy, args)
        print(f"{strategy:<10} {m['restart_s']:>10.2f} {m['redo_steps']:>10d} {m['recovery_s']:>10.2f} "
              f"{m['step_s']:>8.3f} {m['recovery_s'] / m['step_s']:>14.1f}")


if __name__ == "__main__":
    main()

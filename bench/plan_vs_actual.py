"""Plan vs actual on the embedded default: `make demo`'s plan and run, measured as a user sees them.

Plans the demo's pinned mix (4 × g4dn.xlarge in two AWS regions, tiny-cnn, allreduce) for the local
provider, launches it with the CLI in a fresh GEOTRAIN_HOME (once without preemptions, once with the
demo's trace of preemptions and a capacity fault), and prints for each run:

- the plan's predicted samples/s and the run's steady training samples/s (cost-report's "actual",
  restart downtime and worker start-up left out), their ratio (target: within 25 %), and the
  effective samples/s over the whole training time;
- the dollars the three commands print for the run: launch's last line, ``geotrain status`` and
  ``geotrain cost-report --json`` (target: equal to the cent fraction shown, $0.0001).

    .venv/bin/python bench/plan_vs_actual.py [--steps 300] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NODES = "aws/usw2-az1/g4dn.xlarge,aws/usw2-az2/g4dn.xlarge,aws/use1-az1/g4dn.xlarge,aws/use1-az2/g4dn.xlarge"
GEOTRAIN = [sys.executable, "-m", "geotrain"]


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    result = subprocess.run([*GEOTRAIN, *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=900)
    if result.returncode != 0:
        raise SystemExit(f"geotrain {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def dollars(text: str) -> float:
    found = re.findall(r"\$([0-9][0-9,]*\.[0-9]+)", text)
    return float(found[-1].replace(",", "")) if found else float("nan")


def one(label: str, steps: int, trace: str | None) -> dict:
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "GEOTRAIN_HOME": home, "COLUMNS": "200"}
        plan = Path(home) / "mix.json"
        run(["plan", "--workload", "tiny-cnn", "--strategy", "allreduce", "--provider", "local", "--target-sps", "100",
             "-o", str(plan), "--nodes", NODES], env)
        args = ["launch", str(plan), "--steps", str(steps), "--block-min", "5"]
        if trace:
            args += ["--preempt-trace", trace]
        launched = run(args, env)
        final = [line for line in launched.stdout.splitlines() if line.startswith("run ") and " completed" in line]
        status = run(["status"], env).stdout
        (report,) = json.loads(run(["cost-report", "--json"], env).stdout)["runs"]
        plan_part = report["plan"]
        return {
            "label": label, "predicted": plan_part["predicted_samples_per_s"],
            "actual": plan_part["actual_samples_per_s"], "effective": plan_part["effective_samples_per_s"],
            "ratio": plan_part["throughput_ratio"], "comparable": plan_part["comparable"],
            "launch_usd": dollars(final[-1] if final else ""), "status_usd": dollars(status.splitlines()[0]),
            "report_usd": report["total_usd"], "preemptions": report["interruptions"]["preemptions"],
            "why": plan_part["reasons"],
        }


def cpu_rate_now() -> tuple[float, float]:
    """tiny-cnn's one-thread rate measured now (bench/cpu_rates.py's way), and the bundled figure."""
    sys.path.insert(0, str(REPO / "bench"))
    os.environ["OMP_NUM_THREADS"] = "1"
    import cpu_rates  # noqa: PLC0415
    import torch  # noqa: PLC0415

    from geotrain.perf.rates import RateTable  # noqa: PLC0415
    from geotrain.perf.workloads import WorkloadRegistry  # noqa: PLC0415

    torch.set_num_threads(1)
    now = statistics.median(cpu_rates.measure("tiny-cnn", 100) for _ in range(3))
    bundled = RateTable.bundled().node_rate(WorkloadRegistry.bundled().get("tiny-cnn"), None, 1).samples_per_s
    return now, bundled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    now, bundled = cpu_rate_now()
    print(f"tiny-cnn on one thread: {now:,.0f} samples/s now vs {bundled:,.0f} in the bundled rates "
          f"({now / bundled:.2f}): the plan predicts with the bundled figure", flush=True)
    rows = []
    for k in range(args.repeats):
        rows.append(one(f"clean #{k + 1}", args.steps, None))
        rows.append(one(f"demo trace #{k + 1}", args.steps, str(REPO / "examples" / "preemptions.yaml")))
    print(f"{'run':<16} {'plan sps':>9} {'actual':>8} {'ratio':>6} {'effective':>9} {'preempt':>7} "
          f"{'launch $':>9} {'status $':>9} {'report $':>9}")
    for r in rows:
        print(f"{r['label']:<16} {r['predicted']:>9,.0f} {r['actual'] or 0:>8,.0f} {r['ratio'] or 0:>6.2f} "
              f"{r['effective'] or 0:>9,.0f} {r['preemptions']:>7} {r['launch_usd']:>9.4f} {r['status_usd']:>9.4f} "
              f"{r['report_usd']:>9.4f}")
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    worst = max(abs(x - 1) for x in ratios)
    print(f"actual/plan: median {statistics.median(ratios):.2f}, worst |1 - ratio| {worst:.2f} (target <= 0.25: "
          f"{'met' if worst <= 0.25 else 'MISSED'})")
    same = all(round(r["launch_usd"], 4) == round(r["status_usd"], 4) == round(r["report_usd"], 4) for r in rows)
    print(f"launch, status and cost-report print the same dollars: {'yes' if same else 'NO'}")
    print("why (last run):")
    for line in rows[-1]["why"]:
        print(f"  {line}")


if __name__ == "__main__":
    main()

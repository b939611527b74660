"""Measure the built-in CPU workloads: samples/s of one training process with one thread.

Times forward + backward + SGD step, data generation included, after warm-up steps. With
``--write`` the figures become geotrain/perf/data/cpu_rates.csv, the compute rates the throughput
model uses for CPU-only nodes (the local provider's nodes).

    .venv/bin/python bench/cpu_rates.py [--steps 60] [--write]
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

from geotrain.train.workloads import WORKLOADS  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "geotrain" / "perf" / "data" / "cpu_rates.csv"
KIND = {"tiny-cnn": "cv", "tiny-lm": "nlp"}


def measure(name: str, steps: int, warmup: int = 5) -> float:
    workload = WORKLOADS[name]
    torch.manual_seed(0)
    model = workload.build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    start = None
    for step in range(warmup + steps):
        if step == warmup:
            start = time.perf_counter()
        x, y = workload.batch(0, step * workload.samples_per_step, workload.samples_per_step)
        loss = workload.loss(model, x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return steps * workload.samples_per_step / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--write", action="store_true", help=f"write {OUT}")
    args = parser.parse_args()
    torch.set_num_threads(1)
    machine = f"{platform.machine()} {os.cpu_count()} cores, torch {torch.__version__}, 1 thread"
    rows = []
    for name in sorted(WORKLOADS):
        rate = measure(name, args.steps)
        rows.append([name, KIND[name], "CPU", 1, f"{rate:.1f}", "false",
                     f"bench/cpu_rates.py on {machine}, {time.strftime('%Y-%m-%d')}"])
        print(f"{name:<10} {rate:8.1f} samples/s  ({machine})")
    if args.write:
        with open(OUT, "w", newline="") as handle:
            writer = csv.writer(handle, lineterminator="\n")
            writer.writerow(["workload", "kind", "accelerator", "accelerator_count", "samples_per_s", "estimated",
                             "source"])
            writer.writerows(rows)
        print(f"wrote {OUT}")


if __name__ == "__main__":
    main()

"""Measure this machine as the local provider uses it: CPU rates of the built-in workloads, and loopback.

1. samples/s of one training process with one thread per workload: forward + backward + SGD step,
   data generation included, after warm-up steps;
2. loopback: gloo all-reduce between two processes here (one thread each) for payloads from 16 KB to
   8 MB; a least-squares fit of ``t = bytes·8 / bandwidth + latency`` (a ring of two: each sends the
   whole payload once) gives the link figure of every pair of local nodes.

With ``--write`` the figures become ``geotrain/perf/data/cpu_rates.csv`` and ``local_host.json``,
which ``geotrain plan --provider local`` predicts with (``geotrain/perf/host.py``).

    .venv/bin/python bench/cpu_rates.py [--steps 60] [--write]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

from geotrain.train.workloads import WORKLOADS  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / "geotrain" / "perf" / "data"
OUT = DATA / "cpu_rates.csv"
HOST_OUT = DATA / "local_host.json"
PAYLOADS = (16_000, 128_000, 512_000, 2_000_000, 8_000_000)  # bytes
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


def _all_reduce_worker(rank: int, port: int, repeats: int) -> None:
    """One of two processes: time gloo all-reduces of fp16 payloads; rank 0 prints JSON."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
    out = {}
    for size in PAYLOADS:
        tensor = torch.ones(size // 2, dtype=torch.float16)
        for _ in range(3):
            dist.all_reduce(tensor)
        times = []
        for _ in range(repeats):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(tensor)
            times.append(time.perf_counter() - start)
        out[size] = statistics.median(times)
    dist.destroy_process_group()
    if rank == 0:
        print(json.dumps(out))


def measure_loopback(repeats: int = 30) -> tuple[float, float, dict[int, float]]:
    """(bandwidth Gbit/s, latency ms, seconds per payload) of a two-process gloo all-reduce here."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); import cpu_rates; " \
           f"cpu_rates._all_reduce_worker(int(sys.argv[1]), {port}, {repeats})"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(rank)], stdout=subprocess.PIPE, text=True, env=env)
             for rank in (0, 1)]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit("the loopback all-reduce measurement failed")
    seconds = {int(k): v for k, v in json.loads(outputs[0]).items()}
    # least squares of the relative error of t = a·bytes + b (small and large payloads count alike)
    xs, ys = list(seconds), list(seconds.values())
    w = [1 / y**2 for y in ys]
    sw, sx, sy = sum(w), sum(wi * x for wi, x in zip(w, xs)), sum(wi * y for wi, y in zip(w, ys))
    sxx, sxy = sum(wi * x * x for wi, x in zip(w, xs)), sum(wi * x * y for wi, x, y in zip(w, xs, ys))
    a = (sw * sxy - sx * sy) / (sw * sxx - sx * sx)
    b = max((sy - a * sx) / sw, 0.0)
    return 8 / a / 1e9, b * 1e3, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3, help="median of this many timings per workload")
    parser.add_argument("--write", action="store_true", help=f"write {OUT}")
    args = parser.parse_args()
    torch.set_num_threads(1)
    machine = f"{platform.machine()} {os.cpu_count()} cores, torch {torch.__version__}, 1 thread"
    rows = []
    for name in sorted(WORKLOADS):
        rate = statistics.median(measure(name, args.steps) for _ in range(args.repeats))
        rows.append([name, KIND[name], "CPU", 1, f"{rate:.1f}", "false",
                     f"bench/cpu_rates.py on {machine}, {time.strftime('%Y-%m-%d')}"])
        print(f"{name:<10} {rate:8.1f} samples/s  ({machine})")
    gbps, latency_ms, seconds = measure_loopback()
    for size, t in seconds.items():
        model = size * 8 / (gbps * 1e9) + latency_ms / 1e3
        print(f"all-reduce {size / 1e3:8.0f} KB  {t * 1e3:8.3f} ms  (fit {model * 1e3:8.3f} ms)")
    print(f"loopback   {gbps:8.3f} Gbit/s, {latency_ms:.3f} ms per hop  (gloo, two processes)")
    if args.write:
        HOST_OUT.write_text(json.dumps({
            "loopback_gbps": round(gbps, 4), "loopback_rtt_ms": round(latency_ms, 4),
            "measured_on": f"{machine}, {time.strftime('%Y-%m-%d')} (bench/cpu_rates.py)",
            "all_reduce_s": {str(k): round(v, 6) for k, v in seconds.items()},
        }, indent=2) + "\n")
        print(f"wrote {HOST_OUT}")
    if args.write:
        with open(OUT, "w", newline="") as handle:
            writer = csv.writer(handle, lineterminator="\n")
            writer.writerow(["workload", "kind", "accelerator", "accelerator_count", "samples_per_s", "estimated",
                             "source"])
            writer.writerows(rows)
        print(f"wrote {OUT}")


if __name__ == "__main__":
    main()

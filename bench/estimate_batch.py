"""Estimates per second after start-up: the Python API (``Estimator``) and ``geotrain estimate --batch``.

Generates a batch of setups (default 2,000; fixed seed): mixes of 1-16 nodes in 1-4 groups, drawn
from the bundled snapshot's GPU offers on AWS, GCP and Azure in many regions and from the on-prem
machines of ``examples/sites.yaml``, with all four strategies and several workloads. Prints

- the start-up time (imports, snapshot, inventory, tables) and estimates/s after it, in-process;
- the same for the CLI (``estimate --batch`` of one line gives its start-up; the rest of the lines
  its rate), with the CPU seconds it used;
- the CPU seconds of one ``geotrain estimate --json`` call, for comparison;
- each rate's ratio to the target of 1,000 estimates/s.

    .venv/bin/python bench/estimate_batch.py [--setups 2000] [--seed 15] [--profile]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SITES = ROOT / "examples" / "sites.yaml"
GEOTRAIN = [sys.executable, "-m", "geotrain"]
TARGET = 1000.0  # estimates/s after start-up (issue 15)
CLOUDS = ("aws", "gcp", "azure")
ACCELERATORS = ("T4", "A10G", "A10", "L4", "V100", "A100", "A100-80GB", "H100")
WORKLOADS = ("convnext-large", "roberta-xlm", "resnet50", "roberta-base")
STRATEGIES = ("hivemind", "allreduce", "local-sgd", "asgd-ga")
ONPREM = ("onprem/munich-lab/rtx8000-ws", "onprem/munich-lab/dgx-2", "onprem/boston-lab/a10-box",
          "onprem/tokyo-lab/t4-box")


def node_pool(rng: random.Random) -> list[str]:
    """``CLOUD/REGION/INSTANCE/MARKET`` items: per cloud, accelerator and region, one instance type (read
    with the csv module, so that the in-process start-up below parses the snapshot itself)."""
    from geotrain.pricing.bundled import data_bytes

    chosen: dict[tuple[str, str, str], set[str]] = {}
    for row in csv.DictReader(io.StringIO(data_bytes("offers.csv").decode("utf-8"))):
        if row["cloud"] in CLOUDS and row["accelerator"] in ACCELERATORS:
            key = (row["cloud"], row["accelerator"], row["region"])
            chosen.setdefault(key, set()).add(f"{row['instance_type']}/{row['market']}")
    return sorted(f"{cloud}/{region}/{rng.choice(sorted(items))}"
                  for (cloud, _, region), items in chosen.items()) + list(ONPREM)


def setups(count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    pool = node_pool(rng)
    out = []
    for n in range(count):
        nodes = rng.randint(1, 16)
        groups = rng.randint(1, min(4, nodes))
        cuts = sorted(rng.sample(range(1, nodes), groups - 1))
        counts = [b - a for a, b in zip([0, *cuts], [*cuts, nodes], strict=True)]
        items = [f"{spec}={c}" for spec, c in zip(rng.sample(pool, groups), counts, strict=True)]
        line = {"workload": rng.choice(WORKLOADS), "nodes": ",".join(items), "strategy": STRATEGIES[n % 4]}
        if rng.random() < 0.5:
            line["sync"] = {"target_batch_size": rng.choice((4096, 16384, 32768)), "local_steps": rng.choice((8, 32)),
                            "accumulation_steps": rng.choice((4, 16)), "precision": rng.choice(("fp16", "fp32"))}
        out.append(line)
    return out


def in_process(lines: list[dict], profile: bool) -> tuple[float, float, float, int]:
    """(start-up s, estimates per second and per CPU-second, errors) through the Python API."""
    started = time.perf_counter()
    from geotrain.app.estimate import EstimateInputs, Estimator, batch_setup, estimate_record
    from geotrain.errors import GeotrainError

    estimator = Estimator(EstimateInputs(onprem_inventory=SITES))
    startup = time.perf_counter() - started
    texts = [json.dumps(line) for line in lines]

    def run() -> int:
        errors = 0
        for n, text in enumerate(texts, start=1):
            try:
                workload, nodes, sync = batch_setup(text, f"line {n}")
                json.dumps(estimate_record(estimator.estimate(workload, nodes, sync)), allow_nan=False)
            except GeotrainError:
                errors += 1
        return errors

    if profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.runcall(run)
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(30)
    started, cpu = time.perf_counter(), time.process_time()
    errors = run()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    return startup, len(texts) / wall, len(texts) / cpu, errors


def cli(args: list[str]) -> tuple[float, float, str, int]:
    """(wall s, CPU s, stdout, exit code) of one geotrain command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    out = subprocess.run([*GEOTRAIN, *args], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, out.stdout, out.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setups", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--profile", action="store_true", help="cProfile the in-process batch (to stderr)")
    options = parser.parse_args()
    lines = setups(options.setups, options.seed)
    strategies = {line["strategy"] for line in lines}
    sizes = [sum(int(item.rsplit("=", 1)[1]) for item in line["nodes"].split(",")) for line in lines]
    clouds = {item.split("/")[0] for line in lines for item in line["nodes"].split(",")}
    regions = {"/".join(item.split("/")[:2]) for line in lines for item in line["nodes"].split(",")}
    print(f"{len(lines)} setups: {min(sizes)}-{max(sizes)} nodes, {len(clouds)} clouds ({', '.join(sorted(clouds))}), "
          f"{len(regions)} regions or sites, strategies {', '.join(sorted(strategies))}")

    startup, rate, cpu_rate, errors = in_process(lines, options.profile)
    print(f"python API        start-up {startup:5.2f} s   after it {rate:7,.0f} estimates/s, {cpu_rate:7,.0f} per CPU-s: "
          f"{rate / TARGET:.2f}x ({cpu_rate / TARGET:.2f}x) the target of {TARGET:,.0f}/s   "
          f"({errors} setups answered with an error)")

    with tempfile.TemporaryDirectory() as tmp:
        batch, one = Path(tmp) / "batch.jsonl", Path(tmp) / "one.jsonl"
        batch.write_text("".join(json.dumps(line) + "\n" for line in lines))
        one.write_text(json.dumps(lines[0]) + "\n")
        base = ["estimate", "--onprem", str(SITES), "--batch"]
        one_wall, one_cpu, _, _ = cli([*base, str(one)])
        wall, cpu, stdout, code = cli([*base, str(batch)])
    answers = [json.loads(text) for text in stdout.splitlines()]
    failed = sum(1 for a in answers if "error" in a)
    cli_rate = (len(lines) - 1) / max(wall - one_wall, 1e-9)
    cli_cpu_rate = (len(lines) - 1) / max(cpu - one_cpu, 1e-9)
    print(f"estimate --batch  start-up {one_wall:5.2f} s   after it {cli_rate:7,.0f} estimates/s, {cli_cpu_rate:7,.0f} per "
          f"CPU-s: {cli_rate / TARGET:.2f}x ({cli_cpu_rate / TARGET:.2f}x) the target   ({len(answers)} answers, "
          f"{failed} errors, exit {code}; {one_cpu:.2f} CPU-s for one line, {cpu:.2f} for all)")

    first = lines[0]
    single = ["estimate", "--onprem", str(SITES), "--workload", first["workload"], "--nodes", first["nodes"],
              "--strategy", first["strategy"], "--json"]
    runs = [cli(single) for _ in range(3)]
    single_cpu = statistics.median(r[1] for r in runs)
    single_wall = statistics.median(r[0] for r in runs)
    print(f"one `geotrain estimate --json`: {single_wall:.2f} s wall, {single_cpu:.2f} CPU-s (median of 3); "
          f"a batch line costs {cpu / len(lines) * 1000:.2f} CPU-ms in all, start-up included")


if __name__ == "__main__":
    main()

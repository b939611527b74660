"""Throughput model: predicted vs measured samples/s on every calibration run, and prediction speed.

For each run of Erben et al. (single GPU and one-zone multi-GPU tables) prints measured and
predicted samples/s and averaging-round time with the relative error, then the median and max
error; then how many predictions per second ``PerfModel.predict`` makes for a geo-distributed mix
(the planner calls it for many candidate mixes).

    .venv/bin/python bench/perf_model.py
"""

from __future__ import annotations

import statistics
import time

from geotrain.domain import Continent, InstanceShape, InterruptionSignal, Location, Market, NodeGroup, Offer
from geotrain.perf.calibration import load_runs, run_groups
from geotrain.perf.data import data_text
from geotrain.domain import SyncSettings
from geotrain.perf.model import PerfModel
from geotrain.pricing.egress import EgressPrices
from geotrain.perf.workloads import WorkloadRegistry


def calibration_table(model: PerfModel) -> None:
    registry = WorkloadRegistry.bundled()
    strategy = SyncSettings("hivemind")
    errors, round_errors = [], []
    print(f"{'setup':<24} {'acc':<15} {'n':>2} {'workload':<17} {'measured':>9} {'predicted':>9} {'err':>6}"
          f" {'avg_s':>6} {'pred_s':>6} {'err':>6}")
    for run in load_runs(data_text("calibration_runs.csv")):
        estimate = model.predict(registry.get(run.workload), run_groups(run), strategy)
        err = estimate.samples_per_s / run.samples_per_s - 1
        errors.append(abs(err))
        line = (f"{run.setup:<24} {run.accelerator:<15} {run.peers:>2} {run.workload:<17} {run.samples_per_s:>9.1f}"
                f" {estimate.samples_per_s:>9.1f} {err:>+6.1%}")
        if run.averaging_round_s:
            round_err = estimate.comm_time_per_round_s / run.averaging_round_s - 1
            round_errors.append(abs(round_err))
            line += f" {run.averaging_round_s:>6.2f} {estimate.comm_time_per_round_s:>6.2f} {round_err:>+6.1%}"
        print(line)
    print(f"samples/s: {len(errors)} runs, median |error| {statistics.median(errors):.1%}, max {max(errors):.1%}")
    print(f"averaging round: {len(round_errors)} runs, median |error| {statistics.median(round_errors):.1%}, "
          f"max {max(round_errors):.1%}")


def offer(cloud: str, region: str, zone: str, continent: Continent, instance: str, accel: str, price: float) -> Offer:
    from datetime import datetime, timezone

    return Offer(Location(cloud, region, zone, continent), InstanceShape(instance, 8, 32, accel, 1), Market.SPOT,
                 price, None, InterruptionSignal(None, None), datetime(2026, 1, 1, tzinfo=timezone.utc), "bench")


def speed(model: PerfModel, seconds: float = 2.0) -> None:
    registry = WorkloadRegistry.bundled()
    groups = [
        NodeGroup(offer("gcp", "us-central1", "us-central1-a", Continent.NORTH_AMERICA, "n1-standard-8+T4", "T4", 0.18), 4),
        NodeGroup(offer("aws", "us-west-2", "usw2-az1", Continent.NORTH_AMERICA, "g4dn.2xlarge", "T4", 0.4), 4),
        NodeGroup(offer("gcp", "europe-west3", "europe-west3-b", Continent.EUROPE, "n1-standard-8+T4", "T4", 0.2), 2),
        NodeGroup(offer("azure", "eastus", "", Continent.NORTH_AMERICA, "Standard_NC4as_T4_v3", "T4", 0.13), 2),
    ]
    for name in ("hivemind", "allreduce", "local-sgd", "asgd-ga"):
        strategy = SyncSettings(name)
        workload = registry.get("convnext-large")
        model.predict(workload, groups, strategy)  # warm the link cache, as a planner does
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            model.predict(workload, groups, strategy)
            count += 1
        rate = count / (time.perf_counter() - start)
        print(f"predict ({name}, 12 nodes in 4 groups, 3 regions, 3 clouds): {rate:,.0f} predictions/s")


if __name__ == "__main__":
    perf = PerfModel(egress=EgressPrices.bundled())
    calibration_table(perf)
    speed(perf)

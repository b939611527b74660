"""Throughput model: predicted vs measured samples/s on every calibration run, cross-validation, speed.

1. In sample: for each run of Erben et al. (single GPU and one-zone multi-GPU tables), measured and
   predicted samples/s and averaging-round time with the relative error (the bundled fit).
2. Leave one group out: the hivemind constants are refitted (``fit_hivemind``) without one group's
   multi-peer runs and that group is predicted. Groups are setup families (setup × accelerator ×
   cloud), then workloads, then series (one workload's peer sweep in one setup family). The
   single-node baselines are the model's measured compute rates, an input of every fold, not a group. Median, p90 and max |error| per group and over all held-out runs.
3. Leave one accelerator out of the datasheet rule (``geotrain.perf.rates``): its exponents are
   refitted without one of the accelerators Lambda measured, and that accelerator's 1-GPU ratio to
   the A10 is predicted from its datasheet, beside the TFLOPS-only ratio; then the T4, which Lambda
   did not measure, against Erben et al.'s measured T4/A10 ratios (never fitted on).
4. In the data centre, held out: published multi-node data-parallel runs (``bench/data/
   dc_scaling_runs.csv``, sources and doubts in ``bench/data/dc_scaling_SOURCES.md``), none of them
   used by any fit. Each series' measured one-node rate is the node's rate (an input, as the
   single-node baselines above); the model predicts the N-node rate from the ring all-reduce over the
   run's interconnect and DDP's overlap (``geotrain.perf.strategies``: ``β`` and the 25 MiB bucket are
   priors, nothing is fitted on these runs), beside the same ring without the overlap and the previous
   model (one TCP stream of 4.78 Gbit/s, no overlap). Runs with gradient accumulation (one all-reduce
   per accumulated batch) and runs whose per-GPU batch is not printed are left out and counted.
5. How many predictions per second ``PerfModel.predict`` makes for a geo-distributed mix.

    .venv/bin/python bench/perf_model.py
"""

from __future__ import annotations

import csv
import re
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from geotrain.domain import Continent, InstanceShape, InterruptionSignal, Location, Market, NodeGroup, Offer
from geotrain.domain import LinkClass, SyncSettings
from geotrain.perf import strategies, terms
from geotrain.perf.network import LinkEstimate
from geotrain.perf.strategies import PeerGroup, Topology
from geotrain.perf.workloads import Workload
from geotrain.perf.calibration import CalibrationRun, held_out_fits, load_runs, multi_peer, run_groups
from geotrain.perf.data import data_text
from geotrain.perf.model import PerfModel
from geotrain.perf.network import NetworkModel
from geotrain.perf.rates import (
    ANCHOR, SAME_CHIP, GpuScaling, RateTable, bundled_datasheets, chip_name, fit_hardware_exponents,
)
from geotrain.pricing.egress import EgressPrices
from geotrain.perf.workloads import WorkloadRegistry

REGISTRY = WorkloadRegistry.bundled()
WORKLOADS = {name: REGISTRY.get(name) for name in REGISTRY.names()}


def errors(model: PerfModel, runs: Sequence[CalibrationRun]) -> list[tuple[CalibrationRun, float, float, float | None, float | None]]:
    """(run, predicted samples/s, its error, predicted averaging round s, its error) per run."""
    out = []
    for run in runs:
        estimate = model.predict(REGISTRY.get(run.workload), run_groups(run), SyncSettings("hivemind"))
        err = estimate.samples_per_s / run.samples_per_s - 1
        round_s = estimate.comm_time_per_round_s if run.averaging_round_s else None
        round_err = round_s / run.averaging_round_s - 1 if round_s is not None else None
        out.append((run, estimate.samples_per_s, err, round_s, round_err))
    return out


def summary(values: Sequence[float]) -> str:
    if not values:
        return f"{'-':>6} {'-':>6} {'-':>6}"
    ordered = sorted(abs(v) for v in values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return f"{statistics.median(ordered):>6.1%} {p90:>6.1%} {ordered[-1]:>6.1%}"


def calibration_table(model: PerfModel, runs: Sequence[CalibrationRun]) -> None:
    print("In sample (bundled fit)")
    print(f"{'setup':<24} {'acc':<15} {'n':>2} {'workload':<17} {'measured':>9} {'predicted':>9} {'err':>6}"
          f" {'avg_s':>6} {'pred_s':>6} {'err':>6}")
    rows = errors(model, runs)
    for run, predicted, err, round_s, round_err in rows:
        line = (f"{run.setup:<24} {run.accelerator:<15} {run.peers:>2} {run.workload:<17} {run.samples_per_s:>9.1f}"
                f" {predicted:>9.1f} {err:>+6.1%}")
        if round_s is not None:
            line += f" {run.averaging_round_s:>6.2f} {round_s:>6.2f} {round_err:>+6.1%}"
        print(line)
    sps = [r[2] for r in rows]
    multi = [r[2] for r in rows if r[0].peers > 1]
    rounds = [r[4] for r in rows if r[4] is not None]
    print(f"samples/s: {len(sps)} runs, median |error| {statistics.median(map(abs, sps)):.1%}, max {max(map(abs, sps)):.1%}"
          f" (multi-peer only: {len(multi)} runs, median {statistics.median(map(abs, multi)):.1%})")
    print(f"averaging round: {len(rounds)} runs, median |error| {statistics.median(map(abs, rounds)):.1%}, "
          f"max {max(map(abs, rounds)):.1%}")


def family(run: CalibrationRun) -> str:
    return f"{run.setup} / {run.accelerator} / {run.cloud}"


def cross_validation(runs: Sequence[CalibrationRun], key: Callable[[CalibrationRun], str], title: str) -> None:
    network, egress = NetworkModel.bundled(), EgressPrices.bundled()
    groups = sorted({key(r) for r in multi_peer(runs)})
    print(f"\nLeave one group out, groups = {title} ({len(groups)} groups; the single-node baselines are inputs"
          " of every fold)")
    print(f"{'held out':<64} {'runs':>4} | {'samples/s: median':>17} {'p90':>6} {'max':>6} |"
          f" {'round: median':>13} {'p90':>6} {'max':>6} | fit")
    every_sps, every_round = [], []
    for group, held, fit, report in held_out_fits(runs, key, network, WORKLOADS):
        rows = errors(PerfModel(egress=egress, network=network, fit=fit), held)
        sps, rounds = [r[2] for r in rows], [r[4] for r in rows if r[4] is not None]
        every_sps += sps
        every_round += rounds
        how = f"α {report['host_exponent'].split(' ')[0]}, κ {report['step_s_per_gparam'].split(' ')[0]}"
        print(f"{group:<64} {len(held):>4} | {summary(sps):>31} | {summary(rounds):>27} | {how}")
    print(f"{'all held-out runs':<64} {len(every_sps):>4} | {summary(every_sps):>31} | {summary(every_round):>27} |")


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


def accelerator_folds() -> None:
    """Section 3: the datasheet rule, one accelerator held out at a time."""
    sheets = bundled_datasheets()
    scaling = GpuScaling.parse(data_text("gpu_scaling.csv"), "bundled gpu_scaling.csv")
    measured = {(acc, kind): r for (acc, kind), r in scaling.ratios.items()
                if acc != ANCHOR and acc in sheets and acc == chip_name(acc)}  # one row per chip
    print("\nLeave one accelerator out: the datasheet rule's exponents refitted without it (Lambda's 1-GPU ratios "
          "to A10)")
    print(f"{'held out':<12} {'kind':<4} {'measured':>8} | {'rule':>6} {'error':>7} | {'TFLOPS':>6} {'error':>7}"
          " | x, y")
    new_errors: list[float] = []
    old_errors: list[float] = []
    for (acc, kind), ratio in sorted(measured.items()):
        chip = next((g for g in SAME_CHIP if acc in g), frozenset({acc}))  # its same-chip names go too
        x, y = fit_hardware_exponents(scaling.ratios, sheets, leave_out=chip)[kind]
        t, b = sheets[acc].ratio_to(sheets[ANCHOR])
        rule = t ** x * b ** y
        new_errors.append(abs(rule / ratio - 1))
        old_errors.append(abs(t / ratio - 1))
        print(f"{acc:<12} {kind:<4} {ratio:>8.3f} | {rule:>6.3f} {rule / ratio - 1:>+7.1%} | {t:>6.3f} "
              f"{t / ratio - 1:>+7.1%} | {x:.3f}, {y:.3f}")
    print(f"{'all held out':<17} {len(new_errors):>8} | median {statistics.median(new_errors):.1%} max "
          f"{max(new_errors):.1%} | TFLOPS rule: median {statistics.median(old_errors):.1%} max {max(old_errors):.1%}")
    exponents = fit_hardware_exponents(scaling.ratios, sheets)
    rates = {(r.workload, r.accelerator): r.samples_per_s for r in RateTable.bundled().measured()
             if r.accelerator_count == 1 and r.basis == "measured"}
    for (workload, acc), value in sorted(rates.items()):
        if acc in (ANCHOR, "CPU") or acc in {a for a, _ in measured} or (workload, ANCHOR) not in rates:
            continue
        kind = REGISTRY.get(workload).kind
        x, y = exponents[kind]
        t, b = sheets[acc].ratio_to(sheets[ANCHOR])
        ratio, rule = value / rates[(workload, ANCHOR)], t ** x * b ** y
        print(f"{acc:<12} {kind:<4} {ratio:>8.3f} | {rule:>6.3f} {rule / ratio - 1:>+7.1%} | {t:>6.3f} "
              f"{t / ratio - 1:>+7.1%} | not in Lambda's data: Erben et al.'s {workload} on {acc} / {ANCHOR}")


DC_RUNS = Path(__file__).parent / "data" / "dc_scaling_runs.csv"
DC_PARAMETERS = {"ResNet-50": 25_557_032, "BERT-base": 110_000_000, "BERT-large": 340_000_000}  # the models' sizes
DC_RTT_MS = 0.05  # inside one cluster (the latency term is negligible against the payload at these sizes)
PREVIOUS_STREAM_GBPS = 4.78  # the model before: one TCP stream per ring hop (network.json's AWS same-zone figure)


def _interconnect_gbps(row: dict) -> tuple[float | None, str]:
    """The run's node network (Gbit/s): as stated, else the system's nominal figure the row notes."""
    if row["interconnect_gbps"]:
        return float(row["interconnect_gbps"]), "stated"
    text = row["interconnect"]
    found = re.search(r"(\d+)\s*x\s*(\d+)\s*Gb", text)
    if found:
        return float(found.group(1)) * float(found.group(2)), "nominal"
    found = re.search(r"(\d+)\s*Gbit/s", text)
    return (float(found.group(1)), "nominal") if found else (None, "")


def _ddp_rate(nodes: int, per_node_samples_s: float, per_node_step: int, parameters: int, gbps: float,
              overlap: bool) -> float:
    """The N-node rate of the model's allreduce: one group of identical nodes, every hop at ``gbps``."""
    link = LinkEstimate(gbps, DC_RTT_MS, LinkClass.SAME_ZONE, True, True, "the run's interconnect")
    location = Location("onprem", "cluster", "", Continent.EUROPE)
    topo = Topology([PeerGroup(location, nodes, per_node_samples_s, per_node_step)], lambda a, b: link,
                    lambda site: None)
    workload = Workload("held-out", parameters, "cv", per_node_step)
    ring, _, _ = strategies._ring_allreduce(topo, [0], parameters * 4)  # fp32 gradients on the wire
    compute = per_node_step / per_node_samples_s
    step = terms.ddp_step_s(compute, ring, terms.ddp_bucket_share(workload.parameters)) if overlap \
        else compute + ring
    return nodes * per_node_step / step


def _framework(framework: str) -> str:
    """The family of a run's framework: PyTorch DDP (geotrain's runtime), Horovod, or the framework's name."""
    if "Horovod" in framework:
        return "Horovod"
    if "PyTorch" in framework or "DDP" in framework:
        return "PyTorch DDP"
    return framework.split()[0]


def datacentre_folds() -> None:
    rows = list(csv.DictReader(DC_RUNS.open(encoding="utf-8")))
    series: dict[tuple, dict[int, dict]] = {}
    skipped = Counter()
    for row in rows:
        if "accumul" in (row["metric_note"] + row["framework"]).lower():
            skipped["gradient accumulation"] += 1
            continue
        if not row["per_gpu_batch"] or row["model"] not in DC_PARAMETERS:
            skipped["no per-GPU batch printed"] += 1
            continue
        if int(row["gpus_per_node"]) < 8 and int(row["nodes"]) == 1 and "1 GPU" in row["metric_note"]:
            continue  # a single-GPU row of a series: the node (all its GPUs) is the base
        key = (row["source"], row["system"], row["model"], row["framework"], row["precision"], row["per_gpu_batch"])
        series.setdefault(key, {})[int(row["nodes"])] = row
    folds: dict[str, list[tuple[float, float, float]]] = {}
    print("\nData centre, held out (no fit uses these runs): predicted / measured - 1 for every run of 2+ nodes;"
          " the one-node run of each series is the node's rate")
    for (source, system, model, framework, precision, batch), by_nodes in sorted(series.items()):
        base = by_nodes.get(1)
        if base is None or len(by_nodes) < 2:
            skipped["no one-node run in its series"] += len(by_nodes)
            continue
        gbps, how = _interconnect_gbps(base)
        if gbps is None:
            skipped["no interconnect figure"] += len(by_nodes) - 1
            continue
        step = int(base["gpus_per_node"]) * int(batch)
        rate = float(base["samples_per_s"])
        fold = f"{source.split(':')[0].split(' (')[0][:30]} / {model} / {_framework(framework)}"
        for nodes, row in sorted(by_nodes.items()):
            if nodes < 2:
                continue
            measured = float(row["samples_per_s"])
            errs = tuple(_ddp_rate(nodes, rate, step, DC_PARAMETERS[model], g, o) / measured - 1
                         for g, o in ((gbps, True), (gbps, False), (PREVIOUS_STREAM_GBPS, False)))
            folds.setdefault(f"{fold} ({how} {gbps:g} Gbit/s)", []).append(errs)
    print(f"{'held out (source / model / framework, interconnect)':<76} {'runs':>4} | {'model: median':>13} {'p90':>6} |"
          f" {'no overlap':>10} {'p90':>6} | {'previous':>8} {'p90':>6}")
    every: list[tuple[float, float, float]] = []
    for fold, errs in sorted(folds.items()):
        every += errs
        cols = [summary([e[k] for e in errs]).split()[:2] for k in range(3)]
        print(f"{fold:<76} {len(errs):>4} | {cols[0][0]:>13} {cols[0][1]:>6} | {cols[1][0]:>10} {cols[1][1]:>6} |"
              f" {cols[2][0]:>8} {cols[2][1]:>6}")
    cols = [summary([e[k] for e in every]).split()[:2] for k in range(3)]
    print(f"{'all held-out runs':<76} {len(every):>4} | {cols[0][0]:>13} {cols[0][1]:>6} | {cols[1][0]:>10} "
          f"{cols[1][1]:>6} | {cols[2][0]:>8} {cols[2][1]:>6}")
    signed = sorted(e[0] for e in every)
    print(f"signed error of the model: median {statistics.median(signed):+.1%} (positive: predicts faster than "
          f"measured); left out: " + ", ".join(f"{n} runs ({why})" for why, n in sorted(skipped.items())))


if __name__ == "__main__":
    perf = PerfModel(egress=EgressPrices.bundled())
    calibration = load_runs(data_text("calibration_runs.csv"))
    calibration_table(perf, calibration)
    cross_validation(calibration, family, "setup families (setup / accelerator / cloud)")
    cross_validation(calibration, lambda r: r.workload, "workloads")
    cross_validation(calibration, lambda r: f"{family(r)} / {r.workload}", "series (one workload's peer sweep in "
                     "one setup family)")
    accelerator_folds()
    datacentre_folds()
    print()
    speed(perf)

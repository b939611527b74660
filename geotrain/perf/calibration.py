"""Calibration of the throughput model on measured runs (Erben et al., one-zone tables).

What is fitted (``scripts/calibrate_perf.py`` writes the result to ``perf/data/calibration.json``):

- the Hivemind efficiency ``e_w`` per workload: the share of its standalone rate a GPU keeps inside
  Hivemind, ``e = TBS / ((epoch − averaging) · n · r_1)``, averaged over a workload's runs; workloads
  without runs get the median over workloads;
- the averaging round's overhead ``f0 + β·n + γ·(P/1e9)·v(n)``: least squares on
  ``averaging − T_xfer`` over all runs, weighted by 1/averaging (relative error), where
  ``T_xfer`` is the transfer time the network model predicts for that run.

The measured single-GPU rates become ``perf/data/compute_rates.csv``. Everything else in the model
(network, strategies other than hivemind) is not fitted here: it comes from other measurements.
"""

from __future__ import annotations

import csv
import io
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from geotrain.domain import Continent, InstanceShape, InterruptionSignal, Location, Market, NodeGroup, Offer
from geotrain.perf.strategies import Hivemind, HivemindFit, PeerGroup, Topology

# Where the paper's machines were, as locations the network model knows.
RUN_LOCATIONS = {
    "gc": Location("gcp", "us-central1", "us-central1-a", Continent.NORTH_AMERICA),
    "lambda": Location("lambda", "us-west-1", "us-west-1a", Continent.NORTH_AMERICA),
    "onprem": Location("onprem", "tum-munich", "", Continent.EUROPE),
}


@dataclass(frozen=True, slots=True)
class CalibrationRun:
    setup: str
    accelerator: str  # e.g. "T4", "V100x8 (DGX-2)"
    cloud: str  # gc | lambda | onprem
    peers: int
    workload: str
    tbs: int
    samples_per_s: float
    epoch_s: float | None
    averaging_round_s: float | None

    @property
    def accelerator_model(self) -> tuple[str, int]:
        """(model, accelerators per node): 'V100x8 (DGX-2)' -> ('V100', 8)."""
        head = self.accelerator.split(" ")[0]
        if "x" in head:
            model, count = head.split("x")
            return model, int(count)
        return head, 1


def load_runs(text: str) -> list[CalibrationRun]:
    def number(value: str) -> float | None:
        return float(value) if value else None

    return [
        CalibrationRun(row["setup"], row["accelerator"], row["cloud"], int(row["peers"]), row["workload"],
                       int(row["tbs"]), float(row["samples_per_s"]), number(row["epoch_s"]),
                       number(row["averaging_round_s"]))
        for row in csv.DictReader(io.StringIO(text))
    ]


def run_offer(run: CalibrationRun) -> Offer:
    """An offer standing for one of the run's machines (price 0: calibration is about speed)."""
    model, count = run.accelerator_model
    return Offer(
        location=RUN_LOCATIONS[run.cloud],
        shape=InstanceShape(f"{run.cloud}-{model.lower()}x{count}", 0.0, 0.0, model, count),
        market=Market.OWNED, price_usd_per_hour=0.0, capacity_hint=None,
        interruption=InterruptionSignal("none", 0.0), observed_at=datetime(2023, 4, 1, tzinfo=timezone.utc),
        source="Erben et al. 2024", uplink_gbps=None,
    )


def run_groups(run: CalibrationRun) -> tuple[NodeGroup, ...]:
    return (NodeGroup(run_offer(run), run.peers),)


def baseline_rates(runs: Iterable[CalibrationRun]) -> dict[tuple[str, str, int], float]:
    """(workload, accelerator, count) -> measured single-node samples/s."""
    return {(r.workload, *r.accelerator_model): r.samples_per_s for r in runs if r.peers == 1}


def fit_hivemind(runs: Sequence[CalibrationRun], network, parameters: dict[str, int]) -> tuple[HivemindFit, dict]:
    """Fit efficiencies and the round overhead; returns the fit and a report of the inputs."""
    import numpy as np

    base = baseline_rates(runs)
    multi = [r for r in runs if r.peers > 1 and r.epoch_s and r.averaging_round_s]
    per_workload: dict[str, list[float]] = {}
    for r in multi:
        rate = base[(r.workload, *r.accelerator_model)]
        per_workload.setdefault(r.workload, []).append(r.tbs / ((r.epoch_s - r.averaging_round_s) * r.peers * rate))
    efficiency = {w: round(statistics.fmean(v), 4) for w, v in sorted(per_workload.items())}
    default = round(statistics.median(efficiency.values()), 4)

    probe = Hivemind(HivemindFit({}, 1.0, 0.0, 0.0, 0.0), target_batch_size=1)  # only transfer() is used
    rows, target, weight = [], [], []
    for r in multi:
        offer = run_offer(r)
        topo = Topology([PeerGroup(offer.location, r.peers, 1.0, 1)], network.link, lambda _site: None)
        payload = parameters[r.workload] * 2.0
        xfer, _, _ = probe.transfer(topo, payload)
        v = 2 * (r.peers - 1) / r.peers
        rows.append([1.0, r.peers, parameters[r.workload] / 1e9 * v])
        target.append(r.averaging_round_s - xfer)
        weight.append(1.0 / r.averaging_round_s)
    a, y, w = np.array(rows), np.array(target), np.array(weight)
    coef, *_ = np.linalg.lstsq(a * w[:, None], y * w, rcond=None)
    f0, beta, gamma = (round(float(c), 4) for c in coef)
    fit = HivemindFit(efficiency, default, f0, beta, gamma)
    report = {"runs": len(multi), "workloads": len(efficiency), "weighting": "relative (1/averaging_round_s)"}
    return fit, report

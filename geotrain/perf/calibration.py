"""Calibration of the throughput model on measured runs (Erben et al., one-zone tables).

What is fitted (``scripts/calibrate_perf.py`` writes the result to ``perf/data/calibration.json``;
the formulas are in ``geotrain.perf.strategies``), from the runs given to :func:`fit_hivemind`:

- the host exponent ``α`` of ``h(v) = (min(v, V)/V)^(−α)`` (``V`` = :data:`HOST_VCPUS`, a prior):
  a grid search for the least relative error of the averaging round; it needs runs on two host
  sizes, else ``α`` is the prior :data:`PRIOR_HOST_EXPONENT`;
- the averaging round's overhead ``h·(f0 + β·n + γ·(P/1e9))``: least absolute deviations of
  ``averaging − T_xfer``, weighted by 1/averaging (relative error), where ``T_xfer`` is the
  transfer time the network model predicts for that run;
- the time a node spends per sample inside Hivemind, ``(epoch − averaging)·n / TBS``, as
  ``1/(e_w·r) + h·κ·(P/1e9)/mb``: ``1/e_w`` per workload and one ``κ`` (seconds per step per
  billion parameters), least squares weighted by the inverse of that time. ``κ`` is identified only
  by a workload measured on hosts of different speed; else (or if the fit is negative) it is the
  prior :data:`PRIOR_STEP_S_PER_GPARAM` (or 0);
- for workloads without runs, per kind ``k``: the whole per-step cost ``λ_k`` of
  ``(epoch − averaging)·n / TBS = 1/r + h·λ_k·(P/1e9)/mb`` (``e = 1``), least squares weighted by the
  inverse of that time over the kind's runs. A new workload's prediction then comes from its size
  and compute rate; a median of the others' ``e_w`` was 36–48 % off for the two largest CV models
  when they were held out.

The measured single-GPU rates become ``perf/data/compute_rates.csv``. Everything else in the model
(network, strategies other than hivemind) is not fitted here: it comes from other measurements.
"""

from __future__ import annotations

import csv
import io
import statistics
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from geotrain.domain import Continent, InstanceShape, InterruptionSignal, Location, Market, NodeGroup, Offer
from geotrain.perf.hivemind_fit import HivemindFit
from geotrain.perf.strategies import Hivemind, PeerGroup, Topology
from geotrain.perf.workloads import Workload

WORKLOAD_MICRO_BATCH = 32  # per GPU in every multi-peer run (erben-calibration.md; 256 on the DGX-2, not among them)

# Their virtual CPUs (the host factor's variable): GC n1-standard-8 (erben-calibration.md); Lambda's
# 1x A10 instance has 30 (Lambda's instance list, a vendor figure); the on-prem machines: not stated.
RUN_VCPUS = {"gc": 8.0, "lambda": 30.0, "onprem": 0.0}

# Priors (estimated, not fitted), used where the runs given cannot identify a constant:
# α: the round's host-side work (compression, reduction, the offloaded optimizer step) runs on the
# host's cores; fully parallel work would scale as 1/cores (α = 1), serial work not at all (α = 0).
PRIOR_HOST_EXPONENT = 0.5
# κ: one read-modify-write of the fp32 gradients per step on the GPU (8 bytes per parameter at about
# 320 GB/s, a T4's memory bandwidth): 0.025 s per billion parameters.
PRIOR_STEP_S_PER_GPARAM = 0.025
# A node whose vCPUs are not known counts as an 8-vCPU VM (the T4 VMs of the study).
UNKNOWN_VCPUS = 8.0
# V: a host with more vCPUs than this is taken to be no faster (the largest host measured has 30).
HOST_VCPUS = 32.0
ROBUST_ITERATIONS = 30

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
        shape=InstanceShape(f"{run.cloud}-{model.lower()}x{count}", RUN_VCPUS[run.cloud], 0.0, model, count),
        market=Market.OWNED, price_usd_per_hour=0.0, capacity_hint=None,
        interruption=InterruptionSignal("none", 0.0), observed_at=datetime(2023, 4, 1, tzinfo=timezone.utc),
        source="Erben et al. 2024", uplink_gbps=None,
    )


def run_groups(run: CalibrationRun) -> tuple[NodeGroup, ...]:
    return (NodeGroup(run_offer(run), run.peers),)


def baseline_rates(runs: Iterable[CalibrationRun]) -> dict[tuple[str, str, int], float]:
    """(workload, accelerator, count) -> measured single-node samples/s."""
    return {(r.workload, *r.accelerator_model): r.samples_per_s for r in runs if r.peers == 1}


def multi_peer(runs: Iterable[CalibrationRun]) -> list[CalibrationRun]:
    """The runs with two or more peers and measured epoch and averaging times (what the fit uses)."""
    return [r for r in runs if r.peers > 1 and r.epoch_s and r.averaging_round_s]


def _lstsq(rows: list[list[float]], target: list[float], weight: list[float], robust: bool = False) -> list[float]:
    """Weighted least squares; ``robust``: least absolute weighted deviations instead (iteratively
    reweighted), so that a few runs far off the model's form do not pull the rest."""
    import numpy as np

    a, y, w = np.array(rows), np.array(target), np.array(weight)
    coef, *_ = np.linalg.lstsq(a * w[:, None], y * w, rcond=None)
    for _ in range(ROBUST_ITERATIONS if robust else 0):
        scale = w / np.sqrt(np.maximum(np.abs((a @ coef - y) * w), 1e-3))
        coef, *_ = np.linalg.lstsq(a * scale[:, None], y * scale, rcond=None)
    return [float(c) for c in coef]


def _round_fit(multi: Sequence[CalibrationRun], xfer: Sequence[float], parameters: dict[str, int],
               host: Callable[[float], float]) -> tuple[list[float], float]:
    """(f0, β, γ) and the sum of absolute relative errors of the averaging round."""
    rows, target, weight = [], [], []
    for r, x in zip(multi, xfer, strict=True):
        h = host(RUN_VCPUS[r.cloud])
        rows.append([h, h * r.peers, h * parameters[r.workload] / 1e9])
        target.append(r.averaging_round_s - x)
        weight.append(1.0 / r.averaging_round_s)
    coef = _lstsq(rows, target, weight, robust=True)
    sae = sum(abs((sum(c * v for c, v in zip(coef, row)) - y) * w) for row, y, w in zip(rows, target, weight))
    return coef, sae


def _step_fit(multi: Sequence[CalibrationRun], base: dict, parameters: dict[str, int],
              host: Callable[[float], float]) -> tuple[dict[str, float], float, str]:
    """(e_w per workload, κ, how κ was set)."""
    names = sorted({r.workload for r in multi})
    speeds: dict[str, set[float]] = {}
    for r in multi:
        speeds.setdefault(r.workload, set()).add(base[(r.workload, *r.accelerator_model)])
    identified = any(len(v) > 1 for v in speeds.values())

    def per_sample(r: CalibrationRun) -> float:
        return (r.epoch_s - r.averaging_round_s) * r.peers / r.tbs

    def fixed(r: CalibrationRun) -> float:
        model, count = r.accelerator_model
        step = WORKLOAD_MICRO_BATCH * max(1, count)
        return host(RUN_VCPUS[r.cloud]) * parameters[r.workload] / 1e9 / step

    def inverse_shares(kappa: float) -> dict[str, float]:
        out: dict[str, list[float]] = {}
        for r in multi:
            rate = base[(r.workload, *r.accelerator_model)]
            out.setdefault(r.workload, []).append((per_sample(r) - kappa * fixed(r)) * rate)
        return {w: statistics.fmean(v) for w, v in out.items()}

    how = "fitted"
    kappa = PRIOR_STEP_S_PER_GPARAM
    if identified:
        rows, target, weight = [], [], []
        for r in multi:
            rate = base[(r.workload, *r.accelerator_model)]
            rows.append([1.0 / rate if w == r.workload else 0.0 for w in names] + [fixed(r)])
            target.append(per_sample(r))
            weight.append(1.0 / per_sample(r))
        kappa = _lstsq(rows, target, weight)[-1]
        if kappa < 0:
            kappa, how = 0.0, "fitted (negative, set to 0)"
    else:
        how = "prior (no workload measured on two host speeds)"
    return {w: round(1.0 / u, 4) for w, u in sorted(inverse_shares(kappa).items())}, kappa, how


def _unseen_fit(multi: Sequence[CalibrationRun], base: dict, workloads: Mapping[str, Workload],
                host: Callable[[float], float]) -> dict[str, float]:
    """λ_k per workload kind: ``t − 1/r = λ_k·h·(P/1e9)/mb``, weighted by 1/t (relative error)."""
    sums: dict[str, list[float]] = {}
    for r in multi:
        w = workloads[r.workload]
        model, count = r.accelerator_model
        t = (r.epoch_s - r.averaging_round_s) * r.peers / r.tbs
        x = host(RUN_VCPUS[r.cloud]) * w.parameters / 1e9 / (WORKLOAD_MICRO_BATCH * max(1, count))
        y = t - 1.0 / base[(r.workload, model, count)]
        acc = sums.setdefault(w.kind, [0.0, 0.0])
        acc[0] += x * y / t ** 2
        acc[1] += x * x / t ** 2
    return {kind: round(max(0.0, xy / xx), 4) for kind, (xy, xx) in sorted(sums.items())}


def fit_hivemind(runs: Sequence[CalibrationRun], network, workloads: Mapping[str, Workload]) -> tuple[HivemindFit, dict]:
    """Fit the hivemind constants on ``runs`` (single-node baselines and multi-peer runs; the baselines
    of every multi-peer run's hardware must be among them); returns the fit and a report."""
    parameters = {name: w.parameters for name, w in workloads.items()}
    base = baseline_rates(runs)
    multi = multi_peer(runs)
    if not multi:
        raise ValueError("fit_hivemind: no multi-peer run with epoch and averaging times")
    probe = Hivemind(HivemindFit({}, {}, 0.0, 0.0, 0.0), target_batch_size=1)  # only transfer() is used
    xfer = []
    for r in multi:
        topo = Topology([PeerGroup(run_offer(r).location, r.peers, 1.0, 1)], network.link, lambda _site: None)
        xfer.append(probe.transfer(topo, parameters[r.workload] * 2.0)[0])
    sizes = sorted({RUN_VCPUS[r.cloud] or UNKNOWN_VCPUS for r in multi})
    top = HOST_VCPUS

    def factor(alpha: float) -> Callable[[float], float]:
        shell = HivemindFit({}, {}, 0.0, 0.0, 0.0, host_vcpus=top, host_exponent=alpha, unknown_vcpus=UNKNOWN_VCPUS)
        return shell.host_factor

    if len(sizes) > 1:
        alpha = min((a / 100 for a in range(0, 201)), key=lambda a: _round_fit(multi, xfer, parameters, factor(a))[1])
        alpha_how = "fitted (grid 0..2, step 0.01)"
    else:
        alpha, alpha_how = PRIOR_HOST_EXPONENT, "prior (runs on one host size)"
    (f0, beta, gamma), _ = _round_fit(multi, xfer, parameters, factor(alpha))
    efficiency, kappa, kappa_how = _step_fit(multi, base, parameters, factor(alpha))
    unseen = _unseen_fit(multi, base, workloads, factor(alpha))
    fit = HivemindFit(efficiency, unseen, round(f0, 4), round(beta, 4), round(gamma, 4),
                      step_s_per_gparam=round(kappa, 4), host_vcpus=top, host_exponent=round(alpha, 4),
                      unknown_vcpus=UNKNOWN_VCPUS)
    report = {
        "runs": len(multi), "workloads": len(efficiency), "host_vcpus_measured": sizes,
        "host_exponent": alpha_how, "step_s_per_gparam": kappa_how,
        "weighting": "relative (1/averaging_round_s; 1/time per sample)",
    }
    return fit, report


def held_out_fits(runs: Sequence[CalibrationRun], key: Callable[[CalibrationRun], str], network,
                  workloads: Mapping[str, Workload]) -> Iterator[tuple[str, list[CalibrationRun], HivemindFit, dict]]:
    """Leave one group out: for each group of multi-peer runs (``key``), the fit on every other run
    (the single-node baselines stay: they are the model's measured rates) and the runs held out."""
    multi = multi_peer(runs)
    for group in sorted({key(r) for r in multi}):
        held = [r for r in multi if key(r) == group]
        fit, report = fit_hivemind([r for r in runs if r not in held], network, workloads)
        yield group, held, fit, report

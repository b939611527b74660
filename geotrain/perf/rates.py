"""Compute rates: samples per second of one node, per (workload, accelerator, accelerators per node).

Every rate carries a ``basis``:

- ``measured``: a row of ``perf/data/compute_rates.csv`` (written by ``scripts/calibrate_perf.py``
  from the baselines of Erben et al.), ``perf/data/cpu_rates.csv`` (geotrain's built-in CPU
  workloads, measured by ``bench/cpu_rates.py --write``: one training process with one thread per
  node) or a user file, used as it is;
- ``derived``: a measured rate of the *same workload* carried to another accelerator or GPU count
  through Lambda's measured ratios and in-node scaling (``perf/data/gpu_scaling.csv``, written by
  ``scripts/derive_gpu_ratios.py``);
- ``estimated``: anything that needs another rule (a ratio measured on a different workload, a
  datasheet TFLOPS ratio, a median or assumed scaling). ``ComputeRate.estimated`` is
  ``basis != "measured"``.

One accelerator (``single``), in this order:

1. The workload's measured rate on that accelerator. A measured node of m > 1 accelerators anchors
   it too: single = rate(m) / (m x efficiency(accelerator, m)) (e.g. V100 from the DGX-2's 8 x V100).
2. Kind ratio (*estimated*): the accelerator has a measured 1-accelerator rate for another workload
   of the same kind (cv/nlp) that is also measured on the anchor (A10): the workload's anchor rate
   times that ratio, e.g. T4/ResNet-50 = A10/ResNet-50 x (T4/A10 on ConvNextLarge).
3. Lambda ratio (*derived*): the workload's anchor rate times Lambda's measured ratio of the two
   accelerators for the workload's kind (or, without an anchor rate, another accelerator's measured
   rate of the workload times the ratio of their Lambda ratios).
4. Hardware ratio (*estimated*), for accelerators Lambda did not measure (T4, L4, L40S, A10G,
   P100): the anchor rate times a roofline-like blend of the two datasheet ratios to the anchor
   (``perf/data/accelerators.csv``), dense FP16 tensor TFLOPS ``t`` and memory bandwidth ``b``::

       ratio = (t / t_A10)^x_k · (b / b_A10)^y_k

   with ``x_k``, ``y_k`` per kind (cv, nlp) fitted by least squares on the logs of Lambda's measured
   1-GPU ratios of the accelerators that have datasheet figures (:func:`fit_hardware_exponents`;
   ``bench/perf_model.py`` holds each accelerator out in turn). A step is part compute-bound,
   part memory-bound: the TFLOPS ratio alone overstates fast GPUs (H100 on ResNet-50: 7.9 by
   TFLOPS, 4.6 measured) and understates bandwidth-rich ones (V100: 1.0 by TFLOPS, 1.3 measured).
   A workload of neither kind uses the exponents fitted on both kinds' ratios together.

A node of n accelerators: its measured row if there is one, else n x single x efficiency(n), where
the efficiency is Lambda's measured throughput(n) / (n x throughput(1)) for that accelerator and
kind (*derived*). Where Lambda did not measure the accelerator at n: the median over the machines it
measured at n (*estimated*); at a count it measured on no machine (3, 6, 16 ...): the efficiency
at the largest measured count below (no further loss assumed; *estimated*).

Same chip: V100 and V100-32GB are one GV100 chip at the same clocks; a name without rows of its own
for a workload uses its sibling's (a measured row so used becomes *derived*), and Lambda's figures
for V100 serve both, so the two always agree.

A CPU-only node uses the accelerator name ``CPU`` (one training process per node).
Users add or override rates with a CSV file: ``workload,accelerator,samples_per_s`` and optionally
``accelerator_count`` (default 1), ``kind`` (cv/nlp: lets the ratio transfer to other workloads) and
``source``; its rows are measured (unless a column ``estimated`` says true) and win.
"""

from __future__ import annotations

import csv
import functools
import io
import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from geotrain.errors import InputError, NotFoundError
from geotrain.files import atomic_write_text
from geotrain.perf.data import data_text
from geotrain.perf.workloads import Workload
from geotrain.specfile import read_text

ANCHOR = "A10"
CPU = "CPU"
MEASURED, DERIVED, ESTIMATED = "measured", "derived", "estimated"
BASES = (MEASURED, DERIVED, ESTIMATED)
SAME_CHIP: tuple[frozenset[str], ...] = (frozenset({"V100", "V100-32GB"}),)


@dataclass(frozen=True, slots=True)
class ComputeRate:
    workload: str
    accelerator: str
    accelerator_count: int
    samples_per_s: float  # of one node with accelerator_count accelerators
    estimated: bool  # basis != "measured"
    source: str
    kind: str | None = None  # the workload's kind, where known: lets ratios transfer between workloads
    basis: str = ""  # measured | derived | estimated; left empty, it follows ``estimated``

    def __post_init__(self) -> None:
        if not self.basis:
            object.__setattr__(self, "basis", ESTIMATED if self.estimated else MEASURED)
        elif self.basis not in BASES:
            raise ValueError(f"basis {self.basis!r} is not one of {', '.join(BASES)}")
        elif self.estimated != (self.basis != MEASURED):
            raise ValueError(f"estimated={self.estimated} contradicts basis {self.basis!r}")


def _rate(workload: Workload, acc: str, count: int, samples_per_s: float, basis: str, source: str) -> ComputeRate:
    return ComputeRate(workload.name, acc, count, samples_per_s, basis != MEASURED, source, workload.kind, basis)


def _combine(*bases: str) -> str:
    """The weakest of the bases: a figure is only as good as its least-measured input."""
    return max(bases, key=BASES.index)


@dataclass(frozen=True, slots=True)
class Efficiency:
    value: float  # throughput(n) / (n x throughput(1)), at most 1
    basis: str  # measured (n = 1), derived (Lambda measured this accelerator at n) or estimated
    how: str


@dataclass(frozen=True, slots=True)
class GpuScaling:
    """Lambda's measured ratios to the anchor and in-node scaling efficiencies (``gpu_scaling.csv``)."""

    ratios: Mapping[tuple[str, str], float] = field(default_factory=dict)  # (accelerator, kind) -> vs A10
    efficiencies: Mapping[tuple[str, str, int], tuple[float, str]] = field(default_factory=dict)  # -> (eff, source)

    @classmethod
    def parse(cls, text: str, origin: str) -> GpuScaling:
        reader = csv.DictReader(io.StringIO(text))
        missing = {"accelerator", "kind", "accelerator_count", "ratio_vs_a10", "scaling_efficiency", "source"} - set(
            reader.fieldnames or [])
        if missing:
            raise InputError(f"{origin}: missing column {', '.join(sorted(missing))}")
        ratios, efficiencies = {}, {}
        for line, row in enumerate(reader, start=2):
            try:
                acc, kind, n = row["accelerator"], row["kind"], int(row["accelerator_count"])
                if n == 1:
                    ratios[acc, kind] = float(row["ratio_vs_a10"])
                else:
                    efficiencies[acc, kind, n] = (min(1.0, float(row["scaling_efficiency"])), row["source"])
            except ValueError:
                raise InputError(f"{origin}: line {line}: accelerator_count, ratio_vs_a10 and scaling_efficiency "
                                 "must be numbers") from None
        return cls(ratios, efficiencies)

    def ratio(self, acc: str, kind: str | None) -> float | None:
        return self.ratios.get((acc, kind)) if kind else None

    def efficiency(self, acc: str, kind: str | None, n: int) -> Efficiency:
        if n == 1:
            return Efficiency(1.0, MEASURED, "")
        own = self.efficiencies.get((acc, kind, n))
        if own is not None:
            return Efficiency(own[0], DERIVED, f"measured {acc} {kind} scaling efficiency {own[0]:.3f} at {n} (Lambda)")
        # one figure per measured machine: names that share Lambda's rows (A100, A100-80GB) count once
        at_n = {source: value for (_, k, m), (value, source) in self.efficiencies.items() if k == kind and m == n}
        if at_n:
            value = statistics.median(at_n.values())
            return Efficiency(value, ESTIMATED, f"{kind} scaling efficiency {value:.3f} at {n}: median of the "
                                                f"{len(at_n)} machines Lambda measured at {n} ({acc} not among them)")
        below = [m for (_, k, m) in self.efficiencies if k == kind and m < n]
        if below:
            lower = self.efficiency(acc, kind, max(below))
            return Efficiency(lower.value, ESTIMATED, f"{lower.how}; used for {n} (nothing measured at {n}: "
                                                      "no further loss assumed)")
        return Efficiency(1.0, ESTIMATED, "linear scaling assumed (no measured scaling)")


class RateTable:
    """Measured rates plus the rules that derive or estimate the rest."""

    def __init__(self, rates: Iterable[ComputeRate], sheets: Mapping[str, Datasheet],
                 scaling: GpuScaling | None = None) -> None:
        self._rates = {(r.workload, r.accelerator, r.accelerator_count): r for r in rates}
        self._sheets = dict(sheets)
        self._scaling = scaling or GpuScaling()
        self._exponents = fit_hardware_exponents(self._scaling.ratios, self._sheets)

    @classmethod
    @functools.cache
    def bundled(cls) -> RateTable:
        rates = [*_parse_rates(data_text("compute_rates.csv"), "bundled compute_rates.csv"),
                 *_parse_rates(data_text("cpu_rates.csv"), "bundled cpu_rates.csv")]
        scaling = GpuScaling.parse(data_text("gpu_scaling.csv"), "bundled gpu_scaling.csv")
        return cls(rates, bundled_datasheets(), scaling)

    def with_file(self, path: str | Path) -> RateTable:
        extra = _parse_rates(read_text(Path(path), InputError), str(path))
        return RateTable([*self._rates.values(), *extra], self._sheets, self._scaling)

    def measured(self) -> list[ComputeRate]:
        return list(self._rates.values())

    def accelerators(self) -> set[str]:
        """The accelerator names this table can rate (datasheet or measured rows), CPU included."""
        return set(self._sheets) | {a for (_, a, _) in self._rates} | {CPU}

    def node_rate(self, workload: Workload, accelerator: str | None, count: int) -> ComputeRate:
        """Samples/s of one node of ``count`` × ``accelerator`` (None = CPU only) on ``workload``."""
        acc = accelerator or CPU
        count = count if accelerator else 1
        chip = self._chip(workload.name, acc)
        rate = self._node_rate(workload, chip, count) if count >= 1 else None
        if rate is None:
            raise NotFoundError(
                f"no compute rate for workload {workload.name!r} on {count} x {acc}: nothing measured and no "
                "measured or hardware ratio; add one with --rates FILE (columns workload,accelerator,samples_per_s)"
            )
        if chip == acc:
            return rate
        basis = DERIVED if rate.basis == MEASURED else rate.basis
        return replace(rate, accelerator=acc, basis=basis, estimated=True,
                       source=f"{rate.source}; {acc} is the same chip as {chip}")

    def _chip(self, workload: str, acc: str) -> str:
        """``acc``, or its same-chip sibling where only the sibling has rows for ``workload``."""
        def has_rows(a: str) -> bool:
            return any(w == workload and name == a for (w, name, _) in self._rates)

        if has_rows(acc):
            return acc
        siblings = sorted(next((g for g in SAME_CHIP if acc in g), frozenset()) - {acc})
        return next((s for s in siblings if has_rows(s)), acc)

    def _node_rate(self, workload: Workload, acc: str, n: int) -> ComputeRate | None:
        exact = self._rates.get((workload.name, acc, n))
        if exact is not None:
            return exact
        single = self._single(workload, acc, n)
        if single is None:
            return None
        rate, basis, how = single
        if n == 1:
            return _rate(workload, acc, 1, rate, basis, how)
        eff = self._scaling.efficiency(acc, workload.kind, n)
        return _rate(workload, acc, n, rate * n * eff.value, _combine(basis, eff.basis), f"{how}, x{n} x {eff.how}")

    def _single(self, workload: Workload, acc: str, near: int) -> tuple[float, str, str] | None:
        """One accelerator's rate (samples/s, basis, how), from the rows nearest ``near`` accelerators."""
        own = [r for (w, a, _), r in self._rates.items() if w == workload.name and a == acc]
        if own:  # the 1-accelerator row, else the row nearest the count asked for
            base = min(own, key=lambda r: (r.accelerator_count != 1, abs(math.log(r.accelerator_count / near)),
                                           r.accelerator_count))
            return self._per_accelerator(base, workload.kind)
        return (self._kind_ratio(workload, acc) or self._lambda_ratio(workload, acc)
                or self._hardware_ratio(workload, acc))

    def _per_accelerator(self, row: ComputeRate, kind: str | None) -> tuple[float, str, str]:
        """A measured node's rate per accelerator: rate / (m x efficiency(m))."""
        m = row.accelerator_count
        if m == 1:
            return row.samples_per_s, row.basis, row.source
        eff = self._scaling.efficiency(row.accelerator, kind, m)
        return (row.samples_per_s / (m * eff.value), _combine(row.basis, eff.basis),
                f"{row.source} ({row.samples_per_s:g} on {m} x {row.accelerator}) / ({m} x {eff.how})")

    def _kind_ratio(self, workload: Workload, acc: str) -> tuple[float, str, str] | None:
        anchor = self._rates.get((workload.name, ANCHOR, 1))
        if anchor is None:
            return None
        chips = next((g for g in SAME_CHIP if acc in g), frozenset({acc}))
        ratios = [
            (other.samples_per_s / base.samples_per_s, other.workload)
            for (name, a, n), other in self._rates.items()
            if a in chips and n == 1 and other.basis == MEASURED
            and other.kind == workload.kind
            and (base := self._rates.get((name, ANCHOR, 1))) is not None
        ]
        if not ratios:
            return None
        ratio, reference = sorted(ratios, key=lambda item: item[1])[0]
        return anchor.samples_per_s * ratio, ESTIMATED, (
            f"{ANCHOR} rate x measured {acc}/{ANCHOR} ratio {ratio:.3f} on {reference}")

    def _lambda_ratio(self, workload: Workload, acc: str) -> tuple[float, str, str] | None:
        mine = self._scaling.ratio(acc, workload.kind)
        if mine is None:
            return None
        # the anchor's 1-accelerator row first, then other accelerators Lambda measured, 1-accelerator rows first
        references = sorted(
            (r for (w, a, _), r in self._rates.items()
             if w == workload.name and a != acc and self._scaling.ratio(a, workload.kind) is not None),
            key=lambda r: (r.accelerator != ANCHOR, r.accelerator_count != 1, r.accelerator, r.accelerator_count))
        if not references:
            return None
        ref = references[0]
        rate, basis, how = self._per_accelerator(ref, workload.kind)
        ratio = mine / self._scaling.ratio(ref.accelerator, workload.kind)
        return rate * ratio, _combine(basis, DERIVED), (
            f"{how} x Lambda-measured {acc}/{ref.accelerator} {workload.kind} ratio {ratio:.3f}")

    def _hardware_ratio(self, workload: Workload, acc: str) -> tuple[float, str, str] | None:
        anchor = self._rates.get((workload.name, ANCHOR, 1))
        if anchor is None or acc not in self._sheets or ANCHOR not in self._sheets:
            return None
        kind = workload.kind if workload.kind in self._exponents else ANY_KIND
        x, y = self._exponents.get(kind, (1.0, 0.0))  # nothing to fit on: the TFLOPS ratio alone
        t, b = self._sheets[acc].ratio_to(self._sheets[ANCHOR])
        ratio = t ** x * b ** y
        return anchor.samples_per_s * ratio, ESTIMATED, (
            f"{ANCHOR} rate x datasheet ratio {acc}/{ANCHOR} {ratio:.3f} = FP16 tensor TFLOPS {t:.3f}^{x:.3f} "
            f"x memory bandwidth {b:.3f}^{y:.3f} (exponents fitted on Lambda's measured ratios, {kind})")


ANY_KIND = "any kind"


def chip_name(acc: str) -> str:
    """The first name (sorted) of ``acc``'s same-chip group, else ``acc``."""
    return min(next((g for g in SAME_CHIP if acc in g), frozenset({acc})))


@dataclass(frozen=True, slots=True)
class Datasheet:
    """An accelerator's vendor figures (``perf/data/accelerators.csv``)."""

    fp16_tensor_tflops: float
    memory_bandwidth_gbs: float

    def ratio_to(self, other: Datasheet) -> tuple[float, float]:
        """(TFLOPS ratio, bandwidth ratio) of this accelerator to ``other``."""
        return (self.fp16_tensor_tflops / other.fp16_tensor_tflops,
                self.memory_bandwidth_gbs / other.memory_bandwidth_gbs)


@functools.cache
def bundled_datasheets() -> dict[str, Datasheet]:
    return {row["accelerator"]: Datasheet(float(row["fp16_tensor_tflops"]), float(row["memory_bandwidth_gbs"]))
            for row in csv.DictReader(io.StringIO(data_text("accelerators.csv")))}


def fit_hardware_exponents(ratios: Mapping[tuple[str, str], float], sheets: Mapping[str, Datasheet],
                           leave_out: frozenset[str] = frozenset()) -> dict[str, tuple[float, float]]:
    """``kind -> (x, y)``: least squares of ``ln r = x ln t + y ln b`` over the measured 1-GPU ratios
    ``r`` to the anchor of the accelerators with datasheet figures (``t``, ``b``: their datasheet
    ratios to the anchor), per kind and over both kinds together (``ANY_KIND``); names of one chip
    (``SAME_CHIP``) count once. A kind with fewer than two such accelerators gets no exponents.
    ``leave_out``: accelerators not to fit on (the bench's held-out folds)."""
    anchor = sheets.get(ANCHOR)
    if anchor is None:
        return {}
    rows: dict[str, list[tuple[float, float, float]]] = {}
    for (acc, kind), ratio in sorted(ratios.items()):
        if acc == ANCHOR or acc in leave_out or acc not in sheets or ratio <= 0 or acc != chip_name(acc):
            continue  # one point per chip: same-chip names share Lambda's rows
        t, b = sheets[acc].ratio_to(anchor)
        point = (math.log(t), math.log(b), math.log(ratio))
        rows.setdefault(kind, []).append(point)
        rows.setdefault(ANY_KIND, []).append(point)
    import numpy as np

    out = {}
    for kind, points in rows.items():
        a = np.array([p[:2] for p in points])
        if len(points) < 2 or np.linalg.matrix_rank(a) < 2:
            continue
        (x, y), *_ = np.linalg.lstsq(a, np.array([p[2] for p in points]), rcond=None)
        out[kind] = (float(x), float(y))
    return out


RATE_COLUMNS = ("workload", "kind", "accelerator", "accelerator_count", "samples_per_s", "estimated", "source")


def save_rate(path: Path, rate: ComputeRate) -> None:
    """Put ``rate`` in the rates file at ``path`` (the ``--rates`` format), replacing the row of the same
    workload, accelerator and count, keeping the others; written atomically. A file that is not a rates
    file is refused, not overwritten."""
    rows = []
    if path.exists():
        _parse_rates(read_text(path, InputError), str(path))  # refuses what is not a rates file
        rows = [r for r in csv.DictReader(io.StringIO(read_text(path, InputError)))
                if (r["workload"].strip(), r["accelerator"].strip(), int(r.get("accelerator_count") or 1))
                != (rate.workload, rate.accelerator, rate.accelerator_count)]
    rows.append({"workload": rate.workload, "kind": rate.kind or "", "accelerator": rate.accelerator,
                 "accelerator_count": rate.accelerator_count, "samples_per_s": f"{rate.samples_per_s:.6g}",
                 "estimated": str(rate.estimated).lower(), "source": rate.source})
    columns = list(RATE_COLUMNS) + sorted({k for r in rows for k in r if k and k not in RATE_COLUMNS})
    out = io.StringIO()
    writer = csv.DictWriter(out, columns, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, out.getvalue())


def _parse_rates(text: str, origin: str) -> list[ComputeRate]:
    reader = csv.DictReader(io.StringIO(text))
    missing = {"workload", "accelerator", "samples_per_s"} - set(reader.fieldnames or [])
    if missing:
        raise InputError(f"{origin}: missing column {', '.join(sorted(missing))}")
    out = []
    for line, row in enumerate(reader, start=2):
        try:
            rate = float(row["samples_per_s"])
            count = int(row.get("accelerator_count") or 1)
        except ValueError:
            raise InputError(f"{origin}: line {line}: samples_per_s must be a number, accelerator_count whole") from None
        if not rate > 0 or not math.isfinite(rate) or count < 1:
            raise InputError(f"{origin}: line {line}: samples_per_s must be above 0 and accelerator_count at least 1")
        estimated = (row.get("estimated") or "false").lower() == "true"
        out.append(ComputeRate(row["workload"].strip(), row["accelerator"].strip(), count, rate, estimated,
                               row.get("source") or origin, row.get("kind") or None))
    return out

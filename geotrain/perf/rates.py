"""Compute rates: samples per second of one node, per (workload, accelerator, accelerators per node).

Measured rates are used as they are: ``perf/data/compute_rates.csv`` (written by
``scripts/calibrate_perf.py`` from the single-GPU baselines of Erben et al.) and
``perf/data/cpu_rates.csv`` (geotrain's built-in CPU workloads, measured by
``bench/cpu_rates.py --write``: one training process with one thread per node).
Everything else is *estimated* and flagged so, in this order:

1. A measured rate for the same accelerator with a different accelerator count: scaled linearly
   with the count (perfect scaling inside one node is assumed).
2. Kind ratio: the accelerator has a measured rate for another workload of the same kind (cv/nlp)
   that is also measured on the anchor accelerator (A10). The rate is the workload's anchor rate
   times that measured ratio, e.g. T4/ResNet-50 = A10/ResNet-50 x (T4/A10 on ConvNextLarge).
3. Hardware ratio: the workload's anchor rate times the ratio of dense FP16 tensor TFLOPS from the
   vendor datasheets (``perf/data/accelerators.csv``). Peak-FLOP ratios overstate real speed-ups of
   fast GPUs; treat such rates as a first guess and measure (``--rates FILE``).

A CPU-only node uses the accelerator name ``CPU`` (one training process per node).
Users add or override rates with a CSV file: ``workload,accelerator,samples_per_s`` and optionally
``accelerator_count`` (default 1), ``kind`` (cv/nlp: lets the ratio transfer to other workloads) and
``source``.
"""

from __future__ import annotations

import csv
import functools
import io
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from geotrain.errors import InputError, NotFoundError
from geotrain.perf.data import data_text
from geotrain.perf.workloads import Workload
from geotrain.specfile import read_text

ANCHOR = "A10"
CPU = "CPU"


@dataclass(frozen=True, slots=True)
class ComputeRate:
    workload: str
    accelerator: str
    accelerator_count: int
    samples_per_s: float  # of one node with accelerator_count accelerators
    estimated: bool
    source: str
    kind: str | None = None  # the workload's kind, where known: lets ratios transfer between workloads


class RateTable:
    """Measured rates plus the rules that estimate the rest."""

    def __init__(self, rates: Iterable[ComputeRate], tflops: dict[str, float]) -> None:
        self._rates = {(r.workload, r.accelerator, r.accelerator_count): r for r in rates}
        self._tflops = dict(tflops)

    @classmethod
    @functools.cache
    def bundled(cls) -> RateTable:
        rates = [*_parse_rates(data_text("compute_rates.csv"), "bundled compute_rates.csv"),
                 *_parse_rates(data_text("cpu_rates.csv"), "bundled cpu_rates.csv")]
        tflops = {row["accelerator"]: float(row["fp16_tensor_tflops"])
                  for row in csv.DictReader(io.StringIO(data_text("accelerators.csv")))}
        return cls(rates, tflops)

    def with_file(self, path: str | Path) -> RateTable:
        extra = _parse_rates(read_text(Path(path), InputError), str(path))
        return RateTable([*self._rates.values(), *extra], self._tflops)

    def measured(self) -> list[ComputeRate]:
        return list(self._rates.values())

    def node_rate(self, workload: Workload, accelerator: str | None, count: int) -> ComputeRate:
        """Samples/s of one node of ``count`` × ``accelerator`` (None = CPU only) on ``workload``."""
        acc = accelerator or CPU
        count = count if accelerator else 1
        w = workload.name
        exact = self._rates.get((w, acc, count))
        if exact is not None:
            return exact
        single = self._rates.get((w, acc, 1))
        if single is not None:
            return ComputeRate(w, acc, count, single.samples_per_s * count, True,
                               f"{single.source}, x{count} accelerators (linear scaling assumed)", workload.kind)
        per_accelerator = self._estimate_one(workload, acc)
        if per_accelerator is None:
            raise NotFoundError(
                f"no compute rate for workload {w!r} on {acc}: nothing measured and no hardware ratio; "
                "add one with --rates FILE (columns workload,accelerator,samples_per_s)"
            )
        rate, how = per_accelerator
        scaled = f", x{count} accelerators (linear scaling assumed)" if count > 1 else ""
        return ComputeRate(w, acc, count, rate * count, True, how + scaled, workload.kind)

    def _estimate_one(self, workload: Workload, acc: str) -> tuple[float, str] | None:
        anchor = self._rates.get((workload.name, ANCHOR, 1))
        if anchor is None:
            return None
        ratios = [
            (other.samples_per_s / base.samples_per_s, other.workload)
            for (name, a, n), other in self._rates.items()
            if a == acc and n == 1 and not other.estimated
            and other.kind == workload.kind
            and (base := self._rates.get((name, ANCHOR, 1))) is not None
        ]
        if ratios:
            ratio, reference = sorted(ratios, key=lambda item: item[1])[0]
            return anchor.samples_per_s * ratio, (
                f"estimated: {ANCHOR} rate x measured {acc}/{ANCHOR} ratio {ratio:.3f} on {reference}"
            )
        if acc in self._tflops and ANCHOR in self._tflops:
            ratio = self._tflops[acc] / self._tflops[ANCHOR]
            return anchor.samples_per_s * ratio, (
                f"estimated: {ANCHOR} rate x datasheet FP16 tensor TFLOPS ratio {acc}/{ANCHOR} = {ratio:.3f}"
            )
        return None


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
        if not rate > 0 or count < 1:
            raise InputError(f"{origin}: line {line}: samples_per_s must be above 0 and accelerator_count at least 1")
        estimated = (row.get("estimated") or "false").lower() == "true"
        out.append(ComputeRate(row["workload"].strip(), row["accelerator"].strip(), count, rate, estimated,
                               row.get("source") or origin, row.get("kind") or None))
    return out

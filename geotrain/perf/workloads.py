"""Workloads: what is trained, as the throughput model sees it.

A workload has a parameter count (what travels on every synchronisation), a kind (``cv`` or
``nlp``, used to transfer measured speed ratios between accelerators) and a micro-batch size
(samples per step on one accelerator). Bytes on the wire per parameter depend on the precision the
strategy sends in: :data:`BYTES_PER_PARAMETER`.

Built-in workloads are in ``perf/data/workloads.csv``; users add or override them with a CSV file of
the same columns (``name,parameters,kind,samples_per_step[,description,source,state_bytes_per_parameter,
activation_mib_per_sample]``; the last two feed the GPU-memory fit check, :mod:`geotrain.perf.memory`).
"""

from __future__ import annotations

import csv
import difflib
import functools
import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from geotrain.domain import JobSpec
from geotrain.errors import InputError, NotFoundError
from geotrain.perf.data import data_text
from geotrain.specfile import read_text

BYTES_PER_PARAMETER: Mapping[str, float] = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "int8": 1.0}
KINDS = ("cv", "nlp")


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    parameters: int
    kind: str
    samples_per_step: int  # micro-batch on one accelerator
    description: str = ""
    source: str = ""
    state_bytes_per_parameter: float = 16.0  # weights, gradients, optimizer state (mixed-precision Adam)
    activation_mib_per_sample: float = 0.0  # 0: not known, activations are not counted (perf.memory)

    def wire_bytes(self, precision: str) -> float:
        """Bytes of one full copy of the parameters (or gradients) in ``precision``."""
        return self.parameters * BYTES_PER_PARAMETER[precision]


class WorkloadRegistry:
    """Workloads by name: the built-in ones, plus any from user files."""

    def __init__(self, workloads: Iterable[Workload]) -> None:
        self._by_name = {w.name: w for w in workloads}

    @classmethod
    @functools.cache
    def bundled(cls) -> WorkloadRegistry:
        return cls(_parse(data_text("workloads.csv"), "bundled workloads.csv"))

    def with_file(self, path: str | Path) -> WorkloadRegistry:
        """A registry where the file's workloads are added, replacing same-named ones."""
        extra = _parse(read_text(Path(path), InputError), str(path))
        return WorkloadRegistry([*self._by_name.values(), *extra])

    def for_job(self, job: JobSpec) -> Workload:
        """The job's workload: its own definition (the spec's ``model`` section) or the registry's."""
        if job.model is None:
            return self.get(job.workload)
        m = job.model
        return Workload(job.workload, m.parameters, m.kind, m.samples_per_step, "defined in the job spec",
                        "job spec", m.state_bytes_per_parameter, m.activation_mib_per_sample)

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def get(self, name: str) -> Workload:
        try:
            return self._by_name[name]
        except KeyError:
            close = difflib.get_close_matches(name, self._by_name, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise NotFoundError(
                f"unknown workload {name!r}{hint}; known: {', '.join(self.names())}; "
                "add your own with --workloads FILE"
            ) from None


def _parse(text: str, origin: str) -> list[Workload]:
    out = []
    reader = csv.DictReader(io.StringIO(text))
    missing = {"name", "parameters", "kind", "samples_per_step"} - set(reader.fieldnames or [])
    if missing:
        raise InputError(f"{origin}: missing column {', '.join(sorted(missing))}")
    for line, row in enumerate(reader, start=2):
        try:
            parameters = int(row["parameters"])
            per_step = int(row["samples_per_step"])
        except ValueError:
            raise InputError(f"{origin}: line {line}: parameters and samples_per_step must be whole numbers") from None
        if parameters <= 0 or per_step <= 0:
            raise InputError(f"{origin}: line {line}: parameters and samples_per_step must be above 0")
        if row["kind"] not in KINDS:
            raise InputError(f"{origin}: line {line}, column kind: {row['kind']!r} is not one of {', '.join(KINDS)}")
        memory = {}
        for column in ("state_bytes_per_parameter", "activation_mib_per_sample"):
            text = (row.get(column) or "").strip()
            if not text:
                continue
            try:
                memory[column] = float(text)
            except ValueError:
                raise InputError(f"{origin}: line {line}, column {column}: {text!r} is not a number") from None
            if memory[column] < 0 or memory[column] != memory[column]:
                raise InputError(f"{origin}: line {line}, column {column}: must be 0 or more")
        out.append(Workload(row["name"].strip(), parameters, row["kind"], per_step,
                            row.get("description") or "", row.get("source") or origin, **memory))
    return out

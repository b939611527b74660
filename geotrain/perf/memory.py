"""Whether a workload's training state fits on one accelerator (data parallel: every GPU holds it all).

A data-parallel replica keeps, per parameter, its weights, its gradients and the optimizer's state.
For mixed-precision Adam that is 2 + 2 bytes (fp16 weights and gradients) + 4 + 4 + 4 (fp32 master
weights and the two Adam moments) = 16 bytes per parameter (Rajbhandari et al., "ZeRO", SC 2020,
§3.1); fp32 Adam is 4 + 4 + 8 = 16 as well. A workload may say otherwise
(``state_bytes_per_parameter``, e.g. 12 for fp32 SGD with momentum: weights, gradients, momentum),
and may give its activation memory per sample (``activation_mib_per_sample``); without that figure
activations are not counted, and the check is a lower bound on what training needs::

    needed_mib = parameters · state_bytes_per_parameter / 2^20 + micro-batch · activation_mib_per_sample

A node is left out when ``needed_mib`` exceeds its accelerator's memory (``perf/data/gpu_memory.csv``,
the clouds' own GpuInfo figures, ``scripts/derive_gpu_memory.py``); accelerators without a figure
are not checked, and the plan says how many offers that was.
"""

from __future__ import annotations

import csv
import functools
import io
from collections.abc import Mapping
from dataclasses import dataclass

from geotrain.perf.data import data_text
from geotrain.perf.workloads import Workload

MIB = 2**20


@dataclass(frozen=True, slots=True)
class MemoryTable:
    """MiB of memory per accelerator, by accelerator name."""

    mib: Mapping[str, int]

    @classmethod
    @functools.cache
    def bundled(cls) -> MemoryTable:
        rows = csv.DictReader(io.StringIO(data_text("gpu_memory.csv")))
        return cls({row["accelerator"]: int(row["memory_mib"]) for row in rows})

    def of(self, accelerator: str | None) -> int | None:
        return None if accelerator is None else self.mib.get(accelerator)


def needed_mib(workload: Workload) -> float:
    """What one data-parallel replica holds on one accelerator (see the module's docstring)."""
    return (workload.parameters * workload.state_bytes_per_parameter / MIB
            + workload.samples_per_step * workload.activation_mib_per_sample)


def misfit(workload: Workload, accelerator: str | None, table: MemoryTable) -> str | None:
    """Why ``workload`` cannot train on ``accelerator`` (None: it fits, or there is no figure to check)."""
    have = table.of(accelerator)
    need = needed_mib(workload)
    if have is None or need <= have:
        return None
    parts = f"{workload.state_bytes_per_parameter:g} bytes/parameter of weights, gradients and optimizer state"
    if workload.activation_mib_per_sample:
        parts += f" + activations of {workload.samples_per_step} samples"
    return (f"{workload.name} needs {need / 1024:,.1f} GiB per GPU ({parts}); {accelerator} has "
            f"{have / 1024:,.1f} GiB")

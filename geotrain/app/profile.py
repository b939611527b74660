"""``geotrain profile``: measure a training command on this machine and save the rate for ``--rates``."""

from __future__ import annotations

import datetime as dt
import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from geotrain.errors import InputError
from geotrain.perf.rates import CPU, MEASURED, ComputeRate, RateTable, save_rate
from geotrain.train import profiling
from geotrain.train.capabilities import WORKLOADS as BUILT_IN

KINDS = ("cv", "nlp")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


@dataclass(frozen=True, slots=True)
class ProfileRequest:
    command: tuple[str, ...]
    workload: str
    output: Path
    samples_per_step: int | None = None
    steps: int = 20
    warmup: int = 5
    accelerator: str | None = None  # None: the first CUDA device, else CPU
    kind: str | None = None
    timeout_s: float = 600.0
    min_seconds: float = 3.0  # timed at least this long (more steps than ``steps`` if they are fast)
    threads: int | None = None  # OMP_NUM_THREADS; None: 1 on CPU (as a local node runs), unset on a GPU
    workdir: Path = Path(".")


@dataclass(frozen=True, slots=True)
class ProfileResult:
    rate: ComputeRate
    measurement: profiling.Measurement
    device: str
    output: Path


def builtin_command(workload: str) -> tuple[str, ...]:
    """What ``geotrain profile --workload NAME`` runs without a command: the built-in workload, trained
    alone as the built-in runtime trains it (:mod:`geotrain.train.workload_probe`)."""
    if workload not in BUILT_IN:
        raise InputError(f"profile: {workload!r} is not a built-in workload, so give its training command after "
                         f"`--`, e.g. geotrain profile --workload {workload} --samples-per-step 32 -- python train.py; "
                         f"built-in (no command needed): {', '.join(BUILT_IN)}")
    return (sys.executable, "-m", "geotrain.train.workload_probe", workload)


def profile(request: ProfileRequest) -> ProfileResult:
    if not NAME.match(request.workload):
        raise InputError(f"--workload {request.workload!r}: use letters, digits and . _ + - (the name --rates "
                         "files and plans know the workload by)")
    if request.kind is not None and request.kind not in KINDS:
        raise InputError(f"--kind {request.kind!r}: one of {', '.join(KINDS)}")
    known = RateTable.bundled().accelerators()
    if request.accelerator is not None:
        if request.accelerator not in known:
            raise InputError(f"--accelerator {request.accelerator!r} is not one the catalog knows; one of "
                             f"{', '.join(sorted(known))}")
        accelerator, device = request.accelerator, request.accelerator
    else:
        accelerator, device = profiling.local_accelerator()
        if accelerator is None:
            raise InputError(f"this machine's GPU ({device}) is not an accelerator the catalog knows; name it with "
                             f"--accelerator (one of {', '.join(sorted(known))})")
    threads = request.threads if request.threads is not None else (1 if accelerator == CPU else None)
    command = request.command or builtin_command(request.workload)
    measurement = profiling.measure(list(command), samples_per_step=request.samples_per_step,
                                    steps=request.steps, warmup=request.warmup, timeout_s=request.timeout_s,
                                    workdir=request.workdir, threads=threads,
                                    min_seconds=request.min_seconds)
    on = f"{device}, {threads} thread(s)" if accelerator == CPU else device
    what = (f"`{' '.join(request.command)}`" if request.command else
            f"the built-in {request.workload} (geotrain.train.workloads: its synthetic data, as a launch trains it)")
    source = (f"geotrain profile of {what} on {platform.machine()} {on}: "
              f"{measurement.steps_timed} steps after {request.warmup} warm-up ({measurement.counted_by}), "
              f"{dt.date.today().isoformat()}")
    rate = ComputeRate(request.workload, accelerator, 1, measurement.samples_per_s, False, source, request.kind,
                       MEASURED)
    save_rate(request.output, rate)
    return ProfileResult(rate, measurement, device, request.output)

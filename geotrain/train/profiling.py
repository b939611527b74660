"""Measure a user's training command on this machine: samples/s after warm-up (``geotrain profile``).

The command runs as geotrain would launch it on one node (``RANK=0``, ``WORLD_SIZE=1``, a free
``MASTER_PORT``, a throw-away checkpoint location) in its own process group. Progress comes from
the lines in ``GEOTRAIN_PROGRESS_FILE``: the script's own :func:`geotrain.train.api.report_progress`
calls, or, for ``python SCRIPT`` / ``python -m MODULE`` commands, the optimizer steps that
:mod:`geotrain.train.probe` counts (times the samples per step the user gives). Once ``warmup +
steps`` steps are seen and at least ``min_seconds`` have passed since warm-up ended, the command is
stopped; the rate is the samples of the steps after warm-up over the time from the end of warm-up
to the last step. The command's output and its progress lines stay in
``GEOTRAIN_HOME/profiles/<time>-*/``; checkpoints it writes through the API go there too.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from geotrain.errors import InputError, RunError
from geotrain.files import PRIVATE_DIR, geotrain_home
from geotrain.train.worker_env import free_port, worker_env

PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
STOP_GRACE_S = 5.0
POLL_S = 0.05
# CUDA device names (torch.cuda.get_device_name) to the accelerator names of the catalog, first match wins
DEVICE_NAMES: tuple[tuple[str, str], ...] = (
    (r"A100.*80\s*GB", "A100-80GB"), (r"A100", "A100"), (r"H200", "H200"), (r"H100", "H100"),
    (r"V100.*32\s*GB", "V100-32GB"), (r"V100", "V100"), (r"P100", "P100"), (r"\bT4\b", "T4"),
    (r"A10G", "A10G"), (r"\bA10\b", "A10"), (r"L40S", "L40S"), (r"\bL4\b", "L4"), (r"RTX\s*8000", "RTX8000"),
)


@dataclass(frozen=True, slots=True)
class Measurement:
    samples_per_s: float
    steps_timed: int
    seconds: float  # from the end of warm-up to the last timed step
    counted_by: str  # "reported samples" | "optimizer steps"
    log: Path  # the command's stdout and stderr


def accelerator_of_device(name: str) -> str | None:
    """The catalog's accelerator name for a CUDA device name, e.g. 'NVIDIA A100-SXM4-80GB' → A100-80GB."""
    return next((ours for pattern, ours in DEVICE_NAMES if re.search(pattern, name, re.IGNORECASE)), None)


def local_accelerator() -> tuple[str | None, str]:
    """(accelerator name or None when the device is not one the catalog knows, the device's own name):
    the first CUDA device, or CPU."""
    import torch

    if not torch.cuda.is_available():
        return "CPU", "CPU"
    device = torch.cuda.get_device_name(0)
    return accelerator_of_device(device), device


def probed(command: list[str]) -> list[str]:
    """``python SCRIPT ...`` and ``python -m MODULE ...`` run under the step-counting probe; other
    commands run as they are (they report their own progress or are not measured)."""
    if len(command) >= 2 and PYTHON.match(Path(command[0]).name) and (command[1] == "-m" or not command[1].startswith("-")):
        return [command[0], "-m", "geotrain.train.probe", *command[1:]]
    return list(command)


def measure(command: list[str], *, samples_per_step: int | None, steps: int, warmup: int, timeout_s: float,
            workdir: Path, threads: int | None = None, min_seconds: float = 0.0) -> Measurement:
    """Run ``command`` until ``warmup + steps`` steps are done; RunError if it fails or ends first,
    InputError if it cannot be counted."""
    if not command:
        raise InputError("profile: give the training command after `--`, e.g. geotrain profile --workload my-net "
                         "--samples-per-step 32 -- python train.py")
    profiles = geotrain_home() / "profiles"
    profiles.mkdir(mode=PRIVATE_DIR, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=time.strftime("%Y%m%dT%H%M%S-"), dir=profiles))
    progress, log = scratch / "progress.jsonl", scratch / "output.log"
    progress.touch()
    env = _env(progress, scratch, threads)
    argv = probed(command)
    wanted = warmup + steps
    started = time.monotonic()
    with open(log, "wb") as out:
        try:
            proc = subprocess.Popen(argv, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        except OSError as exc:
            raise InputError(f"profile: cannot run {command[0]!r}: {exc.strerror or exc}; check the command "
                             "after `--`") from None
        try:
            events = []
            while True:
                events = _events(progress)
                if _enough(events, wanted, warmup, min_seconds):
                    break
                if proc.poll() is not None:
                    events = _events(progress)
                    if len(events) >= wanted:  # ended on its own after enough steps: time what it did
                        break
                    raise RunError(_ended_early(command, proc.returncode, len(events), wanted, log))
                if time.monotonic() - started > timeout_s:
                    raise RunError(f"profile: {len(events)} of {wanted} steps in {timeout_s:g} s; give more time "
                                   f"(--timeout) or fewer steps (--steps, --warmup); its output: {log}")
                time.sleep(POLL_S)
        finally:
            _stop(proc)
    return _rate(events, warmup, samples_per_step, log, command)


def _enough(events: list[dict], wanted: int, warmup: int, min_seconds: float) -> bool:
    if len(events) < wanted:
        return False
    begin = events[warmup - 1]["t"] if warmup else events[0]["t"]
    return events[-1]["t"] - begin >= min_seconds


def _env(progress: Path, scratch: Path, threads: int | None) -> dict[str, str]:
    package_root = str(Path(__file__).resolve().parents[2])  # so that any python finds the probe
    env = worker_env({
        "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "0",
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "GEOTRAIN_PROGRESS_FILE": str(progress),
        "GEOTRAIN_RUN_ID": "profile", "GEOTRAIN_NODE_ID": "profile", "GEOTRAIN_GENERATION": "0",
        "GEOTRAIN_CHECKPOINT_URL": (scratch / "checkpoints").as_uri(),
        "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p),
        "PYTHONUNBUFFERED": "1",
    })
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def _events(progress: Path) -> list[dict]:
    """Complete lines only (the last one may be half written)."""
    text = progress.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")[:-1]
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    reported = [e for e in out if "samples" in e]
    return reported if reported else out


def _rate(events: list[dict], warmup: int, samples_per_step: int | None, log: Path, command: list[str]) -> Measurement:
    reported = "samples" in events[-1]
    if not reported and samples_per_step is None:
        raise InputError(f"profile: {' '.join(command)!r} ran {len(events)} optimizer steps but reported no samples: "
                         "give --samples-per-step N (samples of one optimizer step), or call "
                         "geotrain.train.api.report_progress(samples) after each step")
    timed = events[warmup:] if warmup else events[1:]  # without warm-up the first step only starts the clock
    begin = events[warmup - 1]["t"] if warmup else events[0]["t"]
    seconds = timed[-1]["t"] - begin
    samples = sum(e["samples"] for e in timed) if reported else len(timed) * samples_per_step
    if seconds <= 0 or samples <= 0:
        raise RunError(f"profile: {len(timed)} steps took no measurable time; profile more steps (--steps)")
    return Measurement(samples / seconds, len(timed), seconds, "reported samples" if reported else "optimizer steps",
                       log)


def _ended_early(command: list[str], code: int, seen: int, wanted: int, log: Path) -> str:
    tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
    how = f"exited with code {code}" if code >= 0 else f"was killed by signal {-code}"
    what = " | ".join(tail) if tail else "no output"
    counted = "" if seen else (" (nothing counted: a python script's optimizer steps are counted, any other "
                               "command must call geotrain.train.api.report_progress)")
    return (f"profile: {' '.join(command)!r} {how} after {seen} of {wanted} steps{counted}; last output: {what}; "
            f"whole output: {log}")


def _stop(proc: subprocess.Popen) -> None:
    """End the command and everything it started (its process group)."""
    if proc.poll() is None:
        for sig, wait_s in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(wait_s)
                break
            except subprocess.TimeoutExpired:
                continue
    try:  # children left in the group after the leader ended
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()

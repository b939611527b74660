"""A user's script's progress, counted where the built-in runtime's is: the run's ledger.

``geotrain.train.api.report_progress(samples, steps=1)`` lands here. What counts is what rank 0
reports, as the runtime counts it: ``samples`` are the samples of the reported steps over *all*
ranks (the global batch of a step, not one rank's share), and the ledger's step and samples are the
run's totals so far (``Ledger.add_progress`` adds each report to the last row). Other ranks'
reports are not counted (every rank trains the same steps).

Where the reports go, from the environment the launcher gives the script:

- ``GEOTRAIN_PROGRESS_FILE`` (``geotrain profile``): one JSON line per report, nothing else;
- a node on this machine (``GEOTRAIN_HOME``): the ledger's SQLite file;
- a node on another machine (``GEOTRAIN_LEDGER=store``): the launcher's store
  (``geotrain.train.ledger_relay``), copied into the ledger by the launcher.

Not under a launch (no run id, generation 0): nowhere. Reports are written at most once every
``FLUSH_S`` (the first at once), and what is left when the script exits is written then, so a
script may report every step, however short; a failure to write is said once on stderr and never
ends the script.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from geotrain.train.ledger_relay import RELAY_ENV, RELAY_STORE, STORE_ENV

FLUSH_S = 1.0
PROGRESS_FILE_ENV = "GEOTRAIN_PROGRESS_FILE"


class ProgressReporter:
    """Counts the reports of one process and writes them where its environment says (see the module)."""

    def __init__(self, env: Mapping[str, str], *, clock: Callable[[], float] = time.time,
                 connect: Callable[[Mapping[str, str], int], Any] | None = None) -> None:
        self.env = env
        self.clock = clock
        self.run_id = env.get("GEOTRAIN_RUN_ID") or ""
        self.generation = _int(env.get("GEOTRAIN_GENERATION"), 0)
        self.rank = _int(env.get("RANK"), 0)
        self.world_size = _int(env.get("WORLD_SIZE"), 1)
        self.progress_file = env.get(PROGRESS_FILE_ENV)
        self._connect = connect
        self._ledger: Any = None
        self._steps = 0  # reported, not yet written
        self._samples = 0
        self._window_start: float | None = None  # when the last write was (the rate's window begins)
        self._failed = False
        self._lock = threading.Lock()

    @property
    def counts(self) -> bool:
        """Whether this process's reports reach a run's ledger (rank 0 of a launched generation)."""
        return not self.progress_file and bool(self.run_id) and self.generation >= 1 and self.rank == 0

    def report(self, samples: int, steps: int = 1) -> None:
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 0:
            raise ValueError(f"report_progress: samples must be a whole number >= 0, not {samples!r}")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"report_progress: steps must be a whole number >= 1, not {steps!r}")
        now = self.clock()
        if self.progress_file:
            with open(self.progress_file, "a", encoding="utf-8") as out:
                out.write(json.dumps({"t": now, "samples": samples, "steps": steps}) + "\n")
            return
        if not self.counts:
            return
        with self._lock:
            self._steps += steps
            self._samples += samples
            if self._window_start is None or now - self._window_start >= FLUSH_S:
                self._write(now)

    def flush(self) -> None:
        """Write what was reported since the last write (at exit)."""
        with self._lock:
            if self._steps:
                self._write(self.clock())

    def _write(self, now: float) -> None:
        rate = self._samples / (now - self._window_start) if self._window_start is not None \
            and now > self._window_start else None
        try:
            self._sink().add_progress(self.run_id, generation=self.generation, steps=self._steps,
                                      samples=self._samples, samples_per_s=rate, world_size=self.world_size)
        except Exception as exc:  # noqa: BLE001 - the script's training matters more than its count
            if not self._failed:
                print(f"geotrain: progress not recorded ({type(exc).__name__}: {exc}); training goes on",
                      file=sys.stderr, flush=True)
            self._failed = True
            return
        self._steps = self._samples = 0
        self._window_start = now

    def _sink(self) -> Any:  # noqa: ANN401 - a Ledger or a StoreLedger
        if self._ledger is None:
            if self.env.get(RELAY_ENV) == RELAY_STORE:
                if STORE_ENV not in self.env:
                    raise RuntimeError(f"{RELAY_ENV}={RELAY_STORE} but {STORE_ENV} is not set")
                from geotrain.train.ledger_relay import connect

                self._ledger = (self._connect or connect)(self.env, self.rank)
            else:
                from geotrain.ledger import Ledger

                self._ledger = Ledger(create=False)
        return self._ledger


def completed_reason(last: Any, *, script: bool) -> str:  # noqa: ANN401 - a ledger ProgressRow or None
    """Why a completed run ended, in words: the steps trained, or what the user's script reported."""
    if not script:
        return f"trained {last.step if last else 0} steps"
    if last is None:
        return ("the script reported no progress (call geotrain.train.api.report_progress(samples) after each "
                "step so that status and cost-report count its steps and samples)")
    return f"the script reported {last.step:,} steps, {last.samples:,} samples"


_reporter: ProgressReporter | None = None
_reporter_lock = threading.Lock()


def reporter() -> ProgressReporter:
    """This process's reporter (made on first use, flushed at exit)."""
    global _reporter
    with _reporter_lock:
        if _reporter is None:
            _reporter = ProgressReporter(os.environ)
            atexit.register(_reporter.flush)
        return _reporter


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text else default
    except ValueError:
        return default

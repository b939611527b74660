"""The small API a user's own training script can use when geotrain launches it.

geotrain runs a torchrun-style script unchanged: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR`` and ``MASTER_PORT`` are set, so ``torch.distributed.init_process_group("gloo")``
(or "nccl") works as under torchrun. When a node is lost the launcher starts the script again on
the new set of nodes (a new world size): the script resumes from its own checkpoint. This module
tells it where checkpoints go and when a preemption is coming::

    from geotrain.train import api

    store = api.checkpoint_store()          # geotrain.train.checkpoint.CheckpointStore
    latest = store.latest()                 # resume from here if not None
    api.on_preemption_notice(lambda: ...)   # e.g. set a flag; save at the next step boundary
    if api.preemption_notice():             # or poll: the deadline (unix time) or None
        ...
    api.report_progress(samples=global_batch)  # after each step: what status, cost-report and
                                               # ``geotrain profile`` count (rank 0's reports)
    dist.destroy_process_group()
    api.finish()                            # last: ends the process with exit status 0
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn


def run_info() -> dict:
    """Run id, node id, generation, rank, world size and region of this process."""
    return {
        "run_id": os.environ.get("GEOTRAIN_RUN_ID"), "node_id": os.environ.get("GEOTRAIN_NODE_ID"),
        "generation": int(os.environ.get("GEOTRAIN_GENERATION", "0")), "rank": int(os.environ.get("RANK", "0")),
        "world_size": int(os.environ.get("WORLD_SIZE", "1")), "region": os.environ.get("GEOTRAIN_REGION"),
    }


def checkpoint_url() -> str:
    url = os.environ.get("GEOTRAIN_CHECKPOINT_URL")
    if not url:
        raise RuntimeError("GEOTRAIN_CHECKPOINT_URL is not set: is this script running under `geotrain launch`?")
    return url


def checkpoint_store():  # noqa: ANN201 - imports torch lazily
    from geotrain.train.checkpoint import CheckpointStore

    return CheckpointStore(checkpoint_url())


def preemption_notice() -> float | None:
    """The deadline (unix time) of a preemption notice for this node, or None."""
    node_dir = os.environ.get("GEOTRAIN_NODE_DIR")
    if not node_dir:
        return None
    path = Path(node_dir) / "preemption-notice.json"
    try:
        return float(json.loads(path.read_text())["deadline"])
    except (OSError, ValueError, KeyError):
        return None


def on_preemption_notice(callback: Callable[[], None]) -> None:
    """Call ``callback`` (in the main thread, between bytecodes: keep it short) when a notice arrives."""
    signal.signal(signal.SIGUSR1, lambda signum, frame: callback())


def report_progress(samples: int, steps: int = 1) -> None:
    """Say that ``steps`` training steps (default one) of ``samples`` samples in all are done.

    Under ``geotrain launch``, rank 0's reports are the run's progress, as the built-in runtime's are:
    ``samples`` counts the samples of those steps over every rank (the global batch, not this rank's
    share); launch's outcome, ``geotrain status`` and ``geotrain cost-report`` show the totals. Other
    ranks' reports are not counted. Under ``geotrain profile`` they are what it times (a script that
    makes them needs no ``--samples-per-step``). Elsewhere this does nothing. Cheap enough to call
    every step (``geotrain.train.progress``)."""
    from geotrain.train.progress import reporter

    reporter().report(samples, steps)


def finish(code: int = 0) -> NoReturn:
    """End this process with exit status ``code``, after its exit handlers (geotrain's last progress
    report among them) and a flush of stdout and stderr, but without Python's interpreter teardown.

    Call it last in a script that trained with torch.distributed over gloo: torch's gloo worker
    threads may free the last collective (DDP's allreduce, with the Python state it holds) while the
    interpreter shuts down, and the process then ends in std::terminate (exit -6 or -11) now and then
    on a busy machine; the launcher cannot tell that from a crash and would start the work again."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a pipe nobody reads any more
            pass
    os._exit(code)

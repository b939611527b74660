"""The small API a user's own training script can use when geotrain launches it.

Train with the plan's sync strategy (any of the five, with the plan's settings): build the model and
the optimizer as usual and let geotrain wrap them::

    from geotrain.train import api

    model = torchvision.models.resnet18(num_classes=10)
    opt = api.optimizer(model, torch.optim.SGD(model.parameters(), lr=0.1), batch_size=32, steps=1000)
    while not opt.done:                      # resumed runs start at the checkpoint's step
        x, y = dataset_batch(opt.batch_indices(len(dataset)))  # this peer's share, where the run is
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step(loss)                       # synchronise as planned, count, checkpoint
        opt.zero_grad()
    opt.close()                              # every peer holds the run's model; the last checkpoint
    api.finish()

``opt.step`` returns whether the model changed (hivemind trains on until the peers together reach
the plan's target batch). The launcher's process group is joined for you (gloo, or nccl where
every rank has a GPU); checkpoints go to ``checkpoint_store()`` with the model, the optimizer, the
RNG state, the step and the samples, every ``--checkpoint-every`` steps, when a preemption notice
arrives, and at the end; progress goes where ``report_progress`` sends it.

Or run a torchrun-style script unchanged: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
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


class SyncedOptimizer:
    """A model and its optimizer under the plan's sync strategy (:func:`optimizer` makes it)."""

    def __init__(self, trainer) -> None:  # noqa: ANN001 - geotrain.train.trainer.Trainer
        self._trainer = trainer
        self.strategy = trainer.sync.name

    @property
    def done(self) -> bool:
        """The run has trained its ``steps`` (asgd-ga across regions: the run's samples)."""
        return self._trainer.finished

    @property
    def step_count(self) -> int:
        """Steps the run has taken (model updates), counted over its generations."""
        return self._trainer.step_count

    @property
    def samples(self) -> int:
        """Samples the run has trained, over every peer and generation."""
        return self._trainer.samples

    @property
    def rank(self) -> int:
        return self._trainer.session.rank

    @property
    def world_size(self) -> int:
        return self._trainer.session.world

    def batch_indices(self, dataset_size: int) -> list[int]:
        """The dataset indices of this peer's next batch: its share of the run's next global batch, in
        an order fixed by the run's seed, so that a resumed run reads on where it stopped. Hivemind's
        peers, which take as many batches as their speed allows in a round, read their own stream."""
        t = self._trainer
        b, rank, world = t.m, t.session.rank, t.session.world
        if t.sync.name == "hivemind":  # as the runtime reads: a round's stretch of the data, interleaved by peer
            position = t.step_count * t.sync.stride + (self._batches_in_round * world + rank) * b
        else:
            position = t.step_count * b * world + rank * b
        return [(position + k) % dataset_size for k in range(b)]

    _batches_in_round = 0

    def step(self, loss: object = None) -> bool:
        """After ``loss.backward()`` on this peer's batch (``loss``: the batch's mean loss, a tensor or a
        number, for the ledger). Returns whether the model changed."""
        value = float(loss.detach()) if hasattr(loss, "detach") else float(loss or 0.0)  # type: ignore[union-attr]
        changed = self._trainer.step(value, self._trainer.m)
        self._batches_in_round = 0 if changed else self._batches_in_round + 1
        return changed

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._trainer.optimizer.zero_grad(set_to_none=set_to_none)

    def save(self) -> None:
        """A checkpoint now, by the rank that holds the run's model."""
        if self._trainer.session.rank == self._trainer.reporter:
            self._trainer.save("periodic")

    def close(self) -> None:
        """The end of training here: the last checkpoint, the process group left."""
        self._trainer.finish()


def optimizer(model, optimizer, *, batch_size: int, steps: int) -> SyncedOptimizer:  # noqa: ANN001
    """Wrap ``model`` and its torch ``optimizer`` with the plan's sync strategy and settings, from the
    launch's environment; resume from the newest checkpoint. ``batch_size``: samples of each
    ``step`` on this peer; ``steps``: the model updates the run takes in all."""
    import torch

    from geotrain.train.session import Session
    from geotrain.train.trainer import NoticeWatch, Trainer

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    notice = NoticeWatch(os.environ.get("GEOTRAIN_NODE_DIR"))
    session = Session.from_environment()
    config = session.config
    trainer = Trainer(session, model, optimizer, loss_fn=None, micro_batches=session.world,
                      samples_per_micro=batch_size, target_steps=steps, checkpoint_url=checkpoint_url(),
                      checkpoint_every=config["checkpoint_every"], progress_every=config["progress_every"],
                      notice=notice)
    return SyncedOptimizer(trainer)


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

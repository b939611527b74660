"""The training state of one process and what happens around each step, whoever computes the
gradient: the built-in runtime (:meth:`Trainer.run_step`: the strategy trains the runtime's
micro-batches) and a user's script (:meth:`Trainer.step`: the script did forward and backward, the
strategy synchronises and steps, :mod:`geotrain.train.api`).

Around each step, in both: the step and sample counts; the strategy's boundary (``after_step``);
a checkpoint when a preemption notice arrives (by the warned node, at once if its model may be
checkpointed, else at the next boundary), every ``checkpoint_every`` steps and at the end (by the
rank whose model is the run's, ``sync.reporter``), each holding the model, the optimizer, the RNG
state, the step and the samples; the run's progress in the ledger every ``progress_every`` steps;
the bytes sent by link. :meth:`restore` resumes from the newest committed checkpoint.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from geotrain.ledger import EventKind
from geotrain.train.checkpoint import CheckpointStore
from geotrain.train.session import Session
from geotrain.train.sync import StepInput, StepResult, SyncContext, make_sync
from geotrain.train.sync.base import EndedByPeers


class NoticeWatch:
    """A preemption notice: SIGUSR1 (the provider's hook) or the notice file on the node."""

    def __init__(self, node_dir: str | None) -> None:
        self.flag = False
        self.path = Path(node_dir) / "preemption-notice.json" if node_dir else None
        signal.signal(signal.SIGUSR1, self._on_signal)

    def _on_signal(self, signum, frame) -> None:  # noqa: ANN001
        self.flag = True

    def received(self) -> bool:
        if not self.flag and self.path is not None and self.path.exists():
            self.flag = True
        return self.flag


class Trainer:
    """A model, its optimizer and the plan's sync strategy in one generation of a run.

    ``micro_batches`` × ``samples_per_micro`` is a step's global batch (the runtime's ``M``
    micro-batches; a script's batch on each of the ranks); ``target_steps`` ends the run."""

    def __init__(self, session: Session, model: nn.Module, optimizer: torch.optim.Optimizer, *,
                 loss_fn: Callable | None, micro_batches: int, samples_per_micro: int, target_steps: int,
                 checkpoint_url: str, checkpoint_every: int, progress_every: int, deterministic: bool = False,
                 notice: NoticeWatch | None = None, write_delay_s: float = 0.0) -> None:
        self.session = session
        self.model, self.optimizer = model, optimizer
        self.M, self.m = micro_batches, samples_per_micro
        self.target = target_steps
        self.every, self.progress_every = checkpoint_every, progress_every
        self.notice = notice
        self.ckpt = CheckpointStore(checkpoint_url, write_delay_s=write_delay_s)
        self.step_count = 0
        self.samples = 0  # trained by all ranks (a hivemind round trains about its target batch)
        self.loss: float | None = None
        self.restored_from: str | None = None
        self._restore_state()
        s = session
        self.sync = make_sync(s.sync_settings, SyncContext(
            model, loss_fn, s.rank, s.world, s.counter, [n["region"] for n in s.nodes], micro_batches=micro_batches,
            samples_per_micro=samples_per_micro, deterministic=deterministic,
            rates=[n.get("samples_per_s") or 1.0 for n in s.nodes], store=s.store, address=s.address,
            timeout_s=s.timeout_s, samples_left=target_steps * micro_batches * samples_per_micro - self.samples,
            optimizer=optimizer, run_id=f"{s.run_id}-gen{s.generation}", dht_peers=s.dht_peers, step=self.step_count, joining=s.joining))
        joined = getattr(self.sync, "joined_at", None)  # an elastic peer that took its state from its peers
        if joined is not None:
            self.samples += (joined - self.step_count) * s.sync_settings.target_batch_size
            self.step_count = joined
            s.ledger.event(s.run_id, EventKind.PEER_JOINED, node_id=s.node_id, rank=s.rank, generation=s.generation,
                           step=joined)
        self.reporter = getattr(self.sync, "reporter", 0)  # the rank whose model and sample count are the run's
        budget = getattr(self.sync, "samples_left", None)  # a strategy that ends on samples, not on the step count
        self.finished = budget <= 0 if budget is not None else self.step_count >= self.target
        self._noticed = False
        self._took_final = False  # an elastic peer took the run's final checkpoint (``_take_final``)
        self._window = (time.perf_counter(), self.samples)

    # -- the state --------------------------------------------------------------------------------

    def _restore_state(self) -> None:
        latest = self.ckpt.latest()
        if latest is None:
            return
        state = self.ckpt.load(latest)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        self.step_count = int(state["step"])
        self.samples = int(state.get("samples", self.step_count * self.M * self.m))  # older checkpoints: M per step
        self.restored_from = latest.url
        s = self.session
        if s.rank == 0:
            s.ledger.event(s.run_id, EventKind.CHECKPOINT_RESTORED, node_id=s.node_id, step=self.step_count,
                           generation=s.generation, url=latest.url, rejected=[list(r) for r in self.ckpt.rejected])

    def save(self, kind: str) -> None:
        s = self.session
        s.ledger.event(s.run_id, EventKind.CHECKPOINT_WRITE_STARTED, node_id=s.node_id, step=self.step_count,
                       purpose=kind)
        with getattr(self.sync, "lock", None) or contextlib.nullcontext():  # held while a parameter server changes the model
            weights = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        info = self.ckpt.save(self.step_count, {
            "model": weights, "optimizer": self.optimizer.state_dict(), "step": self.step_count,
            "samples": self.samples, "torch_rng": torch.get_rng_state(),
        }, meta={"run_id": s.run_id, "generation": s.generation, "world_size": s.world, "samples": self.samples,
                 "kind": kind})
        s.ledger.event(s.run_id, EventKind.CHECKPOINT_SAVED, node_id=s.node_id, step=self.step_count, purpose=kind,
                       url=info.url, size_bytes=info.size_bytes)
        if s.rank == self.reporter:
            self.ckpt.prune(keep=3)

    # -- a step -------------------------------------------------------------------------------------

    def run_step(self, inp: StepInput) -> bool:
        """The runtime's step: the strategy trains ``inp``'s micro-batches. Returns whether the run ended."""
        try:
            return self._after(self.sync.step(inp, self.optimizer))
        except EndedByPeers:
            self._take_final()
            return True

    def step(self, loss: float, samples: int) -> bool:
        """A script's step: its gradient (the mean over its ``samples``) is in the parameters' ``.grad``.
        Returns whether the model changed (hivemind trains on until the peers reach the target batch)."""
        try:
            result = self.sync.apply(self.optimizer, samples, loss)
        except EndedByPeers:
            self._take_final()
            return True
        if result is None:
            return False
        self._after(result)
        return True

    def _take_final(self) -> None:
        """An elastic strategy's peer at the end (a straggler, or one that ended after the first):
        the model, the optimizer and the counts of the run's final checkpoint, written by the first
        peer to end (waited for, up to twice the collective timeout), so every peer ends on it."""
        s = self.session
        deadline = time.monotonic() + 2 * s.timeout_s
        while True:
            latest = self.ckpt.latest()
            if latest is not None and latest.step >= self.target:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the other peers ended the run but its final checkpoint did not appear")
            time.sleep(0.5)
        state = self.ckpt.load(latest)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step_count, self.samples = int(state["step"]), int(state["samples"])
        self.finished = True
        if not self._took_final:
            s.ledger.event(s.run_id, EventKind.CHECKPOINT_RESTORED, node_id=s.node_id, step=self.step_count,
                           generation=s.generation, url=latest.url, rejected=[], purpose="the run's end")
        self._took_final = True

    def _after(self, result: StepResult) -> bool:
        s, sync = self.session, self.sync
        self.loss = result.loss
        self.samples += result.samples
        self.step_count = result.step if result.step is not None else self.step_count + 1
        step = self.step_count
        self.finished = sync.after_step(step, final=step >= self.target)  # the run ends on one model
        self.samples += getattr(sync, "samples_after_last_step", 0) if self.finished else 0
        if self.notice is not None and self.notice.received() and not self._noticed and sync.averaged(step):
            self._noticed = True
            s.ledger.event(s.run_id, EventKind.NOTICE, node_id=s.node_id, step=step)
            self.save("emergency")
        elif (s.rank == self.reporter and step % self.every == 0 and sync.averaged(step)
              and not (self.finished and hasattr(sync, "claims_final"))):  # hivemind: the first to end saves it
            self.save("periodic")
        if s.rank == self.reporter and (step % self.progress_every == 0 or self.finished):
            now = time.perf_counter()
            then, before = self._window
            rate = (self.samples - before) / (now - then) if now > then else None
            self._window = (now, self.samples)
            s.ledger.progress(s.run_id, generation=s.generation, step=step, samples=self.samples, loss=self.loss,
                              samples_per_s=rate, world_size=s.world)
        if step % self.progress_every == 0:
            s.flush_bytes(sync)
        return self.finished

    # -- the end ------------------------------------------------------------------------------------

    def finish(self) -> None:
        """The run's last checkpoint (if its model may be taken here) and the end of the generation."""
        s = self.session
        claims = getattr(self.sync, "claims_final", None)  # hivemind: the first peer to end, whichever rank
        mine = claims() if claims is not None else s.rank == self.reporter
        if mine and self.sync.averaged(self.step_count):
            self.save("final")
            s.ledger.event(s.run_id, EventKind.TRAINING_FINISHED, node_id=s.node_id, step=self.step_count)
        s.flush_bytes(self.sync)
        self.sync.close()
        if claims is not None:  # every peer ends on the run's final model, once nothing of the strategy's
            self._take_final()  # (Hivemind's averagers share the parameters' memory) changes it any more
        s.close()

    def abort(self) -> None:
        """A peer or the store is gone: what was counted goes to the ledger, the strategy's threads end."""
        self.session.flush_bytes(self.sync)
        self.sync.close()


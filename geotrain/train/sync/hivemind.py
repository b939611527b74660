"""``hivemind``: large-batch training as Erben et al. ran it with Hivemind. Peers train at their own
pace, each accumulating gradients over its own micro-batches, and report their progress (samples
accumulated) to a shared counter, the run's rendezvous store (Hivemind's DHT). Once the peers
together reach the target batch size ``TBS``, every peer joins one averaging round: a butterfly
all-reduce (reduce-scatter and all-gather, each peer sends ``2W/n`` to every other peer) of the
gradient sums, weighted by the samples each peer trained, then the same optimizer step on every
peer. A round is one step of the runtime. The butterfly and the sum of the peers' sample counts go
over the runtime's WAN transport (:class:`geotrain.train.sync.streams.Mesh`: several long-lived TCP
streams per pair of peers, each piece sent as soon as it is ready), not gloo's collectives.

Convergence safeguards (as in the paper's setup): the update is the mean gradient over all samples
of the round, whoever trained them, so a slow peer counts for what it did and no sample counts
twice; a peer never accumulates more than ``TBS`` samples on its own (a peer that lost contact with
the counter still ends its round); every peer applies the same averaged update, so the replicas
never drift apart (the parameters of all peers are equal after every round).

Progress reports go through a thread with a store client of its own, so the training loop never
waits on the store's round trip. A peer reports a micro-batch when it starts it (the others count it
as under way) and learns that the target is reached up to one report late, so a round trains the
target batch plus what the peers started in that time (counted: the update is weighted by it).

Data: round ``k``'s micro-batch ``i`` of rank ``r`` starts at sample ``k·stride + (i·n + r)·m``
(``stride`` = ``TBS`` rounded up to ``n·m``, times four), a pure function of the round, so a resumed
run reads the samples an uninterrupted run would have read, up to the peers' pace.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import torch
from torch import nn

from geotrain.train.sync.base import (
    ByteCounter, RoundClock, StepInput, StepResult, Timer, assign, flat_gradients, parameter_bytes, wire_dtype,
)
from geotrain.train.sync.streams import Mesh

REPORT_IDLE_S = 0.0005  # how long the reporter sleeps when it has nothing new to tell


class ProgressCounter(threading.Thread):
    """The peers' shared count of samples accumulated in the current round (one store key a round)."""

    def __init__(self, make_store: Callable[[], object]) -> None:
        super().__init__(daemon=True, name="hivemind-progress")
        self._make_store = make_store
        self._lock = threading.Lock()
        self._round = 0
        self._pending = 0
        self._total = 0
        self._stop = threading.Event()
        self.failed: BaseException | None = None

    def begin(self, round_index: int) -> None:
        with self._lock:
            self._round, self._pending, self._total = round_index, 0, 0

    def add(self, samples: int) -> None:
        with self._lock:
            self._pending += samples

    def total(self) -> int:
        with self._lock:
            return self._total

    def run(self) -> None:
        try:
            store = self._make_store()
            while not self._stop.is_set():
                with self._lock:
                    k, delta = self._round, self._pending
                    self._pending = 0
                total = store.add(f"hivemind/round{k}", delta)
                with self._lock:
                    if self._round == k:
                        self._total = max(self._total, int(total))
                if not delta:
                    time.sleep(REPORT_IDLE_S)
        except BaseException as exc:  # noqa: BLE001 - the store is gone: the round still ends (see the cap)
            self.failed = exc

    def stop(self) -> None:
        self._stop.set()


class HivemindSync:
    name = "hivemind"
    reads_own_data = True

    def __init__(self, model: nn.Module, loss_fn: Callable, rank: int, world: int, counter: ByteCounter,
                 target_batch_size: int, samples_per_micro: int, precision: str = "fp32",
                 make_store: Callable[[], object] | None = None, store: object | None = None,
                 address: str = "127.0.0.1", timeout_s: float = 60.0) -> None:
        self.raw = self.model = model
        self.loss_fn = loss_fn
        self.rank, self.world, self.counter = rank, world, counter
        self.tbs = target_batch_size
        self.m = samples_per_micro
        self.dtype = wire_dtype(precision)
        self.params = [p for p in model.parameters()]
        self.payload = parameter_bytes(model, self.dtype)
        self.stride = 4 * -(-target_batch_size // (world * samples_per_micro)) * world * samples_per_micro
        self.clock = RoundClock()
        self.progress: ProgressCounter | None = None
        self.mesh: Mesh | None = None
        if world > 1:
            if make_store is None or store is None:
                raise ValueError("hivemind with more than one peer needs the run's store for its progress reports")
            self.mesh = Mesh("hivemind", rank, range(world), store, address, counter, timeout_s)
            self.progress = ProgressCounter(make_store)
            self.progress.start()

    def _reached(self, local: int) -> bool:
        if local >= self.tbs:
            return True  # alone at the target: never accumulate more than a whole round
        return self.progress is not None and self.progress.total() >= self.tbs

    def step(self, inp: StepInput, optimizer: torch.optim.Optimizer) -> StepResult:
        if inp.fetch is None:
            raise ValueError("hivemind reads its own micro-batches: the step input needs fetch")
        self.clock.begin()
        k = inp.step
        if self.progress is not None:
            self.progress.begin(k)
        optimizer.zero_grad(set_to_none=True)
        local, loss_sum, i = 0, 0.0, 0
        base = k * self.stride
        while True:
            x, y = inp.fetch(base + (i * self.world + self.rank) * self.m)
            i += 1
            if self.progress is not None:
                self.progress.add(x.shape[0])  # told before it is trained: the others count it as under way
            with Timer(self.clock):
                loss = self.loss_fn(self.model, x, y)
                (loss * (x.shape[0] / self.tbs)).backward()  # a share of the round's mean: no overflow on the wire
            local += x.shape[0]
            loss_sum += float(loss.detach()) * x.shape[0]
            if self._reached(local):
                break
        total = local
        flat = flat_gradients(self.params)
        if self.mesh is not None:  # the butterfly: the peers' gradient sums and sample counts
            flat, total = self.mesh.all_reduce(flat, self.dtype, count=local)
        assign(self.params, flat * (self.tbs / total), grad=True)
        with Timer(self.clock):
            optimizer.step()
        self.clock.steps += 1
        self.clock.end()
        return StepResult(loss_sum / local, total)

    def after_step(self, step: int, *, final: bool = False) -> bool:
        return final

    def averaged(self, step: int) -> bool:
        return True  # every peer applies the same averaged update

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
        if self.mesh is not None:
            self.mesh.close()

"""``hivemind``: large-batch training as Erben et al. ran it with Hivemind. Peers train at their own
pace, each accumulating gradients over its own micro-batches, and tell each other their progress
(samples accumulated; Hivemind's peers tell each other through their DHT). Once the peers
together reach the target batch size ``TBS``, every peer joins one averaging round: a butterfly
all-reduce (reduce-scatter and all-gather, each peer sends ``2W/n`` to every other peer) of the
gradient sums, weighted by the samples each peer trained, then the same optimizer step on every
peer. A round is one step of the runtime. The butterfly and the sum of the peers' sample counts go
over the runtime's WAN transport (:class:`geotrain.train.sync.streams.Mesh`: several long-lived TCP
streams per pair of peers, each piece sent as soon as it is ready), not gloo's collectives.

Convergence safeguards (as in the paper's setup): the update is the mean gradient over all samples
of the round, whoever trained them, so a slow peer counts for what it did and no sample counts
twice; a peer never accumulates more than ``TBS`` samples on its own (a peer that hears nothing from
the others still ends its round); every peer applies the same averaged update, so the replicas
never drift apart (the parameters of all peers are equal after every round).

Progress goes straight to the peers (:class:`PeerProgress`: one long-lived TCP stream per pair, a
thread per peer adding up what arrives), so the training loop never waits on a round trip, and a
peer learns of another's micro-batch one one-way trip after it started (through a store in one
place, it took a round trip to that place). A peer tells a micro-batch when it starts it (the others
count it as under way), so a round trains the target batch plus what the peers started before they
heard that the target was reached (counted: the update is weighted by it).

Data: round ``k``'s micro-batch ``i`` of rank ``r`` starts at sample ``k·stride + (i·n + r)·m``
(``stride`` = ``TBS`` rounded up to ``n·m``, times four), a pure function of the round, so a resumed
run reads the samples an uninterrupted run would have read, up to the peers' pace.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable

import torch
from torch import nn

from geotrain.train.sync.base import (
    ByteCounter, RoundClock, StepInput, StepResult, Timer, assign, flat_gradients, parameter_bytes, wire_dtype,
)
from geotrain.train.sync.streams import Mesh, recv_exact

PROGRESS = struct.Struct("!qq")  # a round, and the samples of a micro-batch a peer started in it


class PeerProgress:
    """The samples the other peers started in each round, as they tell it: one TCP stream per pair of
    peers (a :class:`Mesh` of one stream), a message per micro-batch to every other peer, a thread
    per peer adding up what arrives. A peer that is gone tells nothing more (the butterfly says it is gone)."""

    def __init__(self, rank: int, world: int, store: object, address: str, counter: ByteCounter,
                 timeout_s: float) -> None:
        self.mesh = Mesh("hivemind-progress", rank, range(world), store, address, counter, timeout_s, streams=1)
        self.counter = counter
        self._lock = threading.Lock()
        self._counts: dict[int, int] = {}  # round → samples the other peers started in it
        self._socks = {p: link.socks[0] for p, link in self.mesh.links.items()}
        for p, sock in self._socks.items():
            sock.settimeout(None)  # quiet between rounds (a checkpoint) is no failure
            threading.Thread(target=self._listen, args=(sock,), daemon=True, name=f"hivemind-progress-{p}").start()

    def tell(self, round_index: int, samples: int) -> None:
        message = PROGRESS.pack(round_index, samples)
        for p, sock in self._socks.items():
            try:
                sock.sendall(message)
            except OSError:
                continue
            self.counter.to(p, len(message))

    def others(self, round_index: int) -> int:
        with self._lock:
            return self._counts.get(round_index, 0)

    def forget(self, before: int) -> None:
        """Drop the counts of the rounds before ``before`` (ended on every peer)."""
        with self._lock:
            for k in [k for k in self._counts if k < before]:
                del self._counts[k]

    def _listen(self, sock: socket.socket) -> None:
        try:
            while True:
                k, samples = PROGRESS.unpack(recv_exact(sock, PROGRESS.size))
                with self._lock:
                    self._counts[k] = self._counts.get(k, 0) + samples
        except (ConnectionError, OSError):
            return

    def close(self) -> None:
        self.mesh.close()


class HivemindSync:
    name = "hivemind"
    reads_own_data = True

    def __init__(self, model: nn.Module, loss_fn: Callable, rank: int, world: int, counter: ByteCounter,
                 target_batch_size: int, samples_per_micro: int, precision: str = "fp32", *,
                 store: object | None = None, address: str = "127.0.0.1", timeout_s: float = 60.0) -> None:
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
        self.progress: PeerProgress | None = None
        self.mesh: Mesh | None = None
        if world > 1:
            if store is None:
                raise ValueError("hivemind with more than one peer needs the run's store to connect the peers")
            self.mesh = Mesh("hivemind", rank, range(world), store, address, counter, timeout_s)
            self.progress = PeerProgress(rank, world, store, address, counter, timeout_s)

    def _reached(self, round_index: int, local: int) -> bool:
        if local >= self.tbs:
            return True  # alone at the target: never accumulate more than a whole round
        return self.progress is not None and local + self.progress.others(round_index) >= self.tbs

    def step(self, inp: StepInput, optimizer: torch.optim.Optimizer) -> StepResult:
        if inp.fetch is None:
            raise ValueError("hivemind reads its own micro-batches: the step input needs fetch")
        self.clock.begin()
        k = inp.step
        if self.progress is not None:
            self.progress.forget(k)
        optimizer.zero_grad(set_to_none=True)
        local, loss_sum, i = 0, 0.0, 0
        base = k * self.stride
        while True:
            x, y = inp.fetch(base + (i * self.world + self.rank) * self.m)
            i += 1
            if self.progress is not None:
                self.progress.tell(k, x.shape[0])  # told before it is trained: the others count it as under way
            with Timer(self.clock):
                loss = self.loss_fn(self.model, x, y)
                (loss * (x.shape[0] / self.tbs)).backward()  # a share of the round's mean: no overflow on the wire
            local += x.shape[0]
            loss_sum += float(loss.detach()) * x.shape[0]
            if self._reached(k, local):
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
            self.progress.close()
        if self.mesh is not None:
            self.mesh.close()

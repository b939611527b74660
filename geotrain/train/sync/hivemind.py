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
thread per peer adding up what arrives), so the training loop never waits on a round trip. A peer
tells a micro-batch when it starts it (the others count it as under way), with its wall clock and its
rate (samples/s); what it says reaches the others one one-way trip later. As Hivemind's progress
tracker does, a peer estimates the others' samples as what they told plus their rate times the age
of their last word (:func:`estimated_samples`); a peer not heard from in the round yet is taken to
have started it when this one did (every peer leaves the same butterfly), at its last rate; a peer
that ends its round says so (it is no longer extrapolated). Without the estimate, a round trained
the target batch plus what every peer started while the news crossed the link: 1.25-2.0x the target
at 100-300 ms and a target batch of 256. With it, a round trains about the target batch; the update
is weighted by the samples counted either way. The clocks are the hosts' wall clocks (Hivemind's DHT
time is too): a skewed clock makes a round train a little more or less than the target, never a
wrong update.

Data: round ``k``'s micro-batch ``i`` of rank ``r`` starts at sample ``k·stride + (i·n + r)·m``
(``stride`` = ``TBS`` rounded up to ``n·m``, times four), a pure function of the round, so a resumed
run reads the samples an uninterrupted run would have read, up to the peers' pace.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from geotrain.domain import SyncSettings
from geotrain.train.sync.base import (
    ByteCounter, SyncContext, RoundClock, StepInput, StepResult, Timer, assign, flat_gradients, parameter_bytes, wire_dtype,
)
from geotrain.train.sync.streams import Mesh, recv_exact

# a round; the samples of a micro-batch a peer started in it (0: it ended the round); when (the
# sender's wall clock, s); the sender's rate (samples/s, 0: not known yet)
PROGRESS = struct.Struct("!qqdd")


@dataclass(slots=True)
class Heard:
    """What one peer told of one round: samples started, when it last spoke, its rate, whether it ended."""

    samples: int = 0
    at: float = 0.0
    samples_per_s: float = 0.0
    ended: bool = False


def estimated_samples(heard: Mapping[int, Heard], rates: Mapping[int, float], since: float, now: float) -> float:
    """The others' samples in a round now, as Hivemind's progress tracker estimates them: what each
    told, plus its rate times the age of its last word (nothing for a peer that ended the round); a
    peer not heard from in the round yet is taken to have started it ``since`` (when this one did),
    at its last known rate (``rates``, samples/s)."""
    total = 0.0
    for peer, rate in rates.items():
        h = heard.get(peer)
        if h is None:
            total += rate * max(0.0, now - since)
        elif not h.ended:
            total += h.samples + h.samples_per_s * max(0.0, now - h.at)
        else:
            total += h.samples
    return total


class PeerProgress:
    """The samples the other peers started in each round, as they tell it: one TCP stream per pair of
    peers (a :class:`Mesh` of one stream), a message per micro-batch to every other peer, a thread
    per peer adding up what arrives. A peer that is gone tells nothing more (the butterfly says it is gone)."""

    def __init__(self, rank: int, world: int, store: object, address: str, counter: ByteCounter,
                 timeout_s: float) -> None:
        self.mesh = Mesh("hivemind-progress", rank, range(world), store, address, counter, timeout_s, streams=1)
        self.counter = counter
        self._lock = threading.Lock()
        self._heard: dict[int, dict[int, Heard]] = {}  # round → peer → what it told of the round
        self._rates = {p: 0.0 for p in range(world) if p != rank}  # each peer's last rate told (samples/s)
        self._socks = {p: link.socks[0] for p, link in self.mesh.links.items()}
        for p, sock in self._socks.items():
            sock.settimeout(None)  # quiet between rounds (a checkpoint) is no failure
            threading.Thread(target=self._listen, args=(p, sock), daemon=True, name=f"hivemind-progress-{p}").start()

    def tell(self, round_index: int, samples: int, samples_per_s: float) -> None:
        """A micro-batch of ``samples`` started (``samples`` 0: this peer ended the round)."""
        message = PROGRESS.pack(round_index, samples, time.time(), samples_per_s)
        for p, sock in self._socks.items():
            try:
                sock.sendall(message)
            except OSError:
                continue
            self.counter.to(p, len(message))

    def others(self, round_index: int, since: float) -> float:
        """The other peers' samples in the round now (this peer started it ``since``, wall clock):
        :func:`estimated_samples`."""
        with self._lock:
            return estimated_samples(self._heard.get(round_index, {}), self._rates, since, time.time())

    def forget(self, before: int) -> None:
        """Drop what was told of the rounds before ``before`` (ended on every peer)."""
        with self._lock:
            for k in [k for k in self._heard if k < before]:
                del self._heard[k]

    def _listen(self, peer: int, sock: socket.socket) -> None:
        try:
            while True:
                k, samples, at, rate = PROGRESS.unpack(recv_exact(sock, PROGRESS.size))
                with self._lock:
                    heard = self._heard.setdefault(k, {}).setdefault(peer, Heard())
                    heard.samples += samples
                    heard.at, heard.samples_per_s, heard.ended = at, rate, heard.ended or samples == 0
                    if rate > 0:
                        self._rates[peer] = rate
        except (ConnectionError, OSError):
            return

    def close(self) -> None:
        self.mesh.close()


class HivemindSync:
    name = "hivemind"
    reads_own_data = True

    def __init__(self, model: nn.Module, loss_fn: Callable, rank: int, world: int, counter: ByteCounter,
                 target_batch_size: int, samples_per_micro: int, precision: str, *,
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
        self.samples_per_s = 0.0  # this peer's rate between its micro-batch starts, over its last round
        self.progress: PeerProgress | None = None
        self.mesh: Mesh | None = None
        if world > 1:
            if store is None:
                raise ValueError("hivemind with more than one peer needs the run's store to connect the peers")
            self.mesh = Mesh("hivemind", rank, range(world), store, address, counter, timeout_s)
            self.progress = PeerProgress(rank, world, store, address, counter, timeout_s)
        self._round = 0  # apply(): the round under way, its gradient sum, samples, loss sum, start
        self._sum: torch.Tensor | None = None
        self._local, self._loss_sum, self._first, self._since = 0, 0.0, 0.0, 0.0

    @classmethod
    def from_settings(cls, sync: SyncSettings, ctx: SyncContext) -> HivemindSync:
        return cls(ctx.model, ctx.loss_fn, ctx.rank, ctx.world, ctx.counter, sync.target_batch_size,
                   ctx.samples_per_micro, sync.precision, store=ctx.store, address=ctx.address,
                   timeout_s=ctx.timeout_s)

    def _reached(self, round_index: int, local: int, since: float) -> bool:
        if local >= self.tbs:
            return True  # alone at the target: never accumulate more than a whole round
        return self.progress is not None and local + self.progress.others(round_index, since) >= self.tbs

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
        first, since = 0.0, time.time()
        while True:
            x, y = inp.fetch(base + (i * self.world + self.rank) * self.m)
            started = time.perf_counter()
            if i == 0:
                first = started
            elif started > first:
                self.samples_per_s = local / (started - first)  # the samples started before this one, over their time
            i += 1
            if self.progress is not None:
                self.progress.tell(k, x.shape[0], self.samples_per_s)  # told before it is trained: counted as under way
            with Timer(self.clock):
                loss = self.loss_fn(self.model, x, y)
                (loss * (x.shape[0] / self.tbs)).backward()  # a share of the round's mean: no overflow on the wire
            local += x.shape[0]
            loss_sum += float(loss.detach()) * x.shape[0]
            if self._reached(k, local, since):
                break
        if self.progress is not None:
            self.progress.tell(k, 0, 0.0)  # ended: the others stop extrapolating this peer
        return self._average_and_step(optimizer, flat_gradients(self.params), local, loss_sum)

    def apply(self, optimizer: torch.optim.Optimizer, samples: int, loss: float) -> StepResult | None:
        """The caller's gradient (the mean over its ``samples``) joins this round's sum; when the peers
        together reach the target batch, the round averages and steps (as :meth:`step`, whose loop
        this is, one micro-batch per call)."""
        self.clock.begin()
        k = self._round
        now = time.perf_counter()
        if self._sum is None:
            if self.progress is not None:
                self.progress.forget(k)
            self._sum, self._local, self._loss_sum = torch.zeros_like(flat_gradients(self.params)), 0, 0.0
            self._first, self._since = now, time.time()
        elif now > self._first:
            self.samples_per_s = self._local / (now - self._first)
        self._sum += flat_gradients(self.params) * (samples / self.tbs)  # a share of the round's mean
        self._local += samples
        self._loss_sum += loss * samples
        if self.progress is not None:
            self.progress.tell(k, samples, self.samples_per_s)
        if not self._reached(k, self._local, self._since):
            return None
        if self.progress is not None:
            self.progress.tell(k, 0, 0.0)  # ended: the others stop extrapolating this peer
        flat, local, loss_sum, self._sum = self._sum, self._local, self._loss_sum, None
        self._round += 1
        return self._average_and_step(optimizer, flat, local, loss_sum)

    def _average_and_step(self, optimizer: torch.optim.Optimizer, flat: torch.Tensor, local: int,
                          loss_sum: float) -> StepResult:
        """End this peer's round: the peers' gradient sums and sample counts averaged (the butterfly),
        one optimizer step."""
        total = local
        if self.mesh is not None:
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

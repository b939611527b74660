"""What every sync strategy of the runtime shares: the interface, the byte counter, the wire
precision, flat views of the parameters, and the clock of its rounds.

A strategy trains one *step* of the runtime at a time (``Sync.step``): the data position is the step,
so a resumed run reads exactly the samples an uninterrupted one would. A *round* is the strategy's
unit of synchronisation (one step for all-reduce, ``H`` steps for local SGD, one averaging round for
hivemind, one push for asgd-ga, ``K`` steps for ma); its wall time and the compute inside it are what
``geotrain rehearse`` compares with the perf model (:mod:`geotrain.perf.strategies`).

Bytes are counted by destination rank as each strategy's algorithm sends them; with emulated links
the wire's own counters replace these (``geotrain.wan``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch
import torch.distributed as dist
from torch import nn

from geotrain.train.sync.streams import Mesh


@dataclass
class ByteCounter:
    """Bytes this rank sent, by destination rank."""

    sent: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def ring(self, rank: int, members: Sequence[int], nbytes: int, factor: float) -> None:
        n = len(members)
        if n < 2:
            return
        position = members.index(rank)
        self.to(members[(position + 1) % n], factor * nbytes)

    def to(self, rank: int, nbytes: float) -> None:
        with self._lock:  # a parameter server's threads count too
            self.sent[rank] += int(nbytes)

    def drain(self) -> dict[int, int]:
        with self._lock:
            out = dict(self.sent)
            self.sent.clear()
        return out


WIRE_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def wire_dtype(precision: str) -> torch.dtype:
    try:
        return WIRE_DTYPES[precision]
    except KeyError:
        raise ValueError(f"precision {precision!r} is not one the runtime sends ({', '.join(WIRE_DTYPES)})") from None


def parameter_bytes(model: nn.Module, dtype: torch.dtype | None = None) -> int:
    """Bytes of one copy of the parameters, in ``dtype`` on the wire (default: their own)."""
    size = torch.tensor([], dtype=dtype).element_size() if dtype is not None else None
    return sum(p.numel() * (size or p.element_size()) for p in model.parameters())


def all_reduce_mean(flat: torch.Tensor, dtype: torch.dtype, n: int, group=None) -> torch.Tensor:  # noqa: ANN001
    """The mean of ``flat`` over the group, sent in ``dtype``."""
    wire = flat.to(dtype) if flat.dtype != dtype else flat
    dist.all_reduce(wire, group=group)
    return wire.to(flat.dtype).div_(n) if wire is not flat else wire.div_(n)


def sample_mean_gradient(params: Sequence[torch.Tensor], samples: int, dtype: torch.dtype, group=None,  # noqa: ANN001
                         n: int = 1) -> tuple[torch.Tensor, int]:
    """The mean gradient over every sample the group's ranks trained, and their count, when each rank's
    ``.grad`` is the mean over its own ``samples`` (a loss averaged over its batch, then backward): the
    sums are all-reduced in ``dtype``, the counts exactly. Ranks with unequal batches weigh by their
    samples, as one big batch would."""
    flat = flat_gradients(params)
    if n < 2:
        return flat, samples
    count = torch.tensor([samples], dtype=torch.int64)
    dist.all_reduce(count, group=group)
    total = int(count.item())
    wire = (flat * (samples * n / total)).to(dtype)  # the sum over ranks of the weighted gradients, then /n
    dist.all_reduce(wire, group=group)
    return wire.to(flat.dtype).div_(n), total


def flat_parameters(params: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in params])


def flat_gradients(params: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])


def assign(params: Sequence[torch.Tensor], flat: torch.Tensor, *, grad: bool = False) -> None:
    """Copy ``flat`` into the parameters (or their gradients), in order."""
    offset = 0
    with torch.no_grad():
        for p in params:
            n = p.numel()
            piece = flat[offset:offset + n].view_as(p)
            if grad:
                if p.grad is None:
                    p.grad = piece.clone()
                else:
                    p.grad.copy_(piece)
            else:
                p.copy_(piece)
            offset += n


@dataclass
class StepInput:
    """The micro-batches this rank trains in one step, and how many samples the global batch has.

    ``fetch(position)`` returns the micro-batch that starts at sample ``position``: a strategy that
    decides for itself how many micro-batches it trains in a step (hivemind) reads its data with it."""

    batches: list[tuple[torch.Tensor, torch.Tensor]]  # one (x, y) per micro-batch of this rank
    micro_indices: list[int]  # their positions in the global batch
    global_samples: int
    micro_batches: int  # M
    step: int = 0  # the runtime's step this input is for (0-based)
    fetch: Callable[[int], tuple[torch.Tensor, torch.Tensor]] | None = None


@dataclass(frozen=True)
class SyncContext:
    """What a strategy's runtime class is built with, besides the plan's settings: this rank's place
    in the generation (``regions``: every rank's region, in rank order; ``rates``: their planned
    samples/s), the model and its loss, the generation's store and this node's address for the WAN
    transport, and what the run has left (``samples_left``: asgd-ga across regions ends on it)."""

    model: nn.Module
    loss_fn: Callable | None  # None: the caller computes each gradient (a user's script, ``apply``)
    rank: int
    world: int
    counter: ByteCounter
    regions: Sequence[str]
    micro_batches: int
    samples_per_micro: int
    deterministic: bool = False
    rates: Sequence[float] | None = None
    store: object | None = None
    address: str = "127.0.0.1"
    timeout_s: float = 60.0
    samples_left: int | None = None
    optimizer: torch.optim.Optimizer | None = None  # the run's optimizer (hivemind wraps it)
    run_id: str = "geotrain"  # the swarm's name (hivemind's run id): one per generation of the run
    dht_peers: Sequence[str] = ()  # hivemind: the launcher's DHT bootstrap peer (multiaddrs)
    step: int = 0  # the step the run resumes from
    joining: bool = False  # this peer replaces a lost one in a running generation (an elastic strategy)


class EndedByPeers(Exception):
    """The run reached its step count on other peers while this one was short of it (an elastic
    strategy's straggler): its model is to be the run's final checkpoint."""


@dataclass(frozen=True, slots=True)
class StepResult:
    loss: float  # this rank's mean loss over what it trained in the step
    samples: int  # samples all ranks trained in the step
    step: int | None = None  # the run's step count after it, where the strategy keeps it (hivemind's epoch)


@dataclass
class RoundClock:
    """Wall time of a strategy's rounds and the compute inside them (forward, backward, optimizer)."""

    rounds: int = 0
    round_s: float = 0.0
    compute_s: float = 0.0
    steps: int = 0
    _start: float | None = None

    def begin(self) -> None:
        if self._start is None:
            self._start = time.perf_counter()

    def end(self) -> None:
        if self._start is not None:
            self.round_s += time.perf_counter() - self._start
            self.rounds += 1
            self._start = None

    def computed(self, seconds: float) -> None:
        self.compute_s += seconds

    def drain(self) -> dict[str, float]:
        """Rounds finished since the last drain: count, total seconds, compute seconds, steps."""
        out = {"rounds": self.rounds, "round_s": self.round_s, "compute_s": self.compute_s, "steps": self.steps}
        self.rounds, self.round_s, self.compute_s, self.steps = 0, 0.0, 0.0, 0
        return out


class Sync(Protocol):
    """One sync strategy of the runtime (``make_sync`` picks it by the plan's sync settings)."""

    name: str
    raw: nn.Module  # the model itself (what a checkpoint saves)
    clock: RoundClock

    def step(self, inp: StepInput, optimizer: torch.optim.Optimizer) -> StepResult: ...

    def apply(self, optimizer: torch.optim.Optimizer, samples: int, loss: float) -> StepResult | None:
        """The same step when the caller computed the gradient (a user's script through
        :mod:`geotrain.train.api`): ``.grad`` holds the mean over this rank's ``samples``. Synchronise
        it as the strategy does and step the optimizer; None when the strategy trains on before it
        updates (hivemind, until the peers reach the target batch)."""

    def after_step(self, step: int, *, final: bool = False) -> bool:
        """After step ``step`` (1-based count of steps done); ``final``: the run's step target is
        reached, after which every rank must hold the same model. Returns whether the run ends here:
        ``final``, except for a strategy that ends on its own count (``samples_left``: asgd-ga across
        regions, whose regions take different numbers of steps)."""

    def averaged(self, step: int) -> bool:
        """Whether the model this rank holds after ``step`` is one the run may checkpoint."""

    def close(self) -> None: ...


def region_groups(regions: Sequence[str], rank: int, world: int):  # noqa: ANN201
    """Per-region process groups (every rank creates every group, in the same order), this rank's
    region members, and the region leaders (lowest rank of each region), with their group.

    Returns ``(members_by_region, my_members, my_group, leaders, leader_group)``."""
    members: dict[str, list[int]] = {}
    for r, region in enumerate(regions):
        members.setdefault(region, []).append(r)
    mine = members[regions[rank]]
    my_group = None
    for region in sorted(members):
        group = dist.new_group(members[region]) if world > 1 else None
        if rank in members[region]:
            my_group = group
    leaders = sorted(m[0] for m in members.values())
    leader_group = dist.new_group(leaders) if world > 1 and len(leaders) > 1 else None
    return members, mine, my_group, leaders, leader_group


class Timer:
    """``with Timer(clock): ...`` adds the block's wall time to the clock's compute."""

    def __init__(self, clock: RoundClock) -> None:
        self.clock = clock

    def __enter__(self) -> Timer:
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.clock.computed(time.perf_counter() - self.t0)


class RegionalTraining:
    """What the strategies with per-region groups share (local-sgd, asgd-ga, ma): a step inside the
    region and the region leader's broadcast. Subclasses set ``model``, ``loss_fn``, ``params``,
    ``rank``, ``counter``, ``dtype``, ``payload``, ``my_members``, ``group``, ``clock``; ``lock``
    (optional) is held while the parameters change (a parameter server's threads apply pushes too)."""

    lock: threading.Lock | None = None

    def _leaders_mesh(self, name: str, store: object | None, address: str, timeout_s: float) -> Mesh | None:
        """The region servers' WAN transport (``self.leaders``, set by ``region_groups``): for a rank
        that leads its region when there are other regions; ``None`` otherwise."""
        if self.rank != self.my_members[0] or len(self.leaders) < 2:
            return None
        if store is None:
            raise ValueError(f"{name} across regions needs the run's store to connect the region servers")
        return Mesh(name, self.rank, self.leaders, store, address, self.counter, timeout_s)

    def _region_step(self, inp: StepInput, optimizer: torch.optim.Optimizer, weight: float = 1.0) -> StepResult:
        """This rank's micro-batches forward and backward, then :meth:`_region_apply` (the lock held
        throughout: a parameter server changes the parameters only between two steps)."""
        self.clock.begin()
        with self.lock if self.lock is not None else contextlib.nullcontext():
            optimizer.zero_grad(set_to_none=True)
            x = torch.cat([b[0] for b in inp.batches])
            y = torch.cat([b[1] for b in inp.batches])
            with Timer(self.clock):
                loss = self.loss_fn(self.model, x, y)
                loss.backward()
            self._region_apply(optimizer, x.shape[0], weight, locked=True)
        return StepResult(float(loss.detach()), inp.global_samples)

    def _region_apply(self, optimizer: torch.optim.Optimizer, samples: int, weight: float = 1.0, *,
                      locked: bool = False) -> int:
        """The gradient averaged over the region's samples (an all-reduce inside it), scaled by
        ``weight``, and the optimizer's step; returns the samples the region trained."""
        self.clock.begin()
        with self.lock if self.lock is not None and not locked else contextlib.nullcontext():
            n = len(self.my_members)
            total = samples
            if n > 1 or weight != 1.0:
                grads, total = sample_mean_gradient(self.params, samples, self.dtype, self.group, n)
                if n > 1:
                    self.counter.ring(self.rank, self.my_members, self.payload, 2 * (n - 1) / n)
                assign(self.params, grads * weight if weight != 1.0 else grads, grad=True)
            with Timer(self.clock):
                optimizer.step()
        self.clock.steps += 1
        return total

    def _broadcast_in_region(self) -> None:
        """The region leader's model to the region's other ranks (fp32; a tree broadcast, counted once)."""
        n = len(self.my_members)
        if n < 2:
            return
        leader = self.my_members[0]
        if self.lock is not None:
            self.lock.acquire()
        try:
            flat = flat_parameters(self.params)
            dist.broadcast(flat, src=leader, group=self.group)
            assign(self.params, flat)
        finally:
            if self.lock is not None:
                self.lock.release()
        if self.rank == leader:
            full = parameter_bytes(self.model)
            for member in self.my_members[1:]:
                self.counter.to(member, full / (n - 1))

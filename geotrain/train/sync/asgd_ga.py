"""``asgd-ga``: asynchronous SGD with gradient accumulation between regions, as in
Cloudless-Training. Every region has a parameter server, its leader (the region's lowest rank): the
region's workers push their gradients to it every step (inside the region: an all-reduce, so every
worker of the region holds the server's model). Across regions the servers run asynchronous SGD with
the *home* server, the one in the region with the most compute (the perf model's and the solver's
rule): a region accumulates its updates for ``A`` steps, pushes the accumulated update to the home
server over TCP, and pulls the home model back, while it trains the next ``A`` steps. A round is one
push: ``A`` steps of the region.

**Each region at its own pace.** A region does not wait for the others' steps: its ``A`` steps and
its push take what its compute and its link take, so a fast region trains more steps than a slow one
(the perf model's ``Σ_q A·b_q / T_cycle_q``). The run's target is therefore a *sample budget*
(``samples_left``: the generation's target steps times the global batch, less what a resumed run had
trained), counted by the home server: its own region's samples and every push's (a push carries the
samples its update trained). A region's leader learns what the budget has left from each reply and
the home leader from its own count; a region stops at the first boundary where nothing is left (its
ranks learn it from their leader). A region's step reads its own micro-batches at its own step's
data position, so regions never read the same sample; a resumed run starts every region at the
checkpoint's step (the home region's, which wrote it).

Convergence safeguards (the paper's): **bounded staleness** — a region waits at its push ``k`` until
the home model of its push ``k − S`` has come back (``S`` = 1: communication overlaps one
accumulation, no more), and then continues from that model plus its own updates since (so no update
is lost nor counted twice); **update scaling** — a region steps with its share of the global batch
(``b_q / B``) as the weight of its gradients, so that all regions' updates together make one step of
the global batch; the home server applies every region's update once, as it arrives. After the run's
last step every region pushes what is left and waits for all its replies, and then every rank takes
the home model, so the run ends on one model. The home leader holds the run's model: it reports the
run's progress (samples of all regions) and writes its checkpoints (``reporter``).

Wire: updates and replies travel in the plan's precision as differences (a push carries the region's
update since its last push; a reply the change of the home model since the last reply to that
region), so rounding never accumulates into the parameters. A region's server and the home server
talk over ``STREAMS`` long-lived TCP connections, each message cut into one piece per stream
(:class:`geotrain.train.sync.streams.Streams`). Bytes: ``W`` per push and ``W`` per reply between a
region's server and the home server, plus the in-region all-reduce every step.
"""

from __future__ import annotations

import queue
import socket
import threading
from collections import deque
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from geotrain.domain import WAN_STREAMS, SyncSettings
from geotrain.train.sync.base import (
    ByteCounter, RegionalTraining, SyncContext, RoundClock, StepInput, StepResult, assign, flat_parameters, parameter_bytes,
    region_groups, wire_dtype,
)
from geotrain.train.sync.streams import HELLO, Streams, connect, recv_exact

STREAMS = WAN_STREAMS  # TCP streams per region server and home server (the perf model counts as many)
SERVER_KEY = "asgd-ga/home-server"


def home_region(regions: Sequence[str], rates: Sequence[float] | None) -> str:
    """The region with the most raw compute (samples/s of its nodes; node count if unknown), ties by name."""
    power: dict[str, float] = {}
    for r, region in enumerate(regions):
        power[region] = power.get(region, 0.0) + (rates[r] if rates else 1.0)
    return max(sorted(power), key=lambda q: power[q])


class HomeServer:
    """The home region's parameter server: applies every pushed update to the home model (between
    the home region's own steps: ``lock``), counts the run's samples against its budget (``left``),
    and replies with the change since its last reply and what the budget has left."""

    def __init__(self, params: Sequence[torch.Tensor], dtype: torch.dtype, address: str, counter: ByteCounter,
                 samples_left: int, *, deferred: bool = False) -> None:
        self.params, self.dtype, self.counter = list(params), dtype, counter
        self.lock = threading.Lock()
        # deferred: the pushes wait in ``inbox`` until the home region's training thread folds them in
        # (:meth:`fold`), because a user's script computes its gradient outside the lock and a change
        # of the parameters in place meanwhile would break its backward pass
        self.inbox: torch.Tensor | None = torch.zeros_like(flat_parameters(self.params)) if deferred else None
        self.left = samples_left  # the budget less every region's samples applied so far (under ``lock``)
        self.pushed = 0  # samples of the pushes applied since the home leader last took them (under ``lock``)
        self.listener = socket.create_server((address, 0))
        self.address = f"{address}:{self.listener.getsockname()[1]}"
        self._waiting: dict[int, list[socket.socket | None]] = {}  # a region's streams until all are there
        self._links: list[Streams] = []
        self._join_lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True, name="asgd-ga-server").start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._join, args=(conn,), daemon=True, name="asgd-ga-push").start()

    def _join(self, conn: socket.socket) -> None:
        """A region server's stream: once all its streams are there, serve its pushes (on this thread)."""
        try:
            src, index, n = HELLO.unpack(recv_exact(conn, HELLO.size))
        except (ConnectionError, OSError):
            conn.close()
            return
        with self._join_lock:
            socks = self._waiting.setdefault(src, [None] * n)
            socks[index] = conn
            if any(sock is None for sock in socks):
                return
            del self._waiting[src]
            link = Streams(socks)
            self._links.append(link)
        self._serve(src, link)

    def _serve(self, src: int, link: Streams) -> None:
        try:
            with self.lock:
                told = flat_parameters(self.params)  # what that region's server holds of the home model
            while True:
                k, update, samples = link.recv(self.dtype)
                with self.lock:
                    if self.inbox is None:
                        assign(self.params, flat_parameters(self.params) + update)
                        home = flat_parameters(self.params)
                    else:
                        self.inbox += update
                        home = flat_parameters(self.params) + self.inbox
                    change = (home - told).to(self.dtype)
                    self.left -= samples
                    self.pushed += samples
                    left = self.left
                told += change.to(torch.float32)
                self.counter.to(src, link.send(k, change, left))
        except (ConnectionError, OSError):
            link.close()

    def fold(self) -> None:
        """Apply the pushes waiting in the inbox to the parameters (the training thread, holding ``lock``)."""
        if self.inbox is not None and bool(self.inbox.any()):
            assign(self.params, flat_parameters(self.params) + self.inbox)
            self.inbox.zero_()

    def count(self, own: int) -> int:
        """Count ``own`` samples the home region trained; the samples of the pushes applied since the
        last call (the run's progress, as the home counts it)."""
        with self.lock:
            self.left -= own
            pushed, self.pushed = self.pushed, 0
        return pushed

    def remaining(self) -> int:
        with self.lock:
            return self.left

    def close(self) -> None:
        self.listener.close()
        with self._join_lock:
            links = list(self._links)
        for link in links:
            link.close()


class Pusher(threading.Thread):
    """A region's server's link to the home server: sends pushes in order, collects the replies."""

    def __init__(self, address: str, rank: int, home_rank: int, initial: torch.Tensor, dtype: torch.dtype,
                 counter: ByteCounter, timeout_s: float) -> None:
        super().__init__(daemon=True, name="asgd-ga-pusher")
        socks = connect(address, rank, STREAMS, timeout_s)
        self.link = Streams(socks)
        self.home_rank, self.dtype, self.counter, self.timeout_s = home_rank, dtype, counter, timeout_s
        self.home = initial.clone()  # the home model as of the last reply
        self.outbox: queue.Queue = queue.Queue()
        self.replies: dict[int, tuple[torch.Tensor, int]] = {}  # push → (home model, the budget left)
        self.cond = threading.Condition()
        self.failed: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            while True:
                item = self.outbox.get()
                if item is None:
                    return
                k, update, samples = item
                self.counter.to(self.home_rank, self.link.send(k, update, samples))
                got, change, left = self.link.recv(self.dtype)
                self.home += change
                with self.cond:
                    self.replies[got] = (self.home.clone(), left)
                    self.cond.notify_all()
        except BaseException as exc:  # noqa: BLE001 - the main thread raises it at its next wait
            with self.cond:
                self.failed = exc
                self.cond.notify_all()

    def push(self, k: int, update: torch.Tensor, samples: int) -> None:
        self.outbox.put((k, update, samples))

    def reply(self, k: int) -> tuple[torch.Tensor, int]:
        """The home model after push ``k`` was applied, and what the run's budget had left then."""
        with self.cond:
            ok = self.cond.wait_for(lambda: k in self.replies or self.failed is not None, timeout=self.timeout_s)
            if k in self.replies:
                for old in [j for j in self.replies if j < k]:
                    del self.replies[old]
                return self.replies[k]
            raise RuntimeError(f"asgd-ga: no reply from the home server for push {k}"
                               + (f": {self.failed}" if self.failed else f" within {self.timeout_s:.0f} s" if not ok else ""))

    def close(self) -> None:
        self.outbox.put(None)
        self.link.close()


class AsgdGASync(RegionalTraining):
    name = "asgd-ga"

    def __init__(self, model: nn.Module, loss_fn: Callable, rank: int, world: int, counter: ByteCounter,
                 regions: Sequence[str], accumulation_steps: int, precision: str, *,
                 micro_batches: int, samples_per_micro: int = 1, samples_left: int | None = None,
                 staleness: int = 1, rates: Sequence[float] | None = None, store: object | None = None,
                 address: str = "127.0.0.1", timeout_s: float = 60.0, caller_computes: bool = False) -> None:
        self.raw = self.model = model
        self.loss_fn = loss_fn
        self.rank, self.world, self.counter = rank, world, counter
        self.A, self.S = accumulation_steps, staleness
        self.dtype = wire_dtype(precision)
        self.params = [p for p in model.parameters()]
        self.payload = parameter_bytes(model, self.dtype)
        self.full_bytes = parameter_bytes(model)
        self.members_by_region, self.my_members, self.group, self.leaders, _ = region_groups(regions, rank, world)
        self.leader = self.my_members[0]
        home = home_region(regions, rates)
        self.home_leader = self.members_by_region[home][0]
        self.is_home = regions[rank] == home
        # the region's share of the global batch: rank r trains the micro-batches j ≡ r (mod world)
        micros = sum(len(range(r, micro_batches, world)) for r in self.my_members)
        self.weight = micros / micro_batches
        self.region_samples = micros * samples_per_micro  # one step of this region
        self.across = len(self.leaders) > 1
        if self.across and samples_left is None:
            raise ValueError("asgd-ga across regions ends on a sample budget: give samples_left")
        self.samples_left = samples_left if self.across else None  # the runtime ends the run on it
        self.reporter = self.home_leader if self.across else 0  # the rank that holds the run's model and count
        self.clock = RoundClock()
        self.server: HomeServer | None = None
        self.pusher: Pusher | None = None
        self.pushes = 0
        self.in_flight: deque[torch.Tensor] = deque()
        self.snapshot = flat_parameters(self.params)
        self.since_push = 0  # samples this region trained since its last push
        self.ended = False
        self.samples_after_last_step = 0  # the home leader: pushes applied after its region's last step
        if self.across and rank == self.leader:
            if store is None:
                raise ValueError("asgd-ga across regions needs the run's store to find the home server")
            if self.is_home:
                self.server = HomeServer(self.params, self.dtype, address, counter, samples_left,
                                         deferred=caller_computes)
                self.lock = self.server.lock  # the server applies pushes between the region's steps
                store.set(SERVER_KEY, self.server.address)
            else:
                address_of_home = store.get(SERVER_KEY).decode()
                self.pusher = Pusher(address_of_home, rank, self.home_leader, self.snapshot, self.dtype, counter,
                                     timeout_s)

    @classmethod
    def from_settings(cls, sync: SyncSettings, ctx: SyncContext) -> AsgdGASync:
        return cls(ctx.model, ctx.loss_fn, ctx.rank, ctx.world, ctx.counter, ctx.regions, sync.accumulation_steps,
                   sync.precision, micro_batches=ctx.micro_batches, samples_per_micro=ctx.samples_per_micro,
                   samples_left=ctx.samples_left, staleness=sync.staleness, rates=ctx.rates, store=ctx.store,
                   address=ctx.address, timeout_s=ctx.timeout_s, caller_computes=ctx.loss_fn is None)

    def step(self, inp: StepInput, optimizer: torch.optim.Optimizer) -> StepResult:
        """One step of this region's share; across regions its samples are the region's (the home
        leader's: with every push the home server applied since its last step: the run's progress)."""
        result = self._region_step(inp, optimizer, self.weight)
        if not self.across:
            return result
        self.since_push += self.region_samples
        samples = self.region_samples
        if self.server is not None:
            samples += self.server.count(self.region_samples)
        return StepResult(result.loss, samples)

    def apply(self, optimizer: torch.optim.Optimizer, samples: int, loss: float) -> StepResult:
        """:meth:`step` when the caller computed the gradient of this rank's ``samples``."""
        if self.server is not None:
            with self.lock:
                self.server.fold()
        region = self._region_apply(optimizer, samples, self.weight)
        if not self.across:
            return StepResult(loss, region * self.world // len(self.my_members))
        self.since_push += region
        return StepResult(loss, region + (self.server.count(region) if self.server is not None else 0))

    def after_step(self, step: int, *, final: bool = False) -> bool:
        """At a region's boundary (every ``A`` of its steps): push, and across regions end the region
        when the run's budget has nothing left; the run's last boundary takes every rank to the home
        model. Returns whether this rank's run ends here (one region: at ``final``)."""
        if step % self.A and (self.across or not final):
            return False
        if self.across:
            final = self._region_ends(self._push() if self.pusher is not None else
                                      self.server is not None and self.server.remaining() <= 0)
        self._broadcast_in_region()
        if final:
            self.ended = True
            if self.world > 1:
                dist.barrier()  # every push is applied at home (its reply came back) before the home model is taken
                if self.server is not None:
                    with self.lock:
                        self.server.fold()
                flat = flat_parameters(self.params)
                dist.broadcast(flat, src=self.home_leader)
                assign(self.params, flat)
                if self.server is not None:  # the other regions' last pushes, applied while it waited
                    self.samples_after_last_step = self.server.count(0)
                if self.rank == self.home_leader:
                    self.counter.to((self.rank + 1) % self.world, self.full_bytes)  # a tree broadcast, counted once
        self.clock.end()
        return final

    def _region_ends(self, leader_says: bool) -> bool:
        """The leader's decision, known to every rank of the region."""
        if len(self.my_members) < 2:
            return leader_says
        flag = torch.tensor([1 if leader_says else 0], dtype=torch.int64)
        dist.broadcast(flag, src=self.leader, group=self.group)
        return bool(flag.item())

    def _push(self) -> bool:
        """A region's server at its push: send the update since the last push and the samples it
        trained; continue from the home model of push k − S plus the updates not in it yet. When that
        reply says the budget has nothing left, wait for this push's reply too and end on it."""
        assert self.pusher is not None
        now = flat_parameters(self.params)
        update = now - self.snapshot
        self.pushes += 1
        k = self.pushes
        wire = update.to(self.dtype)
        self.pusher.push(k, wire, self.since_push)
        self.in_flight.append(wire.to(torch.float32))
        self.since_push = 0
        if k - self.S < 1:
            self.snapshot = now
            return False
        home, left = self.pusher.reply(k - self.S)
        ends = left <= 0
        if ends:
            home, left = self.pusher.reply(k)
        while len(self.in_flight) > (0 if ends else self.S):
            self.in_flight.popleft()
        rebased = home + sum(self.in_flight, torch.zeros_like(home))
        assign(self.params, rebased)
        self.snapshot = rebased
        return ends

    def averaged(self, step: int) -> bool:
        return step % self.A == 0 or self.ended

    def close(self) -> None:
        if self.pusher is not None:
            self.pusher.close()
        if self.server is not None:
            self.server.close()

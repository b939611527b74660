"""``hivemind``: large-batch training as Erben et al. ran it, on the Hivemind library itself
(``hivemind.Optimizer`` over a ``hivemind.DHT``). Peers train at their own pace, each accumulating
gradients over its own micro-batches, and tell each other their progress through the DHT; once the
peers together reach the target batch size ``TBS``, the peers that are there average their gradients
(Hivemind's butterfly all-reduce, weighted by the samples each trained) and take the same optimizer
step. A round is an epoch of Hivemind's (``local_epoch``) and one step of the run.

Every round the peers also average their parameters (Hivemind's state averaging, the library's
default: in the background, its result applied before the next round's step), so a peer that
missed a round's group (it steps alone) is brought back to the others. The model's buffers (batch
norm's running statistics) stay each peer's own, and a joiner keeps its initial ones until the end
takes the final checkpoint's: with them as Hivemind's ``extra_tensors`` a worker died of SIGSEGV
in 2 of 11 runs (none in the runs without them). Where that averaging outlasts a round (rounds of
seconds on a busy host), the library lets its result overwrite the next round's step: the peer
keeps its epoch but holds the model a step behind. A joiner starts training once Hivemind's progress tracker sees a peer. (A fresh
generation's peers do not wait for theirs: they see each other only once they report progress, so
their first round or two may be taken alone.)

Membership is elastic, as the library makes it: a peer that is preempted simply stops; the others'
next round forms without it (matchmaking finds who is there) and their step count goes on, with no
new generation. Its replacement joins the DHT and loads the model, the optimizer and the epoch from
its peers (``load_state_from_peers``) before it trains (``GEOTRAIN_JOINING``). A peer that falls
behind the swarm's epoch does the same, by itself (the library's rule).

The end: the first peer to reach the run's step count says so in the store (``FINISHED_KEY``) and
writes the run's final checkpoint (:meth:`HivemindSync.claims_final`); a peer still short of it stops
there (:class:`~geotrain.train.sync.base.EndedByPeers`), and every peer ends on that checkpoint
(:meth:`geotrain.train.trainer.Trainer.finish`): while they train, the peers agree only up to the fp16
deltas of Hivemind's all-reduce and the rounds a peer missed.

The DHT: the launcher runs a bootstrap peer that outlives any node (``geotrain.train.dht``) and
names it in the generation (``SyncContext.dht_peers``); without one (a test, a single process), rank
0's DHT is the bootstrap and its addresses go through the generation's store. A fresh generation
starts together (a barrier on the store), so no peer takes the first rounds alone. Each generation
is its own swarm (Hivemind's run id names it, ``SyncContext.run_id``): where a crash restarts the
gang, the launcher's DHT still holds the old generation's progress and groups for a while, and the
new peers must not count them.

The plan's settings: ``target_batch_size`` is Hivemind's, ``precision`` its gradient and state
compression (fp32: none; fp16 and bf16: Hivemind's ``Float16Compression``, the library has no bf16;
int8: ``Uniform8BitQuantization``). Matchmaking waits :data:`MATCHMAKING_S` for a group (Hivemind's
default is 15 s, sized for rounds of minutes; a round here may take a second). The bytes a round
sends are counted as the butterfly sends them (``2W/n`` to each other peer, ``W`` the compressed
gradients, and as much again for the parameters' averaging), not measured: the library's
transport is its own. Hivemind's status lines (``verbose``) go to the node's log, and after each
of them that says the parameters were averaged, the sum of the parameters as the average left them
(:func:`optimizer_class`).

Data (the runtime's own micro-batches): round ``k``'s micro-batch ``i`` of rank ``r`` starts at sample
``k·stride + (i·n + r)·m`` (``stride`` = ``TBS`` rounded up to ``n·m``, times four), a pure function of
the round, so a resumed run reads what an uninterrupted run would have read, up to the peers' pace.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import time
from collections.abc import Callable

import torch
from torch import nn

from geotrain.domain import SyncSettings
from geotrain.train.worker_env import ELASTIC_KEY
from geotrain.train.sync.base import ByteCounter, EndedByPeers, RoundClock, StepInput, StepResult, SyncContext, Timer, parameter_bytes, wire_dtype

MATCHMAKING_S = 2.0  # how long a peer looks for its averaging group (hivemind.Optimizer's matchmaking_time)
SLOWEST_MBIT = 20.0  # the slowest link a round's averaging is given time for (Mbit/s)
AVERAGING_MARGIN_S = 10.0
JOIN_WAIT_S = 10.0  # at most this long a joiner waits for its tracker to see a peer
REQUEST_TIMEOUT_S = 1.0  # a matchmaking request's timeout: below MATCHMAKING_S, as the library asks
DHT_KEY = "hivemind/dht"  # the store key of rank 0's DHT addresses, where no launcher bootstraps one
READY_KEY = "hivemind/ready"
FINISHED_KEY = "hivemind/finished"  # peers that reached the run's step count
FINAL_KEY = "hivemind/final"  # peers that ended: the first writes the final checkpoint


SHARING_ENV = "HIVEMIND_MEMORY_SHARING_STRATEGY"  # read once, when hivemind is first imported
FD_LIMIT = 65536  # the open files a peer may hold (the soft limit is raised to this, within the hard one)


def library():  # noqa: ANN201 - the hivemind module
    """The Hivemind library, imported so that a peer that dies leaves no memory behind.

    Hivemind switches torch to the ``file_system`` sharing strategy: the tensors it shares with its
    averager process are files in ``/dev/shm`` that only a clean exit removes, so every preempted,
    killed or stopped peer leaves its model there (about 130 MB for a resnet18 run of three peers)
    and a host's memory fills run after run. torch's own default on Linux, ``file_descriptor``,
    unlinks each file as it makes it (the memory goes with the last process that holds it) at the
    cost of a descriptor per shared tensor, so the soft limit on open files is raised too. A user who
    sets ``HIVEMIND_MEMORY_SHARING_STRATEGY`` keeps theirs."""
    os.environ.setdefault(SHARING_ENV, "file_descriptor")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = FD_LIMIT if hard == resource.RLIM_INFINITY else min(FD_LIMIT, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    try:
        import hivemind
    except ImportError as exc:
        raise RuntimeError("the plan's strategy is hivemind but the hivemind library is not installed on this node "
                           f"({exc}); install it with: pip install 'hivemind==1.1.12' 'grpcio-tools<1.77'") from None
    return hivemind


def compression(precision: str):  # noqa: ANN201 - hivemind.compression.CompressionBase
    """Hivemind's compression for the plan's wire precision."""
    library()
    from hivemind.compression import Float16Compression, NoCompression, Uniform8BitQuantization

    return {"fp32": NoCompression, "fp16": Float16Compression, "bf16": Float16Compression,
            "int8": Uniform8BitQuantization}[precision]()


def averaging_timeout_s(payload_bytes: int, limit_s: float) -> float:
    """How long a round's averaging may take before a peer steps with its own gradients (Hivemind's
    ``averaging_timeout``): matchmaking, then the butterfly's two passes of the payload at
    :data:`SLOWEST_MBIT`, plus :data:`AVERAGING_MARGIN_S`; at most ``limit_s`` (the run's collective
    timeout). A missed group costs a peer this long, so it is no longer than the payload needs."""
    return min(limit_s, MATCHMAKING_S + 2 * payload_bytes * 8 / (SLOWEST_MBIT * 1e6) + AVERAGING_MARGIN_S)


def gradient_averager():  # noqa: ANN201 - hivemind's GradientAverager class
    library()
    from hivemind.optim.grad_averager import GradientAverager

    return GradientAverager


def averaging_options(group_size: int | None) -> dict:
    """What both of a peer's averagers (gradients, then parameters) are given: the matchmaking
    request's timeout and the most peers in a group."""
    return {"request_timeout": REQUEST_TIMEOUT_S, "target_group_size": group_size}


AVERAGED_LINE = "hivemind: parameters as averaged with the group (epoch {epoch}, at {at:.3f}): sum {total:.6f}"


def optimizer_class():  # noqa: ANN201 - a hivemind.Optimizer subclass
    """``hivemind.Optimizer`` whose state averager says, in the node's log, what each parameters'
    averaging left: the sum of the parameters right after the group's average is loaded into them
    (:data:`AVERAGED_LINE`, with the epoch and the Unix time). Every peer of an averaging group loads
    the same average (each peer loads it before its next step, so within a round), so these lines
    are where a joiner can be seen to hold its peers' parameters: a peer's printed step count cannot
    show it, since Hivemind's groups form by time, not by epoch, and a joiner may average with peers
    an epoch ahead of it until the library finds it out of sync. (The hooks are hivemind 1.1.12's:
    ``Optimizer._make_state_averager`` and ``TrainingStateAverager._apply_averaging_results_``.)"""
    hivemind = library()
    from hivemind.optim.state_averager import TrainingStateAverager

    class ReportingStateAverager(TrainingStateAverager):
        def _apply_averaging_results_(self) -> None:
            super()._apply_averaging_results_()
            with torch.no_grad():
                total = float(sum(p.detach().sum(dtype=torch.float64) for p in self.main_parameters))
            print(AVERAGED_LINE.format(epoch=self.local_epoch, at=time.time(), total=total), flush=True)

    class ReportingOptimizer(hivemind.Optimizer):
        def _make_state_averager(self, **kwargs) -> TrainingStateAverager:  # noqa: ANN003 - hivemind's
            return ReportingStateAverager(
                dht=self.dht, prefix=f"{self.run_id}_state_averager", min_matchmaking_time=self.matchmaking_time,
                allreduce_timeout=self.allreduce_timeout, shutdown_timeout=self.shutdown_timeout,
                offload_optimizer=self.offload_optimizer, custom_gradients=self.offload_optimizer,
                status_loglevel=self.status_loglevel, next_chunk_timeout=self.next_chunk_timeout,
                client_mode=self.client_mode, auxiliary=self.auxiliary, start=True, **kwargs)

    return ReportingOptimizer


def start_dht(initial_peers: list[str], address: str):  # noqa: ANN201 - hivemind.DHT
    """A DHT peer on ``address`` (any free port), joined to ``initial_peers``."""
    return library().DHT(start=True, initial_peers=initial_peers, host_maddrs=[f"/ip4/{address}/tcp/0"],
                        wait_timeout=30)


class HivemindSync:
    name = "hivemind"
    reads_own_data = True

    def __init__(self, model: nn.Module, loss_fn: Callable | None, optimizer: torch.optim.Optimizer, rank: int,
                 world: int, counter: ByteCounter, target_batch_size: int, samples_per_micro: int, precision: str, *,
                 run_id: str = "geotrain", dht_peers: list[str] | None = None, store: object | None = None,
                 address: str = "127.0.0.1", timeout_s: float = 60.0, step: int = 0, joining: bool = False,
                 group_size: int | None = None) -> None:

        self.raw = self.model = model
        self.loss_fn = loss_fn
        self.rank, self.world, self.counter = rank, world, counter
        self.tbs = target_batch_size
        self.m = samples_per_micro
        self.payload = parameter_bytes(model, wire_dtype(precision) if precision != "int8" else torch.int8)
        self.stride = 4 * -(-target_batch_size // (world * samples_per_micro)) * world * samples_per_micro
        self.clock = RoundClock()
        self.joined_at: int | None = None  # the epoch this peer's state came from its peers with
        peers = list(dht_peers or [])
        if not peers and world > 1 and rank != 0:
            if store is None:
                raise ValueError("hivemind with more than one peer needs the launcher's DHT or the run's store")
            store.wait([DHT_KEY], timedelta_s(timeout_s))
            peers = json.loads(store.get(DHT_KEY).decode())
        self.dht = start_dht(peers, address)
        if store is not None:  # the launcher replaces a lost peer in this generation only if its workers say so
            store.set(ELASTIC_KEY, "1")
        if not dht_peers and world > 1 and rank == 0 and store is not None:
            store.set(DHT_KEY, json.dumps([str(a) for a in self.dht.get_visible_maddrs()]))
        self.opt = optimizer_class()(
            dht=self.dht, run_id=run_id, target_batch_size=target_batch_size, batch_size_per_step=samples_per_micro,
            optimizer=optimizer, matchmaking_time=MATCHMAKING_S, averaging_timeout=averaging_timeout_s(self.payload, timeout_s),
            grad_compression=compression(precision), state_averaging_compression=compression(precision),
            load_state_timeout=timeout_s, verbose=True,
            # the library's matchmaking forms groups of at most group_size peers (None: one of every peer).
            # hivemind 1.1.12 gives averager_opts to the state averager only, though its docstring says
            # both: the gradient averager gets the same options through the library's factory seam
            averager_opts=averaging_options(group_size),
            grad_averager_factory=functools.partial(gradient_averager(), **averaging_options(group_size)))
        self.opt.state_averager.local_epoch = step  # resumed from a checkpoint: the swarm's epoch
        deadline = time.monotonic() + timeout_s
        if joining:
            self.opt.load_state_from_peers()
            self.joined_at = self.opt.local_epoch
            self._wait_for_peers(2, min(deadline, time.monotonic() + JOIN_WAIT_S))
        elif world > 1 and store is not None:  # a fresh generation starts together
            store.add(READY_KEY, 1)
            while int(store.add(READY_KEY, 0)) < world and time.monotonic() < deadline:
                time.sleep(0.05)
        self._local, self._loss_sum = 0, 0.0  # since the last epoch: samples and loss sum of this peer
        self.store, self.timeout_s = store, timeout_s
        self._looked = 0.0  # when _swarm_ended last asked the store

    def _wait_for_peers(self, peers: int, deadline: float) -> None:
        """Wait (until ``deadline``) for Hivemind's progress tracker to see ``peers`` peers, this one
        included: a joiner whose tracker sees nobody counts only its own samples toward the target
        batch size, so it would take its first round alone, without its peers' gradients."""
        self.opt.tracker.report_local_progress(self.opt.local_epoch, 0)  # peers see a peer once it reports
        while self.opt.tracker.global_progress.num_peers < peers and time.monotonic() < deadline:
            time.sleep(0.1)

    @classmethod
    def from_settings(cls, sync: SyncSettings, ctx: SyncContext) -> HivemindSync:
        if ctx.optimizer is None:
            raise ValueError("hivemind wraps the run's optimizer: the sync context needs it")
        return cls(ctx.model, ctx.loss_fn, ctx.optimizer, ctx.rank, ctx.world, ctx.counter, sync.target_batch_size,
                   ctx.samples_per_micro, sync.precision, run_id=ctx.run_id, dht_peers=list(ctx.dht_peers),
                   store=ctx.store, address=ctx.address, timeout_s=ctx.timeout_s, step=ctx.step,
                   joining=ctx.joining, group_size=sync.group_size)

    @property
    def epoch(self) -> int:
        return self.opt.local_epoch

    def step(self, inp: StepInput, optimizer: torch.optim.Optimizer) -> StepResult:
        """Train micro-batches until the swarm's epoch moves on (this peer's round ends)."""
        if inp.fetch is None or self.loss_fn is None:
            raise ValueError("hivemind reads its own micro-batches: the step input needs fetch")
        k, i = self.epoch, 0
        base = k * self.stride
        while True:
            x, y = inp.fetch(base + (i * self.world + self.rank) * self.m)
            i += 1
            optimizer.zero_grad(set_to_none=True)
            with Timer(self.clock):
                loss = self.loss_fn(self.model, x, y)
                loss.backward()
            result = self.apply(optimizer, int(x.shape[0]), float(loss.detach()))
            if result is not None:
                return result

    def apply(self, optimizer: torch.optim.Optimizer, samples: int, loss: float) -> StepResult | None:
        """The caller's gradient (the mean over its ``samples``) goes to Hivemind's accumulators; a
        result once the swarm's epoch has moved on (an averaged step, or this peer caught up)."""
        if self._local == 0:
            self.clock.begin()
        before = self.epoch
        self._local += samples
        self._loss_sum += loss * samples
        if self._swarm_ended():  # another peer reached the end: the run's model is its final checkpoint
            raise EndedByPeers(f"a peer reached the run's step count while this one was at {before}")
        self.opt.step(batch_size=samples)
        after = self.epoch
        if after == before:
            return None
        rounds = max(1, after - before)
        peers = max(1, self.opt.tracker.global_progress.num_peers)
        for p in range(self.world):  # the butterfly: 2W/n to each other peer, the gradients and the parameters
            if p != self.rank and p < peers:
                self.counter.to(p, 2 * 2 * self.payload // peers)
        result = StepResult(self._loss_sum / self._local, rounds * self.tbs, step=after)
        self._local, self._loss_sum = 0, 0.0
        self.clock.steps += 1
        self.clock.end()
        return result

    def after_step(self, step: int, *, final: bool = False) -> bool:
        """At the end (the run's step count reached) a peer says so in the store: a straggler still
        short of it stops there and takes the run's final model from the checkpoint of the first peer
        that ended (:meth:`_swarm_ended`, :class:`EndedByPeers`), not from peers that have left."""
        if final and self.store is not None and self.world > 1:
            self.store.add(FINISHED_KEY, 1)
        return final

    def _swarm_ended(self) -> bool:
        """Whether a peer has reached the run's step count (looked up in the store at most once a second)."""
        if self.store is None or self.world == 1 or time.monotonic() - self._looked < 1.0:
            return False
        self._looked = time.monotonic()
        return bool(self.store.check([FINISHED_KEY]))

    def claims_final(self) -> bool:
        """Whether this peer writes the run's final checkpoint: the first to end, whichever rank."""
        return self.store is None or int(self.store.add(FINAL_KEY, 1)) == 1

    def averaged(self, step: int) -> bool:
        return True  # every peer of the round applies the same averaged update (up to the wire's rounding)

    def close(self) -> None:
        self.opt.shutdown()
        self.dht.shutdown()


def timedelta_s(seconds: float):  # noqa: ANN201
    from datetime import timedelta

    return timedelta(seconds=seconds)

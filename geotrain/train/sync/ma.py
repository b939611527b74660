"""``ma``: model averaging between the regional parameter servers, Cloudless-Training's second
inter-region strategy. Every region has a parameter server, its leader (the region's lowest rank);
the region's workers push their gradients to it every step (an all-reduce inside the region), and
every ``K`` pushes the servers average their models over the WAN, weighted by their regions' shares
of the global batch, then hand the average to their workers (a broadcast inside the region). A round
is ``K`` steps.

The average overlaps the next ``K`` steps (**bounded staleness** of one round): at boundary ``k`` a
server starts averaging its model as of ``k`` (an asynchronous all-reduce among the servers) and goes
on training; at boundary ``k + 1`` it waits for that average and moves its model by the average's
difference from its own model as of ``k`` (the region keeps its own progress since). After the run's
last step the servers average once more, synchronously, so the run ends on one model. The servers'
average goes over the runtime's WAN transport (:class:`geotrain.train.sync.streams.Mesh`, on a thread
of its own), not gloo's collectives.

Wire: the servers send their model's change since the last agreed average, in the plan's precision
(rounding never accumulates into the parameters). Bytes: a butterfly all-reduce among the ``R``
servers (``2W/R`` from each to each other) per round, the broadcast of ``W`` inside each region, and
the in-region all-reduce every step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import nn

from geotrain.domain import SyncSettings
from geotrain.train.sync.base import (
    ByteCounter, RegionalTraining, SyncContext, RoundClock, StepInput, StepResult, assign, flat_parameters, parameter_bytes,
    region_groups, wire_dtype,
)


class ModelAveragingSync(RegionalTraining):
    name = "ma"

    def __init__(self, model: nn.Module, loss_fn: Callable, rank: int, world: int, counter: ByteCounter,
                 regions: Sequence[str], averaging_pushes: int, precision: str, *,
                 micro_batches: int, store: object | None = None, address: str = "127.0.0.1",
                 timeout_s: float = 60.0) -> None:
        self.raw = self.model = model
        self.loss_fn = loss_fn
        self.rank, self.world, self.counter = rank, world, counter
        self.K = averaging_pushes
        self.dtype = wire_dtype(precision)
        self.params = [p for p in model.parameters()]
        self.payload = parameter_bytes(model, self.dtype)
        self.members_by_region, self.my_members, self.group, self.leaders, self.leader_group = \
            region_groups(regions, rank, world)
        self.leader = self.my_members[0]
        self.weight = sum(len(range(r, micro_batches, world)) for r in self.my_members) / micro_batches
        self.clock = RoundClock()
        self.agreed = flat_parameters(self.params)  # the last average every server holds
        self.pending = None  # (the average under way, the model as of the boundary it started at)
        self._averaged_at = -1
        self.mesh = self._leaders_mesh("ma", store, address, timeout_s)
        self.averager = ThreadPoolExecutor(1, thread_name_prefix="ma-average") if self.mesh is not None else None

    @classmethod
    def from_settings(cls, sync: SyncSettings, ctx: SyncContext) -> ModelAveragingSync:
        return cls(ctx.model, ctx.loss_fn, ctx.rank, ctx.world, ctx.counter, ctx.regions, sync.averaging_pushes,
                   sync.precision, micro_batches=ctx.micro_batches, store=ctx.store, address=ctx.address,
                   timeout_s=ctx.timeout_s)

    def step(self, inp: StepInput, optimizer: torch.optim.Optimizer) -> StepResult:
        return self._region_step(inp, optimizer)

    def apply(self, optimizer: torch.optim.Optimizer, samples: int, loss: float) -> StepResult:
        return StepResult(loss, self._region_apply(optimizer, samples) * self.world // len(self.my_members))

    def after_step(self, step: int, *, final: bool = False) -> bool:
        if step % self.K and not final:
            return False
        if self.mesh is not None:
            self._land()
            self._average(wait=final)
        self._broadcast_in_region()
        self._averaged_at = step if final else self._averaged_at
        self.clock.end()
        return final

    def _average(self, *, wait: bool) -> None:
        """Start (or, with ``wait``, do) the weighted average of the servers' models as of now."""
        now = flat_parameters(self.params)
        self.pending = (self.averager.submit(self.mesh.all_reduce, (now - self.agreed) * self.weight, self.dtype), now)
        if wait:
            self._land(exact=True)

    def _land(self, *, exact: bool = False) -> None:
        """Wait for the average started at the last boundary and move the model by its difference
        (``exact``: nothing was trained since it started; take the average itself, the same on every server)."""
        if self.pending is None:
            return
        future, then = self.pending
        self.pending = None
        summed, _ = future.result()
        average = self.agreed + summed
        self.agreed = average
        assign(self.params, average if exact else flat_parameters(self.params) + (average - then))

    def averaged(self, step: int) -> bool:
        """At a boundary (a region's server model, which a resumed run starts every region from) and at the end."""
        return step % self.K == 0 or step == self._averaged_at

    def close(self) -> None:
        if self.pending is not None:
            try:
                self.pending[0].result()
            except (RuntimeError, ConnectionError):
                pass
        if self.mesh is not None:
            self.mesh.close()
            self.averager.shutdown(wait=False)

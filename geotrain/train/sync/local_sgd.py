"""``local-sgd``: model averaging every ``H`` steps with per-region groups. Every step the ranks of
one region all-reduce their gradients inside the region; every ``H`` steps (and after the run's last
step) all ranks average their parameters: inside each region (an all-reduce), then among the region
leaders over the WAN, weighted by their regions' sizes (the runtime's WAN transport,
:class:`geotrain.train.sync.streams.Mesh`), then each leader broadcasts the average inside its region.
A round is ``H`` steps and the average. With one region, the average is one all-reduce of all ranks.

Bytes: the in-region all-reduce as a ring over the region's ranks every step; per average, the
in-region all-reduce, a butterfly among the ``R`` leaders (``2W/R`` from each to each other) and the
broadcast of ``W`` inside each region."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from geotrain.domain import SyncSettings
from geotrain.train.sync.base import (
    ByteCounter, RegionalTraining, SyncContext, RoundClock, StepInput, StepResult, all_reduce_mean, assign, flat_parameters,
    parameter_bytes, region_groups, wire_dtype,
)


class LocalSGDSync(RegionalTraining):
    name = "local-sgd"

    def __init__(self, model: nn.Module, loss_fn: Callable, rank: int, world: int, counter: ByteCounter,
                 regions: Sequence[str], local_steps: int, precision: str, *, store: object | None = None,
                 address: str = "127.0.0.1", timeout_s: float = 60.0) -> None:
        self.raw = self.model = model
        self.loss_fn = loss_fn
        self.rank, self.world, self.counter = rank, world, counter
        self.H = local_steps
        self.dtype = wire_dtype(precision)
        self.params = [p for p in model.parameters()]
        self.payload = parameter_bytes(model, self.dtype)
        self.members = list(range(world))
        self.region_members, self.my_members, self.group, self.leaders, _ = region_groups(regions, rank, world)
        self.mesh = self._leaders_mesh("local-sgd", store, address, timeout_s)
        self.clock = RoundClock()
        self._averaged_at = -1

    @classmethod
    def from_settings(cls, sync: SyncSettings, ctx: SyncContext) -> LocalSGDSync:
        return cls(ctx.model, ctx.loss_fn, ctx.rank, ctx.world, ctx.counter, ctx.regions, sync.local_steps,
                   sync.precision, store=ctx.store, address=ctx.address, timeout_s=ctx.timeout_s)

    def step(self, inp: StepInput, optimizer: torch.optim.Optimizer) -> StepResult:
        return self._region_step(inp, optimizer)

    def apply(self, optimizer: torch.optim.Optimizer, samples: int, loss: float) -> StepResult:
        return StepResult(loss, self._region_apply(optimizer, samples) * self.world // len(self.my_members))

    def after_step(self, step: int, *, final: bool = False) -> bool:
        """Every H steps, and after the run's last step: average the parameters of all ranks."""
        if step % self.H and not final:
            return False
        self._averaged_at = step
        if self.world > 1 and len(self.leaders) < 2:  # one region
            assign(self.params, all_reduce_mean(flat_parameters(self.params), self.dtype, self.world))
            self.counter.ring(self.rank, self.members, self.payload, 2 * (self.world - 1) / self.world)
        elif self.world > 1:
            flat = flat_parameters(self.params)
            n = len(self.my_members)
            if n > 1:
                flat = all_reduce_mean(flat, self.dtype, n, self.group)
                self.counter.ring(self.rank, self.my_members, self.payload, 2 * (n - 1) / n)
            if self.mesh is not None:  # the region's mean, weighted by its share of the ranks
                assign(self.params, self.mesh.all_reduce(flat * (n / self.world), self.dtype)[0])
            self._broadcast_in_region()
        self.clock.end()
        return final

    def averaged(self, step: int) -> bool:
        return step % self.H == 0 or step == self._averaged_at

    def close(self) -> None:
        if self.mesh is not None:
            self.mesh.close()

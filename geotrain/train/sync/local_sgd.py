"""``local-sgd``: model averaging every ``H`` steps with per-region groups. Every step the ranks of
one region all-reduce their gradients inside the region; every ``H`` steps (and after the run's last
step) all ranks average their parameters, over the WAN. A round is ``H`` steps and the average.

Bytes: the in-region all-reduce as a ring over the region's ranks every step; the average as a ring
over all ranks."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from geotrain.train.sync.base import (
    ByteCounter, RegionalTraining, RoundClock, StepInput, StepResult, all_reduce_mean, assign, flat_parameters,
    parameter_bytes, region_groups, wire_dtype,
)


class LocalSGDSync(RegionalTraining):
    name = "local-sgd"

    def __init__(self, model: nn.Module, loss_fn: Callable, rank: int, world: int, counter: ByteCounter,
                 regions: Sequence[str], local_steps: int, precision: str = "fp32") -> None:
        self.raw = self.model = model
        self.loss_fn = loss_fn
        self.rank, self.world, self.counter = rank, world, counter
        self.H = local_steps
        self.dtype = wire_dtype(precision)
        self.params = [p for p in model.parameters()]
        self.payload = parameter_bytes(model, self.dtype)
        self.members = list(range(world))
        self.region_members, self.my_members, self.group, _, _ = region_groups(regions, rank, world)
        self.clock = RoundClock()
        self._averaged_at = -1

    def step(self, inp: StepInput, optimizer: torch.optim.Optimizer) -> StepResult:
        return self._region_step(inp, optimizer)

    def after_step(self, step: int, *, final: bool = False) -> bool:
        """Every H steps, and after the run's last step: average the parameters of all ranks."""
        if step % self.H and not final:
            return False
        self._averaged_at = step
        if self.world > 1:
            assign(self.params, all_reduce_mean(flat_parameters(self.params), self.dtype, self.world))
            self.counter.ring(self.rank, self.members, self.payload, 2 * (self.world - 1) / self.world)
        self.clock.end()
        return final

    def averaged(self, step: int) -> bool:
        return step % self.H == 0 or step == self._averaged_at

    def close(self) -> None:
        pass

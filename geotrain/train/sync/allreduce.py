"""``allreduce``: synchronous data parallel, one round per step.

- ``DDPSync``: ``torch.nn.parallel.DistributedDataParallel`` (the gradient all-reduce overlaps the
  backward pass). Each rank trains its share of the global batch; losses are scaled so that the
  averaged gradient is the mean over the whole global batch. Gradients travel in the plan's wire
  precision (cast before the collective, summed in that type, cast back), as the perf model counts.
- ``DeterministicSync``: the same update, bit for bit independent of the world size: the global
  batch is cut into ``M`` fixed micro-batches; each rank computes the gradient of its micro-batches
  one by one, all ranks all-gather them and add them up in micro-batch order. A run that loses and
  gains nodes therefore ends with exactly the weights of an uninterrupted run. It sends
  ``(n−1)/n·M/n`` times more than an all-reduce, always fp32: for tests and reproducible runs.

Bytes are counted as a ring sends them: an all-reduce of ``B`` bytes among ``n`` ranks sends
``2(n−1)/n·B`` from each rank to its successor in the ring (ranks in location order); an all-gather
of pieces of ``b`` bytes sends ``(n−1)·b`` to the successor.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

from geotrain.domain import SyncSettings
from geotrain.train.sync.base import (
    ByteCounter, RoundClock, StepInput, StepResult, SyncContext, Timer, assign, parameter_bytes, sample_mean_gradient,
    wire_dtype,
)


def _compressed_all_reduce_hook(dtype: torch.dtype):  # noqa: ANN202
    """A DDP communication hook that all-reduces each gradient bucket in ``dtype`` (averaged)."""

    def hook(group, bucket):  # noqa: ANN001, ANN202
        world = dist.get_world_size(group)
        buffer = bucket.buffer()
        wire = buffer.to(dtype).div_(world)
        future = dist.all_reduce(wire, group=group, async_op=True).get_future()

        def back(fut):  # noqa: ANN001, ANN202
            buffer.copy_(fut.value()[0])
            return buffer

        return future.then(back)

    return hook


def _untimed() -> contextlib.AbstractContextManager:
    return contextlib.nullcontext()


class DDPSync:
    name = "allreduce"

    def __init__(self, model: nn.Module, loss_fn: Callable, rank: int, world: int, counter: ByteCounter,
                 precision: str) -> None:
        self.raw = model
        self.dtype = dtype = wire_dtype(precision)
        self.params = [p for p in model.parameters()]
        self._ddp: nn.Module | None = None  # DDP wraps the model at the first step() (apply() needs no wrapper)
        self.loss_fn = loss_fn
        self.rank, self.world, self.counter = rank, world, counter
        self.members = list(range(world))
        self.payload = parameter_bytes(model, dtype)
        self.clock = RoundClock()

    @classmethod
    def from_settings(cls, sync: SyncSettings, ctx: SyncContext) -> DDPSync | DeterministicSync:
        """DDP; a deterministic run (``ctx.deterministic``) the bit-exact all-gather instead."""
        if ctx.deterministic:
            return DeterministicSync(ctx.model, ctx.loss_fn, ctx.rank, ctx.world, ctx.counter, ctx.micro_batches)
        return cls(ctx.model, ctx.loss_fn, ctx.rank, ctx.world, ctx.counter, sync.precision)

    @property
    def model(self) -> nn.Module:
        """DDP around the model (the gradient all-reduce in the backward pass), made at first use."""
        if self._ddp is None:
            self._ddp = self.raw
            if self.world > 1:
                self._ddp = nn.parallel.DistributedDataParallel(self.raw)
                if self.dtype != torch.float32:
                    self._ddp.register_comm_hook(None, _compressed_all_reduce_hook(self.dtype))
        return self._ddp

    def apply(self, optimizer: torch.optim.Optimizer, samples: int, loss: float) -> StepResult:
        """The caller's gradient (of its own model, not DDP's) averaged over every rank's samples."""
        self.clock.begin()
        grads, total = sample_mean_gradient(self.params, samples, self.dtype, None, self.world)
        if self.world > 1:
            assign(self.params, grads, grad=True)
            self.counter.ring(self.rank, self.members, self.payload, 2 * (self.world - 1) / self.world)
        with Timer(self.clock):
            optimizer.step()
        self.clock.steps += 1
        self.clock.end()
        return StepResult(loss, total)

    def step(self, inp: StepInput, optimizer: torch.optim.Optimizer) -> StepResult:
        self.clock.begin()
        optimizer.zero_grad(set_to_none=True)
        x = torch.cat([b[0] for b in inp.batches])
        y = torch.cat([b[1] for b in inp.batches])
        local = x.shape[0]
        # DDP averages over ranks; scaling by world·local/global makes that the global-batch mean
        with Timer(self.clock) if self.world == 1 else _untimed():  # with peers the all-reduce overlaps the backward
            loss = self.loss_fn(self.model, x, y)
            (loss * (self.world * local / inp.global_samples)).backward()
        with Timer(self.clock):
            optimizer.step()
        self.counter.ring(self.rank, self.members, self.payload, 2 * (self.world - 1) / self.world)
        self.clock.steps += 1
        self.clock.end()
        return StepResult(float(loss.detach()), inp.global_samples)

    def after_step(self, step: int, *, final: bool = False) -> bool:
        return final

    def averaged(self, step: int) -> bool:
        return True  # every rank holds the same model after every step

    def close(self) -> None:
        # the DDP wrapper goes while the interpreter is whole: its reducer holds the process group and
        # the comm hook's futures, which hold Python callbacks; freed only at the interpreter's
        # finalization, gloo's threads took a dying interpreter's GIL and the worker aborted (SIGABRT)
        # after it had trained (3 of 18 three-node rehearsals whose nodes were held to CPU shares)
        if self._ddp is not None and self._ddp is not self.raw:
            self._ddp = self.raw
            gc.collect()


class DeterministicSync:
    name = "allreduce"

    def __init__(self, model: nn.Module, loss_fn: Callable, rank: int, world: int, counter: ByteCounter,
                 micro_batches: int) -> None:
        self.raw = self.model = model
        self.loss_fn = loss_fn
        self.rank, self.world, self.counter = rank, world, counter
        self.members = list(range(world))
        self.M = micro_batches
        self.params = [p for p in model.parameters()]
        self.numel = sum(p.numel() for p in self.params)
        self.slots = -(-micro_batches // world)  # micro-batches per rank, rounded up
        self.clock = RoundClock()

    def step(self, inp: StepInput, optimizer: torch.optim.Optimizer) -> StepResult:
        self.clock.begin()
        device = self.params[0].device
        mine = torch.zeros(self.slots, self.numel, device=device)
        losses = torch.zeros(self.slots, device=device)
        with Timer(self.clock):
            for slot, (x, y) in enumerate(inp.batches):
                optimizer.zero_grad(set_to_none=True)
                loss = self.loss_fn(self.model, x, y)
                loss.backward()
                mine[slot] = torch.cat([p.grad.reshape(-1) for p in self.params])
                losses[slot] = loss.detach()
        if self.world > 1:
            gathered = [torch.empty_like(mine) for _ in range(self.world)]
            dist.all_gather(gathered, mine)
            loss_parts = [torch.empty_like(losses) for _ in range(self.world)]
            dist.all_gather(loss_parts, losses)
            self.counter.ring(self.rank, self.members, mine.numel() * 4 + losses.numel() * 4, self.world - 1)
        else:
            gathered, loss_parts = [mine], [losses]
        # micro-batch j lives on rank j % world, in slot j // world: add them up in the order j = 0..M-1
        total = torch.zeros(self.numel, device=device)
        loss_sum = torch.zeros((), device=device)
        for j in range(self.M):
            total += gathered[j % self.world][j // self.world]
            loss_sum += loss_parts[j % self.world][j // self.world]
        total /= self.M
        offset = 0
        for p in self.params:
            n = p.numel()
            p.grad = total[offset:offset + n].view_as(p).clone()
            offset += n
        with Timer(self.clock):
            optimizer.step()
        self.clock.steps += 1
        self.clock.end()
        return StepResult(float(loss_sum / self.M), inp.global_samples)

    def apply(self, optimizer: torch.optim.Optimizer, samples: int, loss: float) -> StepResult:
        raise ValueError("a deterministic run trains the runtime's own micro-batches; a script's gradient "
                         "goes through DDPSync.apply")

    def after_step(self, step: int, *, final: bool = False) -> bool:
        return final

    def averaged(self, step: int) -> bool:
        return True

    def close(self) -> None:
        pass

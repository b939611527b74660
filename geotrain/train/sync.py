"""Synchronisation of one training step across ranks, with the bytes each rank sends counted.

- ``DDPSync``: synchronous data parallel with ``torch.nn.parallel.DistributedDataParallel`` (the
  gradient all-reduce overlaps the backward pass). Each rank trains its share of the global batch;
  losses are scaled so that the averaged gradient is the mean over the whole global batch.
- ``DeterministicSync``: the same update, bit for bit independent of the world size: the global
  batch is cut into ``M`` fixed micro-batches; each rank computes the gradient of its micro-batches
  one by one, all ranks all-gather them and add them up in micro-batch order. A run that loses and
  gains nodes therefore ends with exactly the weights of an uninterrupted run. It sends
  ``(n−1)/n·M/n`` times more than an all-reduce: for tests and reproducible runs of small models.
- ``LocalSGDSync``: model averaging every ``H`` steps with per-region groups: every step the ranks
  of one region all-reduce their gradients inside the region; every ``H`` steps all ranks average
  their parameters (over the WAN). Cloudless-Training's inter-region model averaging.

Wire precision (the plan's ``sync.precision``): ``DDPSync`` and ``LocalSGDSync`` send gradients and
parameters as fp32, fp16 or bf16 (cast before the collective, summed in that type, cast back), as the
perf model counts them; ``DeterministicSync`` always sends fp32.

Bytes are counted as a ring sends them: an all-reduce of ``B`` bytes among ``n`` ranks sends
``2(n−1)/n·B`` from each rank to its successor in the ring (ranks in location order); an all-gather
of pieces of ``b`` bytes sends ``(n−1)·b`` to the successor.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn


@dataclass
class ByteCounter:
    """Bytes this rank sent, by destination rank."""

    sent: dict[int, int] = field(default_factory=lambda: defaultdict(int))

    def ring(self, rank: int, members: Sequence[int], nbytes: int, factor: float) -> None:
        n = len(members)
        if n < 2:
            return
        position = members.index(rank)
        successor = members[(position + 1) % n]
        self.sent[successor] += int(factor * nbytes)

    def drain(self) -> dict[int, int]:
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


def _all_reduce_mean(flat: torch.Tensor, dtype: torch.dtype, n: int, group=None) -> torch.Tensor:  # noqa: ANN001
    """The mean of ``flat`` over the group, sent in ``dtype``."""
    wire = flat.to(dtype) if flat.dtype != dtype else flat
    dist.all_reduce(wire, group=group)
    return wire.to(flat.dtype).div_(n) if wire is not flat else wire.div_(n)


@dataclass
class StepInput:
    """The micro-batches this rank trains in one step, and how many samples the global batch has."""

    batches: list[tuple[torch.Tensor, torch.Tensor]]  # one (x, y) per micro-batch of this rank
    micro_indices: list[int]  # their positions in the global batch
    global_samples: int
    micro_batches: int  # M


class DDPSync:
    name = "allreduce"

    def __init__(self, model: nn.Module, loss_fn: Callable, rank: int, world: int, counter: ByteCounter,
                 precision: str = "fp32") -> None:
        self.raw = model
        dtype = wire_dtype(precision)
        self.model = nn.parallel.DistributedDataParallel(model) if world > 1 else model
        if world > 1 and dtype != torch.float32:
            self.model.register_comm_hook(None, _compressed_all_reduce_hook(dtype))
        self.loss_fn = loss_fn
        self.rank, self.world, self.counter = rank, world, counter
        self.members = list(range(world))
        self.payload = parameter_bytes(model, dtype)

    def step(self, inp: StepInput, optimizer: torch.optim.Optimizer) -> float:
        optimizer.zero_grad(set_to_none=True)
        x = torch.cat([b[0] for b in inp.batches])
        y = torch.cat([b[1] for b in inp.batches])
        local = x.shape[0]
        # DDP averages over ranks; scaling by world·local/global makes that the global-batch mean
        loss = self.loss_fn(self.model, x, y)
        (loss * (self.world * local / inp.global_samples)).backward()
        optimizer.step()
        self.counter.ring(self.rank, self.members, self.payload, 2 * (self.world - 1) / self.world)
        return float(loss.detach()) * local / inp.global_samples

    def averaged(self, step: int) -> bool:
        return True  # every rank holds the same model after every step


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

    def step(self, inp: StepInput, optimizer: torch.optim.Optimizer) -> float:
        device = self.params[0].device
        mine = torch.zeros(self.slots, self.numel, device=device)
        losses = torch.zeros(self.slots, device=device)
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
        optimizer.step()
        return float(loss_sum / self.M)

    def averaged(self, step: int) -> bool:
        return True


class LocalSGDSync:
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
        # one process group per region; every rank must create every group, in the same order
        self.region_members: dict[str, list[int]] = {}
        for r, region in enumerate(regions):
            self.region_members.setdefault(region, []).append(r)
        self.my_members = self.region_members[regions[rank]]
        self.group = None
        for region in sorted(self.region_members):
            members = self.region_members[region]
            group = dist.new_group(members) if world > 1 else None
            if rank in members:
                self.group = group

    def step(self, inp: StepInput, optimizer: torch.optim.Optimizer) -> float:
        optimizer.zero_grad(set_to_none=True)
        x = torch.cat([b[0] for b in inp.batches])
        y = torch.cat([b[1] for b in inp.batches])
        loss = self.loss_fn(self.model, x, y)
        loss.backward()
        n = len(self.my_members)
        if n > 1:
            flat = _all_reduce_mean(torch.cat([p.grad.reshape(-1) for p in self.params]), self.dtype, n, self.group)
            offset = 0
            for p in self.params:
                p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
                offset += p.numel()
            self.counter.ring(self.rank, self.my_members, self.payload, 2 * (n - 1) / n)
        optimizer.step()
        return float(loss.detach())

    def after_step(self, step: int, *, final: bool = False) -> None:
        """Every H steps, and after the run's last step: average the parameters of all ranks."""
        if step % self.H and not final:
            return
        self._averaged_at = step
        if self.world < 2:
            return
        with torch.no_grad():
            flat = _all_reduce_mean(torch.cat([p.data.reshape(-1) for p in self.params]), self.dtype, self.world)
            offset = 0
            for p in self.params:
                p.data.copy_(flat[offset:offset + p.numel()].view_as(p))
                offset += p.numel()
        self.counter.ring(self.rank, self.members, self.payload, 2 * (self.world - 1) / self.world)

    def averaged(self, step: int) -> bool:
        return step % self.H == 0 or step == getattr(self, "_averaged_at", -1)

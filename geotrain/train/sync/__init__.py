"""Synchronisation of the runtime's training steps across ranks: one module per strategy, behind one
interface (:class:`geotrain.train.sync.base.Sync`), chosen by the plan's sync settings
(:func:`make_sync`). The perf model (:mod:`geotrain.perf.strategies`) predicts each one's round time
and bytes; ``geotrain rehearse`` measures them."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import nn

from geotrain.train.sync.allreduce import DDPSync, DeterministicSync
from geotrain.train.sync.asgd_ga import AsgdGASync
from geotrain.train.sync.base import ByteCounter, RoundClock, StepInput, StepResult, Sync, parameter_bytes, wire_dtype
from geotrain.train.sync.hivemind import HivemindSync
from geotrain.train.sync.local_sgd import LocalSGDSync
from geotrain.train.sync.ma import ModelAveragingSync

__all__ = ["AsgdGASync", "ByteCounter", "DDPSync", "DeterministicSync", "HivemindSync", "LocalSGDSync",
           "ModelAveragingSync", "RoundClock", "StepInput", "StepResult", "Sync", "make_sync", "parameter_bytes",
           "wire_dtype"]


def make_sync(settings: dict, *, model: nn.Module, loss_fn: Callable, rank: int, world: int, counter: ByteCounter,
              regions: Sequence[str], micro_batches: int, samples_per_micro: int, deterministic: bool = False,
              rates: Sequence[float] | None = None, store: object | None = None, address: str = "127.0.0.1",
              timeout_s: float = 60.0, samples_left: int | None = None) -> Sync:
    """The strategy of ``settings`` (the plan's sync settings as the generation file has them).
    ``samples_left``: what the run has left to train (asgd-ga across regions ends on it)."""
    strategy = settings["strategy"]
    precision = settings.get("precision", "fp32")
    if strategy == "local-sgd":
        return LocalSGDSync(model, loss_fn, rank, world, counter, regions, settings["local_steps"], precision,
                            store=store, address=address, timeout_s=timeout_s)
    if strategy == "hivemind":
        return HivemindSync(model, loss_fn, rank, world, counter, settings["target_batch_size"], samples_per_micro,
                            precision, store=store, address=address, timeout_s=timeout_s)
    if strategy == "asgd-ga":
        return AsgdGASync(model, loss_fn, rank, world, counter, regions, settings["accumulation_steps"], precision,
                          micro_batches=micro_batches, samples_per_micro=samples_per_micro,
                          samples_left=samples_left, staleness=settings.get("staleness", 1), rates=rates,
                          store=store, address=address, timeout_s=timeout_s)
    if strategy == "ma":
        return ModelAveragingSync(model, loss_fn, rank, world, counter, regions, settings["averaging_pushes"],
                                  precision, micro_batches=micro_batches, store=store, address=address,
                                  timeout_s=timeout_s)
    if strategy != "allreduce":
        raise ValueError(f"sync strategy {strategy!r} is not one the runtime runs")
    if deterministic:
        return DeterministicSync(model, loss_fn, rank, world, counter, micro_batches)
    return DDPSync(model, loss_fn, rank, world, counter, precision)

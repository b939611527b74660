"""Synchronisation of the runtime's training steps across ranks: one module per strategy, behind one
interface (:class:`geotrain.train.sync.base.Sync`), chosen by the plan's sync settings
(:func:`make_sync`). The perf model (:mod:`geotrain.perf.strategies`) predicts each one's round time
and bytes; ``geotrain rehearse`` measures them."""

from __future__ import annotations

from geotrain.domain import SyncSettings
from geotrain.strategies import entry, resolve
from geotrain.train.sync.allreduce import DDPSync, DeterministicSync
from geotrain.train.sync.asgd_ga import AsgdGASync
from geotrain.train.sync.base import (
    ByteCounter, RoundClock, StepInput, StepResult, Sync, SyncContext, parameter_bytes, wire_dtype,
)
from geotrain.train.sync.hivemind import HivemindSync
from geotrain.train.sync.local_sgd import LocalSGDSync
from geotrain.train.sync.ma import ModelAveragingSync

__all__ = ["AsgdGASync", "ByteCounter", "DDPSync", "DeterministicSync", "HivemindSync", "LocalSGDSync",
           "ModelAveragingSync", "RoundClock", "StepInput", "StepResult", "Sync", "SyncContext", "make_sync", "parameter_bytes",
           "wire_dtype"]


def make_sync(settings: SyncSettings, ctx: SyncContext) -> Sync:
    """The runtime of ``settings.strategy`` (the class the registry, :mod:`geotrain.strategies`, names)."""
    return resolve(entry(settings.strategy).runtime_class).from_settings(settings, ctx)

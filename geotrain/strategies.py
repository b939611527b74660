"""The one registry of sync strategies: for each :class:`geotrain.domain.SyncStrategyName`, the perf
model's class (what ``plan`` predicts), the training runtime's class (what ``launch`` runs), the
settings knob that sets its round. A new strategy is added here, in one place: a
name in ``SyncStrategyName``, a row below, and the two classes it names.

The classes are named by import path, resolved by the layer that uses them (``geotrain.perf`` its
column, ``geotrain.train`` its own): this table sits below both. Each class builds itself from the
plan's :class:`~geotrain.domain.SyncSettings` with a ``from_settings`` class method.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from geotrain.domain import SyncStrategyName


@dataclass(frozen=True, slots=True)
class StrategyEntry:
    name: SyncStrategyName
    perf_class: str  # "module:Class" of the perf model (geotrain.perf.strategies)
    runtime_class: str  # "module:Class" of the training runtime (geotrain.train.sync)
    knob: str | None  # the SyncSettings field that sets the round (None: every step)
    elastic: bool = False  # peers leave and join a running generation (no process group, no restart)


STRATEGIES: dict[SyncStrategyName, StrategyEntry] = {e.name: e for e in (
    StrategyEntry(SyncStrategyName.HIVEMIND, "geotrain.perf.strategies:Hivemind",
                  "geotrain.train.sync.hivemind:HivemindSync", "target_batch_size", elastic=True),
    StrategyEntry(SyncStrategyName.ALLREDUCE, "geotrain.perf.strategies:AllReduce",
                  "geotrain.train.sync.allreduce:DDPSync", None),
    StrategyEntry(SyncStrategyName.LOCAL_SGD, "geotrain.perf.strategies:LocalSGD",
                  "geotrain.train.sync.local_sgd:LocalSGDSync", "local_steps"),
    StrategyEntry(SyncStrategyName.ASGD_GA, "geotrain.perf.strategies:AsgdGA",
                  "geotrain.train.sync.asgd_ga:AsgdGASync", "accumulation_steps"),
    StrategyEntry(SyncStrategyName.MA, "geotrain.perf.strategies:ModelAveraging",
                  "geotrain.train.sync.ma:ModelAveragingSync", "averaging_pushes"),
)}


def entry(name: SyncStrategyName | str) -> StrategyEntry:
    return STRATEGIES[SyncStrategyName(name)]


def resolve(path: str) -> type:
    """The class a registry row names (``"module:Class"``)."""
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)

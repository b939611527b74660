"""The planner's referee: what a mix of candidates trains and costs by the perf model.

The solver's MIP is a relaxation of these figures and certifies its answers against them
(``geotrain.solver.model``); the plan reports the same figures, so what the solver calls optimal is
optimal for what the plan says.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from geotrain.domain import NodeGroup, Offer, SyncSettings
from geotrain.perf.model import DataSource, Estimate, PerfModel
from geotrain.perf.workloads import Workload
from geotrain.planning.context import DEFAULT_MAX_NODES, predict_groups
from geotrain.solver.problem import Candidate, Evaluation


@dataclass(eq=False)
class PerfReferee:
    """Implements ``geotrain.solver.problem.Referee`` with ``PerfModel.predict``."""

    perf: PerfModel
    workload: Workload
    sync: SyncSettings
    candidates: Sequence[Candidate]
    offers: Mapping[str, Offer]  # candidate key -> offer
    data: DataSource | None = None
    _cache: dict[tuple[int, ...], Estimate] = field(default_factory=dict)

    def estimate(self, counts: tuple[int, ...]) -> Estimate:
        if counts not in self._cache:
            chosen = [(c, n) for c, n in zip(self.candidates, counts, strict=True) if n]
            groups = [NodeGroup(self.offers[c.key], n) for c, n in chosen]
            self._cache[counts] = self.perf.predict(self.workload, groups, self.sync, self.data,
                                                    goodputs=[c.goodput for c, _ in chosen])
        return self._cache[counts]

    def evaluate(self, counts: tuple[int, ...]) -> Evaluation:
        estimate = self.estimate(counts)
        return Evaluation(estimate.goodput_samples_per_s, estimate.usd_per_hour)


class MixReferee:
    """An independent check of a plan: hill-climbing over count vectors of ``offers`` — add, remove,
    swap or move one node, over every offer, the steepest move each time — from ``restarts`` random
    mixes (one to three offers, a few nodes each), every mix scored by the perf model as the plan is (``predict_groups``): the shortfall from
    ``target`` first, then $/h; without a target, the fastest mix. It shares nothing with the
    solver's search but the perf model and the job's node and per-zone limits."""

    def __init__(self, ctx, offers, target: float | None, restarts: int = 6) -> None:  # noqa: ANN001
        self.predict = predict_groups
        self.ctx, self.offers, self.target, self.restarts = ctx, offers, target, restarts
        c = ctx.job.constraints
        self.max_nodes, self.per_zone = c.node_count or c.max_nodes or DEFAULT_MAX_NODES, c.max_nodes_per_zone
        self.cache: dict[tuple[int, ...], tuple[float, float]] = {}

    def allowed(self, x: tuple[int, ...]) -> bool:
        if not 0 < sum(x) <= self.max_nodes or min(x) < 0:
            return False
        zones: dict[str, int] = {}
        for o, n in zip(self.offers, x, strict=True):
            zones[o.location.zone_scope] = zones.get(o.location.zone_scope, 0) + n
        if self.per_zone is not None and max(zones.values()) > self.per_zone:
            return False
        most = self.ctx.job.constraints.max_gpus_per_zone
        if most is not None:
            gpus: dict[str, int] = {}
            for o, n in zip(self.offers, x, strict=True):
                gpus[o.location.zone_scope] = gpus.get(o.location.zone_scope, 0) + n * o.shape.accelerator_count
            return max(gpus.values()) <= most
        return True

    def score(self, x: tuple[int, ...]) -> tuple[float, float]:
        """(shortfall from the target, $/h); without a target: (0, −samples/s)."""
        if x not in self.cache:
            groups = [NodeGroup(o, n) for o, n in zip(self.offers, x, strict=True) if n]
            e = self.predict(self.ctx, groups)
            if self.target is None:
                self.cache[x] = (0.0, -e.goodput_samples_per_s)
            else:
                short = max(0.0, self.target - e.goodput_samples_per_s) / self.target
                self.cache[x] = (short if short > 1e-9 else 0.0, e.usd_per_hour)
        return self.cache[x]

    def neighbours(self, x: tuple[int, ...]):
        n = len(x)
        for i in range(n):
            for delta in (1, -1):
                y = list(x)
                y[i] += delta
                yield tuple(y)
            for j in range(n):
                if i != j and x[i]:
                    y = list(x)
                    y[i] -= 1
                    y[j] += 1
                    yield tuple(y)

    def climb(self, x: tuple[int, ...]) -> tuple[tuple[float, float], tuple[int, ...]]:
        best = self.score(x)
        while True:
            moves = [(self.score(y), y) for y in self.neighbours(x) if self.allowed(y)]
            if not moves or min(moves)[0] >= best:
                return best, x
            best, x = min(moves)

    def best(self, rng: random.Random) -> tuple[tuple[float, float], tuple[int, ...]]:
        found = None
        for _ in range(self.restarts):
            while True:  # a few offers, a few nodes each
                x = [0] * len(self.offers)
                for i in rng.sample(range(len(self.offers)), min(len(self.offers), rng.randint(1, 3))):
                    x[i] = rng.randint(1, self.per_zone or 4)
                x = tuple(x)
                if self.allowed(x):
                    break
            result = self.climb(x)
            found = result if found is None or result < found else found
        return found

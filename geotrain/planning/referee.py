"""The planner's referee: what a mix of candidates trains and costs by the perf model.

The solver's MIP is a relaxation of these figures and certifies its answers against them
(``geotrain.solver.model``); the plan reports the same figures, so what the solver calls optimal is
optimal for what the plan says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from geotrain.domain import NodeGroup, Offer, SyncSettings
from geotrain.perf.model import DataSource, Estimate, PerfModel
from geotrain.perf.workloads import Workload
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

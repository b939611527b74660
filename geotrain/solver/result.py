"""What the solver returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class SolveStatus(StrEnum):
    OPTIMAL = "optimal"
    FEASIBLE = "feasible"  # a solution, not proven optimal (time limit)
    INFEASIBLE = "infeasible"
    TIME_LIMIT = "time_limit"  # no solution within the time limit
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Solution:
    """One MIP solve at one target rate."""

    status: SolveStatus
    counts: tuple[int, ...] | None
    usd_per_hour: float | None  # the referee's $/h of the mix
    bound_usd_per_hour: float | None  # no admissible mix reaching the target costs less (by the referee)
    wall_s: float
    iterations: int  # MIP solves, counting re-solves after adding lazy rows or cuts
    target_samples_per_s: float
    samples_per_s: float | None = None  # the referee's samples/s of the mix

    @property
    def found(self) -> bool:
        return self.counts is not None


@dataclass(frozen=True, slots=True)
class SearchResult:
    """The outcome of an objective: the chosen solution and how it was certified."""

    objective: str
    solution: Solution | None  # None: infeasible
    samples_per_s: float | None  # the referee's throughput of the chosen mix
    usd_per_hour: float | None  # the referee's $/h of the chosen mix
    status: SolveStatus
    gap: float  # relative: MIP gap for min_cost; the parametric search's bracket otherwise
    wall_s: float
    solves: int
    frontier: tuple[tuple[float, float], ...] = field(default_factory=tuple)  # (samples/s, $/h)
    bound: float | None = None  # what no admissible mix beats, in ``bound_unit``: the certificate of ``gap``
    bound_unit: str = ""  # usd_per_hour (min_cost), samples_per_s (max_throughput), usd_per_million_samples

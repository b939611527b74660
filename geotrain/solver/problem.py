"""Plain data the solver works on: candidates, limits, the communication oracle and the referee.

The solver knows nothing of pandas, providers or the perf model's classes: the planner turns
offers into :class:`Candidate` rows and hands over a :class:`CommOracle` that answers, for a node
count ``k`` and the places in use, how long the communication terms of a round take and what a
byte costs between two places. A *place* is a candidate's zone (``Candidate.zone``: the region for
region-wide offers, the site for on-prem machines); zones of one region share their network figures
but not their prices. The :class:`Referee` says what a mix really trains and costs (the planner's
is the perf model); the MIP is a relaxation of it, and a mix is called optimal only when the
referee agrees (``geotrain.solver.model``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from geotrain.errors import InputError

STRATEGIES = ("hivemind", "allreduce", "local-sgd", "ma", "asgd-ga")
AVERAGING = ("local-sgd", "ma")  # H (or K) in-region steps, then the region leaders' ring


@dataclass(frozen=True, slots=True)
class Candidate:
    """One offer the solver may buy nodes of."""

    key: str  # the offer id
    region: str  # "cloud/region", or "onprem/site"
    zone: str  # "cloud/region/zone" (the region for region-wide offers)
    cloud: str
    market: str  # spot | on_demand | owned
    price_usd_per_hour: float
    rate: float  # samples/s of one node training alone
    goodput: float  # share of a node's time that trains: 1 − interruptions/h × recovery h, in (0, 1]
    samples_per_step: int  # one node's micro-batch (all its accelerators)
    accelerators: int  # counted against quotas (1 for a CPU-only node)
    capacity: int  # at most this many nodes
    minimum: int = 0  # at least this many (nodes kept on re-planning, must-use on-prem machines)
    data_usd_per_hour: float = 0.0  # egress for reading training data, one node at full speed
    pool: str = ""  # the capacity pool its accelerators come from (``Limits.pool_caps``); "" none
    step_efficiency: float = 1.0  # hivemind: the share of its rate a node keeps inside the protocol, (0, 1]
    host_factor: float = 1.0  # hivemind: its host's slowdown of the round overhead (≥ 1; the oracle's is 1)

    def __post_init__(self) -> None:
        if not (self.rate > 0 and 0 < self.goodput <= 1 and self.samples_per_step > 0):
            raise InputError(f"candidate {self.key}: rate, goodput and samples_per_step must be positive")
        if not (0 < self.step_efficiency <= 1 and self.host_factor >= 1):
            raise InputError(f"candidate {self.key}: step_efficiency must be in (0, 1] and host_factor at least 1")
        if self.price_usd_per_hour < 0 or self.data_usd_per_hour < 0:
            raise InputError(f"candidate {self.key}: prices must not be negative")
        if not 0 <= self.minimum <= self.capacity:
            raise InputError(f"candidate {self.key}: minimum {self.minimum} is not within 0..capacity {self.capacity}")

    @property
    def usd_per_good_sample_s(self) -> float:
        """$/h per good sample/s at full speed, ``(p + d) / (s·g)``: what ranks candidates for a mix."""
        return (self.price_usd_per_hour + self.data_usd_per_hour) / (self.rate * self.goodput)

    @property
    def site(self) -> str | None:
        cloud, _, name = self.region.partition("/")
        return name if cloud == "onprem" else None


@dataclass(frozen=True, slots=True)
class Evaluation:
    """What a mix trains and costs by the referee: samples/s after expected interruptions, and $/h
    (nodes, synchronisation egress and data egress) while it trains at that speed."""

    samples_per_s: float
    usd_per_hour: float


class Referee(Protocol):
    """The figures a plan reports for a mix (counts per candidate)."""

    def evaluate(self, counts: tuple[int, ...]) -> Evaluation: ...


class CommOracle(Protocol):
    """Communication terms of one strategy, in seconds per round, for ``k`` nodes in total.

    ``place_s(p, k)``: the term inside place p (hivemind: a node's own egress or a pair inside p;
    the others: a ring over k nodes on p's own link; ``slowest_place_s``: that ring on the slowest machine
p may have, an upper bound where ``place_s`` is a lower one). ``pair_s(a, b, k)``: between places a and b
    (hivemind and allreduce: k nodes in all; local-sgd and ma: a ring of k region leaders; asgd-ga: one
    push, k unused). ``broadcast_s(p)``: one copy of the parameters over p's own link. ``pair_share(k)``:
    hivemind, what one node sends another per round as a share of ``2W``: ``1/k`` in one group of every
    node, ``(m − 1)/((k − 1)·m)`` in groups of ``m = min(k, G)`` (so ``k·pair_share(k)`` is 1 up to G nodes
    and at least ``(G − 1)/G`` beyond)."""

    strategy: str
    samples_per_round: float  # hivemind: the target batch size
    local_steps: int  # local-sgd: H; ma: K (its averaging pushes, one per step)
    accumulation_steps: int  # asgd-ga: A
    payload_bytes: float  # W: one copy of the parameters on the wire
    # allreduce: a step overlaps its ring with the backward pass (``β`` of the step) but for the last
    # bucket (``b`` of the gradients): ``step_s(τ, T) = max(τ + b·T, (1 − β)·τ + T)``
    bucket_share: float
    backward_share: float

    def step_s(self, compute_s: float, ring_s: float) -> float: ...

    def overhead_s(self, k: int) -> float: ...

    def pair_share(self, k: int) -> float: ...

    def place_s(self, place: str, k: int) -> float: ...

    def slowest_place_s(self, place: str, k: int) -> float: ...

    def pair_s(self, a: str, b: str, k: int) -> float: ...

    def broadcast_s(self, place: str) -> float: ...

    def site_s(self, site: str, inside: int, k: int) -> float | None: ...

    def usd_per_byte(self, src: str, dst: str) -> float: ...


@dataclass(frozen=True, slots=True)
class Limits:
    """Constraints on the mix. None = no limit."""

    max_nodes: int = 64
    min_nodes: int | None = None  # at least this many (with max_nodes: exactly, for a pinned node count)
    max_regions: int | None = None
    max_nodes_per_zone: int | None = None
    max_accelerators_per_zone: int | None = None
    max_zone_share: float | None = None
    max_spot_share: float | None = None
    budget_usd_per_hour: float | None = None
    min_samples_per_s: float | None = None  # a throughput floor (deadline, or a target kept as a constraint)
    quotas: tuple[tuple[str, int], ...] = ()  # (cloud or "cloud/region", accelerators)
    pool_caps: tuple[tuple[str, int], ...] = ()  # (pool, accelerators that can be had at once)

    def __post_init__(self) -> None:
        if self.max_nodes < 1:
            raise InputError("max_nodes must be at least 1")
        if self.min_nodes is not None and not 1 <= self.min_nodes <= self.max_nodes:
            raise InputError(f"min_nodes must be from 1 to max_nodes ({self.max_nodes}), got {self.min_nodes}")
        for name in ("max_zone_share", "max_spot_share"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= 1:
                raise InputError(f"{name} must be within 0..1")


@dataclass(frozen=True, slots=True)
class Problem:
    candidates: tuple[Candidate, ...]
    oracle: CommOracle
    limits: Limits = field(default_factory=Limits)
    referee: Referee | None = None  # None: the solver's own model (``semantics.ModelReferee``)

    def __post_init__(self) -> None:
        if self.oracle.strategy not in STRATEGIES:
            raise InputError(f"strategy {self.oracle.strategy!r} is not one of {', '.join(STRATEGIES)}")
        keys = [c.key for c in self.candidates]
        if len(set(keys)) != len(keys):
            raise InputError("candidate keys must be unique")

    @property
    def regions(self) -> list[str]:
        return sorted({c.region for c in self.candidates})

    @property
    def places(self) -> list[str]:
        """Places in ring order: by region, then zone (the order the runtime's ring visits them)."""
        return sorted({c.zone for c in self.candidates}, key=place_order)

    @property
    def node_cap(self) -> int:
        """The largest node count the model considers."""
        return max(1, min(self.limits.max_nodes, sum(c.capacity for c in self.candidates)))

    @property
    def min_samples_per_step(self) -> int:
        return min(c.samples_per_step for c in self.candidates)

    @property
    def max_samples_per_step(self) -> int:
        return max(c.samples_per_step for c in self.candidates)


def place_order(place: str) -> tuple[str, ...]:
    """``cloud/region/zone`` as a tuple: a region-wide place ("cloud/region") comes before its zones."""
    return tuple(place.split("/"))


def share(k: int) -> float:
    return 2 * (k - 1) / k


def finite(value: float) -> bool:
    return not (math.isinf(value) or math.isnan(value))


def counts_by(candidates: Sequence[Candidate], counts: Sequence[int], attribute: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for c, n in zip(candidates, counts, strict=True):
        if n:
            key = getattr(c, attribute)
            out[key] = out.get(key, 0) + n
    return out

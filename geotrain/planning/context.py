"""The planning kernel: what one planning run builds once (``PlanningContext``), how it is asked for
(``PlanOptions``), and the few functions every part of the planner judges a mix with: the perf
model's figures for it (``predict_groups``, ``estimate_of``, ``totals_of``), whether it keeps the goal
(``keeps_the_goal``) and how it ranks (``objective_score``). ``planning.planner`` builds the context and
runs the search; the baselines, fallbacks, trade-off and explanations import this module, not it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from geotrain.domain import JobSpec, NodeGroup, Objective, Offer, PlanTotals
from geotrain.perf.describe import bottleneck_words
from geotrain.perf.model import DataSource, Estimate, PerfModel
from geotrain.perf.workloads import Workload
from geotrain.planning.candidates import CandidateSet, goodput_of
from geotrain.pricing.capacity import CapacityModel
from geotrain.pricing.outliers import as_planned
from geotrain.pricing.snapshot import PriceSnapshot
from geotrain.solver.problem import Limits, Problem
from geotrain.solver.search import Searcher, SearchProgress

DEFAULT_MAX_NODES = 64


@dataclass(frozen=True, slots=True)
class PlanOptions:
    """How to plan (the job says what). ``provider`` ``"local"``: the nodes will be the local
    provider's processes on this machine, so the plan is predicted with this machine's rates
    (``geotrain.perf.host``); None: the offers' own hardware, as the clouds sell it."""

    backend: str = "CBC"
    recovery_h: float = 0.25  # work lost per interruption (since the last checkpoint) + restart
    provider: str | None = None
    tolerance: float = 1e-3
    frontier_points: int = 6
    time_limit_s: float = 60.0  # for the whole plan: search, frontier, baselines (the search gets what the rest leave)
    frontier_time_limit_s: float = 3.0  # the frontier is a sketch: bounded work
    blocked: frozenset[str] = frozenset()  # zone/region scopes or offer ids not to use
    keep: dict[str, int] = field(default_factory=dict)  # offer id -> nodes that must stay (re-planning)
    unknown_interruptions_per_hour: float | None = None  # default: median of the snapshot's known spot rates
    progress: Callable[[SearchProgress], None] | None = None  # hears of each solve (``solver.search``)
    allow_below_target: bool = False  # a given mix (``plan_for_nodes``) that misses the goal is planned anyway
    capacity: CapacityModel | None = None  # the capacity model (None: the bundled one; a replay's: its past)
    raw_prices: bool = False  # plan on the listed prices, low unconfirmed listings included (``pricing.outliers``)

    def capacity_model(self) -> CapacityModel:
        return self.capacity or CapacityModel.bundled()


@dataclass
class PlanningContext:
    """Everything one planning run builds once and reuses (objective, frontier, baseline, explanations)."""

    job: JobSpec
    workload: Workload
    perf: PerfModel
    candidates: CandidateSet
    problem: Problem
    data: DataSource | None
    options: PlanOptions

    def searcher(self, limits: Limits | None = None) -> Searcher:
        """A search of this problem (or of it under other ``limits``) within the plan's time limit, less
        what the frontier may take after it."""
        problem = self.problem if limits is None else replace(self.problem, limits=limits)
        options = self.options
        # the frontier's time, and a twentieth for what follows the search (fallbacks, the trade-off)
        reserve = (options.frontier_time_limit_s if options.frontier_points else 0.0) + options.time_limit_s / 20
        return Searcher(problem, options.backend, options.tolerance, max(1.0, options.time_limit_s - reserve),
                        progress=options.progress)


def keeps_the_goal(ctx: PlanningContext, goodput_samples_per_s: float, usd_per_hour: float) -> bool:
    """Whether a mix with these perf-model figures meets the job's target (min_cost), throughput floor
    (deadline) and budget."""
    job, limits = ctx.job, ctx.problem.limits
    floor = max(limits.min_samples_per_s or 0.0,
                job.target_samples_per_s or 0.0 if job.objective is Objective.MIN_COST else 0.0)
    if goodput_samples_per_s <= 0 or goodput_samples_per_s < floor * (1 - 1e-6):
        return False
    return limits.budget_usd_per_hour is None or usd_per_hour <= limits.budget_usd_per_hour * (1 + 1e-6)


def objective_score(ctx: PlanningContext, rate: float, usd_per_hour: float) -> tuple[float, float]:
    """Smaller is better by the job's objective: min_cost $/h; max_throughput samples/s, then $/h;
    otherwise $/sample."""
    objective = ctx.job.objective
    if objective is Objective.MIN_COST:
        return (usd_per_hour, 0.0)
    if objective is Objective.MAX_THROUGHPUT:
        return (-rate, usd_per_hour)
    return (usd_per_hour / rate, 0.0)


def counts_of(ctx: PlanningContext, groups: Sequence[NodeGroup]) -> tuple[int, ...]:
    """The solver's count vector of node groups (each group's offer is one of the candidates)."""
    index = {c.key: i for i, c in enumerate(ctx.problem.candidates)}
    counts = [0] * len(index)
    for g in groups:
        counts[index[g.offer.offer_id]] += g.count
    return tuple(counts)


def estimate_of(ctx: PlanningContext, groups: Sequence[NodeGroup]) -> Estimate:
    """The referee's figures for groups of the candidates (cached: a baseline is evaluated once for
    the baselines, the search's start and the fallback)."""
    return ctx.problem.referee.estimate(counts_of(ctx, groups))


def groups_of(ctx: PlanningContext, counts: tuple[int, ...]) -> list[NodeGroup]:
    return [NodeGroup(ctx.candidates.offers[c.key], n) for c, n in zip(ctx.problem.candidates, counts, strict=True) if n]


def predict_groups(ctx: PlanningContext, groups: list[NodeGroup]) -> Estimate:
    """The perf model's figures for a mix, with each node's goodput: what the plan reports (for a
    solved mix these equal the referee's, ``planning.referee``)."""
    default = ctx.candidates.default_interruptions_per_hour
    goodputs = [goodput_of(g.offer, default, ctx.options.recovery_h) for g in groups]
    return ctx.perf.predict(ctx.workload, groups, ctx.job.sync, ctx.data, goodputs=goodputs)


def totals_of(ctx: PlanningContext, groups: list[NodeGroup], estimate: Estimate) -> PlanTotals:
    default = ctx.candidates.default_interruptions_per_hour
    interruptions = sum(g.count * (g.offer.interruption.interruptions_per_hour
                                   if g.offer.interruption.interruptions_per_hour is not None
                                   else (default if g.offer.market.value == "spot" else 0.0)) for g in groups)
    granularity = estimate.granularity if estimate.granularity != float("inf") else None
    return PlanTotals(
        samples_per_s=estimate.samples_per_s,
        goodput_samples_per_s=estimate.goodput_samples_per_s if estimate.goodput_samples_per_s is not None
        else estimate.samples_per_s,
        time_per_round_s=estimate.time_per_round_s, granularity=granularity,
        compute_usd_per_hour=estimate.compute_usd_per_hour, egress_usd_per_hour=estimate.egress_usd_per_hour,
        data_egress_usd_per_hour=estimate.data_egress_usd_per_hour,
        usd_per_million_samples=estimate.usd_per_million_samples, interruptions_per_hour=interruptions,
        bottleneck=bottleneck_words(estimate),
    )


def planning_offers(snapshot: PriceSnapshot, options: PlanOptions) -> list[Offer]:
    """The snapshot's offers as plans price them: a listing far below its type's price elsewhere that
    nothing recent confirms at that price (``pricing.outliers``), unless ``options.raw_prices``."""
    offers = list(snapshot.offers())
    if options.raw_prices:
        return offers
    return as_planned(offers)

"""``make_plan``: job spec + price snapshot (+ on-prem inventory) → the best mix, as a :class:`Plan`.

The planner turns offers into solver candidates (``planning.candidates``), the perf model into the
solver's communication oracle (``planning.oracle``), runs the objective (``solver.search``), and
evaluates the chosen mix — and the best single-region homogeneous choice for comparison — with the
perf model, whose figures are what the plan reports.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from geotrain.clouds.geography import continent_of
from geotrain.domain import (
    CLOUD_ONPREM, Baseline, BaselineKind, JobSpec, Location, NodeGroup, Objective, Offer, Plan, PlanItem, SolverReport,
    SyncStrategyName, BASELINE_WORDS,
)
from geotrain.errors import InfeasibleError, InputError, SearchCutShortError
from geotrain.perf.describe import bottleneck_words
from geotrain.perf.host import LocalHost
from geotrain.perf.model import DataSource, Estimate, PerfModel, bundled_fit
from geotrain.perf.network import LinkOverride, SitePlacement
from geotrain.perf.rates import RateTable
from geotrain.perf.workloads import WorkloadRegistry
from geotrain.planning.answers import budget_use_of, completion_of, goal_misses
from geotrain.planning.baseline import baselines_for
from geotrain.planning.candidates import build_candidates
from geotrain.planning.chance import launch_chance_words
from geotrain.planning.context import (  # noqa: F401 - PlanOptions, predict_groups: the planner's API too
    DEFAULT_MAX_NODES, PlanningContext, PlanOptions, counts_of, estimate_of, groups_of, keeps_the_goal, planning_offers,
    predict_groups, totals_of,
)
from geotrain.planning.explain import cut_short_words, explain_infeasible
from geotrain.planning.exposure import plaintext_words
from geotrain.planning.fallback import fallbacks_of
from geotrain.planning.names import check_names
from geotrain.planning.oracle import PerfOracle
from geotrain.planning.pools import with_pools
from geotrain.planning.referee import PerfReferee
from geotrain.planning.shape import plan_for_shape
from geotrain.planning.tradeoff import why_homogeneous
from geotrain.pricing.egress import EgressPrices
from geotrain.pricing.inventory import Inventory, inventory_table
from geotrain.pricing.nodespec import parse_nodes, resolve_nodes
from geotrain.pricing.outliers import ROBUST_MARK
from geotrain.pricing.snapshot import PriceSnapshot, offers_from_table, staleness_words
from geotrain.providers.base import LOCAL_PROVIDER
from geotrain.solver.problem import Limits, Problem
from geotrain.solver.result import SearchResult, SolveStatus
from geotrain.solver.search import Searcher
from geotrain.strategies import entry


def make_plan(job: JobSpec, snapshot: PriceSnapshot, *, inventory: Inventory | None = None,
              perf: PerfModel | None = None, registry: WorkloadRegistry | None = None,
              options: PlanOptions = PlanOptions()) -> Plan:
    if not job.modelled:  # a task file without a workload: its shape, on price alone
        return plan_for_shape(job, snapshot, inventory=inventory, options=options)
    started = time.perf_counter()
    ctx = build_context(job, snapshot, inventory=inventory, perf=perf, registry=registry, options=options)
    searcher = ctx.searcher()
    searcher.announce("baselines")
    clock = time.perf_counter()
    baselines, missing = baselines_for(ctx)
    baselines_s = time.perf_counter() - clock
    for baseline in baselines:  # the search starts from the baselines: it only looks for cheaper mixes
        searcher.evaluate(counts_of(ctx, baseline.groups))
    result = run_objective(ctx, searcher)
    if result.solution is None:
        if result.status is SolveStatus.TIME_LIMIT:  # nothing found, nothing proven: say so, not "out of reach"
            raise SearchCutShortError(cut_short_words(ctx, searcher, time.perf_counter() - started))
        raise InfeasibleError(explain_infeasible(ctx, result))
    groups = groups_of(ctx, result.solution.counts)
    estimate = ctx.problem.referee.estimate(result.solution.counts)
    frontier = ()
    clock = time.perf_counter()
    if options.frontier_points:
        searcher.restart_clock(options.frontier_time_limit_s)
        frontier = searcher.frontier(options.frontier_points)
    frontier_s = time.perf_counter() - clock
    notes: tuple[str, ...] = ()
    solved = (f"the solver's mix ({_mix_words(groups)}: ${estimate.usd_per_hour:,.3f}/h, "
              f"{totals_of(ctx, groups, estimate).goodput_samples_per_s:,.1f} samples/s by the perf model)")
    for baseline in baselines:
        better = baseline_if_better(ctx, groups, estimate, baseline)
        if better is None:
            continue
        # the solver's model and the perf model disagree on this mix: plan the baseline, which the perf
        # model prices better under the same limits, and say so (the plan is never worse than one)
        notes = (f"{solved} did worse than the {BASELINE_WORDS[baseline.kind]} choice, which is planned instead",)
        groups, estimate = better
        result = replace(result, status=SolveStatus.FEASIBLE)
    final = totals_of(ctx, groups, estimate)
    if not keeps_the_goal(ctx, final.goodput_samples_per_s, estimate.usd_per_hour):
        # the solver's own model overstates this mix (it does not yet see every term of the perf model)
        # and no simpler choice meets the goal either: an honest "out of reach", not a wrong plan
        budget = ctx.problem.limits.budget_usd_per_hour
        raise InfeasibleError(
            f"{solved} misses the job's goal (target or deadline rate, budget"
            + (f" ${budget:,.2f}/h" if budget is not None else "") + "), though the solver's own model says it "
            f"meets it ({job.strategy.value}); no single-zone, single-region or identical-nodes choice meets it "
            "either; lower the target, raise the budget, or try another --strategy")
    plan = with_fallbacks(ctx, assemble(ctx, snapshot, result, groups, estimate, frontier, baselines, missing), groups)
    use = budget_use_of(ctx.problem, counts_of(ctx, groups), final.usd_per_hour, final.goodput_samples_per_s,
                        tolerance=options.tolerance,
                        describe=lambda counts: bottleneck_words(ctx.problem.referee.estimate(counts)))
    timing = replace(plan.solver, total_s=time.perf_counter() - started, frontier_s=frontier_s,
                     baselines_s=baselines_s)
    exposed = plaintext_words(g.offer.location for g in groups) if options.provider != "local" else None
    return replace(plan, solver=timing, assumptions=plan.assumptions + notes + ((exposed,) if exposed else ()),
                   budget_use=use, tradeoff=tradeoff_of(ctx, groups))


def tradeoff_of(ctx: PlanningContext, groups: list[NodeGroup]) -> str:
    if ctx.options.provider == LOCAL_PROVIDER:
        return ""  # every offer trains at this machine's rate: a trade-off would say nothing of the clouds
    return why_homogeneous(ctx, groups) or ""


def with_fallbacks(ctx: PlanningContext, plan: Plan, groups: list[NodeGroup]) -> Plan:
    return replace(plan, fallbacks=fallbacks_of(ctx, groups))


def baseline_if_better(ctx: PlanningContext, groups: list[NodeGroup], estimate: Estimate,
                       baseline: Baseline | None) -> tuple[list[NodeGroup], Estimate] | None:
    """The baseline's groups and estimate when, by the perf model, it serves the job's objective better
    than the solved mix and keeps its limits; None otherwise."""
    if baseline is None or any(c.minimum for c in ctx.problem.candidates):
        return None  # nodes that must stay (kept, or on-prem machines that must be used): not a baseline's
    job = ctx.job
    base_groups = list(baseline.groups)
    base = estimate_of(ctx, base_groups)
    mine, theirs = totals_of(ctx, groups, estimate), totals_of(ctx, base_groups, base)
    if not keeps_the_goal(ctx, theirs.goodput_samples_per_s, base.usd_per_hour):
        return None
    if not keeps_the_goal(ctx, mine.goodput_samples_per_s, estimate.usd_per_hour):
        return base_groups, base  # the solver's mix misses the target or the budget by the perf model
    if job.objective is Objective.MIN_COST:
        wins = base.usd_per_hour < estimate.usd_per_hour * (1 - 1e-9)
    elif job.objective is Objective.MAX_THROUGHPUT:  # rates within the tolerance tie: the cheaper wins
        tolerance = ctx.options.tolerance
        wins = (theirs.goodput_samples_per_s > mine.goodput_samples_per_s * (1 + tolerance)
                or (theirs.goodput_samples_per_s >= mine.goodput_samples_per_s * (1 - tolerance)
                    and base.usd_per_hour < estimate.usd_per_hour * (1 - 1e-9)))
    else:
        wins = base.usd_per_million_samples < estimate.usd_per_million_samples * (1 - 1e-9)
    return (base_groups, base) if wins else None


def _mix_words(groups: list[NodeGroup]) -> str:
    return " + ".join(f"{g.count} x {g.offer.offer_id}" for g in groups)


def plan_for_nodes(job: JobSpec, snapshot: PriceSnapshot, nodes: str, *, inventory: Inventory | None = None,
                   perf: PerfModel | None = None, options: PlanOptions = PlanOptions()) -> Plan:
    """A plan of a mix the user chose (node syntax of ``geotrain.pricing.nodespec``), evaluated like a
    solved one, so that it can be launched and compared: no solver runs."""
    requests = parse_nodes(nodes)
    offers = planning_offers(snapshot, options)
    if inventory is not None:
        offers += offers_from_table(inventory_table(inventory))
    groups = resolve_nodes(requests, offers)
    if not job.modelled:  # a task file without a workload: the given mix, priced
        return plan_for_shape(job, snapshot, inventory=inventory, options=options, groups=groups)
    ctx = build_context(job, snapshot, inventory=inventory, perf=perf, options=options)
    estimate = predict_groups(ctx, groups)
    misses = goal_misses(job, totals_of(ctx, groups, estimate))
    if misses and not options.allow_below_target:
        raise InfeasibleError(f"the given mix ({_mix_words(groups)}) misses the job's goal: {'; '.join(misses)}; "
                              "give more or faster nodes, or plan it anyway with --allow-below-target")
    given = SearchResult("given", None, estimate.samples_per_s, estimate.usd_per_hour, SolveStatus.OPTIMAL, 0.0, 0.0, 0)
    baselines, missing = baselines_for(ctx)
    plan = with_fallbacks(ctx, assemble(ctx, snapshot, given, groups, estimate, (), baselines, missing), groups)
    use = budget_use_of(ctx.problem, None, estimate.usd_per_hour, plan.totals.goodput_samples_per_s, tolerance=0.0)
    return replace(plan, solver=replace(plan.solver, status="given", candidates=0, dominated=0), misses=misses,
                   budget_use=use)


def build_context(job: JobSpec, snapshot: PriceSnapshot, *, inventory: Inventory | None = None,
                  perf: PerfModel | None = None, registry: WorkloadRegistry | None = None,
                  options: PlanOptions = PlanOptions()) -> PlanningContext:
    registry = registry or WorkloadRegistry.bundled()
    workload = registry.for_job(job)
    offers = planning_offers(snapshot, options)
    sites = {}
    if inventory is not None:
        offers += offers_from_table(inventory_table(inventory))
        sites = site_placements(inventory)
    check_names(job, offers)
    if perf is None:
        rates = RateTable.bundled().with_file(job.rates_file) if job.rates_file else RateTable.bundled()
        egress = EgressPrices.bundled().with_file(job.egress_file) if job.egress_file else EgressPrices.bundled()
        perf = PerfModel(rates=rates, egress=egress)
    if sites:
        perf = perf.with_sites(sites)
    node_cap = job.constraints.node_count or job.constraints.max_nodes or DEFAULT_MAX_NODES
    if options.provider == LOCAL_PROVIDER:
        host = LocalHost.measured()
        perf = perf.on_local_host(host)
        # more local nodes than cores only share them (and add traffic): never worth planning
        node_cap = job.constraints.node_count or job.constraints.max_nodes or host.cores
    elif options.provider is not None:
        raise InputError(f"provider {options.provider!r}: plans are made for the offers' own hardware or for "
                         f"{LOCAL_PROVIDER!r} (this machine)")
    data = data_source(job)
    capacity_of = None
    confidence = job.constraints.capacity_confidence
    if confidence is not None:
        if not 0 < confidence <= 1:
            raise InputError(f"--capacity-confidence: {confidence!r} is not within (0, 1]")
        model = options.capacity_model()
        capacity_of = lambda offer: model.cap(offer, confidence)  # noqa: E731
    cands = build_candidates(
        offers, job=job, workload=workload, perf=perf, node_cap=node_cap, recovery_h=options.recovery_h,
        data=data, keep=options.keep, blocked=options.blocked,
        default_rate=options.unknown_interruptions_per_hour, capacity_of=capacity_of,
    )
    places: dict[str, Location] = {}
    for offer in cands.offers.values():
        places.setdefault(offer.location.zone_scope, offer.location)
    nics, floors = place_nics(places, cands.offers.values(), perf.nic_gbps)
    sync = job.sync
    oracle = PerfOracle(
        strategy=sync.strategy.value, places=places, network=perf.network, egress=perf.egress,
        payload_bytes=workload.wire_bytes(sync.precision),
        fit=bundled_fit(), workload=workload, samples_per_round=sync.target_batch_size,
        local_steps=sync.averaging_pushes if sync.strategy is SyncStrategyName.MA else sync.local_steps,
        accumulation_steps=sync.accumulation_steps,
        uplinks={s.site: s.uplink_gbps for s in inventory.sites} if inventory else None,
        nccl=perf.nccl, place_nic_gbps=nics, place_nic_floor_gbps=floors, group_size=sync.group_size,
    )
    limits = limits_of(job, node_cap)
    if confidence is not None:
        cands, limits = with_pools(cands, limits, model, confidence)
    referee = PerfReferee(perf, workload, sync, cands.candidates, cands.offers, data)
    problem = Problem(cands.candidates, oracle, limits, referee)
    return PlanningContext(job, workload, perf, cands, problem, data, options)


def site_placements(inventory: Inventory) -> dict[str, SitePlacement]:
    """Where each on-prem site of the inventory sits on the network."""
    source = f"measured link in the inventory ({Path(inventory.origin).name})"
    return {s.site: SitePlacement(s.uplink_gbps, s.near_region, s.single_stream_gbps, tuple(
        LinkOverride(f"{CLOUD_ONPREM}/{s.site}", link.to, link.single_stream_gbps, link.rtt_ms, source,
                     link.aggregate_gbps) for link in s.links)) for s in inventory.sites}


def data_source(job: JobSpec) -> DataSource | None:
    if job.dataset is None:
        return None
    d = job.dataset
    continent = continent_of(d.cloud, d.region)
    if continent is None:
        raise InputError(f"dataset.region: {d.cloud}/{d.region} is not a region geotrain knows")
    return DataSource(Location(d.cloud, d.region, "", continent), d.fetched_bytes_per_trained_sample)


def limits_of(job: JobSpec, node_cap: int) -> Limits:
    c = job.constraints
    floor = None
    if job.total_samples is not None and job.deadline_h is not None:
        floor = job.total_samples / (3600 * job.deadline_h)
    if c.node_count is not None:  # a pinned node count: exactly that many, whatever the other limits
        node_cap = c.node_count
    return Limits(
        max_nodes=node_cap, min_nodes=c.node_count, max_regions=c.max_regions,
        max_nodes_per_zone=c.max_nodes_per_zone,
        max_accelerators_per_zone=c.max_gpus_per_zone,
        max_zone_share=c.max_zone_share, max_spot_share=c.max_spot_share,
        budget_usd_per_hour=job.budget_usd_per_hour, min_samples_per_s=floor, quotas=c.quotas,
    )


def place_nics(places: dict[str, Location], offers, nic_gbps) -> tuple[dict, dict]:  # noqa: ANN001
    """Per place, its region's fastest and slowest NIC among the candidates (Gbit/s). A region's rings
    are priced at its lead place, so every place of it gets the region's figures: the fastest (None
    where a candidate has no figure, so is not capped) bounds a ring from below, the slowest with a
    figure (None where none has one) from above."""
    fastest: dict[str, float | None] = {}
    slowest: dict[str, float] = {}
    for offer in offers:
        region, nic = offer.location.region_scope, nic_gbps(offer)
        if nic is None:
            fastest[region] = None
            continue
        if region not in fastest or fastest[region] is not None:
            fastest[region] = max(nic, fastest.get(region) or 0.0)
        slowest[region] = min(nic, slowest.get(region, nic))
    return ({key: fastest.get(loc.region_scope) for key, loc in places.items()},
            {key: slowest.get(loc.region_scope) for key, loc in places.items()})


def run_objective(ctx: PlanningContext, searcher: Searcher) -> SearchResult:
    job = ctx.job
    if not ctx.problem.candidates:
        return SearchResult(job.objective.value, None, None, None, _infeasible(), 0.0, 0.0, 0)
    if job.objective is Objective.MIN_COST:
        if job.target_samples_per_s is None:
            raise InputError("objective min_cost needs a target throughput (--target-sps)")
        return searcher.min_cost(job.target_samples_per_s)
    if job.objective is Objective.MAX_THROUGHPUT:
        if job.budget_usd_per_hour is None:
            raise InputError("objective max_throughput needs a budget (--budget)")
        return searcher.max_throughput()
    if job.objective is Objective.MIN_COST_BY_DEADLINE and (job.total_samples is None or job.deadline_h is None):
        raise InputError("objective min_cost_by_deadline needs --samples and --deadline")
    return searcher.min_cost_per_sample()


def _infeasible():  # noqa: ANN202
    return SolveStatus.INFEASIBLE


def assemble(ctx: PlanningContext, snapshot: PriceSnapshot, result: SearchResult, groups: list[NodeGroup],
             estimate: Estimate, frontier, baselines: tuple[Baseline, ...] = (),  # noqa: ANN001
             missing: tuple[tuple[BaselineKind, str], ...] = ()) -> Plan:
    raw = [r.samples_per_s * g.count for g, r in zip(estimate.groups, estimate.rates, strict=True)]
    total = sum(raw)
    items = tuple(PlanItem(g.offer, g.count, estimate.samples_per_s * part / total)
                  for g, part in zip(estimate.groups, raw, strict=True))
    solver = SolverReport(
        objective=ctx.job.objective, status=result.status.value, gap=result.gap, wall_s=result.wall_s,
        solves=result.solves, backend=ctx.options.backend, candidates=len(ctx.problem.candidates),
        dominated=ctx.candidates.dominated, bound=result.bound, bound_unit=result.bound_unit,
    )
    created = datetime.now(timezone.utc).replace(microsecond=0)
    assumptions = assumptions_of(ctx, estimate)
    totals = totals_of(ctx, groups, estimate)
    digest = hashlib.sha256(json.dumps([snapshot.snapshot_id, ctx.job.name, [(i.offer.offer_id, i.count) for i in items],
                                        created.isoformat()]).encode()).hexdigest()[:12]
    return Plan(
        plan_id=f"plan-{digest}", created_at=created, snapshot_id=snapshot.snapshot_id, job=ctx.job, items=items,
        totals=totals, solver=solver,
        recovery_h=ctx.options.recovery_h, provider=ctx.options.provider, frontier=tuple(frontier),
        baselines=baselines, missing_baselines=missing, assumptions=assumptions,
        completion=completion_of(ctx.job, totals),
    )


def assumptions_of(ctx: PlanningContext, estimate: Estimate) -> tuple[str, ...]:
    minutes = ctx.options.recovery_h * 60
    if entry(ctx.job.sync.strategy).elastic:  # the others train on; the lost node's replacement joins them
        out = [f"an interruption costs {minutes:.0f} min of the lost node's work only (its replacement boots and "
               "joins the peers, who train on)"]
    else:
        out = [f"an interruption costs {minutes:.0f} min of a node's work (checkpoint + restart)"]
    bought = [g.offer.observed_at for g in estimate.groups if g.offer.market.value != "owned"]
    stale = staleness_words(max(bought), min(bought)) if bought else None
    if stale is not None:
        out.append(f"the planned offers' {stale}")
    for g in estimate.groups:
        if ROBUST_MARK in g.offer.source:
            out.append(f"{g.offer.offer_id}: {g.offer.source.split(ROBUST_MARK + ': ', 1)[1]}; planned at "
                       f"${g.offer.price_usd_per_hour:,.4g}/h (--raw-prices: as listed)")
    host = ctx.perf.host
    if host is not None:
        out.append(f"predicted for the local provider: every node is a process on this machine ({host.cores} cores"
                   + (f", shared by {estimate.nodes} nodes" if estimate.nodes > host.cores else "")
                   + f"), at its measured CPU rate, over loopback ({host.source}); prices and egress are the "
                   "offers' own; no single-region baseline")
    unknown = [g for g in estimate.groups if g.offer.market.value == "spot"
               and g.offer.interruption.interruptions_per_hour is None]
    if unknown:
        count = sum(g.count for g in unknown)
        out.append(f"{count} spot node{' has' if count == 1 else 's have'} no interruption figure; "
                   f"{ctx.candidates.default_interruptions_per_hour:.2g}/h assumed (median of known spot rates)")
    for basis, words in (("derived", "compute rates derived from measured ratios and scaling for "),
                         ("estimated", "compute rates estimated (no measurement of this accelerator) for ")):
        chosen = sorted({f"{r.accelerator}x{r.accelerator_count}" for r in estimate.rates if r.basis == basis})
        if chosen:
            out.append(words + ", ".join(chosen))
    no_rate = {reason.rsplit(" on ", 1)[1]: n for reason, n in ctx.candidates.skipped.items()
               if reason.startswith("no compute rate")}
    if no_rate:
        out.append(f"{sum(no_rate.values())} offers left out: no compute rate for {ctx.workload.name} on "
                   f"{', '.join(sorted(no_rate))} (add one with --rates)")
    for reason, count in sorted(ctx.candidates.skipped.items()):
        if not reason.startswith("no compute rate"):
            out.append(f"{count} offers left out: {reason}")
    if len({g.offer.location.zone_scope for g in estimate.groups}) > 1:  # traffic leaves a zone
        out += ctx.perf.egress.assumed_words(g.offer.location for g in estimate.groups)
    if host is None:  # the local provider's nodes are processes here: always had
        out.append(launch_chance_words(estimate.groups, ctx.options.capacity_model()))
    return tuple(out)

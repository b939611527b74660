"""Offers → the solver's candidates: filters, compute rates, goodput, data locality, dominance.

Goodput: a spot node loses, per hour, its expected interruptions × the recovery time (the work since
the last checkpoint plus the restart), so it trains ``1 − λ·t_rec`` of the time. Offers whose
interruption rate is unknown get a default (by default the median of the snapshot's known spot
rates; the plan says so).

Dominance (exact): inside one region and market (one zone, when a per-zone limit is set), an offer that is no more expensive, no slower, no
less reliable, no worse per step, uses no more quota, and can supply every node the plan could need,
makes the other one useless; the dominated offer is dropped before the MIP is built.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from geotrain.clouds.geography import launcher_may_go, named_places, needs_opt_in
from geotrain.pricing.images import image_gap
from geotrain.domain import CLOUD_ONPREM, JobSpec, Market, Offer, SyncStrategyName
from geotrain.errors import NotFoundError
from geotrain.perf.memory import MemoryTable, misfit
from geotrain.perf.model import DataSource, PerfModel, bundled_fit, samples_per_step
from geotrain.perf.workloads import Workload
from geotrain.solver.problem import Candidate

MIN_GOODPUT = 0.05


@dataclass(frozen=True, slots=True)
class CandidateSet:
    candidates: tuple[Candidate, ...]
    offers: dict[str, Offer]  # candidate key -> offer
    considered: int  # offers that passed the filters
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> count
    dominated: int = 0
    default_interruptions_per_hour: float = 0.0
    # the dominated candidates and their offers: never in the MIP, but where the launcher's fallbacks
    # may move a zone's nodes (a dominated offer in another zone is still another zone)
    alternates: tuple[tuple[Candidate, Offer], ...] = ()


def passes_filters(offer: Offer, job: JobSpec, blocked: frozenset[str]) -> bool:
    c = job.constraints
    loc = offer.location
    if c.clouds is not None and loc.cloud not in c.clouds and loc.cloud != CLOUD_ONPREM:
        return False
    if c.regions is not None and loc.cloud != CLOUD_ONPREM and not (
            loc.region in c.regions or loc.region_scope in c.regions):
        return False
    if c.continents is not None and loc.continent not in c.continents:
        return False
    if c.spot_only and offer.market == Market.ON_DEMAND:
        return False
    if c.accelerators is not None and not _accelerator_matches(offer.shape.accelerator, c.accelerators):
        return False
    if c.resources and offer.market != Market.OWNED and not any(r.matches(offer) for r in c.resources):
        return False
    if blocked and ({loc.cloud, loc.zone_scope, loc.region_scope, offer.offer_id} & blocked):
        return False
    # places a new account must opt in to (AWS opt-in regions, Local and Wavelength Zones): only where named
    if needs_opt_in(loc) is not None and not launcher_may_go(loc, named_places(job)):
        return False
    # a node that would boot an image its accelerator cannot use, unless the task names its own image
    return image_gap(offer) is None or c.image_for(offer) is not None


def _accelerator_matches(name: str | None, wanted: frozenset[str]) -> bool:
    """``A100`` matches ``A100`` and ``A100-80GB`` (as the catalog filter does); case-insensitive."""
    if name is None:
        return "CPU" in {w.upper() for w in wanted}
    lower = name.lower()
    return any(lower == w.lower() or lower.startswith(w.lower() + "-") for w in wanted)


def default_interruption_rate(offers: Iterable[Offer]) -> float:
    known = [o.interruption.interruptions_per_hour for o in offers
             if o.market == Market.SPOT and o.interruption.interruptions_per_hour is not None]
    return statistics.median(known) if known else 0.0


def goodput_of(offer: Offer, default_rate: float, recovery_h: float) -> float:
    """The share of its time a node of ``offer`` trains: ``1 − λ·t_rec`` (at least ``MIN_GOODPUT``),
    λ its interruptions per hour (spot: the offer's, else ``default_rate``; others 0)."""
    if offer.market == Market.SPOT:
        lam = offer.interruption.interruptions_per_hour
        lam = default_rate if lam is None else lam
    else:
        lam = 0.0
    return max(MIN_GOODPUT, 1.0 - lam * recovery_h)


def build_candidates(offers: Sequence[Offer], *, job: JobSpec, workload: Workload, perf: PerfModel,
                     node_cap: int, recovery_h: float, data: DataSource | None = None,
                     keep: Mapping[str, int] | None = None, blocked: frozenset[str] = frozenset(),
                     default_rate: float | None = None,
                     capacity_of: Callable[[Offer], int] | None = None) -> CandidateSet:
    """``capacity_of``: at most this many nodes of an offer (the capacity model at a confidence)."""
    keep = dict(keep or {})
    default = default_interruption_rate(offers) if default_rate is None else default_rate
    # a node trains q·rate inside Hivemind (q: its step efficiency): that is what it reads from the data
    hivemind = job.strategy is SyncStrategyName.HIVEMIND
    fit = bundled_fit()
    # local nodes beyond this machine's cores share them: rates as for a mix of node_cap nodes (exact for the
    # largest mix, conservative for smaller ones; the perf model prices the chosen mix exactly)
    share = perf.host_share(node_cap)
    cands, by_key = [], {}
    memory = MemoryTable.bundled()
    skipped: dict[str, int] = defaultdict(int)
    considered = 0
    for offer in offers:
        allowed = passes_filters(offer, job, blocked)
        if not allowed and offer.offer_id not in keep:
            continue
        considered += 1
        shape = offer.shape
        too_small = misfit(workload, shape.accelerator, memory)
        if too_small is not None and offer.offer_id not in keep:
            skipped[too_small] += 1
            continue
        try:
            rate = perf.rates.node_rate(workload, shape.accelerator, shape.accelerator_count)
        except NotFoundError:
            skipped[f"no compute rate for {workload.name} on {shape.accelerator or 'CPU'}"] += 1
            continue
        samples_per_s = perf.data_capped_rate(rate.samples_per_s * share, offer.location, data)
        goodput = goodput_of(offer, default, recovery_h)
        capacity = node_cap if offer.capacity_hint is None else min(offer.capacity_hint, node_cap)
        if capacity_of is not None and offer.market != Market.OWNED:
            capped = min(capacity, capacity_of(offer))
            if capped == 0 and offer.offer_id not in keep:
                skipped["capacity model: not even one node at the confidence asked"] += 1
                continue
            capacity = capped
        minimum = keep.get(offer.offer_id, 0)
        if job.constraints.onprem_required and offer.market == Market.OWNED:
            minimum = max(minimum, capacity)
        capacity = max(capacity, minimum)
        if not allowed:  # kept, but filtered out or in a blocked scope: keep the survivors, add none
            capacity = minimum
        if capacity == 0:
            skipped["capacity 0"] += 1
            continue
        step = samples_per_step(workload, job.sync, shape.accelerator_count)
        q = fit.step_efficiency(workload, samples_per_s, step, shape.vcpus) if hivemind else 1.0
        data_usd = 3600 * samples_per_s * q * perf.data_usd_per_sample(offer.location, data)
        loc = offer.location
        cand = Candidate(
            key=offer.offer_id, region=loc.region_scope, zone=loc.zone_scope, cloud=loc.cloud,
            market=offer.market.value, price_usd_per_hour=offer.price_usd_per_hour, rate=samples_per_s,
            goodput=goodput, samples_per_step=step,
            accelerators=max(1, shape.accelerator_count), capacity=capacity, minimum=minimum,
            data_usd_per_hour=data_usd, step_efficiency=q,
            host_factor=fit.host_factor(shape.vcpus) if hivemind else 1.0,
        )
        cands.append(cand)
        by_key[cand.key] = offer
    c = job.constraints
    zones_matter = c.max_nodes_per_zone is not None or c.max_zone_share is not None or c.max_gpus_per_zone is not None
    kept, dominated = prune_dominated(cands, node_cap, zones_matter=zones_matter)
    chosen = {c.key for c in kept}
    alternates = tuple((c, by_key[c.key]) for c in cands if c.key not in chosen)
    return CandidateSet(tuple(kept), {c.key: by_key[c.key] for c in kept}, considered, dict(skipped),
                        dominated, default, alternates)


def _dominates(a: Candidate, b: Candidate, node_cap: int) -> bool:
    return (
        a.capacity >= node_cap and b.minimum == 0
        and a.price_usd_per_hour <= b.price_usd_per_hour and a.data_usd_per_hour <= b.data_usd_per_hour
        and a.rate * a.goodput >= b.rate * b.goodput and a.goodput >= b.goodput
        and a.samples_per_step / a.rate <= b.samples_per_step / b.rate
        and a.samples_per_step * a.goodput >= b.samples_per_step * b.goodput
        and a.accelerators <= b.accelerators
        and a.rate * a.goodput * a.step_efficiency >= b.rate * b.goodput * b.step_efficiency
        and a.host_factor <= b.host_factor
    )


def prune_dominated(cands: Sequence[Candidate], node_cap: int, *, zones_matter: bool = True) -> tuple[list[Candidate], int]:
    """Drop dominated candidates. Zones only separate candidates when a per-zone limit is set."""
    groups: dict[tuple, list[Candidate]] = defaultdict(list)
    for c in cands:
        groups[(c.region, c.zone if zones_matter else "", c.market, c.cloud)].append(c)
    kept = []
    for members in groups.values():
        members.sort(key=lambda c: (c.price_usd_per_hour / (c.rate * c.goodput), c.key))
        survivors: list[Candidate] = []
        for c in members:
            if not any(_dominates(s, c, node_cap) for s in survivors):
                survivors.append(c)
        kept.extend(survivors)
    kept.sort(key=lambda c: c.key)
    return kept, len(cands) - len(kept)

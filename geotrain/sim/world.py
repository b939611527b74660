"""What a replay knows of its market besides the traces: each zone's spot and on-demand offer, the
price of every tick, what a mix of nodes trains (the perf model) and what moving a checkpoint costs.

Prices: a tick's spot price is the trace's where it recorded one (``spot_prices="trace"``), else the
bundled catalog's for the zone's region and instance type (the cheapest zone of that region); with
``spot_prices="catalog"`` the catalog's always (traces whose recorded price is only a part of the
VM's, as the GCP probes' GPU component). The on-demand price is the trace's, else the catalog's for
the region. A zone with no spot price anywhere, or a job none of whose regions has an on-demand
price, is refused: no figure is invented.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

import numpy as np

from geotrain.domain import InstanceShape, InterruptionSignal, Location, Market, NodeGroup, Offer
from geotrain.errors import InputError
from geotrain.perf.model import PerfModel
from geotrain.perf.workloads import WorkloadRegistry
from geotrain.pricing.egress import EgressPrices
from geotrain.pricing.snapshot import PriceSnapshot, bundled_snapshot, offers_from_table
from geotrain.sim.job import SimJob
from geotrain.sim.market import UNLIMITED
from geotrain.sim.market import Market as TraceMarket

Placement = tuple[tuple[int, str], ...]  # ((zone index, market), …) one entry per node, sorted


def placement_of(nodes: list[tuple[int, str]]) -> Placement:
    return tuple(sorted(nodes))


@dataclass
class World:
    """A market and a job, with the offers, prices and rates a replay needs (build with :func:`build_world`)."""

    market: TraceMarket
    job: SimJob
    spot: tuple[Offer, ...]  # per zone: its spot offer (the price is the first tick's)
    on_demand: tuple[Offer | None, ...]  # per zone: the on-demand offer of its region (None: no price known)
    spot_usd_per_hour: np.ndarray  # [zone, tick], filled
    perf: PerfModel
    egress: EgressPrices
    work_samples: float
    notes: tuple[str, ...] = ()
    _rates: dict[Placement, tuple[float, float]] = field(default_factory=dict, repr=False)

    @property
    def zones(self) -> int:
        return len(self.spot)

    def capacity(self, zone: int, tick: int) -> int:
        """Spot nodes obtainable in ``zone`` at ``tick`` (a flag trace's yes: as many as asked)."""
        if tick >= self.market.ticks:
            return 0  # after the trace: no spot is known to be there
        value = int(self.market.available[zone, tick])
        return UNLIMITED if value == UNLIMITED else value

    def price(self, zone: int, market: str, tick: int) -> float:
        if market == Market.SPOT:
            return float(self.spot_usd_per_hour[zone, min(tick, self.market.ticks - 1)])
        offer = self.on_demand[zone]
        if offer is None:
            raise InputError(f"no on-demand price for {self.spot[zone].location.region_scope}")
        return offer.price_usd_per_hour

    def offer(self, zone: int, market: str, tick: int | None = None) -> Offer:
        base = self.spot[zone] if market == Market.SPOT else self.on_demand[zone]
        if base is None:
            raise InputError(f"no on-demand offer in {self.spot[zone].location.region_scope}")
        if tick is None or market != Market.SPOT:
            return base
        return replace(base, price_usd_per_hour=self.price(zone, market, tick))

    def rate(self, placement: Placement) -> tuple[float, float]:
        """(samples/s, training traffic $/h) of these nodes training together, by the perf model."""
        cached = self._rates.get(placement)
        if cached is not None:
            return cached
        counts: dict[tuple[int, str], int] = {}
        for key in placement:
            counts[key] = counts.get(key, 0) + 1
        groups = [NodeGroup(self.offer(z, m), n) for (z, m), n in sorted(counts.items())]
        workload = WorkloadRegistry.bundled().get(self.job.workload)
        estimate = self.perf.predict(workload, groups, self.job.sync)
        out = (estimate.samples_per_s, estimate.egress_usd_per_hour)
        self._rates[placement] = out
        return out

    def gang(self, zone: int, market: str) -> Placement:
        return tuple([(zone, market)] * self.job.nodes)

    def checkpoint_usd(self, src_zone: int | None, dst_zones: set[int]) -> float:
        """Moving the checkpoint from where it was written to each region of the next gang that lacks it."""
        if src_zone is None or self.job.checkpoint_gb <= 0:
            return 0.0
        src = self.spot[src_zone].location
        regions = {self.spot[z].location.region_scope: self.spot[z].location for z in dst_zones}
        return sum(self.job.checkpoint_gb * self.egress.usd_per_gb(src, dst)
                   for scope, dst in regions.items() if scope != src.region_scope)

    def interruption_signals(self, tick: int) -> list[InterruptionSignal]:
        """Per zone, what the market's past (ticks before ``tick``) says: interruptions per node-hour
        (spells of availability that ended, over the hours available; one pseudo-spell of the trace's
        length as a prior) and the share of ticks available."""
        out = []
        hours_per_tick = self.market.tick_s / 3600
        for z in range(self.zones):
            seen = self.market.available[z, :max(0, tick)] >= 1
            up = float(seen.sum())
            ends = float(np.count_nonzero(seen[:-1] & ~seen[1:])) if len(seen) > 1 else 0.0
            rate = (ends + 0.5) / ((up + 1) * hours_per_tick + 24.0)  # one half-event per day of prior
            share = up / len(seen) if len(seen) else None
            out.append(InterruptionSignal("trace", rate, share))
        return out


def _catalog_offers(snapshot: PriceSnapshot, instance_types: set[str]) -> list[Offer]:
    table = snapshot.table
    return list(offers_from_table(table[table["instance_type"].isin(sorted(instance_types))]))


def build_world(market: TraceMarket, job: SimJob, *, spot_prices: str = "trace",
                snapshot: PriceSnapshot | None = None) -> World:
    if spot_prices not in ("trace", "catalog"):
        raise InputError(f"spot prices {spot_prices!r}: trace or catalog")
    snapshot = snapshot or bundled_snapshot()
    catalog = _catalog_offers(snapshot, {z.instance_type for z in market.zones})
    by_region: dict[tuple[str, str, str, str], list[Offer]] = {}
    for offer in catalog:
        loc = offer.location
        by_region.setdefault((loc.cloud, loc.region, offer.shape.instance_type, offer.market.value), []).append(offer)
    spot, on_demand, notes = [], [], []
    prices = np.array(market.spot_usd_per_hour, dtype=np.float64, copy=True)
    for z, trace in enumerate(market.zones):
        loc = trace.location
        key = (loc.cloud, loc.region, trace.instance_type)
        spot_rows = by_region.get((*key, "spot"), [])
        od_rows = by_region.get((*key, "on_demand"), [])
        shape = (spot_rows or od_rows or [None])[0]
        if shape is not None:
            shape = shape.shape
        elif trace.accelerator:
            shape = InstanceShape(trace.instance_type, 0.0, 0.0, trace.accelerator, trace.accelerator_count or 1)
            notes.append(f"{trace.key}: the catalog does not know {trace.instance_type}; vCPUs unknown")
        else:
            raise InputError(f"{trace.source}: instance type {trace.instance_type!r} is in no catalog row and the "
                             "trace names no accelerator; give the zone's instance type (--instance-type)")
        catalog_spot = min((o.price_usd_per_hour for o in spot_rows), default=math.nan)
        row = prices[z]
        if spot_prices == "catalog" or np.all(np.isnan(row)):
            if math.isnan(catalog_spot):
                raise InputError(f"{trace.key}: the trace records no spot price and the catalog has none for "
                                 f"{trace.instance_type} in {loc.region_scope}")
            row[:] = catalog_spot
            notes.append(f"{trace.key}: spot ${catalog_spot:.4f}/h from the catalog")
        elif np.any(np.isnan(row)):
            if math.isnan(catalog_spot):
                first = row[~np.isnan(row)][0]
                row[np.isnan(row)] = first
                notes.append(f"{trace.key}: ticks before the first recorded spot price take that price")
            else:
                row[np.isnan(row)] = catalog_spot
                notes.append(f"{trace.key}: ticks without a recorded spot price take the catalog's")
        od_price = trace.on_demand_usd_per_hour
        if od_price is None and od_rows:
            od_price = min(o.price_usd_per_hour for o in od_rows)
        observed = market.start if market.start.tzinfo else market.start.replace(tzinfo=timezone.utc)
        spot.append(Offer(loc, shape, Market.SPOT, float(row[0]), None, InterruptionSignal("trace", None), observed,
                          trace.source))
        on_demand.append(None if od_price is None else Offer(
            loc, shape, Market.ON_DEMAND, float(od_price), None, InterruptionSignal("none", 0.0), observed,
            trace.source if trace.on_demand_usd_per_hour is not None else "catalog"))
        if od_price is None:
            notes.append(f"{loc.region_scope}: no on-demand price for {trace.instance_type}")
    if all(o is None for o in on_demand):
        raise InputError("no on-demand price for any zone of the traces (neither in the traces nor in the catalog): "
                         "a replay needs one for its fallback")
    egress = EgressPrices.bundled()
    perf = PerfModel(egress=egress)
    world = World(market, job, tuple(spot), tuple(on_demand), prices, perf, egress, 0.0, tuple(notes))
    if job.target_samples_per_s is not None:  # the gang: the fewest nodes of the first zone that reach it
        for n in range(1, 1025):
            world.job = replace(job, nodes=n)
            world._rates.clear()
            if world.rate(world.gang(0, Market.SPOT))[0] >= job.target_samples_per_s:
                break
        else:
            raise InputError(f"{job.target_samples_per_s:g} samples/s is out of reach with 1,024 nodes of "
                             f"{spot[0].shape.instance_type}; lower target_samples_per_s")
        job = world.job
        world.notes = (*world.notes, f"the gang: {job.nodes} node(s) of {spot[0].shape.instance_type} reach "
                                     f"{job.target_samples_per_s:g} samples/s")
    if job.work_samples is not None:
        world.work_samples = float(job.work_samples)
    else:
        rate, _ = world.rate(world.gang(0, Market.SPOT))
        gpus = job.nodes * max(1, spot[0].shape.accelerator_count)
        world.work_samples = job.work_gpu_hours / gpus * 3600 * rate
    return world


def utc(dt: datetime) -> datetime:
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


def observed_capacity(world: World, tick: int):  # noqa: ANN201 - a CapacityModel
    """The capacity model of what the market showed before ``tick`` (never later): per zone, the share
    of past ticks at which at least ``n`` nodes could be had (a flag trace's yes counts as the gang)."""
    from geotrain.pricing.capacity import CapacityModel, CapacityRow

    rows = []
    past = world.market.available[:, :max(1, tick)]
    for z, offer in enumerate(world.spot):
        row = past[z]
        finite = row[row != UNLIMITED]
        # a flag's yes (UNLIMITED) counts as the gang, or as the most ever counted where the trace counts too
        yes = max(world.job.nodes, int(finite.max()) if finite.size else 0)
        counts = np.where(row == UNLIMITED, yes, row)
        top = int(counts.max())
        units = max(1, offer.shape.accelerator_count)
        if top <= 0:
            curve = ((units, 0.0),)
        else:
            curve, last = [], None
            for n in range(1, top + 1):
                share = float(np.mean(counts >= n))
                if last is not None and share == last[1]:
                    curve[-1] = (n * units, share)
                else:
                    curve.append((n * units, share))
                last = curve[-1]
            curve = tuple(curve)
        loc = offer.location
        rows.append(CapacityRow(
            loc.cloud, loc.region, loc.zone, "", "zone", offer.shape.accelerator or "cpu", offer.shape.instance_type,
            units, "spot", "probe", curve[0][1], curve, curve[-1][0], None, int(past.shape[1]),
            past.shape[1] * world.market.tick_s / 3600, "", "", "replay: the market's past", ""))
    return CapacityModel(rows)

"""Capacity: the chance of obtaining ``k`` nodes of an offer at once, from public measurements.

Standard library only (plus ``geotrain.domain``/``errors`` and the bundled data file).

Words
-----
A *unit* is one accelerator (GPU, chip); a CPU-only node counts as one unit, so a node of an offer
has ``g = max(1, accelerator_count)`` units. The *family* is the accelerator model as offers name it
(``V100``, ``H100``, ``A100-80GB`` …; ``cpu`` for CPU-only nodes): nodes of one family in one zone
draw from one pool of units, whatever the instance size.

Rows (``data/capacity.csv``, built by ``scripts/build_capacity.py``; see PROVENANCE.md)
-----------------------------------------------------------------------------------------
One row per observed (cloud, region, zone, family, node size, source). Its *curve* ``A(n)`` is the
time-weighted share of the observed window in which at least ``n`` units could be had at once, for
``n = 1 … max_units`` (``max_units`` = the largest simultaneous count seen; ``A(n) = 0`` beyond it).
It is written as breakpoints ``n1:a1;n2:a2;…`` meaning ``A(m) = a_i`` for ``n_(i-1) < m ≤ n_i``.

- ``probe`` rows (SkyNomad, GCP 16×a3-highgpu-1g launch probes): ``A(n)`` = share of probe rounds in
  which ≥ n of the 16 requested VMs launched. ``scope`` ``zone``, or ``region``: per round the best
  zone of the region (what a launcher that tries each zone of a region-wide offer gets).
- ``availability`` rows (SkyNomad AWS p3.2xlarge ticks; Training-on-a-Dime GCP slots): one level,
  ``A(g0) = p``, the share of time one node of ``g0`` units could be had. ``scope`` ``zone-name``
  where the source names an AWS zone (us-east-2a) that the data cannot tie to an AZ ID.
- ``pool`` rows (Bamboo): ``A(n)`` = share of time a spot pool held ≥ n units. A pool trace tells how
  big a pool was held, not how often a first launch succeeds: it gives a *shape* only, never ``p``.
  ``scope`` ``cloud`` when the trace does not record its region.

Model
-----
For a spot offer of family ``f`` in zone ``z`` with ``g`` units per node::

    P(k) = E(k·g),        E(n) = p · S(n),        S(n) = A_s(n) / A_s(1)

``p`` is the chance one unit can be had at all (availability), ``S`` the pool-size survival: given
that one can be had, the chance that ``n`` can be had at once. For a probe row of the offer's own
zone both come from that row (``E = A``). Consequences, by construction:

- ``P(0) = 1`` and ``P`` is non-increasing in ``k`` (``S`` is a survival function);
- a node with more units of the same family in the same zone never gets a higher chance for the
  same ``k``: ``E(k·g') ≤ E(k·g)`` for ``g' ≥ g`` (``p`` is one figure per zone and family, never per
  instance size). Counting units is the only size effect modelled; on real hosts fragmentation
  makes whole 8-GPU nodes harder still, so for large nodes the model is optimistic;
- beyond the largest simultaneous count seen in the data behind an answer, ``E = 0``: the model
  never promises more than was ever observed at once (probes asked for 16; pools held ≤ 80).

``p`` — the first that applies (this decides the *basis*):

1. the row of the offer's own zone (a zoned offer) or own region (a region-wide offer: the
   ``region`` row) of the same family → basis ``probed``. Several node sizes measured there: the
   row with the fewest units per node gives ``p``;
2. rows of the same family in the same region (other zones, or AWS zone names not tied to AZ IDs):
   their mean → ``prior``;
3. the same family elsewhere in the same cloud: the median over its zones → ``prior``;
4. any family of the same cloud: the median over the cloud's zones → ``prior``;
5. any cloud: the median over every zone in the data → ``prior`` (Azure: no capacity data at all).

Medians count one ``p`` per (zone, family) (the fewest-units row), never the derived region rows.

``S`` — the first that applies:

a. the ``p`` row's own curve, if it is a probe row;
b. pool rows of the same cloud and family: same zone, else same region, else any (region unknown),
   an equal-weight mixture → if ``p`` is not ``probed``, the basis is ``pool-trace``;
c. the probe curves of the same cloud and family (other zones), mixture;
d. an equal-weight mixture over the cloud's families of their shapes (b or c);
e. the same over every cloud.

A mixture ``S = mean_i S_i`` is the pool-size law of "a zone like one of those observed, each as
likely"; ``S_i`` is 0 beyond its own maximum.

AWS Spot Advisor (market pressure) is **not** used: on the only AWS zones with availability data
(9 zones, p3.2xlarge) all three regions are in one band (">20%"), while availability ranges from
0.17 to 0.91 within it, so the band explains none of it; the savings figure orders the three
regions' mean availability (us-east-1 < us-east-2 < us-west-2), but three points prove nothing
(exact permutation p = 1/6). See PROVENANCE.md. The basis ``advisor-derived`` is therefore never
produced.

Other markets and live signals
------------------------------
- ``on_demand``: no data measures on-demand capacity. Prior: certain (1.0) up to
  :data:`ON_DEMAND_PRIOR_NODES` = 64 nodes, the planner's default node limit, and 0 beyond;
  basis ``prior``. Account quotas are the real limit and the planner enforces them separately.
- ``owned``: the inventory count exactly (``capacity_hint``): 1.0 up to it, 0 beyond; basis
  ``inventory``. An owned offer without a count is taken as one machine (the offer exists).
- ``capacity_hint`` (a live source's count, or an inventory count): ``P(k) = 0`` for ``k > hint``
  whatever the market. The bundled snapshot carries 13 hints (lower medians of the same H100
  probes), so those zones are capped at their median.

``cap(offer, c)`` is the largest ``k ≤`` :data:`MAX_NODES` with ``P(k) ≥ c``.
"""


from __future__ import annotations

import bisect
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from geotrain.domain import Market, Offer
from geotrain.pricing.capacity.rows import CapacityRow, rows_from_csv

ON_DEMAND_PRIOR_NODES = 64  # = the planner's default node limit (solver Limits.max_nodes); not a measurement
MAX_NODES = 1024  # no answer is larger, whatever a hint or an inventory says

@dataclass(frozen=True, slots=True)
class CapacityEstimate:
    """What the model says for one (cloud, region, zone, family) of the spot market.

    ``obtainable[n]`` = E(n), the chance that ``n`` units can be had at once (index 0 … max; 0 beyond).
    """

    basis: str
    availability: float
    obtainable: tuple[float, ...]
    explanation: str

    @property
    def max_units(self) -> int:
        return len(self.obtainable) - 1

    def at(self, units: int) -> float:
        return self.obtainable[units] if units < len(self.obtainable) else 0.0


_NOTHING = (1.0,)  # E for "no data at all": nothing beyond 0 units
_ONE_UNIT = (1.0, 1.0)  # S when availability exists but no pool shape anywhere


def _mix(shapes: Sequence[tuple[float, ...]]) -> tuple[float, ...]:
    longest = max(len(s) for s in shapes)
    return tuple(sum(s[n] if n < len(s) else 0.0 for s in shapes) / len(shapes) for n in range(longest))


def _family(offer: Offer) -> str:
    return offer.shape.accelerator or "cpu"


def _units(offer: Offer) -> int:
    return max(1, offer.shape.accelerator_count)


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"k must be a whole number ≥ 0, got {k!r}")


@dataclass(frozen=True, slots=True)
class _Shape:
    values: tuple[float, ...]
    what: str
    pool: bool  # from a pool trace of the family itself


class CapacityModel:
    """The chance of obtaining k nodes of an offer; see the module docstring for the math.

    ``CapacityModel(rows)`` takes the measurements (tests inject their own);
    :meth:`bundled` reads the shipped ``capacity.csv``. Answers are cached per
    (cloud, region, zone, family) on first use; whichever caller fills a cache entry, it holds
    the same answer. Cache keys that use ``id()`` refer only to tuples the model itself keeps.
    """

    def __init__(self, rows: Iterable[CapacityRow]) -> None:
        self.rows = tuple(r for r in rows if r.market == Market.SPOT.value)
        self._cache: dict[tuple[str, str, str, str], CapacityEstimate] = {}
        self._shapes = {id(r): r.shape() for r in self.rows}  # each row's S, computed once
        self._mixes: dict[tuple[int, ...], tuple[float, ...]] = {}
        own: dict[tuple[str, str, str, str], list[CapacityRow]] = defaultdict(list)  # (cloud, region, zone|"", fam)
        zonal: dict[tuple[str, str, str], dict[str, CapacityRow]] = defaultdict(dict)  # (cloud, region, fam)
        self._pools: dict[tuple[str, str], list[CapacityRow]] = defaultdict(list)
        self._probes: dict[tuple[str, str], list[CapacityRow]] = defaultdict(list)
        for r in self.rows:
            if r.kind == "pool":
                if self._shapes[id(r)] is not None:
                    self._pools[(r.cloud, r.accelerator)].append(r)
                continue
            if r.scope == "zone" and r.zone:
                own[(r.cloud, r.region, r.zone, r.accelerator)].append(r)
            elif r.scope == "region":
                own[(r.cloud, r.region, "", r.accelerator)].append(r)
            if r.scope in ("zone", "zone-name"):
                place = r.zone or r.zone_name
                best = zonal[(r.cloud, r.region, r.accelerator)].get(place)
                if best is None or r.accelerators_per_node < best.accelerators_per_node:
                    zonal[(r.cloud, r.region, r.accelerator)][place] = r
                if r.kind == "probe" and self._shapes[id(r)] is not None:
                    self._probes[(r.cloud, r.accelerator)].append(r)
        self._own = {key: min(rs, key=lambda r: r.accelerators_per_node) for key, rs in own.items()}
        self._zonal = {key: tuple(by_place.values()) for key, by_place in zonal.items()}
        fam_ps: dict[tuple[str, str], list[float]] = defaultdict(list)
        cloud_ps: dict[str, list[float]] = defaultdict(list)
        for (cloud, _region, fam), rs in sorted(self._zonal.items()):
            for r in rs:
                fam_ps[(cloud, fam)].append(r.availability)
                cloud_ps[cloud].append(r.availability)
        self._fam_ps = {key: (statistics.median(ps), len(ps)) for key, ps in fam_ps.items()}
        self._cloud_ps = {key: (statistics.median(ps), len(ps)) for key, ps in cloud_ps.items()}
        everywhere = [p for ps in cloud_ps.values() for p in ps]
        self._all_ps = (statistics.median(everywhere), len(everywhere)) if everywhere else None
        self._products: dict[tuple[float, int], tuple[float, ...]] = {}  # (p, id of S) → E
        self._ladders: dict[tuple, tuple[float, ...]] = {}  # (cloud, region, zone, fam, g) → −E(k·g), k ≥ 1
        families = sorted({key for key in (*self._pools, *self._probes)})
        self._family_shapes = {key: self._family_shape(key) for key in families}
        self._cloud_shapes: dict[str, _Shape] = {}
        for cloud in sorted({c for c, _ in families}):
            members = [s for (c, _), s in self._family_shapes.items() if c == cloud]
            self._cloud_shapes[cloud] = _Shape(
                _mix([s.values for s in members]),
                f"mixture of {cloud}'s {len(members)} family pool shapes", False)
        everything = list(self._family_shapes.values())
        self._global_shape = (_Shape(_mix([s.values for s in everything]),
                                     f"mixture of all {len(everything)} family pool shapes", False)
                              if everything else None)

    @classmethod
    def bundled(cls) -> CapacityModel:
        """The model of the shipped ``geotrain/pricing/data/capacity.csv``."""
        from geotrain.pricing.bundled import data_bytes

        return cls(rows_from_csv(data_bytes("capacity.csv"), "bundled capacity.csv"))

    # ---- shapes ---------------------------------------------------------------------------------

    def _mix_rows(self, rows: Sequence[CapacityRow]) -> tuple[float, ...]:
        key = tuple(id(r) for r in rows)
        mixed = self._mixes.get(key)
        if mixed is None:
            mixed = self._mixes[key] = _mix([self._shapes[id(r)] for r in rows])
        return mixed

    def _family_shape(self, key: tuple[str, str], region: str | None = None,
                      zone: str | None = None) -> _Shape:
        pools = self._pools.get(key, [])
        if pools:
            for chosen in ([r for r in pools if zone and r.zone == zone],
                           [r for r in pools if region and r.region == region], pools):
                if chosen:
                    label = ", ".join(f"{r.source} (≤{r.max_units} units)" for r in chosen)
                    return _Shape(self._mix_rows(chosen), f"pool shape from {label}", True)
        probes = self._probes[key]
        return _Shape(self._mix_rows(probes),
                      f"pool shape: mixture of {len(probes)} {key[1]} probe curves (≤{max(r.max_units for r in probes)} units)",
                      False)

    def _shape_for(self, cloud: str, region: str, zone: str, fam: str) -> _Shape | None:
        key = (cloud, fam)
        if key in self._pools or key in self._probes:
            return self._family_shape(key, region, zone)
        if cloud in self._cloud_shapes:
            return self._cloud_shapes[cloud]
        return self._global_shape

    # ---- resolution -----------------------------------------------------------------------------

    def estimate(self, offer: Offer) -> CapacityEstimate:
        """The spot-market estimate for the offer's (cloud, region, zone, family), hint not applied."""
        loc = offer.location
        key = (loc.cloud, loc.region, loc.zone, _family(offer))
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._resolve(*key)
        return found

    def _resolve(self, cloud: str, region: str, zone: str, fam: str) -> CapacityEstimate:
        where = f"{cloud} {region}{'/' + zone if zone else ' (region-wide)'} {fam}"
        row = self._own.get((cloud, region, zone, fam))
        if row is not None:
            if row.kind == "probe":
                return CapacityEstimate(
                    "probed", row.availability, row.dense(),
                    f"probed: {where}: ≥1 unit obtainable in {row.availability:.1%} of {row.samples} probes "
                    f"(≥{row.max_units} in {row.curve[-1][1]:.1%}; none of more seen, {row.requested_units} "
                    f"requested), {row.label()}")
            p, what = row.availability, f"p {row.availability:.1%} over {row.observed_h:.0f} h, {row.label()}"
            basis = "probed"
        else:
            siblings = self._zonal.get((cloud, region, fam), ())
            if siblings:
                p = statistics.fmean(r.availability for r in siblings)
                names = ", ".join(r.zone or f"{r.zone_name} (name not tied to an AZ ID)" for r in siblings)
                what = f"no data for this {'zone' if zone else 'region as a whole'}; p {p:.1%} = mean of {region} zones {names}"
            elif (cloud, fam) in self._fam_ps:
                p, n = self._fam_ps[(cloud, fam)]
                what = f"no {fam} data in {region}; p {p:.1%} = median of {n} {cloud} {fam} zones"
            elif cloud in self._cloud_ps:
                p, n = self._cloud_ps[cloud]
                what = f"no {fam} data in {cloud}; p {p:.1%} = median of {n} {cloud} zones (other families)"
            elif self._all_ps:
                p, n = self._all_ps
                what = f"no {cloud} data; p {p:.1%} = median of all {n} zones in the data"
            else:
                return CapacityEstimate("prior", 0.0, _NOTHING, f"prior: {where}: no capacity data at all")
            basis = "prior"
        shape = self._shape_for(cloud, region, zone, fam)
        if shape is None:  # availability data but no pool shape anywhere: one unit, no more
            values, shape_what = _ONE_UNIT, "no pool shape in the data: one unit at most"
        else:
            values, shape_what = shape.values, shape.what
            if basis == "prior" and shape.pool:
                basis = "pool-trace"
        obtainable = self._products.get((p, id(values)))
        if obtainable is None:
            obtainable = self._products[(p, id(values))] = (1.0,) + tuple(p * s for s in values[1:])
        return CapacityEstimate(basis, p, obtainable, f"{basis}: {where}: {what}; {shape_what}")

    # ---- the questions the planner asks ---------------------------------------------------------

    def probability(self, offer: Offer, k: int) -> float:
        """The chance of obtaining ``k`` nodes of ``offer`` at once (1 for k = 0, non-increasing in k)."""
        _check_k(k)
        if k == 0:
            return 1.0
        hint = offer.capacity_hint
        if hint is not None and k > hint:
            return 0.0
        if k > MAX_NODES:
            return 0.0
        if offer.market == Market.OWNED:
            return 1.0 if k <= (1 if hint is None else hint) else 0.0
        if offer.market == Market.ON_DEMAND:
            return 1.0 if k <= ON_DEMAND_PRIOR_NODES else 0.0
        return self.estimate(offer).at(k * _units(offer))

    def cap(self, offer: Offer, confidence: float) -> int:
        """The largest ``k ≤ MAX_NODES`` with ``probability(offer, k) ≥ confidence`` (0 < confidence ≤ 1)."""
        if not 0.0 < confidence <= 1.0:
            raise ValueError(f"confidence must be within (0, 1], got {confidence!r}")
        hint = offer.capacity_hint
        bound = MAX_NODES if hint is None else min(max(hint, 0), MAX_NODES)
        if offer.market == Market.OWNED:
            return min(bound, 1 if hint is None else hint)
        if offer.market == Market.ON_DEMAND:
            return min(bound, ON_DEMAND_PRIOR_NODES)
        loc, shape = offer.location, offer.shape
        g = shape.accelerator_count if shape.accelerator_count > 0 else 1
        key = (loc.cloud, loc.region, loc.zone, shape.accelerator or "cpu", g)
        ladder = self._ladders.get(key)
        if ladder is None:  # −E(k·g) for k = 1, 2, …: non-decreasing, so bisect finds the last E ≥ c
            obtainable = self.estimate(offer).obtainable
            shared = (id(obtainable), g)  # estimates share E tuples (see _products)
            ladder = self._ladders.get(shared)
            if ladder is None:
                ladder = self._ladders[shared] = tuple(-e for e in obtainable[g::g])
            self._ladders[key] = ladder
        return min(bisect.bisect_right(ladder, -confidence), bound)

    def pool_of(self, offer: Offer) -> str | None:
        """The pool a spot offer's accelerators come from (zone and family); None off the spot market."""
        if offer.market != Market.SPOT:
            return None
        loc = offer.location
        return f"{loc.cloud}/{loc.region}/{loc.zone}/{_family(offer)}"

    def pool_cap_units(self, offer: Offer, confidence: float) -> int:
        """The most units of the offer's pool that can be had at once with at least ``confidence``."""
        if not 0.0 < confidence <= 1.0:
            raise ValueError(f"confidence must be within (0, 1], got {confidence!r}")
        obtainable = self.estimate(offer).obtainable
        return max((n for n, e in enumerate(obtainable) if e >= confidence), default=0)

    def launch_probability(self, items: Iterable[tuple[Offer, int]]) -> float:
        """The chance that a whole mix (offer, nodes) can be had at once: spot nodes of one zone and
        family draw from one pool (``E`` of their units together); pools, on-demand and owned
        offers are taken as independent of each other."""
        pools: dict[tuple[str, str, str, str], tuple[Offer, int]] = {}
        chance = 1.0
        for offer, count in items:
            if count <= 0:
                continue
            hint = offer.capacity_hint
            if hint is not None and count > hint:
                return 0.0
            if offer.market != Market.SPOT:
                chance *= self.probability(offer, count)
                continue
            loc = offer.location
            key = (loc.cloud, loc.region, loc.zone, _family(offer))
            first, units = pools.get(key, (offer, 0))
            pools[key] = (first, units + count * _units(offer))
        for first, units in pools.values():
            chance *= self.estimate(first).at(units) if units <= MAX_NODES * 8 else 0.0
        return chance

    def basis(self, offer: Offer) -> str:
        """``probed`` | ``pool-trace`` | ``prior`` | ``inventory`` (see the module docstring)."""
        if offer.market == Market.OWNED:
            return "inventory"
        if offer.market == Market.ON_DEMAND:
            return "prior"
        return self.estimate(offer).basis

    def explain(self, offer: Offer) -> str:
        """One line naming the data behind the answer for ``offer``."""
        hint = offer.capacity_hint
        bounded = f"; bounded by capacity_hint {hint}" if hint is not None else ""
        if offer.market == Market.OWNED:
            count = 1 if hint is None else hint
            return f"inventory: {count} machine(s) of {offer.shape.instance_type} at {offer.location.region}, all obtainable"
        if offer.market == Market.ON_DEMAND:
            return (f"prior: on-demand, no capacity data; taken as certain up to {ON_DEMAND_PRIOR_NODES} nodes "
                    f"(the planner's default node limit){bounded}")
        return self.estimate(offer).explanation + bounded

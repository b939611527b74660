"""Synthetic spot markets: a seeded generator of zone traces, to evaluate spot policies on markets they
were not tuned on.

:func:`generate` turns a :class:`MarketSpec` and a seed into ``list[ZoneTrace]`` that
:func:`geotrain.sim.market.align` accepts and :func:`geotrain.sim.world.build_world` prices. The same
(spec, seed) gives the same arrays, bit for bit. :data:`GRID` is a fixed set of specs over the regimes a
V100/H100 spot market shows.

**Availability and prices are synthetic; the price levels are real.** Every spell, outage, dip, price
wiggle and spike is drawn here; the spot price they move around is the bundled catalog's spot price for
that zone and instance type, and the ceiling is the catalog's on-demand price of the region. No base price
is invented: a zone without a catalog spot row, or whose region has no on-demand row, is refused.

The parameters (:class:`MarketSpec`)
------------------------------------
Where:

- ``instance_type``: the catalog's instance type (``p3.2xlarge``: 1 V100; ``a3-highgpu-1g``: 1 H100).
- ``zones``: zone scopes ``cloud/region/zone`` (``aws/us-east-1/use1-az1``; AWS zones are AZ ids), or
  ``cloud/region`` where the catalog's spot price is region-wide (GCP's ``a3-highgpu-8g``). Each must be
  in :func:`catalog_zones` for the instance type. The *last* ``flap_zones`` of them flap.

When:

- ``days``: the length of the market, days. ``tick_s``: seconds between observations (the traces have
  one observation a tick). ``start``: the UTC time of the first tick (a naive datetime is taken as UTC).

How many nodes:

- ``capacity``: nodes a zone offers when it is fully available (a *count* trace); ``0``: a *flag* trace
  whose values are only 0 and :data:`~geotrain.sim.market.UNLIMITED` (Can't Be Late's single-node
  convention: a launch succeeds or not, how many is not known).

Availability, per zone, is an alternating sequence of *up* and *down* spells; on top of it, in order:

- ``up_mean_h``, ``down_mean_h``: mean lengths of up and down spells, hours.
- ``shape``: the Weibull shape k of the spell lengths (both up and down). k = 1: exponential
  (memoryless); k < 1: heavy-tailed (many short spells and a few very long ones); k > 1: more regular.
- ``zone_spread``: the lognormal sigma across zones of the spell means. Each zone draws z ~ N(0, 1) and
  multiplies ``up_mean_h`` by exp(sigma z) and ``down_mean_h`` by exp(-sigma z): one zone is stable (long
  up, short down), another is not. 0: every zone alike. The multipliers have median 1.
- ``flap_zones``: how many zones flap (the last ones of ``zones``). A flapping zone alternates spells of
  ``flap_up_h`` and ``flap_down_h`` (mean hours, exponential) instead of its ordinary ones while it is in
  a flapping *episode*; ``flap_episode_share`` is the share of time it spends in episodes (1: always),
  ``flap_episode_h`` the mean length of an episode, hours (exponential). Outside episodes it behaves like
  the other zones.
- ``partial_share``: the share of a count zone's up-time at which it offers only part of ``capacity``: a
  level drawn uniformly from 1 … capacity − 1 and held for a partial spell of mean ``partial_h`` hours
  (exponential). No effect where ``capacity`` < 2 (there is no level between none and all).
- ``outage_per_day``: regional outages per region and day (a Poisson process); ``outage_h``: their mean
  length, hours (exponential). During an outage every zone of the region shows 0, at the same ticks.
- ``diurnal_amplitude`` (0 … 1): around the region's local business hours (08:00–20:00 local standard
  time, a sin² bump that peaks at 14:00) a count zone's capacity shrinks by up to that share, and a flag
  zone's chance of being up drops by up to that share. The depth is dithered by one uniform draw per
  zone and local day, so a flag zone that dips is down for one contiguous stretch around 14:00, and at
  each hour the expected loss is exactly ``diurnal_amplitude`` × bump.

Spot price (``$`` per node-hour), per zone:

- the catalog's spot price of the zone × exp(x), where x is a mean-reverting AR(1) with stationary
  standard deviation ``price_noise`` (≈ the relative std of the price; 0: flat) and reversion time
  ``price_reversion_h`` hours (x loses 1/e of its deviation in that time). The median price is the catalog's.
- ``spike_per_day`` spikes per zone and day (Poisson), each multiplying the price by ``spike_factor`` for
  a mean ``spike_h`` hours (exponential).
- capped at the region's on-demand price from the catalog (the cheapest on-demand row of the region, as
  ``build_world`` takes it); the traces leave ``on_demand_usd_per_hour`` None so ``build_world`` looks it
  up the same way.

Every spell and event lasts at least one tick (the market is observed once a tick; a shorter one would
not be seen) and is rounded to whole ticks. Each piece (a zone's spells, its flaps, its partial levels, its
dips, its prices, its spikes, a region's outages, a zone's multiplier) draws from a random stream of its
own, derived from the seed, the piece and the zone's (region's) index: changing the spike rate of a spec
leaves its availability unchanged, and the first zones of a spec are the same when zones are appended.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from geotrain.domain import Continent, Location
from geotrain.errors import InputError
from geotrain.pricing.snapshot import bundled_snapshot
from geotrain.sim.market import UNLIMITED, ZoneTrace

DEFAULT_INSTANCE_TYPE = "p3.2xlarge"
DEFAULT_START = datetime(2024, 1, 1, tzinfo=UTC)

# Zone sets of the bundled catalog with a p3.2xlarge (V100) spot row (tests check each is there).
ZONES_3Z_2R = ("aws/us-east-1/use1-az1", "aws/us-east-1/use1-az2", "aws/us-east-2/use2-az1")
ZONES_3R = ("aws/us-east-1/use1-az1", "aws/us-east-1/use1-az2", "aws/us-east-2/use2-az1",
            "aws/us-west-2/usw2-az1", "aws/us-west-2/usw2-az2")  # 3 regions, 1-2 zones each
ZONES_1R_2Z = ("aws/us-west-2/usw2-az2", "aws/us-west-2/usw2-az3")
ZONES_1Z = ("aws/us-east-1/use1-az1",)
ZONES_3CONT = ("aws/us-east-1/use1-az1", "aws/eu-west-1/euw1-az2", "aws/ap-northeast-1/apne1-az4")
ZONES_10 = ("aws/us-east-1/use1-az1", "aws/us-east-1/use1-az2", "aws/us-east-1/use1-az5",
            "aws/us-east-1/use1-az6", "aws/us-east-2/use2-az1", "aws/us-east-2/use2-az2",
            "aws/us-west-2/usw2-az1", "aws/us-west-2/usw2-az2", "aws/us-west-2/usw2-az3",
            "aws/ca-central-1/cac1-az2")
# a3-highgpu-1g (1 H100) has per-zone GCP spot rows in these zones; a3-highgpu-8g's are region-wide
ZONES_H100_GCP = ("gcp/us-central1/us-central1-a", "gcp/us-central1/us-central1-b",
                  "gcp/us-east4/us-east4-a", "gcp/us-east5/us-east5-a")

# Approximate UTC offsets (standard time, hours) of the regions' local business hours; a region not
# listed takes its continent's. Daylight saving is ignored: an hour matters little to a 12-hour bump.
_UTC_OFFSET_H = {
    "us-east-1": -5, "us-east-2": -5, "us-west-1": -8, "us-west-2": -8, "ca-central-1": -5,
    "sa-east-1": -3, "eu-west-1": 0, "eu-west-2": 0, "eu-west-3": 1, "eu-central-1": 1, "eu-north-1": 1,
    "ap-northeast-1": 9, "ap-northeast-2": 9, "ap-southeast-1": 8, "ap-southeast-2": 10,
    "ap-south-1": 5.5, "us-central1": -6, "us-east4": -5, "us-east5": -5, "us-west1": -8, "us-west4": -8,
    "europe-west1": 1, "europe-west3": 1, "europe-west4": 1, "europe-west9": 1, "europe-north1": 2,
    "asia-east1": 8, "asia-northeast1": 9, "asia-south1": 5.5, "asia-south2": 5.5, "asia-southeast1": 8,
    "australia-southeast1": 10,
}
_CONTINENT_OFFSET_H = {
    Continent.NORTH_AMERICA: -6, Continent.SOUTH_AMERICA: -3, Continent.EUROPE: 1, Continent.ASIA: 8,
    Continent.MIDDLE_EAST: 3, Continent.AFRICA: 2, Continent.OCEANIA: 10,
}

# One random stream per piece of the market (see the module docstring): the piece's number here.
_BASE, _FLAP, _EPISODE, _PARTIAL, _DIURNAL, _NOISE, _SPIKE, _SPREAD, _OUTAGE = range(9)


@dataclass(frozen=True, slots=True)
class MarketSpec:
    """The parameters of a synthetic spot market; each field's unit and meaning is in the module docstring.
    Invalid values raise :class:`InputError`; whether the zones are in the catalog is checked by
    :func:`generate`."""

    instance_type: str = DEFAULT_INSTANCE_TYPE
    zones: tuple[str, ...] = ZONES_3Z_2R
    days: float = 14.0
    tick_s: float = 600.0
    start: datetime = DEFAULT_START
    capacity: int = 4
    up_mean_h: float = 8.0
    down_mean_h: float = 2.0
    shape: float = 1.0
    zone_spread: float = 0.0
    flap_zones: int = 0
    flap_up_h: float = 0.25
    flap_down_h: float = 0.25
    flap_episode_share: float = 1.0
    flap_episode_h: float = 6.0
    partial_share: float = 0.0
    partial_h: float = 2.0
    outage_per_day: float = 0.0
    outage_h: float = 2.0
    diurnal_amplitude: float = 0.0
    price_noise: float = 0.05
    price_reversion_h: float = 24.0
    spike_per_day: float = 0.0
    spike_factor: float = 2.0
    spike_h: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "zones", tuple(self.zones))
        object.__setattr__(self, "start", _utc(self.start))
        for name in ("capacity", "flap_zones"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise InputError(f"market spec: {name} must be a whole number, got {value!r}")
            object.__setattr__(self, name, int(value))
        _check_zones(self.zones)
        _check_ranges(self)

    @property
    def ticks(self) -> int:
        """Observations per zone: ``days`` at one a ``tick_s``."""
        return round(self.days * 86400.0 / self.tick_s)

    @property
    def regions(self) -> tuple[str, ...]:
        """The zones' region scopes (``cloud/region``), in the order they first appear."""
        return tuple(dict.fromkeys(_region_scope(z) for z in self.zones))

    @property
    def flag(self) -> bool:
        """Whether the traces are flags (0 or UNLIMITED) rather than node counts."""
        return self.capacity == 0

    @property
    def name(self) -> str:
        """The spec in a few words, from its parameters (e.g. ``3z/2r cap16 up8h/down2h k0.6 flap1 out0.5/d``)."""
        parts = [] if self.instance_type == DEFAULT_INSTANCE_TYPE else [self.instance_type]
        parts += [f"{len(self.zones)}z/{len(self.regions)}r", "flag" if self.flag else f"cap{self.capacity}",
                  f"up{self.up_mean_h:g}h/down{self.down_mean_h:g}h", f"k{self.shape:g}"]
        if self.zone_spread:
            parts.append(f"spread{self.zone_spread:g}")
        if self.flap_zones:
            share = f"@{self.flap_episode_share:g}" if self.flap_episode_share < 1 else ""
            parts.append(f"flap{self.flap_zones}{share}")
        if self.partial_share and self.capacity >= 2:
            parts.append(f"part{self.partial_share:g}")
        if self.outage_per_day:
            parts.append(f"out{self.outage_per_day:g}/d")
        if self.diurnal_amplitude:
            parts.append(f"diurnal{self.diurnal_amplitude:g}")
        if self.price_noise:
            parts.append(f"noise{self.price_noise:g}")
        if self.spike_per_day:
            parts.append(f"spike{self.spike_per_day:g}/d*{self.spike_factor:g}")
        return " ".join(parts)


def _utc(value: datetime) -> datetime:
    if not isinstance(value, datetime):
        raise InputError(f"market spec: start must be a datetime, got {value!r}")
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _region_scope(zone_scope: str) -> str:
    return "/".join(zone_scope.split("/")[:2])


def _check_zones(zones: tuple[str, ...]) -> None:
    if not zones:
        raise InputError("market spec: give at least one zone (cloud/region/zone)")
    for scope in zones:
        parts = scope.split("/") if isinstance(scope, str) else []
        if len(parts) not in (2, 3) or not all(parts):
            raise InputError(f"market spec: zone {scope!r} is not cloud/region/zone or cloud/region "
                             "(e.g. aws/us-east-1/use1-az1)")
    twice = sorted({z for z in zones if zones.count(z) > 1})
    if twice:
        raise InputError(f"market spec: zone {twice[0]} is given twice; give each zone once")


_MAX_TICKS = 5_000_000  # a year at 10 s ticks; more would only fill memory

# (field, lowest, highest, whether the lowest is allowed): the ranges that keep a market physical
_RANGES = (
    ("days", 0.0, 3660.0, False), ("tick_s", 0.0, 86400.0, False), ("capacity", 0, 100_000, True),
    ("up_mean_h", 0.0, 1e5, False), ("down_mean_h", 0.0, 1e5, False), ("shape", 0.2, 10.0, True),
    ("zone_spread", 0.0, 3.0, True), ("flap_up_h", 0.0, 1e3, False), ("flap_down_h", 0.0, 1e3, False),
    ("flap_episode_share", 0.0, 1.0, False), ("flap_episode_h", 0.0, 1e5, False),
    ("partial_share", 0.0, 1.0, True), ("partial_h", 0.0, 1e5, False), ("outage_per_day", 0.0, 100.0, True),
    ("outage_h", 0.0, 1e4, False), ("diurnal_amplitude", 0.0, 1.0, True), ("price_noise", 0.0, 2.0, True),
    ("price_reversion_h", 0.0, 1e5, False), ("spike_per_day", 0.0, 100.0, True), ("spike_factor", 1.0, 100.0, True),
    ("spike_h", 0.0, 1e4, False),
)


def _check_ranges(spec: MarketSpec) -> None:
    for name, low, high, low_ok in _RANGES:
        value = getattr(spec, name)
        if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
            raise InputError(f"market spec: {name} must be a number, got {value!r}")
        if not (math.isfinite(value) and (value >= low if low_ok else value > low) and value <= high):
            raise InputError(f"market spec: {name} = {value!r} is out of range "
                             f"({'[' if low_ok else '('}{low:g}, {high:g}])")
    if spec.flap_zones > len(spec.zones):
        raise InputError(f"market spec: flap_zones = {spec.flap_zones} but there are {len(spec.zones)} zones")
    if not 2 <= spec.ticks <= _MAX_TICKS:
        raise InputError(f"market spec: {spec.days:g} days at {spec.tick_s:g} s a tick is {spec.ticks} ticks; "
                         f"give 2 to {_MAX_TICKS:,}")


# --- the catalog --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CatalogZone:
    """A zone of the bundled catalog with a spot price for an instance type (``$`` per node-hour)."""

    location: Location
    spot_usd_per_hour: float
    on_demand_usd_per_hour: float  # the cheapest on-demand row of the region: the price cap
    accelerator: str | None
    accelerator_count: int | None


@functools.cache
def _catalog(instance_type: str) -> dict[str, CatalogZone]:
    """Zone scope → the catalog's figures, for zones with a spot row whose region has an on-demand row."""
    table = bundled_snapshot().table
    rows = table[table["instance_type"] == instance_type]
    on_demand: dict[tuple[str, str], float] = {}
    od_rows = rows[rows["market"] == "on_demand"]
    for cloud, region, price in zip(od_rows["cloud"], od_rows["region"], od_rows["price_usd_per_hour"], strict=True):
        on_demand[(cloud, region)] = min(float(price), on_demand.get((cloud, region), math.inf))
    out: dict[str, CatalogZone] = {}
    spot = rows[rows["market"] == "spot"]
    for row in spot.itertuples(index=False):
        od = on_demand.get((row.cloud, row.region))
        if od is None:  # nothing to cap the price at, and build_world would have no fallback there
            continue
        zone = row.zone if isinstance(row.zone, str) else ""  # a region-wide price: no zone (NA or "")
        loc = Location(row.cloud, row.region, zone, Continent(row.continent))
        known = out.get(loc.zone_scope)
        if known is not None and known.spot_usd_per_hour <= row.price_usd_per_hour:
            continue
        accelerator = row.accelerator if isinstance(row.accelerator, str) and row.accelerator else None
        count = int(row.accelerator_count) if accelerator else None
        out[loc.zone_scope] = CatalogZone(loc, float(row.price_usd_per_hour), od, accelerator, count)
    return out


def catalog_zones(instance_type: str = DEFAULT_INSTANCE_TYPE) -> tuple[str, ...]:
    """The zone scopes (``cloud/region/zone``, or ``cloud/region`` for a region-wide price) the bundled
    catalog has a spot price for ``instance_type`` in, with an on-demand price in the region; sorted."""
    return tuple(sorted(_catalog(instance_type)))


def _catalog_zone(instance_type: str, scope: str) -> CatalogZone:
    known = _catalog(instance_type)
    if scope not in known:
        hint = ", ".join(sorted(known)[:4])
        raise InputError(f"market spec: zone {scope} has no spot price for {instance_type} in the bundled catalog "
                         f"(or no on-demand price in its region); give one of catalog_zones({instance_type!r})"
                         + (f", e.g. {hint}" if hint else ": the catalog has none for this instance type"))
    return known[scope]


# --- random pieces --------------------------------------------------------------------------------------


def _rng(seed: int, piece: int, index: int) -> np.random.Generator:
    """The random stream of one piece of the market (see the module docstring)."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(piece, index)))


def _spell_ticks(rng: np.random.Generator, mean_ticks: float, shape: float, n: int, cap: int) -> np.ndarray:
    """``n`` Weibull spell lengths of mean ``mean_ticks``, rounded to whole ticks, at least 1, at most ``cap``."""
    scale = mean_ticks / math.gamma(1.0 + 1.0 / shape)
    return np.clip(np.rint(rng.weibull(shape, n) * scale), 1, cap).astype(np.int64)


def _alternating(rng: np.random.Generator, ticks: int, on_ticks: float, off_ticks: float,
                 shape: float = 1.0) -> np.ndarray:
    """An alternating renewal process on ``ticks`` ticks: True spells of mean ``on_ticks``, False spells of
    mean ``off_ticks`` (Weibull of ``shape``). It starts in True with the long-run share of True time."""
    on_first = bool(rng.random() < on_ticks / (on_ticks + off_ticks))
    first, second = (on_ticks, off_ticks) if on_first else (off_ticks, on_ticks)
    pairs = int(ticks / (on_ticks + off_ticks) * 1.25) + 8  # enough in one draw almost always
    chunks, total = [], 0
    while total < ticks:
        pair = np.empty(2 * pairs, dtype=np.int64)
        pair[0::2] = _spell_ticks(rng, first, shape, pairs, ticks)
        pair[1::2] = _spell_ticks(rng, second, shape, pairs, ticks)
        chunks.append(pair)
        total += int(pair.sum())
    lengths = np.concatenate(chunks)
    ends = np.cumsum(lengths)
    used = int(np.searchsorted(ends, ticks)) + 1  # the spell that reaches the last tick, and those before
    lengths = lengths[:used].copy()
    lengths[-1] -= int(ends[used - 1]) - ticks
    states = np.zeros(used, dtype=bool)
    states[0::2] = on_first
    states[1::2] = not on_first
    return np.repeat(states, lengths)


def _events(rng: np.random.Generator, ticks: int, per_tick: float, mean_ticks: float) -> np.ndarray:
    """Ticks covered by Poisson events (``per_tick`` a tick) of exponential length ``mean_ticks``; events
    that began before tick 0 and reach into it count too (the market is already running at its start)."""
    lead = math.ceil(5 * mean_ticks)
    n = int(rng.poisson(per_tick * (ticks + lead)))
    starts = rng.integers(-lead, ticks, n)
    ends = starts + np.clip(np.rint(rng.exponential(mean_ticks, n)), 1, ticks + lead).astype(np.int64)
    inside = ends > 0
    depth = np.zeros(ticks + 1, dtype=np.int64)
    np.add.at(depth, np.clip(starts[inside], 0, ticks), 1)
    np.add.at(depth, np.clip(ends[inside], 0, ticks), -1)
    return np.cumsum(depth[:ticks]) > 0


# --- one zone ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Zone:
    """What one zone's generation needs besides the spec."""

    index: int
    catalog: CatalogZone
    flaps: bool
    outage: np.ndarray  # bool per tick: its region is out


def _up(spec: MarketSpec, seed: int, zone: _Zone) -> np.ndarray:
    """Whether the zone is up at each tick: its own spells, or its flaps during a flapping episode."""
    ticks, per_h = spec.ticks, 3600.0 / spec.tick_s
    sigma = spec.zone_spread * float(_rng(seed, _SPREAD, zone.index).standard_normal()) if spec.zone_spread else 0.0
    up = _alternating(_rng(seed, _BASE, zone.index), ticks, spec.up_mean_h * math.exp(sigma) * per_h,
                      spec.down_mean_h * math.exp(-sigma) * per_h, spec.shape)
    if not zone.flaps:
        return up
    flaps = _alternating(_rng(seed, _FLAP, zone.index), ticks, spec.flap_up_h * per_h, spec.flap_down_h * per_h)
    if spec.flap_episode_share >= 1.0:
        return flaps
    share, episode = spec.flap_episode_share, spec.flap_episode_h * per_h
    flapping = _alternating(_rng(seed, _EPISODE, zone.index), ticks, episode, episode * (1 - share) / share)
    return np.where(flapping, flaps, up)


def _levels(spec: MarketSpec, seed: int, zone: _Zone) -> np.ndarray:
    """Nodes the zone offers while up, per tick: ``capacity``, or a partial level held for a partial spell."""
    ticks, cap = spec.ticks, max(1, spec.capacity)
    full = np.full(ticks, cap, dtype=np.int64)
    if cap < 2 or spec.partial_share <= 0:
        return full
    rng, share = _rng(seed, _PARTIAL, zone.index), spec.partial_share
    if share >= 1.0:
        partial = np.ones(ticks, dtype=bool)
    else:
        mean = spec.partial_h * 3600.0 / spec.tick_s
        partial = _alternating(rng, ticks, mean, mean * (1 - share) / share)
    spell = np.cumsum(np.r_[True, partial[1:] != partial[:-1]]) - 1  # the spell each tick is in
    level = rng.integers(1, cap, int(spell[-1]) + 1)[spell]
    return np.where(partial, level, full)


def _business_bump(local_h: np.ndarray) -> np.ndarray:
    """0 … 1 by local hour: sin² over 08:00–20:00 (peak at 14:00), 0 at night."""
    inside = (local_h >= 8.0) & (local_h < 20.0)
    return np.where(inside, np.sin(np.pi * (local_h - 8.0) / 12.0) ** 2, 0.0)


def utc_offset_h(location: Location) -> float:
    """The approximate UTC offset (standard time, hours) of a location's local business hours."""
    return float(_UTC_OFFSET_H.get(location.region, _CONTINENT_OFFSET_H.get(location.continent, 0)))


def _diurnal_cap(spec: MarketSpec, seed: int, zone: _Zone) -> np.ndarray:
    """The most nodes the zone offers at each tick after the business-hours dip (flag traces: 1 or 0)."""
    cap = max(1, spec.capacity)
    if spec.diurnal_amplitude <= 0:
        return np.full(spec.ticks, cap, dtype=np.int64)
    first_h = (spec.start - spec.start.replace(hour=0, minute=0, second=0, microsecond=0)).total_seconds() / 3600
    local = first_h + utc_offset_h(zone.catalog.location) + np.arange(spec.ticks) * (spec.tick_s / 3600.0)
    day = np.floor(local / 24.0).astype(np.int64)
    day -= day[0]
    dither = _rng(seed, _DIURNAL, zone.index).random(int(day[-1]) + 1)[day]  # one draw a local day
    dip = spec.diurnal_amplitude * _business_bump(np.mod(local, 24.0))
    # floor(c·dip + u) has mean c·dip, and for a flag (c = 1) it is 1 exactly where dip ≥ 1 − u: one
    # stretch a day around the peak, with chance dip at each hour
    return cap - np.floor(cap * dip + dither).astype(np.int64)


def _available(spec: MarketSpec, seed: int, zone: _Zone) -> np.ndarray:
    up = _up(spec, seed, zone) & ~zone.outage
    nodes = np.minimum(_levels(spec, seed, zone), _diurnal_cap(spec, seed, zone))
    nodes = np.where(up, nodes, 0)
    if spec.flag:
        return np.where(nodes > 0, UNLIMITED, 0).astype(np.int64)
    return nodes.astype(np.int64)


def _prices(spec: MarketSpec, seed: int, zone: _Zone) -> np.ndarray:
    """Spot ``$`` per node-hour at each tick: the catalog's × AR(1) noise × spikes, capped at on-demand."""
    ticks, tick_h = spec.ticks, spec.tick_s / 3600.0
    log_move = np.zeros(ticks)
    if spec.price_noise > 0:
        keep = math.exp(-tick_h / spec.price_reversion_h)
        shocks = _rng(seed, _NOISE, zone.index).standard_normal(ticks) * spec.price_noise
        shocks[1:] *= math.sqrt(1.0 - keep * keep)  # the first is the stationary draw itself
        log_move = _ar1(shocks, keep)
    price = zone.catalog.spot_usd_per_hour * np.exp(log_move)
    if spec.spike_per_day > 0:
        spikes = _events(_rng(seed, _SPIKE, zone.index), ticks, spec.spike_per_day * tick_h / 24.0,
                         spec.spike_h / tick_h)
        price = np.where(spikes, price * spec.spike_factor, price)
    return np.minimum(price, zone.catalog.on_demand_usd_per_hour)


def _ar1(shocks: np.ndarray, keep: float) -> np.ndarray:
    """x[0] = shocks[0]; x[t] = keep · x[t−1] + shocks[t]. In blocks whose closed form stays in float range."""
    if keep < 1e-9:  # the reversion is much faster than a tick: no memory from tick to tick
        return shocks.copy()
    out = np.empty_like(shocks)
    block = max(1, min(len(shocks), int(300.0 / max(-math.log(keep), 1e-300))))  # keep**-block ≤ e^300
    carry = 0.0
    for first in range(0, len(shocks), block):
        part = shocks[first:first + block]
        powers = keep ** np.arange(len(part))
        # x[t] = keep^t (carry·keep + Σ_{s≤t} shocks[s]/keep^s) within the block
        out[first:first + len(part)] = powers * (carry * keep + np.cumsum(part / powers))
        carry = float(out[first + len(part) - 1])
    return out


# --- the market ---------------------------------------------------------------------------------------------


def generate(spec: MarketSpec, seed: int) -> list[ZoneTrace]:
    """The zone traces of ``spec`` drawn with ``seed`` (an int ≥ 0), one per zone in ``spec.zones`` order:
    ``times_s = arange(spec.ticks) · tick_s`` from ``spec.start``, node counts (or flags) and spot prices a
    tick, no on-demand price (``build_world`` takes the catalog's). Deterministic in (spec, seed). A zone
    that is not in :func:`catalog_zones` for the instance type raises :class:`InputError`."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise InputError(f"market seed must be a whole number >= 0, got {seed!r}")
    seed = int(seed)
    catalog = [_catalog_zone(spec.instance_type, scope) for scope in spec.zones]
    outages = _outages(spec, seed)
    first_flapping = len(spec.zones) - spec.flap_zones
    times_s = np.arange(spec.ticks, dtype=np.float64) * float(spec.tick_s)
    source = f"generated:{spec.name} seed {seed}"
    traces = []
    for i, (scope, entry) in enumerate(zip(spec.zones, catalog, strict=True)):
        zone = _Zone(i, entry, i >= first_flapping, outages[_region_scope(scope)])
        traces.append(ZoneTrace(
            location=entry.location, instance_type=spec.instance_type, start=spec.start, times_s=times_s.copy(),
            available=_available(spec, seed, zone), spot_usd_per_hour=_prices(spec, seed, zone),
            on_demand_usd_per_hour=None, source=source, accelerator=entry.accelerator,
            accelerator_count=entry.accelerator_count))
    return traces


def _outages(spec: MarketSpec, seed: int) -> dict[str, np.ndarray]:
    """Region scope → whether the region is out at each tick (its own stream, by the region's index)."""
    tick_h = spec.tick_s / 3600.0
    out = {}
    for r, region in enumerate(spec.regions):
        if spec.outage_per_day > 0:
            out[region] = _events(_rng(seed, _OUTAGE, r), spec.ticks, spec.outage_per_day * tick_h / 24.0,
                                  spec.outage_h / tick_h)
        else:
            out[region] = np.zeros(spec.ticks, dtype=bool)
    return out


# --- the grid -----------------------------------------------------------------------------------------------

# A fixed set of markets over the regimes a V100/H100 spot market shows. Spells run from minutes (flaps)
# to days (a stable zone's up spells); prices are the catalog's with a few percent of daily wiggle.
GRID: tuple[MarketSpec, ...] = (
    # single-node flag traces (Can't Be Late's convention), 2 zones in one region: a stable pair
    MarketSpec(zones=ZONES_1R_2Z, capacity=0, up_mean_h=24.0, down_mean_h=1.0, shape=1.0),
    # the same shape of market, heavy-tailed and uneven: many short spells, a few down spells of a day or more
    MarketSpec(zones=ZONES_1R_2Z, capacity=0, up_mean_h=6.0, down_mean_h=3.0, shape=0.5, zone_spread=0.5),
    # flag traces where one zone flaps (12-minute spells) for a third of the time
    MarketSpec(zones=ZONES_3Z_2R, capacity=0, up_mean_h=8.0, down_mean_h=2.0, shape=0.8, flap_zones=1,
               flap_up_h=0.2, flap_down_h=0.2, flap_episode_share=0.3, flap_episode_h=6.0),
    # gangs of 4 over 3 regions, 1-2 zones each, zones of unequal stability
    MarketSpec(zones=ZONES_3R, capacity=4, up_mean_h=8.0, down_mean_h=2.0, shape=0.7, zone_spread=0.4,
               partial_share=0.2, partial_h=2.0),
    # gangs of 16 over 3 zones in 2 regions: a zone often has only part of the 16, one zone flaps
    MarketSpec(zones=ZONES_3Z_2R, capacity=16, up_mean_h=8.0, down_mean_h=2.0, shape=0.6, partial_share=0.4,
               partial_h=3.0, flap_zones=1, flap_up_h=0.3, flap_down_h=0.2, flap_episode_share=0.5),
    # correlated regional outages (half a day's worth a day across 3 regions), gangs of 4
    MarketSpec(zones=ZONES_3R, capacity=4, up_mean_h=12.0, down_mean_h=1.5, shape=0.8, outage_per_day=0.5,
               outage_h=3.0),
    # follow the sun: 3 continents whose capacity dips by up to 60 % in their business hours
    MarketSpec(zones=ZONES_3CONT, capacity=8, up_mean_h=12.0, down_mean_h=2.0, shape=0.8,
               diurnal_amplitude=0.6),
    # scarce: mostly unavailable, with long droughts and short windows of 1-2 nodes
    MarketSpec(zones=ZONES_3Z_2R, capacity=2, up_mean_h=2.0, down_mean_h=6.0, shape=0.7, zone_spread=0.3,
               partial_share=0.3, partial_h=1.0),
    # price spikes (twice a day, ×3 for an hour, never above on-demand) over a volatile price
    MarketSpec(zones=ZONES_3Z_2R, capacity=4, up_mean_h=10.0, down_mean_h=1.0, shape=1.0, price_noise=0.15,
               price_reversion_h=6.0, spike_per_day=2.0, spike_factor=3.0, spike_h=1.0),
    # H100 on GCP: a3-highgpu-1g in 4 zones of 3 regions, gangs of 16, often partial, rare outages
    MarketSpec(instance_type="a3-highgpu-1g", zones=ZONES_H100_GCP, capacity=16, up_mean_h=12.0,
               down_mean_h=4.0, shape=0.6, zone_spread=0.3, partial_share=0.5, partial_h=4.0, outage_per_day=0.2,
               outage_h=2.0, diurnal_amplitude=0.3),
    # one zone, one node, no zone to fail over to: long spells broken by episodes of 15-minute flaps (a
    # policy with slack should wait them out rather than buy on-demand through them)
    MarketSpec(zones=ZONES_1Z, capacity=0, up_mean_h=6.0, down_mean_h=2.0, shape=0.6, flap_zones=1,
               flap_up_h=0.25, flap_down_h=0.25, flap_episode_share=0.3, flap_episode_h=4.0),
    # one zone, gangs of 16: often only part of the 16, the same flapping episodes
    MarketSpec(zones=ZONES_1Z, capacity=16, up_mean_h=6.0, down_mean_h=2.0, shape=0.6, partial_share=0.3,
               partial_h=2.0, flap_zones=1, flap_up_h=0.25, flap_down_h=0.25, flap_episode_share=0.3,
               flap_episode_h=4.0),
    # everything at once over 10 zones in 4 regions
    MarketSpec(zones=ZONES_10, capacity=8, up_mean_h=8.0, down_mean_h=2.0, shape=0.7, zone_spread=0.5,
               flap_zones=2, flap_episode_share=0.4, partial_share=0.25, outage_per_day=0.3, outage_h=2.0,
               diurnal_amplitude=0.3, price_noise=0.08, spike_per_day=0.5, spike_factor=2.0, spike_h=2.0),
)

__all__ = ["DEFAULT_INSTANCE_TYPE", "DEFAULT_START", "GRID", "ZONES_1R_2Z", "ZONES_1Z", "ZONES_3CONT", "ZONES_3R",
           "ZONES_3Z_2R", "ZONES_10", "ZONES_H100_GCP", "CatalogZone", "MarketSpec", "catalog_zones", "generate",
           "utc_offset_h"]

"""A spot market over time, as the simulator replays it: per zone, how many nodes could be had and
at what price, tick by tick.

Words
-----
- A *zone trace* (:class:`ZoneTrace`) is one zone's record as one source wrote it: observation
  times, the nodes obtainable from each observation on (a step function), the spot price from each
  observation on, and the zone's on-demand price where the source gives one. Loaders
  (``geotrain.sim.traces``) make them; they never change a figure, only its convention.
- ``available`` counts nodes of the trace's instance type that a launch could get at once. A source
  that records only whether a launch succeeded (a *flag* trace) writes :data:`UNLIMITED` for "yes":
  the count is not known, and the simulator reads it as "as many as the job asks" (the convention of
  Can't Be Late's single-node traces). ``0`` is "none".
- A *market* (:class:`Market`) is zone traces on one tick grid: ``available[z, t]`` and
  ``spot_usd_per_hour[z, t]`` hold at tick ``t`` for the whole tick (the value observed last at or
  before the tick's start). Ticks before a zone's first observation hold no capacity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np

from geotrain.domain import Location
from geotrain.errors import InputError

UNLIMITED = 2**31 - 1  # an available tick of a flag trace: a launch succeeded, how many is not known
DEFAULT_TICK_S = 600.0  # the coarsest default tick: a policy looks at the market at least this often


@dataclass(frozen=True, slots=True, eq=False)
class ZoneTrace:
    """One zone's spot market as one source recorded it (see the module docstring)."""

    location: Location
    instance_type: str
    start: datetime  # UTC: the time of ``times_s == 0``
    times_s: np.ndarray  # float64, seconds after ``start`` of each observation; sorted, the first is 0
    available: np.ndarray  # int64 per observation: nodes obtainable from then on; UNLIMITED: some (a flag)
    spot_usd_per_hour: np.ndarray | None  # float64 per observation, one node for one hour; NaN: not recorded
    on_demand_usd_per_hour: float | None  # None: the source gives none (the simulator looks it up)
    source: str  # the file and its format, for reports
    accelerator: str | None = None  # where the source says (H100, V100 …)
    accelerator_count: int | None = None  # per node, where the source says

    def __post_init__(self) -> None:
        n = len(self.times_s)
        if n == 0:
            raise InputError(f"{self.source}: {self.location.zone_scope} has no observation")
        if len(self.available) != n or (self.spot_usd_per_hour is not None and len(self.spot_usd_per_hour) != n):
            raise InputError(f"{self.source}: {self.location.zone_scope}: series of different lengths")
        if np.any(np.diff(self.times_s) < 0):
            raise InputError(f"{self.source}: {self.location.zone_scope}: observation times go backwards")
        if np.any(self.available < 0):
            raise InputError(f"{self.source}: {self.location.zone_scope}: a negative node count")

    @property
    def flag(self) -> bool:
        """Whether the source records only success or failure (no counts)."""
        return bool(np.all((self.available == 0) | (self.available == UNLIMITED)))

    @property
    def duration_s(self) -> float:
        """Up to the last observation plus one median step (a trace holds its last value that long)."""
        if len(self.times_s) < 2:
            return 0.0
        return float(self.times_s[-1] + np.median(np.diff(self.times_s)))

    @property
    def end(self) -> datetime:
        return self.start + timedelta(seconds=self.duration_s)

    @property
    def key(self) -> str:
        """``cloud/region/zone/instance_type``: one market."""
        return f"{self.location.zone_scope}/{self.instance_type}"


@dataclass(frozen=True, slots=True, eq=False)
class Market:
    """Zone traces on one tick grid (see the module docstring). Build with :func:`align`."""

    zones: tuple[ZoneTrace, ...]
    start: datetime
    tick_s: float
    available: np.ndarray  # int64 [zone, tick]
    spot_usd_per_hour: np.ndarray  # float64 [zone, tick]; NaN: not recorded
    sources: tuple[str, ...] = field(default=())

    @property
    def ticks(self) -> int:
        return int(self.available.shape[1])

    @property
    def hours(self) -> float:
        return self.ticks * self.tick_s / 3600.0

    def time_of(self, tick: int) -> datetime:
        return self.start + timedelta(seconds=tick * self.tick_s)

    def window(self, first_tick: int, ticks: int) -> Market:
        """The ticks ``first_tick …`` (at most ``ticks`` of them), as a market of its own."""
        end = min(self.ticks, first_tick + ticks)
        return Market(self.zones, self.time_of(first_tick), self.tick_s, self.available[:, first_tick:end].copy(),
                      self.spot_usd_per_hour[:, first_tick:end].copy(), self.sources)


def _step_values(times_s: np.ndarray, values: np.ndarray, grid_s: np.ndarray, before: float) -> np.ndarray:
    """The last value observed at or before each grid time (``before`` ahead of the first)."""
    index = np.searchsorted(times_s, grid_s, side="right") - 1
    out = np.where(index >= 0, values[np.clip(index, 0, None)], before)
    return out


def align(zones: list[ZoneTrace] | tuple[ZoneTrace, ...], *, tick_s: float | None = None,
          start: datetime | None = None, hours: float | None = None) -> Market:
    """Zone traces on one grid of ``tick_s`` (default: the coarsest median step among them, at most
    :data:`DEFAULT_TICK_S`), from
    ``start`` (default: the latest first observation, so every zone is observed from tick 0) for
    ``hours`` (default: up to the earliest end); traces observed over spans that do not overlap at all
    (a price history of zones that came and went) are replayed over all of them, each zone unavailable
    outside its own. Traces of one key (zone and instance type) are refused: which one holds would be
    a guess."""
    if not zones:
        raise InputError("no zone trace to replay")
    keys = [z.key for z in zones]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise InputError(f"two traces for {', '.join(twice)}: give each zone and instance type once")
    steps = [float(np.median(np.diff(z.times_s))) for z in zones if len(z.times_s) > 1]
    # a policy acts at every tick: the traces' coarsest step, but at least every DEFAULT_TICK_S (a daily
    # price history still replays decisions every few minutes, its prices held between observations)
    tick = float(tick_s) if tick_s is not None else min(max(steps) if steps else DEFAULT_TICK_S, DEFAULT_TICK_S)
    if not math.isfinite(tick) or tick <= 0:
        raise InputError(f"tick {tick_s!r} is not a number of seconds > 0")
    begin = start or max(z.start for z in zones)
    end = min(z.end for z in zones)
    if start is None and end <= begin:  # observed over different spans (a price history): all of them, a zone
        begin, end = min(z.start for z in zones), max(z.end for z in zones)  # unavailable outside its own
    if hours is not None:
        end = min(end, begin + timedelta(hours=hours)) if start is None else begin + timedelta(hours=hours)
    count = int((end - begin).total_seconds() // tick)
    if count < 1:
        raise InputError("the traces do not overlap in time (each zone's first to last observation); replay "
                         "them one at a time, or give --start inside all of them")
    available = np.zeros((len(zones), count), dtype=np.int64)
    prices = np.full((len(zones), count), np.nan)
    for i, z in enumerate(zones):
        grid = (begin - z.start).total_seconds() + np.arange(count) * tick
        available[i] = _step_values(z.times_s, z.available.astype(np.int64), grid, 0)
        available[i, grid >= z.duration_s] = 0  # after its last observation a zone is not known to have any
        if z.spot_usd_per_hour is not None:
            prices[i] = _step_values(z.times_s, z.spot_usd_per_hour.astype(np.float64), grid, np.nan)
    return Market(tuple(zones), begin, tick, available, prices, tuple(dict.fromkeys(z.source for z in zones)))

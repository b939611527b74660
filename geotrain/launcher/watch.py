"""What the spot market has shown, per zone, learned online from its past only (``MarketWatch``).

A *market key* names one spot market: ``cloud/region/zone/instance_type`` (a replay's zone trace key,
a launch's offer location and instance type). The watch is told what was seen, when
(:meth:`MarketWatch.observe`: how many nodes a launch could have had at that moment: a probe, a launch
that succeeded or failed, a preemption), and answers for a *need*, the spot nodes a gang holds in
each of its zones (``((key, nodes), …)``): the need *holds* while every zone has at least its nodes.

Over time a need alternates between *up* spells (it holds) and *down* spells. For each kind the watch
keeps the spells that ended and the one in progress, and estimates a hazard that depends on the
spell's age, piecewise constant over the age bins :data:`AGE_EDGES_H`. In bin ``b``, with ``e_b``
spells that ended at an age in the bin and ``x_b`` hours that spells (ended or not) spent in it,

    λ_b = (e_b + β·λ₀) / (x_b + β),     λ₀ = (Σe + ½) / (Σx + 24 h)

(``β`` = :data:`PRIOR_H` hours of prior exposure at the pooled rate ``λ₀``, itself half an event a
day before any is seen): a zone that flaps has a high hazard at young ages; a spell that has lasted
long is expected to last (heavy tails), as far as the zone's own spells show. Then the chance that a
spell of age ``a`` lasts ``x`` more hours is ``exp(−(Λ(a+x) − Λ(a)))``, ``Λ`` the cumulative hazard.
The first spell seen is left out (its start is not known). Gangs of different sizes in one zone are
different needs (a zone that gives 2 nodes for days may give 16 only for minutes), and a gang spread
over zones is one need whose spells are those of all its zones together (their correlation is in
the data, not assumed away).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

AGE_EDGES_H = np.array([0.0, 1 / 6, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0])  # last bin: to infinity
PRIOR_H = 1.0  # hours of prior exposure per age bin at the pooled rate
PRIOR_EVENTS = 0.5  # pooled prior: half an event …
PRIOR_EXPOSURE_H = 24.0  # … per day
PRICE_MEMORY_H = 24.0  # the usual price of a market: its prices seen, weighted with this half-life
PRICE_REVERSION_H = 1.0  # before a market's prices have moved: how long a deviation is expected to last

Need = tuple[tuple[str, int], ...]  # ((market key, spot nodes), …) sorted


def need_of(counts: dict[str, int]) -> Need:
    return tuple(sorted((k, n) for k, n in counts.items() if n > 0))


class _Spells:
    """One kind of spell (up or down) of one need: per age bin, the ends seen and the hours spent."""

    __slots__ = ("ends", "_exposure_h", "_pending")

    def __init__(self) -> None:
        self.ends = np.zeros(len(AGE_EDGES_H))
        self._exposure_h = np.zeros(len(AGE_EDGES_H))
        self._pending: list[float] = []  # lengths not yet spread over the bins (done when a hazard is asked)

    def add(self, length_h: float, ended: bool) -> None:
        self._pending.append(length_h)
        if ended:
            self.ends[_bin(length_h)] += 1

    @property
    def exposure_h(self) -> np.ndarray:
        if self._pending:
            self._exposure_h += _exposure(np.array(self._pending)).sum(axis=0)
            self._pending.clear()
        return self._exposure_h

    def hazard(self, current_h: float | None, prior_exposure_h: float = PRIOR_EXPOSURE_H) -> np.ndarray:
        """Per age bin, the hazard per hour, with the spell in progress (of age ``current_h``) counted."""
        exposure = self.exposure_h if current_h is None else self.exposure_h + _exposure(np.array([current_h]))[0]
        pooled = (self.ends.sum() + PRIOR_EVENTS) / (exposure.sum() + prior_exposure_h)
        return (self.ends + PRIOR_H * pooled) / (exposure + PRIOR_H)


_UPPER = np.append(AGE_EDGES_H[1:], np.inf)


def _bin(age_h: float) -> int:
    return int(np.searchsorted(AGE_EDGES_H, age_h, side="right") - 1)


def _exposure(lengths_h: np.ndarray) -> np.ndarray:
    """Hours spells of ``lengths_h`` spent in each age bin (one row per spell)."""
    return np.clip(lengths_h[:, None] - AGE_EDGES_H, 0.0, _UPPER - AGE_EDGES_H)


def _cumulative(hazard: np.ndarray) -> np.ndarray:
    """Λ at each bin edge (the last bin extends past the last edge at its own hazard)."""
    widths = np.diff(AGE_EDGES_H)
    return np.concatenate(([0.0], np.cumsum(hazard[:-1] * widths)))


def _cum_at(cum: np.ndarray, hazard: np.ndarray, ages_h: np.ndarray) -> np.ndarray:
    inside = np.interp(ages_h, AGE_EDGES_H, cum)
    beyond = cum[-1] + hazard[-1] * np.maximum(0.0, ages_h - AGE_EDGES_H[-1])
    return np.where(ages_h > AGE_EDGES_H[-1], beyond, inside)


def _expected_rest_h(hazard: np.ndarray, age_h: float, horizon_h: float) -> float:
    """``∫₀^h exp(−(Λ(a+x) − Λ(a))) dx`` for a hazard constant per age bin."""
    upper = np.append(AGE_EDGES_H[1:], np.inf)
    total, alive, at = 0.0, 1.0, age_h
    end = age_h + max(0.0, horizon_h)
    for b in range(len(AGE_EDGES_H)):
        if upper[b] <= at:
            continue
        stop = min(upper[b], end)
        if stop <= at:
            break
        rate, span = float(hazard[b]), stop - at
        total += alive * (span if rate <= 1e-12 else (1 - math.exp(-rate * span)) / rate)
        alive *= math.exp(-rate * span)
        at = stop
        if at >= end:
            break
    return total


@dataclass(frozen=True, slots=True)
class Outlook:
    """A need as the watch sees it now: up or down, since when, and what its spells say of the future."""

    up: bool | None  # None: never observed
    age_h: float  # of the spell in progress
    up_share: float  # of the time observed (a prior of one half before anything is seen)
    up_hazard: np.ndarray  # per age bin, per hour
    down_hazard: np.ndarray
    _up_cum: np.ndarray = field(init=False, repr=False)  # Λ at the bin edges (kept: asked for many times)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_up_cum", _cumulative(self.up_hazard))

    def survival(self, ahead_h: np.ndarray) -> np.ndarray:
        """The chance that the up spell in progress lasts ``ahead_h`` more hours (0 when down; as a fresh
        spell when never observed)."""
        if self.up is None:
            return self.fresh_survival(ahead_h)
        if not self.up:
            return np.zeros_like(ahead_h, dtype=float)
        return self.survival_from(self.age_h, ahead_h)

    def fresh_survival(self, ahead_h: np.ndarray) -> np.ndarray:
        """The chance that an up spell lasts ``ahead_h`` hours from its start (age 0)."""
        return self.survival_from(0.0, ahead_h)

    def survival_from(self, age_h: float, ahead_h: np.ndarray) -> np.ndarray:
        """The chance that an up spell of age ``age_h`` lasts ``ahead_h`` more hours."""
        cum, hazard = self._up_cum, self.up_hazard
        start = _cum_at(cum, hazard, np.array([age_h]))[0]
        return np.exp(-(_cum_at(cum, hazard, age_h + np.asarray(ahead_h, dtype=float)) - start))

    def expected_down_h(self, horizon_h: float) -> float:
        """The expected rest of the down spell in progress (0 when up), at most ``horizon_h``: the integral
        of its survival, exact for the piecewise constant hazard."""
        if self.up:
            return 0.0
        return _expected_rest_h(self.down_hazard, self.age_h, horizon_h)


@dataclass
class _PriceMemory:
    """One market's prices: the last, the usual level (a geometric mean: a spike weighs as much as a dip of
    the same factor), and the AR(1) fit of the log-price's deviation
    from it (one sample per price seen: ``x_t = ln(p_t/μ)``, ``φ = Σ x_{t−1}x_t / Σ x_{t−1}²`` per step of
    ``step_s``)."""

    since_s: float
    price: float
    usual: float
    step_s: float = 0.0
    lagged: float = 0.0  # Σ x_{t−1}·x_t
    squares: float = 0.0  # Σ x_{t−1}²
    steps: int = 0

    def see(self, at_s: float, price: float) -> None:
        dt = max(0.0, at_s - self.since_s)
        if dt <= 0:
            self.price = price
            return
        before = math.log(max(self.price, 1e-12) / max(self.usual, 1e-12))
        keep = 0.5 ** (dt / 3600 / PRICE_MEMORY_H)
        self.usual = math.exp(keep * math.log(max(self.usual, 1e-12)) + (1 - keep) * math.log(max(self.price, 1e-12)))
        now = math.log(max(price, 1e-12) / max(self.usual, 1e-12))
        self.lagged += before * now
        self.squares += before * before
        self.steps += 1
        self.step_s += (dt - self.step_s) / self.steps
        self.since_s, self.price = at_s, price

    def reversion_h(self) -> float:
        if self.squares <= 1e-12 or self.step_s <= 0:
            return PRICE_REVERSION_H
        phi = min(max(self.lagged / self.squares, 1e-6), 0.999)
        return min(max(self.step_s / 3600 / -math.log(phi), self.step_s / 3600), PRICE_MEMORY_H)


@dataclass
class _Shares:
    """Hours per combination of needs holding (``MarketWatch.together``)."""

    mask: tuple[bool, ...] | None = None
    since_s: float = 0.0
    hours_by_mask: dict[tuple[bool, ...], float] = field(default_factory=dict)
    some: _Track = field(default_factory=lambda: _Track())  # spells of "at least one need holds"

    def see(self, at_s: float, mask: tuple[bool, ...]) -> None:
        if mask == self.mask:
            return
        self.some.see(at_s, any(mask))
        if self.mask is not None:
            self.hours_by_mask[self.mask] = self.hours_by_mask.get(self.mask, 0.0) + (at_s - self.since_s) / 3600
        self.mask, self.since_s = mask, at_s

    def hours(self, now_s: float) -> list[tuple[tuple[bool, ...], float]]:
        out = dict(self.hours_by_mask)
        if self.mask is not None:
            out[self.mask] = out.get(self.mask, 0.0) + max(0.0, now_s - self.since_s) / 3600
        return [(mask, h) for mask, h in out.items() if h > 0]


@dataclass
class _Track:
    """One need's spells, kept up to date as observations arrive."""

    state: bool | None = None
    since_s: float = 0.0
    first: bool = True  # the spell in progress is the first seen (its start is not known)
    observed_from_s: float | None = None
    up_s: float = 0.0  # time up in spells that ended (first one included)
    up: _Spells = field(default_factory=_Spells)
    down: _Spells = field(default_factory=_Spells)

    def see(self, at_s: float, holds: bool) -> None:
        if self.state is None:
            self.state, self.since_s, self.observed_from_s = holds, at_s, at_s
            return
        if holds == self.state:
            return
        length_h = max(0.0, at_s - self.since_s) / 3600
        if self.state:
            self.up_s += at_s - self.since_s
        if not self.first:
            (self.up if self.state else self.down).add(length_h, ended=True)
        self.state, self.since_s, self.first = holds, at_s, False


class MarketWatch:
    """Observations of spot markets and, per need, the spells they show (see the module docstring)."""

    def __init__(self, *, down_prior_h: float = PRIOR_EXPOSURE_H / PRIOR_EVENTS) -> None:
        """``down_prior_h``: the expected length of a down spell before any has been seen (a launch: its
        ``--block-min``)."""
        self._down_prior_exposure_h = down_prior_h * PRIOR_EVENTS
        self._history: dict[str, list[tuple[float, int]]] = {}  # key -> (time, nodes) where it changed
        self._last: dict[str, int] = {}
        self._now_s: float = -math.inf
        self._tracks: dict[Need, _Track] = {}
        self._by_key: dict[str, list[Need]] = {}
        self._shares: dict[tuple[Need, ...], _Shares] = {}
        self._changes = 0  # observations that changed something (outlooks are kept until the next)
        self._memo: dict[Need, tuple[float, int, Outlook]] = {}
        self._prices: dict[str, _PriceMemory] = {}
        self._shares_by_key: dict[str, list[tuple[Need, ...]]] = {}

    @property
    def now_s(self) -> float:
        return self._now_s

    def observe(self, key: str, at_s: float, available: int) -> None:
        """``available`` nodes of ``key`` could be had at ``at_s`` (times never go backwards)."""
        self._now_s = max(self._now_s, at_s)
        if self._last.get(key) == available:
            return
        self._last[key] = available
        self._changes += 1
        self._history.setdefault(key, []).append((at_s, available))
        for need in self._by_key.get(key, ()):
            self._tracks[need].see(at_s, self._holds(need))
        for needs in self._shares_by_key.get(key, ()):
            self._shares[needs].see(at_s, tuple(self._holds(n) for n in needs))

    def observe_price(self, key: str, at_s: float, usd_per_hour: float) -> None:
        """A spot price seen at ``at_s`` (per node-hour); it holds until the next one."""
        last = self._prices.get(key)
        if last is None:
            self._prices[key] = _PriceMemory(at_s, usd_per_hour, usd_per_hour)
            return
        last.see(at_s, usd_per_hour)

    def usual_price(self, key: str) -> float | None:
        """The price ``key`` usually asks: the geometric mean of its past prices, each for as long as it
        held, weighted with a half-life of :data:`PRICE_MEMORY_H` (None: no price seen)."""
        last = self._prices.get(key)
        return None if last is None else last.usual

    def reversion_h(self, key: str) -> float:
        """How long a price of ``key`` away from its usual level takes to return (the e-folding time of
        its log-price's deviation, fitted as an AR(1) on the prices seen; :data:`PRICE_REVERSION_H`
        before any move is seen)."""
        last = self._prices.get(key)
        return PRICE_REVERSION_H if last is None else last.reversion_h()

    def keys(self) -> list[str]:
        """The markets seen so far."""
        return list(self._last)

    def available(self, key: str) -> int | None:
        """The nodes of ``key`` seen last (None: never seen)."""
        return self._last.get(key)

    def holds(self, need: Need) -> bool:
        return all(self._last.get(k, 0) >= n for k, n in need)

    def outlook(self, need: Need, now_s: float | None = None) -> Outlook:
        now_s = self._now_s if now_s is None else now_s
        memo = self._memo.get(need)
        if memo is not None and memo[0] == now_s and memo[1] == self._changes:
            return memo[2]
        outlook = self._outlook(self._track(need), now_s)
        self._memo[need] = (now_s, self._changes, outlook)
        return outlook

    def _outlook(self, track: _Track, now_s: float) -> Outlook:
        if track.state is None:
            empty = _Spells()
            return Outlook(None, 0.0, 0.5, empty.hazard(None), empty.hazard(None, self._down_prior_exposure_h))
        age_h = max(0.0, now_s - track.since_s) / 3600
        current = None if track.first else age_h
        up_h = (track.up_s + (now_s - track.since_s if track.state else 0.0)) / 3600
        span_h = max(0.0, now_s - track.observed_from_s) / 3600
        share = (up_h + 0.5) / (span_h + 1.0)  # half an hour of each as a prior
        up_hazard = track.up.hazard(current if track.state else None)
        down_hazard = track.down.hazard(None if track.state else current, self._down_prior_exposure_h)
        return Outlook(track.state, age_h, share, up_hazard, down_hazard)

    def together(self, needs: tuple[Need, ...], now_s: float | None = None) -> list[tuple[tuple[bool, ...], float]]:
        """How the needs held together over the time observed: ``(which held, hours)`` per combination
        seen. Zones that go down together show so here (no independence is assumed)."""
        now_s = self._now_s if now_s is None else now_s
        shares = self._shares.get(needs)
        if shares is None:
            shares = _Shares()
            keys = sorted({k for need in needs for k, _ in need})
            for t, levels in self._sweep(keys):
                shares.see(t, tuple(all(levels[k] >= n for k, n in need) for need in needs))
            self._shares[needs] = shares
            for k in keys:
                self._shares_by_key.setdefault(k, []).append(needs)
        return shares.hours(now_s)

    def some_outlook(self, needs: tuple[Need, ...], now_s: float | None = None) -> Outlook:
        """The spells of "at least one of the needs holds" (a market's outages, all its zones at once)."""
        now_s = self._now_s if now_s is None else now_s
        self.together(needs, now_s)
        return self._outlook(self._shares[needs].some, now_s)

    def _holds(self, need: Need) -> bool:
        return self.holds(need)

    def _sweep(self, keys: list[str]):  # noqa: ANN202 - yields (time, {key: nodes}) after each change
        """The keys' histories merged: at each change time, every key's nodes (0 before its first)."""
        events = sorted((t, k, v) for k in keys for t, v in self._history.get(k, ()))
        levels = {k: 0 for k in keys}
        i = 0
        while i < len(events):
            t = events[i][0]
            while i < len(events) and events[i][0] == t:
                levels[events[i][1]] = events[i][2]
                i += 1
            yield t, levels

    def _track(self, need: Need) -> _Track:
        track = self._tracks.get(need)
        if track is not None:
            return track
        track = _Track()
        keys = sorted({k for k, _ in need})
        for t, levels in self._sweep(keys):
            if all(k in self._history and self._history[k][0][0] <= t for k in keys):
                track.see(t, all(levels[k] >= n for k, n in need))
        self._tracks[need] = track
        for k, _ in need:
            self._by_key.setdefault(k, []).append(need)
        return track

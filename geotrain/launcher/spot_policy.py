"""Where a job with a deadline trains next: hold its gang, move it, wait for spot, or buy on-demand.

One decision, made at every look of the launcher (and every tick of a replay), over the *mixes* the
job could hold: a whole gang of spot nodes in one zone, the gang spread over zones that each hold part
of it, a zone's spot nodes filled up with on-demand ones, the gang on on-demand nodes. A mix costs
``π`` $/h (its nodes at the current prices, returning to their usual level over the market's fitted
reversion time; plus its training traffic) and trains ``r`` samples/s (the perf model); its spot nodes
are a *need* of the :class:`~geotrain.launcher.watch.MarketWatch`, which says how likely the need is
to hold ``x`` more hours (``P(X > x)``, from the zones' own past spells, at the spell's age).

**The safety net first** (``launcher.deadline``): once its margin is spent the run buys the cheapest
on-demand gang that still finishes in time and stays there. Inside the margin the policy minimises
the expected cost to finish, one step ahead (``S`` samples and ``H`` hours left, ``R`` a restart,
``Δ`` a look, ``C`` the checkpoint interval):

- *The value of the work left.* ``V(S, H) = S·(q·c_s + (1 − q)·c_od)``: ``c_od`` $/sample on
  on-demand; ``c_s`` $/good sample of spot and ``λ`` the gangs it loses per hour held, both as the
  market usually is (over the time watched, at each moment the one-zone mix then up that is cheapest
  per good sample when entered at the start of its spell); ``q`` the share of the work spot does before
  the margin ``m = H − R − S/r_od`` is spent: with ``T = S/r_od``, ``w`` the hours spent waiting per hour
  of spot (the time no such mix was up) and ``L = R + C/2 + Δ/2`` the margin one loss spends, spot that
  has trained ``t`` hours has spent ``w·t + L·N(λt)`` (``N`` Poisson) and trains on while that is at most
  ``m``: ``q = (1/T)·∫₀ᵀ P(N(λt) ≤ (m − w·t)/L) dt`` (linear between whole numbers of losses). The
  waiting comes as spot trains, not all of it first.
- *Entering a mix* (a restart; a change the run makes checkpoints first), held until its need breaks
  at ``X`` or the work is done: ``J = E[cost(min(X, R + S/r)) + V(S − g(X), H − X)]``, with
  ``g(X) = r·C·⌊(X − R)/C⌋`` the work that reached a checkpoint (all of it with a notice long enough to
  write one).
- *Staying* in the mix held: the same, without the restart and with the work since its last
  checkpoint at stake.
- *Waiting* for a spot mix that is down now until its down spell is expected to end (at least a look),
  then entering it at the start of its spell: the same ``J`` at ``H`` less that wait.
- *An on-demand stint* while every spot mix is down (behind the pace; see below), for the outage's expected rest ``W``:
  ``cost(W) + V(S − r_od·(W − R), H − W)``; while spot is up, on-demand to the end.

The smallest expected cost wins; leaving the mix held must win by :data:`SWITCH_MARGIN` of it, and
waiting must win by :data:`WAIT_MARGIN` over the best mix to enter (closer estimates are noise, and a
look of waiting spends margin that a policy asking again each look would spend again; an on-demand
gang given back to wait needs only that margin, as it spends no restart). A *pace* keeps the lesser of
Uniform Progress's line ``λ_p·m₀·H/H₀`` (:data:`PACE`; ``m₀`` the first margin, at most
:data:`PACE_CAP` of the time the work needed on on-demand) and what the work left is expected to
spend, ``T·(w + λ·L)``: an on-demand gang the run holds stays until a restart's worth ahead of it, and
ahead of it, while every spot mix is down, the run waits (the margin is there to wait out the outage;
with twice the time needed, the calendar's line alone called a run that had waited an hour "behind"
and bought on-demand through the next outage, and where the past day said the work would spend more
than the whole margin, the uncapped line did so from the first look). Waiting for a zone while
another's spot can be had stops at the calendar's line, uncapped (until a zone's down spells are seen,
its prior says it is back within minutes at every look). A zone that
flapped is left alone while its young spells' hazard makes it dear, and taken again when its spells
say it holds; a zone's price, its restarts and its lost work are in the same figure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from geotrain.launcher.deadline import EPSILON_H, Deadline, MarketRule
from geotrain.launcher.watch import MarketWatch, Need, need_of

GRID_POINTS = 48  # where a need may break, between now and the end of the work
SWITCH_MARGIN = 0.25  # leaving the mix held must save this share of its expected cost
WAIT_MARGIN = 0.03  # waiting must save this share of the best entry's expected cost
PACE = 1.0  # how closely the work follows the line from start to deadline (Uniform Progress: 1; 0: no pace)
PACE_CAP = 0.5  # the line paces at most this share of the time the work needs on on-demand (0: no cap)


@dataclass(frozen=True, slots=True)
class Mix:
    """A gang the run could hold (see the module docstring)."""

    nodes: tuple[tuple[str, int], ...]  # (offer id, nodes), sorted
    usd_per_hour: float  # its nodes at the current prices, plus its training traffic
    samples_per_s: float
    need: Need  # spot nodes per market key; () for an on-demand gang
    usual_usd_per_hour: float | None = None  # at the prices its markets usually ask (None: as now)
    reversion_h: float = 1.0  # how long its prices take to return to the usual level

    def usd_over(self, hours: np.ndarray | float) -> np.ndarray:
        """Holding it ``hours``: a spot price away from its usual level returns to it over ``reversion_h``
        (``μ·x + (π − μ)·τ·(1 − e^(−x/τ))``)."""
        hours = np.asarray(hours, dtype=float)
        usual = self.usual_usd_per_hour
        if usual is None or usual == self.usd_per_hour:
            return self.usd_per_hour * hours
        tau = max(self.reversion_h, 1e-6)
        return usual * hours + (self.usd_per_hour - usual) * tau * (1 - np.exp(-hours / tau))

    @property
    def on_demand(self) -> bool:
        return not self.need

    @property
    def usd_per_sample(self) -> float:
        return self.usd_per_hour / (3600.0 * self.samples_per_s) if self.samples_per_s > 0 else math.inf


@dataclass(frozen=True, slots=True)
class Situation:
    """What the launcher knows at a decision."""

    deadline: Deadline
    checkpoint_every_h: float  # hours of training between checkpoints
    notice_saves_work: bool  # a preemption's notice leaves time to write a checkpoint
    held: Mix | None = None  # the gang training now (whole); None: none
    restart_left_h: float = 0.0  # of the held gang's restart
    since_checkpoint_h: float = 0.0  # hours of training since the held gang's last checkpoint


@dataclass(frozen=True, slots=True)
class Decision:
    mix: Mix | None  # None: hold nothing (wait for spot)
    committed: bool  # on-demand to the end (the safety net)
    expected_usd: float  # to finish the job, by the estimate that chose it
    reason: str


@dataclass(frozen=True, slots=True)
class MarketValue:
    """What spot is worth for the work left (``V`` of the module docstring)."""

    spot_usd_per_sample: float  # c_s: per good sample, when spot is next taken
    on_demand_usd_per_sample: float  # c_od
    on_demand_samples_per_s: float  # r_od: the fastest on-demand gang
    preemptions_per_h: float  # λ: gangs lost per hour held, the market's usual spot taken
    loss_h: float  # L: the margin one loss spends (a restart, half a checkpoint interval, half a look)
    waiting_share: float  # w: hours of margin spent waiting per hour of spot, while no spot can be had
    outage_h: float = 0.0  # the expected rest of an outage of every spot mix (0: one holds now)
    wait_usd: float = math.inf  # waiting for a spot mix that is down now (inf: none to wait for)

    def work_usd(self, samples: np.ndarray | float, hours_left: np.ndarray | float, restart_h: float) -> np.ndarray:
        """``V(S, H) = S·(q·c_s + (1 − q)·c_od)``: spot trains until the margin cannot pay for what it has
        spent, on-demand the rest. With ``T = S/r`` hours of training and ``m = H − R − T`` the margin, spot
        that has trained ``t`` hours has spent ``w·t`` of it waiting and ``L·N(λt)`` on losses (``N`` a
        Poisson process); it trains on while ``w·t + L·N(λt) ≤ m``, so
        ``q = (1/T)·∫₀ᵀ P(N(λt) ≤ (m − w·t)/L) dt`` (linear between whole numbers of losses). The waiting
        comes as spot trains, not all at once: a margin that pays for half the waiting ahead still lets
        spot do about half the work."""
        samples = np.maximum(np.asarray(samples, dtype=float), 0.0)
        if self.spot_usd_per_sample >= self.on_demand_usd_per_sample:
            return samples * self.on_demand_usd_per_sample
        train_h = samples / (3600 * self.on_demand_samples_per_s)
        margin_h = np.asarray(hours_left, dtype=float) - restart_h - train_h
        share = _spot_share(train_h, margin_h, self.preemptions_per_h, self.waiting_share, self.loss_h)
        return samples * (share * self.spot_usd_per_sample + (1 - share) * self.on_demand_usd_per_sample)


SHARE_POINTS = 8  # where the share's integral over the training left is taken (midpoints)


def _spot_share(train_h: np.ndarray, margin_h: np.ndarray, losses_per_h: float, waiting_share: float,
                loss_h: float) -> np.ndarray:
    """``q`` of :meth:`MarketValue.work_usd`: the share of ``train_h`` hours that spot trains before a
    margin of ``margin_h`` is spent by ``waiting_share`` hours of waiting per hour trained and ``loss_h``
    a loss, at ``losses_per_h`` (the integral by the midpoint rule)."""
    train, margin = np.broadcast_arrays(np.maximum(np.asarray(train_h, dtype=float), 0.0),
                                        np.asarray(margin_h, dtype=float))
    shape = train.shape
    train, margin = train.reshape(-1), margin.reshape(-1)
    steps = (np.arange(SHARE_POINTS) + 0.5) / SHARE_POINTS
    at_h = train[:, None] * steps[None, :]  # hours trained at each point
    mu = losses_per_h * at_h
    k = (margin[:, None] - waiting_share * at_h) / max(loss_h, 1e-9)  # losses the margin still pays for there
    alive = np.zeros(at_h.shape)
    ok = k >= 0
    sure = ok & ((mu < 1e-9) | (k > mu + 10 * np.sqrt(mu) + 10))  # no loss expected, or every one paid for
    alive[sure] = 1.0
    todo = ok & ~sure
    if todo.any():
        m, kk = mu[todo], k[todo]
        top = int(np.floor(kk.max())) + 2
        j = np.arange(top)
        log_pmf = j * np.log(m[:, None]) - m[:, None] - np.array([math.lgamma(x + 1) for x in j])
        cdf = np.cumsum(np.exp(log_pmf), axis=1)  # P(N ≤ j)
        low = np.floor(kk).astype(int)
        frac = kk - low
        rows = np.arange(len(kk))
        alive[todo] = (1 - frac) * cdf[rows, low] + frac * cdf[rows, np.minimum(low + 1, top - 1)]
    out = np.where(train > 0, np.clip(alive, 0.0, 1.0).mean(axis=1), 1.0)
    return out.reshape(shape)


class SpotPolicy:
    """The decision of the module docstring; one per run (it remembers that the net was reached)."""

    def __init__(self, *, switch_margin: float = SWITCH_MARGIN, grid_points: int = GRID_POINTS,
                 pace: float = PACE, pace_cap: float = PACE_CAP) -> None:
        self.switch_margin = switch_margin
        self.grid_points = grid_points
        self.pace = pace
        self.pace_cap = pace_cap
        self.committed = False
        self._paced: tuple[float, float] | None = None  # (margin, hours left) at the first decision
        self._unit: tuple[np.ndarray, np.ndarray] | None = None  # the grid of a horizon of 1 h

    def decide(self, situation: Situation, mixes: Sequence[Mix], watch: MarketWatch,
               holds: Callable[[Need], bool] | None = None) -> Decision:
        """``holds(need)``: whether a mix's spot nodes can be had now (default: the watch's last look)."""
        holds = holds or watch.holds
        d = situation.deadline
        on_demand = [m for m in mixes if m.on_demand and m.samples_per_s > 0]
        if on_demand and (self.committed or d.rule() is MarketRule.ON_DEMAND):
            self.committed = True
            mix = fallback(d, on_demand, situation.held, situation.restart_left_h)
            return Decision(mix, True, mix.usd_per_hour * (d.restart_h + d.samples_left / (3600 * mix.samples_per_s)),
                            f"the deadline's margin is spent ({d.margin_h():.2f} h): on-demand to the end")
        value = self.market_value(situation, mixes, watch)
        h = d.hours_left
        if self._paced is None:  # the first decision: the margin to pace over the hours to the deadline
            self._paced = (max(0.0, d.margin_h()), max(h, 1e-9))
        reserve = self.reserve_h(h, d.samples_left, value)  # the pace against on-demand
        held = situation.held
        if held is not None and held.on_demand and d.margin_h() < reserve + d.restart_h:
            return Decision(held, False, math.nan, "on-demand until a restart's worth ahead of the pace")
        if value is not None and value.outage_h > 0 and d.margin_h() >= reserve and (held is None or held.on_demand):
            # every spot mix is down and the margin is ahead of the pace: the time is there to wait
            return Decision(None, False, value.wait_usd, "ahead of the pace: waiting for spot")
        # waiting for a zone while another's spot can be had: the calendar's line (a zone's prior says it
        # is back within minutes at every look until its down spells are seen)
        behind = d.margin_h() < self.reserve_h(h)
        wait = value.wait_usd if value is not None and not behind else math.inf
        waiting = Decision(None, False, wait, "waiting for spot")
        stay = None
        if held is not None and (held.on_demand or holds(held.need)):
            cost = self.expected_usd(held, situation, watch, value, entering=False)
            stay = Decision(held, False, cost, "holding its gang")
        entry = None
        for mix in mixes:
            if mix == held or mix.samples_per_s <= 0 or not (mix.on_demand or holds(mix.need)):
                continue
            cost = self.expected_usd(mix, situation, watch, value, entering=True)
            if entry is None or cost < entry.expected_usd:
                entry = Decision(mix, False, cost, "the least expected cost to finish")
        # a change must win by a margin: leaving the gang held, and waiting over the best entry (estimates
        # this close are noise, and each change spends a restart or a look of the margin); an on-demand
        # gang given back to wait spends no restart, so waiting needs only its own margin over it
        if entry is None or waiting.expected_usd < entry.expected_usd * (1 - WAIT_MARGIN):
            entry = waiting
        switch = WAIT_MARGIN if held is not None and held.on_demand and entry.mix is None else self.switch_margin
        if stay is not None and entry.expected_usd >= stay.expected_usd * (1 - switch):
            return stay
        return entry

    def reserve_h(self, hours_left: float, samples_left: float = 0.0, value: MarketValue | None = None) -> float:
        """The margin the pace keeps with ``hours_left`` to go: the lesser of the calendar's line
        ``λ·m₀·H/H₀`` (Uniform Progress, ``λ = 1``, spends the first margin ``m₀`` evenly over the time)
        and what the work left is expected to spend, ``T·(w + λ_s·L)`` (``V``'s waiting share and losses
        over its ``T`` hours of training); against on-demand the line paces at most ``c·(H₀ − m₀)`` of the
        first margin (:data:`PACE_CAP` ``c`` of the time the work needed on on-demand). With slack the
        calendar's line keeps far more than the market needs, and a run that waited an hour would be
        "behind" and buy on-demand through the next outage; the expected spend lets it wait wherever the
        market leaves the time, and where the past day's market says even the whole margin will not do
        (a zone that flapped all day), the cap leaves the slack beyond ``c`` to wait in. Without
        ``value``: the calendar's line alone, uncapped. No reserve where the first margin was unbounded
        (nothing left to train, or no on-demand gang to fall back on)."""
        if self._paced is None or math.isinf(self._paced[0]):
            return 0.0
        margin_h, start_h = self._paced
        if value is None or not math.isfinite(value.spot_usd_per_sample):
            return self.pace * margin_h * max(0.0, hours_left) / start_h
        if self.pace_cap > 0:
            margin_h = min(margin_h, self.pace_cap * (start_h - margin_h))
        line_h = self.pace * margin_h * max(0.0, hours_left) / start_h
        train_h = samples_left / (3600 * value.on_demand_samples_per_s)
        return min(line_h, train_h * (value.waiting_share + value.preemptions_per_h * value.loss_h))

    # -- the estimates ------------------------------------------------------------------------

    def market_value(self, situation: Situation, mixes: Iterable[Mix], watch: MarketWatch) -> MarketValue | None:
        """``V``'s figures from the one-zone spot mixes: over the time the watch has seen, at each moment
        the cheapest per good sample (entered at the start of a spell) of those that held then, if any
        is cheaper than on-demand, gives ``c_s`` and ``λ``; the moments none did, ``w``; ``c_od`` and
        ``r_od`` from the on-demand gangs; ``W``, the expected rest of an outage of every spot mix (0
        while one holds). Zones that went down together count as such (``MarketWatch.together``)."""
        mixes = list(mixes)
        od = [m for m in mixes if m.on_demand and m.samples_per_s > 0]
        if not od:
            return None
        d = situation.deadline
        cheapest_od = min(od, key=lambda m: m.usd_per_sample)
        fastest_od = max(m.samples_per_s for m in od)
        lost_h = 0.0 if situation.notice_saves_work else situation.checkpoint_every_h / 2
        loss_h = d.restart_h + lost_h + d.look_h / 2
        singles = sorted((m for m in mixes if len(m.need) == 1 and len(m.nodes) == 1 and m.samples_per_s > 0),
                         key=lambda m: m.need)
        rows = []
        for mix in singles:
            hold_h, good, broken = self._fresh_yield(mix, situation, watch.outlook(mix.need))
            usd = float(mix.usd_over(hold_h)) / good if good > 0 else math.inf
            rows.append((usd, broken / max(hold_h, 1e-9)))
        good_rows = [i for i in sorted(range(len(rows)), key=lambda i: rows[i][0])
                     if rows[i][0] < cheapest_od.usd_per_sample]
        nothing = MarketValue(math.inf, cheapest_od.usd_per_sample, fastest_od, 0.0, loss_h, 0.0)
        if not good_rows:
            return nothing
        needs = tuple(m.need for m in singles)
        usd = rate = up_h = total_h = 0.0
        for held, hours in watch.together(needs):
            total_h += hours
            first = next((i for i in good_rows if held[i]), None)
            if first is not None:
                usd += hours * rows[first][0]
                rate += hours * rows[first][1]
                up_h += hours
        if up_h <= 0:
            return nothing
        value = MarketValue(usd / up_h, cheapest_od.usd_per_sample, fastest_od, rate / up_h, loss_h,
                            (total_h - up_h) / up_h)
        if not any(watch.holds(singles[i].need) for i in good_rows):
            value = replace(value, outage_h=watch.some_outlook(needs).expected_down_h(max(d.hours_left, 0.0)))
        # waiting for a spot mix that is down now: until its down spell is expected to end (at least a look),
        # then entering it at the start of its spell; none down: nothing to wait for
        wait = math.inf
        for i in good_rows:
            outlook = watch.outlook(singles[i].need)
            if outlook.up:
                continue
            back_h = max(d.look_h, outlook.expected_down_h(max(d.hours_left, 0.0)))
            wait = min(wait, self._spell_usd(singles[i], situation, outlook.fresh_survival, value, d.restart_h,
                                             0.0, d.hours_left - back_h))
        return replace(value, wait_usd=wait)

    def _fresh_yield(self, mix: Mix, situation: Situation, outlook) -> tuple[float, float, float]:  # noqa: ANN001
        """Expected hours held, good samples, and the chance the spell breaks first, of an entry at the
        start of a spell."""
        d = situation.deadline
        horizon_h = d.restart_h + d.samples_left / (3600 * mix.samples_per_s)
        mid, edges = self._grid(horizon_h)
        alive = outlook.fresh_survival(edges)
        ends = alive[:-1] - alive[1:]
        good = self._good(mix, mid, d.restart_h, 0.0, situation)
        hold_h = float(np.dot(ends, mid) + alive[-1] * horizon_h)
        samples = float(np.dot(ends, good) + alive[-1] * d.samples_left)
        return hold_h, samples, float(1 - alive[-1])

    def expected_usd(self, mix: Mix, situation: Situation, watch: MarketWatch, value: MarketValue | None, *,
                     entering: bool) -> float:
        """``J`` of the module docstring: the expected cost to finish, entering ``mix`` now or staying in it."""
        d = situation.deadline
        s, h = d.samples_left, d.hours_left
        restart_h = d.restart_h if entering else situation.restart_left_h
        phase_h = 0.0 if entering else situation.since_checkpoint_h
        horizon_h = restart_h + s / (3600 * mix.samples_per_s)
        if value is None:
            return float(mix.usd_over(horizon_h))
        if mix.on_demand:  # through an outage of spot: a stint until spot is expected back; else to the end
            stint_h = max(d.look_h, value.outage_h, restart_h) if value.outage_h > 0 else horizon_h
            if stint_h >= horizon_h:
                return float(mix.usd_over(horizon_h))
            trained = 3600 * mix.samples_per_s * max(0.0, stint_h - restart_h)
            return float(mix.usd_over(stint_h)) + float(value.work_usd(s - trained, h - stint_h, d.restart_h))
        return self._spell_usd(mix, situation, watch.outlook(mix.need).survival, value, restart_h, phase_h, h)

    def _spell_usd(self, mix: Mix, situation: Situation, survival: Callable[[np.ndarray], np.ndarray],
                   value: MarketValue, restart_h: float, phase_h: float, hours_left: float) -> float:
        """``J`` of holding ``mix`` until its need breaks (``survival``) or the work is done."""
        d = situation.deadline
        s = d.samples_left
        horizon_h = restart_h + s / (3600 * mix.samples_per_s)
        mid, edges = self._grid(horizon_h)
        alive = survival(edges)
        ends = alive[:-1] - alive[1:]
        good = self._good(mix, mid, restart_h, phase_h, situation)
        after = value.work_usd(s - good, hours_left - mid, d.restart_h)
        return float(np.dot(ends, mix.usd_over(mid) + after) + alive[-1] * mix.usd_over(horizon_h))

    def _grid(self, horizon_h: float) -> tuple[np.ndarray, np.ndarray]:
        if self._unit is None:
            edges = np.linspace(0.0, 1.0, self.grid_points + 1)
            self._unit = ((edges[1:] + edges[:-1]) / 2, edges)
        scale = max(horizon_h, 1e-9)
        return self._unit[0] * scale, self._unit[1] * scale

    @staticmethod
    def _good(mix: Mix, held_h: np.ndarray, restart_h: float, phase_h: float, situation: Situation) -> np.ndarray:
        """Samples that reach a checkpoint when the need breaks after ``held_h`` hours (negative: work at
        risk lost)."""
        trained_h = np.maximum(0.0, held_h - restart_h)
        if situation.notice_saves_work:
            return 3600 * mix.samples_per_s * trained_h
        every = situation.checkpoint_every_h
        kept_h = every * np.floor((phase_h + trained_h) / every + 1e-9) - phase_h
        return 3600 * mix.samples_per_s * kept_h


def fallback(deadline: Deadline, on_demand: Sequence[Mix], held: Mix | None, restart_left_h: float = 0.0) -> Mix:
    """The on-demand gang to finish on: the one held if it finishes in time (what is left of its restart
    counted), else the cheapest that does (a restart counted), else the fastest."""
    if held is not None and held.on_demand and held.samples_per_s > 0 and (
            deadline.samples_left <= 0 or restart_left_h + deadline.samples_left / (3600 * held.samples_per_s)
            <= deadline.hours_left + EPSILON_H):
        return held
    reach = [m for m in on_demand if deadline.reachable_on_demand(m.samples_per_s)]
    if reach:
        return min(reach, key=lambda m: (m.usd_per_hour * (deadline.restart_h + deadline.samples_left
                                                             / (3600 * m.samples_per_s)), m.nodes))
    return max(on_demand, key=lambda m: (m.samples_per_s, tuple(-n for _, n in m.nodes)))


def gang_mixes(spot: Sequence[tuple[str, str, str, float]], on_demand: Sequence[tuple[str, str, float]], nodes: int,
               rate: Callable[[tuple[tuple[str, int], ...]], tuple[float, float]],
               available: Callable[[str], int | None],
               usual: Callable[[str], float | None] = lambda key: None,
               reversion_h: Callable[[str], float] = lambda key: 1.0) -> list[Mix]:
    """The mixes a gang of ``nodes`` could hold now.

    ``spot``: per spot market ``(market key, offer id, region scope, $/h a node)``; ``on_demand``: per
    region ``(offer id, region scope, $/h a node)``; ``rate(nodes)``: samples/s and traffic $/h of a mix
    (the perf model); ``available(key)``: nodes seen last (None: never seen); ``usual(key)``: the price a
    spot market usually asks (None: not known), ``reversion_h(key)`` how long its prices take to return
    to it. The mixes: the gang
    on-demand in each region; the gang on spot in each zone; where no zone holds it alone, the zones of
    a region filled cheapest first, and the zones of any region so (the perf model prices the traffic
    and the slower rounds of a gang spread over regions); a zone's spot nodes filled up with on-demand
    ones of its region."""
    out: dict[tuple[tuple[str, int], ...], Mix] = {}
    od_of_region = {region: (offer, price) for offer, region, price in on_demand}
    od_price = {offer: price for offer, _, price in on_demand}
    spot_price = {offer: price for _, offer, _, price in spot}
    key_of = {offer: key for key, offer, _, _ in spot}

    def add(counts: dict[str, int]) -> None:
        items = tuple(sorted((o, n) for o, n in counts.items() if n > 0))
        if not items or items in out:
            return
        samples_per_s, traffic = rate(items)
        usd = sum(n * (spot_price.get(o) if o in spot_price else od_price[o]) for o, n in items) + traffic
        usual_usd = sum(n * (_usual(o) if o in spot_price else od_price[o]) for o, n in items) + traffic
        keys = {key_of[o]: n for o, n in items if o in key_of}
        out[items] = Mix(items, usd, samples_per_s, need_of(keys), usual_usd,
                         max((reversion_h(k) for k in keys), default=1.0))

    def _usual(offer: str) -> float:
        price = usual(key_of[offer])
        return spot_price[offer] if price is None else price

    for offer, _, _ in on_demand:
        add({offer: nodes})
    by_region: dict[str, list[tuple[float, str, int]]] = {}
    for key, offer, region, price in spot:
        add({offer: nodes})
        seen = available(key) or 0
        if 0 < seen < nodes:
            by_region.setdefault(region, []).append((price, offer, seen))
            if region in od_of_region:
                add({offer: seen, od_of_region[region][0]: nodes - seen})
    for zones in [*by_region.values(), [z for zs in by_region.values() for z in zs]]:  # each region, then any
        counts = _fill(sorted(zones), nodes)
        if counts is not None and len(counts) > 1:
            add(counts)
    return list(out.values())


def _fill(zones: list[tuple[float, str, int]], nodes: int) -> dict[str, int] | None:
    """``nodes`` from at most three zones ``(price, offer, nodes seen)``, cheapest first (None: they fall short)."""
    counts, left = {}, nodes
    for _, offer, seen in zones[:3]:
        take = min(seen, left)
        counts[offer] = take
        left -= take
        if left == 0:
            return counts
    return None

"""The omniscient optimum on the realised trace: the cheapest schedule that trains the job's work by
its deadline, knowing every tick in advance. A lower bound for every policy (a property test checks
it on generated markets).

Model (dynamic programming over ticks). A *configuration* ``k`` is a multiset of nodes
(zone, market): the job's gang on spot in one zone, the gang on on-demand in one zone per region,
and any other mix a policy of the replay ran (``extra``). At tick ``t`` configuration ``k`` is
available when every zone holds its spot nodes (``n_{k,z} ≤ cap_{z,t}``); it costs
``c_{k,t} = Σ_nodes price_{z,m,t}·Δ + traffic_k·Δ`` for a tick of ``Δ`` seconds and trains
``r_k`` samples/s (the perf model). Entering ``k`` restarts the job: its first ticks lose ``R`` seconds
(``age`` counts the ticks since entering, up to ``A = ⌈R/Δ⌉``), so a tick at age ``a`` trains
``e_a = clamp((a+1)Δ − R, 0, Δ)`` seconds. Work is counted on a grid of ``P`` units of ``u = W/P``
samples, and each tick's progress is rounded **up** (``⌈r_k·e_a/u⌉``), so the grid can only favour the
oracle: its answer stays a lower bound. With ``V_t(k, a, p)`` the least cost to stand in ``k`` at age
``a`` with ``p`` units done after tick ``t``::

    M_t(p)              = min( min_{k,a} V_t(k, a, p), I_t(p) )                 (leave anything)
    I_{t+1}(p)          = M_t(p)                                                (idle: no cost)
    V_{t+1}(k, 1, p+i)  ≤ M_t(p) + c_{k,t}          i = ⌈r_k e_0 / u⌉           (enter k: a restart)
    V_{t+1}(k, a', p+i) ≤ V_t(k, a, p) + c_{k,t}    i = ⌈r_k e_a / u⌉, a' = min(a+1, A)
    answer              = min over t < T_deadline, k, a, p with p + i ≥ P of V_t(k, a, p) + c_{k,t}·(P−p)/i,
                          where that tick's finish, tΔ + (Δ − e_a) + e_a·(P−p)/i, is by the deadline

only over configurations available at ``t``. Never being preempted, the oracle loses no work; it
pays no checkpoint egress either (leaving a cost out keeps the bound). The unit ``u`` is a whole
fraction of one tick of the job's one-zone gang (all such gangs train alike), so those ticks count
exactly, and ``P = ⌊W/u⌋ ≈ units`` (default 20,000): only restart ticks and other mixes round.

Beside each cost the DP carries the spot and on-demand node-hours of the path it comes from, so the
oracle reports the node-hours of its schedule like the other policies (the last tick pro rata).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from geotrain.domain import Market
from geotrain.sim.engine import HOURS, Outcome
from geotrain.sim.world import Placement, World


@dataclass(frozen=True, slots=True)
class Config:
    placement: Placement
    spot_need: tuple[tuple[int, int], ...]  # (zone, spot nodes)
    samples_per_s: float
    traffic_usd_per_hour: float


def configurations(world: World, extra: tuple[Placement, ...] = ()) -> list[Config]:
    seen: dict[Placement, Config] = {}
    regions: set[str] = set()
    candidates: list[Placement] = [world.gang(z, Market.SPOT) for z in range(world.zones)]
    for z in range(world.zones):
        if world.on_demand[z] is not None and world.spot[z].location.region_scope not in regions:
            regions.add(world.spot[z].location.region_scope)
            candidates.append(world.gang(z, Market.ON_DEMAND))
    candidates += [p for p in extra if len(p) >= world.job.nodes]
    for placement in candidates:
        if placement in seen:
            continue
        need: dict[int, int] = {}
        for z, m in placement:
            if m == Market.SPOT:
                need[z] = need.get(z, 0) + 1
        rate, traffic = world.rate(placement)
        seen[placement] = Config(placement, tuple(sorted(need.items())), rate, traffic)
    return list(seen.values())


def oracle(world: World, *, start_tick: int = 0, extra: tuple[Placement, ...] = (), units: int = 20_000) -> Outcome:
    """The least cost of finishing the job by its deadline (see the module docstring)."""
    clock = time.perf_counter()
    job, tick_s = world.job, world.market.tick_s
    configs = configurations(world, extra)
    # the unit: a whole fraction of what the job's gang trains in one tick, so that every one-zone gang's
    # full-speed ticks count exactly; P = ⌊W/u⌋ (the oracle may stop up to one unit short: a lower bound)
    reference = world.rate(world.gang(0, Market.SPOT))[0] * tick_s
    per_tick = max(1, round(units * reference / world.work_samples))
    unit = reference / per_tick
    P = max(1, math.floor(world.work_samples / unit + 1e-9))
    A = max(1, math.ceil(job.restart_s / tick_s)) if job.restart_s > 0 else 1
    effective = [min(tick_s, max(0.0, (a + 1) * tick_s - job.restart_s)) for a in range(A + 1)]
    deadline_s = job.deadline_h * HOURS
    deadline_ticks = math.ceil(deadline_s / tick_s - 1e-9)
    K = len(configs)
    inf = np.inf
    V = np.full((K, A + 1, P + 1), inf)
    # the node-hours of the path each cell's cost comes from: [..., 0] spot, [..., 1] on-demand
    NH = np.zeros((K, A + 1, P + 1, 2))
    idle = np.full(P + 1, inf)
    idle[0] = 0.0
    idle_nh = np.zeros((P + 1, 2))
    best = inf
    best_tick = None
    best_nh = (0.0, 0.0)
    incs = np.array([[math.ceil(c.samples_per_s * effective[a] / unit - 1e-9) for a in range(A + 1)]
                     for c in configs], dtype=np.int64)
    tick_h = tick_s / HOURS
    nodes = [np.array([sum(1 for _, m in c.placement if m == Market.SPOT),
                       sum(1 for _, m in c.placement if m != Market.SPOT)], dtype=float) for c in configs]
    cols = np.arange(P + 1)
    for step in range(deadline_ticks):
        t = start_tick + step
        flat = V.reshape(K * (A + 1), P + 1)
        j = flat.argmin(axis=0)
        lowest = flat[j, cols]
        from_v = lowest < idle
        M = np.where(from_v, lowest, idle)
        MH = np.where(from_v[:, None], NH.reshape(K * (A + 1), P + 1, 2)[j, cols], idle_nh)
        new = np.full_like(V, inf)
        new_nh = np.zeros_like(NH)
        for k, c in enumerate(configs):
            if t >= world.market.ticks and c.spot_need:
                continue
            if any(n > world.capacity(z, t) for z, n in c.spot_need):
                continue
            price = sum(world.price(z, m, t) for z, m in c.placement)
            add_nh = nodes[k] * tick_h
            for a in range(A + 1):
                source, source_nh = (M, MH) if a == 0 else (V[k, a], NH[k, a])
                inc = int(incs[k, a])
                e = effective[a]
                cost = (price * tick_s + c.traffic_usd_per_hour * e) / HOURS
                target = min(a + 1, A)
                if inc <= 0:
                    _relax(new[k, target], new_nh[k, target], source + cost, source_nh + add_nh)
                    continue
                # finishing within this tick: pro rata
                lo = max(0, P - inc)
                tail = source[lo:P]
                if tail.size:
                    frac = (P - np.arange(lo, P)) / inc
                    done = tail + (price * tick_s * frac + c.traffic_usd_per_hour * e * frac) / HOURS
                    ends_s = step * tick_s + (tick_s - e) + frac * e  # finishing by the deadline, not after it
                    done = np.where(ends_s <= deadline_s + 1e-6, done, inf)
                    i = int(done.argmin())
                    m = float(done[i])
                    if m < best:  # it ends within this tick, after its restart part and its share of the rest
                        best, best_tick = m, step * tick_s + (tick_s - e) + float(frac[i]) * e
                        best_nh = tuple(source_nh[lo + i] + add_nh * float(frac[i]))
                if P - inc > 0:
                    _relax(new[k, target, inc:P], new_nh[k, target, inc:P], source[:P - inc] + cost,
                           source_nh[:P - inc] + add_nh)
        V, NH = new, new_nh
        idle, idle_nh = M, MH
        idle[P] = inf
    notes = (f"{K} configurations, {P} work units, restart over {A} tick(s)",)
    if not math.isfinite(best):
        return Outcome("oracle", math.inf, math.inf, 0.0, 0.0, False, None, job.deadline_h, 0, 0, 0.0, 0.0,
                       time.perf_counter() - clock, None, ("no schedule finishes by the deadline",) + notes)
    return Outcome("oracle", best, best, 0.0, 0.0, True, best_tick / HOURS, job.deadline_h, 0, 0,
                   float(best_nh[0]), float(best_nh[1]), time.perf_counter() - clock, None, notes)


def _relax(value: np.ndarray, node_h: np.ndarray, candidate: np.ndarray, candidate_nh: np.ndarray) -> None:
    """``value = min(value, candidate)`` in place, the node-hours following the cheaper path."""
    better = candidate < value
    if better.any():
        value[better] = candidate[better]
        node_h[better] = candidate_nh[better]

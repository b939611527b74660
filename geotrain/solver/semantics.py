"""The solver's model, evaluated directly for one count vector (the reference the MIP must match).

``throughput(problem, x)`` and ``hourly_cost(problem, x, rate)`` define what the MIP in
``geotrain.solver.model`` optimises once its lazily added rows cover the places a mix uses; see that
module's docstring for the formulas. The model is a *relaxation* of the perf model the planner
reports: for every mix it predicts at least the perf model's samples/s and at most its $/h (the
egress of a mix training ``rate`` samples/s is priced at ``rate``, where the perf model prices it at
the mix's own, higher or equal, speed; terms the model leaves out are communication it does not
see). ``ModelReferee`` is the model's own figures at a mix's full speed: the referee of solver tests.
Tests enumerate small instances with these functions (brute force) and compare with the MIP.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from geotrain.solver.problem import Evaluation, Problem, counts_by, place_order, share


def used_places(problem: Problem, x: Sequence[int]) -> dict[str, int]:
    """Nodes per place, in ring order."""
    per = counts_by(problem.candidates, x, "zone")
    return {p: per[p] for p in sorted(per, key=place_order)}


def used_regions(problem: Problem, x: Sequence[int]) -> dict[str, list[str]]:
    """Region -> its places in use, in ring order."""
    region_of = {c.zone: c.region for c in problem.candidates}
    out: dict[str, list[str]] = {}
    for p in used_places(problem, x):
        out.setdefault(region_of[p], []).append(p)
    return out


def region_leads(problem: Problem) -> dict[str, str]:
    """Region -> its lead place: the first of its places in ring order among all candidates (where the
    model puts its leader or parameter server; zones of a region share their network figures)."""
    out: dict[str, str] = {}
    for place in sorted({c.zone for c in problem.candidates}, key=place_order):
        region = next(c.region for c in problem.candidates if c.zone == place)
        out.setdefault(region, place)
    return out


def _hivemind_terms(problem: Problem, x: Sequence[int], k: int) -> float:
    oracle = problem.oracle
    per = used_places(problem, x)
    term = max((oracle.place_s(p, k) for p in per), default=0.0)
    term = max([term] + [oracle.pair_s(a, b, k) for a, b in combinations(per, 2)])
    per_region = counts_by(problem.candidates, x, "region")
    for q, inside in per_region.items():
        cloud, _, site = q.partition("/")
        if cloud == "onprem":
            value = oracle.site_s(site, inside, k)
            if value is not None:
                term = max(term, value)
    return term


def _ring_term(problem: Problem, x: Sequence[int], k: int) -> float:
    oracle = problem.oracle
    per = used_places(problem, x)
    term = max((oracle.place_s(p, k) for p in per), default=0.0)
    return max([term] + [oracle.pair_s(a, b, k) for a, b in combinations(per, 2)])


def _step(problem: Problem, x: Sequence[int]) -> float:
    return max(c.samples_per_step / c.rate for c, n in zip(problem.candidates, x, strict=True) if n)


def _good_samples(problem: Problem, x: Sequence[int]) -> float:
    return sum(c.samples_per_step * c.goodput * n for c, n in zip(problem.candidates, x, strict=True))


def min_step(problem: Problem) -> float:
    return min(c.samples_per_step / c.rate for c in problem.candidates)


def local_sgd_round(problem: Problem, x: Sequence[int]) -> float:
    """H·T_loc + T_wan + B; ma: max(K·T_loc, T_wan) + B (see the model)."""
    oracle = problem.oracle
    h = oracle.local_steps
    regions = used_regions(problem, x)
    per_region = counts_by(problem.candidates, x, "region")
    local = _step(problem, x)
    tau_min = min_step(problem)
    broadcast = 0.0
    lead = region_leads(problem)
    for q in regions:
        n_q = per_region[q]
        if n_q >= 2:
            local = max(local, tau_min + oracle.place_s(lead[q], n_q))
            broadcast = max(broadcast, oracle.broadcast_s(lead[q]))
    wan = 0.0
    lead = region_leads(problem)
    leaders = [lead[q] for q in regions]
    if len(leaders) >= 2:
        wan = max(oracle.pair_s(a, b, len(leaders)) for a, b in combinations(leaders, 2))
    if oracle.strategy == "ma":
        return max(h * local, wan) + broadcast
    return h * local + wan + broadcast


def throughput(problem: Problem, x: Sequence[int]) -> float:
    """Samples/s of the mix ``x`` (counts per candidate) in the solver's model; 0 without nodes."""
    cands, oracle = problem.candidates, problem.oracle
    k = sum(x)
    if k == 0:
        return 0.0
    good_rate = sum(c.rate * c.goodput * n for c, n in zip(cands, x, strict=True))
    if oracle.strategy == "asgd-ga":
        return max((sum(r.values()) for r in _asgd_rates_by_home(problem, x).values()), default=0.0)
    if k == 1:
        return good_rate
    if oracle.strategy == "hivemind":
        # the model's round: the overhead at the fastest candidate's host plus the communication terms,
        # or the overhead at the slowest host in use alone (the perf model adds the two)
        fastest = min(c.host_factor for c in cands)
        slowest = max(c.host_factor for c, n in zip(cands, x, strict=True) if n)
        overhead = oracle.overhead_s(k)
        comm = max(fastest * overhead + _hivemind_terms(problem, x, k), slowest * overhead)
        inside = sum(c.rate * c.goodput * c.step_efficiency * n for c, n in zip(cands, x, strict=True))
        s = oracle.samples_per_round
        return s / (s / inside + comm)
    if oracle.strategy == "allreduce":
        return _good_samples(problem, x) / oracle.step_s(_step(problem, x), _ring_term(problem, x, k))
    return oracle.local_steps * _good_samples(problem, x) / local_sgd_round(problem, x)


def homes(problem: Problem, x: Sequence[int]) -> list[str]:
    """asgd-ga: the regions that may be home, those with the most raw compute (the runtime's rule)."""
    power: dict[str, float] = {}
    for c, n in zip(problem.candidates, x, strict=True):
        if n:
            power[c.region] = power.get(c.region, 0.0) + c.rate * n
    top = max(power.values(), default=0.0)
    return sorted(q for q, p in power.items() if p >= top * (1 - 1e-12))


def _asgd_rates_by_home(problem: Problem, x: Sequence[int]) -> dict[str, dict[str, float]]:
    """Per home: per region min(compute, A·samples per step / push(q, home)); the home is not limited.
    A region of two or more nodes computes at most Σ_i n_i·m_i / (m_i/(s_i·g_i) + ρ_q(2))."""
    oracle = problem.oracle
    compute: dict[str, float] = {}
    per_step: dict[str, float] = {}
    lead = region_leads(problem)
    nodes = counts_by(problem.candidates, x, "region")
    for c, n in zip(problem.candidates, x, strict=True):
        if n:
            compute[c.region] = compute.get(c.region, 0.0) + c.rate * c.goodput * n
            per_step[c.region] = per_step.get(c.region, 0.0) + c.samples_per_step * n
    for q in compute:
        if nodes[q] >= 2:  # each step also waits for the region's all-reduce, at least ρ_q(2)
            ring = oracle.place_s(lead[q], 2)
            compute[q] = min(compute[q], sum(c.samples_per_step * n / (c.samples_per_step / (c.rate * c.goodput) + ring)
                                             for c, n in zip(problem.candidates, x, strict=True)
                                             if n and c.region == q))
    return {home: {q: (r if q == home else min(r, oracle.accumulation_steps * per_step[q]
                                                  / oracle.pair_s(lead[q], lead[home], 0)))
                   for q, r in compute.items()}
            for home in homes(problem, x)}


def asgd_cycle_bound_s(problem: Problem, place: str, home: str) -> float:
    """The longest cycle a region at ``place`` can have with home ``home``: its push, or A steps of
    the slowest candidate with an all-reduce over every node the problem allows."""
    oracle = problem.oracle
    slowest = max(c.samples_per_step / c.rate for c in problem.candidates)
    ring = oracle.slowest_place_s(place, problem.node_cap) if problem.node_cap > 1 else 0.0
    return max(oracle.accumulation_steps * (slowest + ring), oracle.pair_s(place, home, 0))


def asgd_push_usd_per_hour(problem: Problem, place: str, home: str) -> float:
    """A region pushes W and pulls W at most once per cycle bound (a lower bound on its egress)."""
    oracle = problem.oracle
    w = oracle.payload_bytes
    return 3600 / asgd_cycle_bound_s(problem, place, home) * w * (
        oracle.usd_per_byte(place, home) + oracle.usd_per_byte(home, place))


def _next_in_ring(places: Sequence[str]) -> list[tuple[str, str]]:
    """(place, its successor) for the places in use, in ring order (none for one place)."""
    if len(places) < 2:
        return []
    return [(places[j], places[(j + 1) % len(places)]) for j in range(len(places))]


def sync_egress_usd_per_hour(problem: Problem, x: Sequence[int], rate: float) -> float:
    """Egress of synchronisation traffic at ``rate`` samples/s (the model's; see the model)."""
    oracle = problem.oracle
    per = used_places(problem, x)
    if len(per) < 2:
        return 0.0
    k = sum(x)
    w = oracle.payload_bytes
    m_max = problem.max_samples_per_step
    price = oracle.usd_per_byte
    if oracle.strategy == "hivemind":
        alpha = 3600 * rate * 2 * w / oracle.samples_per_round
        return sum(alpha * c_p * sum(price(p, q) * c_q for q, c_q in per.items() if q != p) * oracle.pair_share(k)
                   for p, c_p in per.items())
    if oracle.strategy == "allreduce":
        volume = 3600 * rate * share(k) * w / (k * m_max)
        return sum(volume * price(a, b) for a, b in _next_in_ring(list(per)))
    regions = used_regions(problem, x)
    if oracle.strategy in ("local-sgd", "ma"):
        # every step the nodes of a region all-reduce (a ring hop of at least W crosses from each of its
        # zones in use to the next); every H steps the leaders do (at least W per hop); all regions step
        # together, at least rate / (k·m_max) steps per second
        steps = 3600 * rate * w / (k * m_max)
        total = 0.0
        for places in regions.values():
            total += sum(steps * price(a, b) for a, b in _next_in_ring(places))
        lead = region_leads(problem)
        leaders = [lead[q] for q in regions]
        total += sum(steps / oracle.local_steps * price(a, b) for a, b in _next_in_ring(leaders))
        return total
    # asgd-ga: the pushes (regions step at their own pace: their in-region traffic is left out)
    lead = region_leads(problem)
    best = None
    for home in homes(problem, x):
        pushes = sum(asgd_push_usd_per_hour(problem, lead[q], lead[home]) for q in regions if q != home)
        best = pushes if best is None else min(best, pushes)
    return best or 0.0


def node_usd_per_hour(problem: Problem, x: Sequence[int]) -> float:
    """$/h of the nodes themselves and of the data they read, at full speed."""
    return sum((c.price_usd_per_hour + c.data_usd_per_hour) * n for c, n in zip(problem.candidates, x, strict=True))


def hourly_cost(problem: Problem, x: Sequence[int], rate: float) -> float:
    """$/h of the mix when it trains ``rate`` samples/s: nodes + data egress + sync egress."""
    return node_usd_per_hour(problem, x) + sync_egress_usd_per_hour(problem, x, rate)


def structurally_feasible(problem: Problem, x: Sequence[int]) -> bool:
    """Capacities, minimums and the limits that do not involve money or throughput."""
    cands, limits = problem.candidates, problem.limits
    used = [(cands[i], n) for i, n in enumerate(x) if n]
    k = sum(n for _, n in used)
    minimums, capacity = _of_candidates(cands)
    if k == 0 or k > max(1, min(limits.max_nodes, capacity)) or (limits.min_nodes is not None and k < limits.min_nodes):
        return False
    if any(n < 0 or n > c.capacity for c, n in used):
        return False
    if any(x[i] < minimum for i, minimum in minimums):
        return False
    if limits.max_regions is not None and len({c.region for c, _ in used}) > limits.max_regions:
        return False
    zones: dict[str, int] = {}
    for c, n in used:
        zones[c.zone] = zones.get(c.zone, 0) + n
    if limits.max_nodes_per_zone is not None and max(zones.values()) > limits.max_nodes_per_zone:
        return False
    if limits.max_accelerators_per_zone is not None:
        gpus: dict[str, int] = {}
        for c, n in used:
            gpus[c.zone] = gpus.get(c.zone, 0) + c.accelerators * n
        if max(gpus.values()) > limits.max_accelerators_per_zone:
            return False
    if limits.max_zone_share is not None and max(zones.values()) > limits.max_zone_share * k + 1e-9:
        return False
    spot = sum(n for c, n in used if c.market == "spot")
    if limits.max_spot_share is not None and spot > limits.max_spot_share * k + 1e-9:
        return False
    for scope, quota in limits.quotas:
        if sum(c.accelerators * n for c, n in used if c.cloud == scope or c.region == scope) > quota:
            return False
    if limits.pool_caps:
        pools: dict[str, int] = {}
        for c, n in used:
            if c.pool:
                pools[c.pool] = pools.get(c.pool, 0) + c.accelerators * n
        caps = _caps(limits.pool_caps)
        if any(units > caps.get(pool, units) for pool, units in pools.items()):
            return False
    return True


_OF_CANDIDATES: dict[int, tuple[tuple, tuple[tuple[tuple[int, int], ...], int]]] = {}


def _of_candidates(cands: tuple) -> tuple[tuple[tuple[int, int], ...], int]:
    """(index, minimum) of the candidates with a minimum, and their total capacity (what
    ``Problem.node_cap`` caps), kept per candidate tuple by identity."""
    entry = _OF_CANDIDATES.get(id(cands))
    if entry is None or entry[0] is not cands:
        if len(_OF_CANDIDATES) > 64:
            _OF_CANDIDATES.clear()
        figures = (tuple((i, c.minimum) for i, c in enumerate(cands) if c.minimum), sum(c.capacity for c in cands))
        entry = _OF_CANDIDATES[id(cands)] = (cands, figures)
    return entry[1]


@functools.lru_cache(maxsize=16)
def _caps(pool_caps: tuple[tuple[str, int], ...]) -> dict[str, int]:
    return dict(pool_caps)


@dataclass(frozen=True)
class ModelReferee:
    """The model's own figures for a mix at its full speed (the referee when no other is given)."""

    problem: Problem

    def evaluate(self, counts: tuple[int, ...]) -> Evaluation:
        rate = throughput(self.problem, counts)
        return Evaluation(rate, hourly_cost(self.problem, counts, rate))


def referee_of(problem: Problem):  # noqa: ANN201
    return problem.referee if problem.referee is not None else ModelReferee(problem)


def admissible(problem: Problem, counts: Sequence[int], evaluation: Evaluation) -> bool:
    """Whether a mix keeps every limit by the referee's figures (budget and throughput floor)."""
    limits = problem.limits
    if not structurally_feasible(problem, counts) or evaluation.samples_per_s <= 0:
        return False
    if limits.budget_usd_per_hour is not None and evaluation.usd_per_hour > limits.budget_usd_per_hour * (1 + 1e-9):
        return False
    floor = limits.min_samples_per_s or 0.0
    return evaluation.samples_per_s >= floor * (1 - 1e-9)

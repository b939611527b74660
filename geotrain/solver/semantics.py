"""The solver's model, evaluated directly for one count vector (the reference the MIP must match).

``throughput(problem, x)`` and ``hourly_cost(problem, x, rate)`` define what the MIP in
``geotrain.solver.model`` optimises; see that module's docstring for the formulas. Tests enumerate
small instances with these functions (brute force) and compare with the MIP's optimum; the MIP
uses them to check that its lazily added constraints cover the regions a solution uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

from geotrain.solver.problem import Problem, counts_by, share


def _terms(problem: Problem, x: Sequence[int], k: int) -> tuple[float, float, float]:
    """(max region term, max pair term, max site term) for the regions ``x`` uses."""
    oracle = problem.oracle
    per_region = counts_by(problem.candidates, x, "region")
    regions = sorted(per_region)
    region_term = max((oracle.region_s(q, k) for q in regions), default=0.0)
    pair_term = max((oracle.pair_s(a, b, k) for a, b in combinations(regions, 2)), default=0.0)
    site_term = 0.0
    for q, inside in per_region.items():
        cloud, _, site = q.partition("/")
        if cloud == "onprem":
            value = oracle.site_s(site, inside, k)
            if value is not None:
                site_term = max(site_term, value)
    return region_term, pair_term, site_term


def throughput(problem: Problem, x: Sequence[int]) -> float:
    """Samples/s of the mix ``x`` (counts per candidate) in the solver's model; 0 without nodes."""
    cands, oracle = problem.candidates, problem.oracle
    k = sum(x)
    if k == 0:
        return 0.0
    good_rate = sum(c.rate * c.goodput * n for c, n in zip(cands, x, strict=True))
    if oracle.strategy == "asgd-ga":
        return sum(_asgd_home(problem, x)[1].values())
    if k == 1:
        return good_rate
    region_term, pair_term, site_term = _terms(problem, x, k)
    if oracle.strategy == "hivemind":
        comm = oracle.overhead_s(k) + max(region_term, pair_term, site_term)
        s = oracle.samples_per_round
        return s / (s / (oracle.efficiency * good_rate) + comm)
    step = max(c.samples_per_step / c.rate for c, n in zip(cands, x, strict=True) if n)
    good_samples = sum(c.samples_per_step * c.goodput * n for c, n in zip(cands, x, strict=True))
    if oracle.strategy == "allreduce":
        return good_samples / (step + max(region_term, pair_term))
    h = oracle.local_steps
    return h * good_samples / (h * (step + region_term) + pair_term)


def _asgd_rates(problem: Problem, x: Sequence[int], home: str) -> dict[str, float]:
    """Per region: min(compute, A·samples per step / push(q, home)); the home region is not limited."""
    oracle = problem.oracle
    compute: dict[str, float] = {}
    per_step: dict[str, float] = {}
    for c, n in zip(problem.candidates, x, strict=True):
        if n:
            compute[c.region] = compute.get(c.region, 0.0) + c.rate * c.goodput * n
            per_step[c.region] = per_step.get(c.region, 0.0) + c.samples_per_step * n
    return {q: (r if q == home else min(r, oracle.accumulation_steps * per_step[q] / oracle.pair_s(q, home, 0)))
            for q, r in compute.items()}


def _asgd_egress(problem: Problem, regions: Sequence[str], home: str) -> float:
    """A region pushes 2W at most once per push time (an upper bound on its egress)."""
    oracle = problem.oracle
    return sum(3600 / oracle.pair_s(q, home, 0) * 2 * oracle.payload_bytes * oracle.usd_per_byte(q, home)
               for q in regions if q != home)


def _asgd_home(problem: Problem, x: Sequence[int]) -> tuple[str, dict[str, float]]:
    """The home region that maximises throughput (ties: the first by name)."""
    homes = sorted(counts_by(problem.candidates, x, "region"))
    rates = {home: _asgd_rates(problem, x, home) for home in homes}
    best = max(homes, key=lambda h: (sum(rates[h].values()), [-ord(ch) for ch in h]))
    return best, rates[best]


def sync_egress_usd_per_hour(problem: Problem, x: Sequence[int], rate: float) -> float:
    """Egress of synchronisation traffic at ``rate`` samples/s (upper bounds; see the model)."""
    oracle = problem.oracle
    per_region = counts_by(problem.candidates, x, "region")
    if len(per_region) < 2:
        return 0.0
    k = sum(x)
    w = oracle.payload_bytes
    m_min = problem.min_samples_per_step
    total = 0.0
    if oracle.strategy == "asgd-ga":
        # the cheapest home that still reaches ``rate`` (the MIP picks the home too)
        homes = [h for h in sorted(per_region) if sum(_asgd_rates(problem, x, h).values()) >= rate * (1 - 1e-9)]
        homes = homes or [_asgd_home(problem, x)[0]]
        return min(_asgd_egress(problem, sorted(per_region), h) for h in homes)
    for q, inside in per_region.items():
        price = max(oracle.usd_per_byte(q, other) for other in per_region if other != q)
        if oracle.strategy == "hivemind":
            per_sample = 2 * w * min(inside, k - inside) / oracle.samples_per_round
        elif oracle.strategy == "allreduce":
            per_sample = share(k) * w / (k * m_min)
        else:
            per_sample = 2 * w / (oracle.local_steps * k * m_min)
        total += 3600 * rate * per_sample * price
    return total


def node_usd_per_hour(problem: Problem, x: Sequence[int]) -> float:
    """$/h of the nodes themselves and of the data they read, at full speed."""
    return sum((c.price_usd_per_hour + c.data_usd_per_hour) * n for c, n in zip(problem.candidates, x, strict=True))


def hourly_cost(problem: Problem, x: Sequence[int], rate: float) -> float:
    """$/h of the mix when it trains ``rate`` samples/s: nodes + data egress + sync egress."""
    return node_usd_per_hour(problem, x) + sync_egress_usd_per_hour(problem, x, rate)


def _asgd_home_points(problem: Problem, x: Sequence[int]) -> list[tuple[float, float]] | None:
    """asgd-ga over two or more regions: (samples/s, $/h) with each region as home; its egress
    depends on the home, not on the rate. None for any other mix."""
    regions = sorted(counts_by(problem.candidates, x, "region"))
    if problem.oracle.strategy != "asgd-ga" or len(regions) < 2:
        return None
    nodes = node_usd_per_hour(problem, x)
    return [(sum(_asgd_rates(problem, x, home).values()), nodes + _asgd_egress(problem, regions, home))
            for home in regions]


def structurally_feasible(problem: Problem, x: Sequence[int]) -> bool:
    """Capacities, minimums and the limits that do not involve money or throughput."""
    cands, limits = problem.candidates, problem.limits
    k = sum(x)
    if any(n < c.minimum or n > c.capacity for c, n in zip(cands, x, strict=True)):
        return False
    if k == 0 or k > problem.node_cap:
        return False
    if limits.max_regions is not None and len(counts_by(cands, x, "region")) > limits.max_regions:
        return False
    zones = counts_by(cands, x, "zone")
    if limits.max_nodes_per_zone is not None and max(zones.values()) > limits.max_nodes_per_zone:
        return False
    if limits.max_accelerators_per_zone is not None:
        gpus: dict[str, int] = {}
        for c, n in zip(cands, x, strict=True):
            gpus[c.zone] = gpus.get(c.zone, 0) + c.accelerators * n
        if max(gpus.values()) > limits.max_accelerators_per_zone:
            return False
    if limits.max_zone_share is not None and max(zones.values()) > limits.max_zone_share * k + 1e-9:
        return False
    spot = sum(n for c, n in zip(cands, x, strict=True) if c.market == "spot")
    if limits.max_spot_share is not None and spot > limits.max_spot_share * k + 1e-9:
        return False
    for scope, quota in limits.quotas:
        used = sum(c.accelerators * n for c, n in zip(cands, x, strict=True)
                   if c.cloud == scope or c.region == scope)
        if used > quota:
            return False
    for pool, units in limits.pool_caps:
        if sum(c.accelerators * n for c, n in zip(cands, x, strict=True) if c.pool == pool) > units:
            return False
    return True


def rate_within_budget(problem: Problem, x: Sequence[int]) -> float:
    """The highest rate ≤ throughput(x) at which the mix stays within the budget (0 if none)."""
    top = throughput(problem, x)
    budget = problem.limits.budget_usd_per_hour
    if budget is None:
        return top
    homes = _asgd_home_points(problem, x)
    if homes is not None:  # the fastest home the budget affords
        return max((r for r, c in homes if c <= budget * (1 + 1e-12)), default=0.0)
    at_zero, at_top = hourly_cost(problem, x, 0.0), hourly_cost(problem, x, top)
    if at_top <= budget:
        return top
    if at_zero > budget or at_top == at_zero:
        return 0.0
    return top * (budget - at_zero) / (at_top - at_zero)  # the cost is linear in the rate


def cheapest_operating_point(problem: Problem, x: Sequence[int]) -> tuple[float, float] | None:
    """(samples/s, $/h) at which the mix trains a sample most cheaply within the budget and at or above
    the floor; None if it cannot. With a cost linear in the rate that is the fastest affordable rate;
    asgd-ga compares its home regions (a slower home may push less over dear links)."""
    floor = problem.limits.min_samples_per_s or 0.0
    budget = problem.limits.budget_usd_per_hour
    points = _asgd_home_points(problem, x)
    if points is None:
        rate = rate_within_budget(problem, x)
        points = [(rate, hourly_cost(problem, x, rate))]
    points = [(r, c) for r, c in points if r > 0 and r >= floor * (1 - 1e-9)
              and (budget is None or c <= budget * (1 + 1e-12))]
    return min(points, key=lambda p: (p[1] / p[0], -p[0]), default=None)

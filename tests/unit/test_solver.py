"""The solver's optimum equals brute force over the same model; its solutions meet every limit."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from geotrain.solver import semantics
from geotrain.solver.problem import Candidate, Limits, Problem
from geotrain.solver.search import Searcher


@dataclass(frozen=True)
class FakeOracle:
    """Round terms from small tables, so that instances are easy to vary."""

    strategy: str = "hivemind"
    samples_per_round: float = 4096.0
    efficiency: float = 0.6
    local_steps: int = 8
    accumulation_steps: int = 4
    payload_bytes: float = 2e8
    inside: dict = field(default_factory=dict)  # region -> seconds per round at k nodes: a·(k−1)/k
    between: dict = field(default_factory=dict)  # (a, b) -> (seconds, per-node seconds)
    price: dict = field(default_factory=dict)  # (a, b) -> $/byte

    def overhead_s(self, k: int) -> float:
        return 0.5 + 0.1 * k

    def region_s(self, region: str, k: int) -> float:
        return self.inside.get(region, 0.2) * (k - 1) / k

    def pair_s(self, a: str, b: str, k: int) -> float:
        fixed, per = self.between.get(tuple(sorted((a, b))), (5.0, 2.0))
        return fixed + per / max(k, 1)

    def site_s(self, site: str, inside: int, k: int) -> float | None:
        return None

    def usd_per_byte(self, src: str, dst: str) -> float:
        return self.price.get((src, dst), 2e-11 if src != dst else 0.0)


def candidate(key, region, price, rate, capacity=3, market="spot", zone=None, minimum=0, step=32, goodput=1.0):
    return Candidate(key=key, region=region, zone=zone or region + "/a", cloud=region.split("/")[0], market=market,
                     price_usd_per_hour=price, rate=rate, goodput=goodput, samples_per_step=step, accelerators=1,
                     capacity=capacity, minimum=minimum)


def brute_force(problem: Problem):
    ranges = [range(c.minimum, c.capacity + 1) for c in problem.candidates]
    for x in itertools.product(*ranges):
        if semantics.structurally_feasible(problem, x):
            yield x


def brute_min_cost(problem: Problem, target: float) -> float:
    best = math.inf
    budget = problem.limits.budget_usd_per_hour
    for x in brute_force(problem):
        if semantics.throughput(problem, x) >= target * (1 - 1e-9):
            cost = semantics.hourly_cost(problem, x, target)
            if budget is None or cost <= budget + 1e-9:
                best = min(best, cost)
    return best


def brute_min_ratio(problem: Problem) -> float:
    best = math.inf
    floor = problem.limits.min_samples_per_s or 0.0
    for x in brute_force(problem):
        rate = semantics.throughput(problem, x)
        if rate >= floor * (1 - 1e-9) and rate > 0:
            cost_at_floor = semantics.hourly_cost(problem, x, max(floor, 1e-9))
            budget = problem.limits.budget_usd_per_hour
            if budget is not None and cost_at_floor > budget + 1e-9:
                continue
            best = min(best, semantics.hourly_cost(problem, x, rate) / (3600 * rate))
    return best


def brute_max_rate(problem: Problem) -> float:
    return max((semantics.rate_within_budget(problem, x) for x in brute_force(problem)), default=0.0)


REGIONS = ("aws/us-east-1", "gcp/europe-west3", "azure/eastus")


@st.composite
def instances(draw, strategy=None):
    n = draw(st.integers(2, 4))
    cands = []
    for i in range(n):
        region = draw(st.sampled_from(REGIONS))
        cands.append(candidate(
            f"o{i}", region, price=draw(st.floats(0.05, 3.0)), rate=draw(st.floats(20, 400)),
            capacity=draw(st.integers(1, 3)), market=draw(st.sampled_from(["spot", "on_demand"])),
            zone=f"{region}/{draw(st.sampled_from('ab'))}", goodput=draw(st.floats(0.7, 1.0)),
            step=draw(st.sampled_from([16, 32, 64])),
        ))
    between = {tuple(sorted(p)): (draw(st.floats(0.1, 40)), draw(st.floats(0.0, 20)))
               for p in itertools.combinations(REGIONS, 2)}
    price = {(a, b): draw(st.floats(0, 1e-10)) for a in REGIONS for b in REGIONS if a != b}
    oracle = FakeOracle(strategy=strategy or draw(st.sampled_from(["hivemind", "allreduce", "local-sgd", "asgd-ga"])),
                        between=between, price=price)
    limits = Limits(
        max_nodes=draw(st.integers(1, 8)),
        max_regions=draw(st.one_of(st.none(), st.integers(1, 2))),
        max_nodes_per_zone=draw(st.one_of(st.none(), st.integers(1, 3))),
        max_spot_share=draw(st.one_of(st.none(), st.sampled_from([0.5, 1.0]))),
        budget_usd_per_hour=draw(st.one_of(st.none(), st.floats(0.5, 8.0))),
    )
    return Problem(tuple(cands), oracle, limits)


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(problem=instances(), fraction=st.floats(0.05, 1.0))
def test_min_cost_equals_brute_force(problem, fraction):
    top = max((semantics.throughput(problem, x) for x in brute_force(problem)), default=0.0)
    target = max(top * fraction, 1e-6)
    expected = brute_min_cost(problem, target)
    result = Searcher(problem).min_cost(target)
    if math.isinf(expected):
        assert result.solution is None
        return
    assert result.solution is not None
    assert result.usd_per_hour == pytest.approx(expected, rel=1e-6, abs=1e-9)
    counts = result.solution.counts
    assert semantics.structurally_feasible(problem, counts)
    assert semantics.throughput(problem, counts) >= target * (1 - 1e-6)


@SETTINGS
@given(problem=instances())
def test_min_cost_per_sample_equals_brute_force(problem):
    expected = brute_min_ratio(problem)
    result = Searcher(problem, tolerance=1e-4).min_cost_per_sample()
    if math.isinf(expected):
        assert result.solution is None
        return
    counts = result.solution.counts
    rate = semantics.throughput(problem, counts)
    ratio = semantics.hourly_cost(problem, counts, rate) / (3600 * rate)
    assert ratio == pytest.approx(expected, rel=2e-4)


@SETTINGS
@given(problem=instances())
def test_max_throughput_equals_brute_force(problem):
    expected = brute_max_rate(problem)
    result = Searcher(problem, tolerance=1e-4).max_throughput()
    if expected <= 0:
        assert result.solution is None or result.samples_per_s == pytest.approx(0, abs=1e-6)
        return
    assert result.samples_per_s == pytest.approx(expected, rel=2e-4)


@SETTINGS
@given(problem=instances(strategy="hivemind"), fraction=st.floats(0.05, 0.9), bump=st.floats(1.01, 3.0),
       which=st.integers(0, 3))
def test_raising_a_price_never_lowers_the_optimal_cost(problem, fraction, bump, which):
    top = max((semantics.throughput(problem, x) for x in brute_force(problem)), default=0.0)
    target = max(top * fraction, 1e-6)
    before = Searcher(problem).min_cost(target)
    cands = list(problem.candidates)
    i = which % len(cands)
    cands[i] = replace(cands[i], price_usd_per_hour=cands[i].price_usd_per_hour * bump)
    after = Searcher(replace(problem, candidates=tuple(cands))).min_cost(target)
    if before.solution is None:
        assert after.solution is None
    elif after.solution is not None:
        assert after.usd_per_hour >= before.usd_per_hour * (1 - 1e-9)


def test_single_region_is_cheaper_than_a_slow_pair_unless_capacity_forces_it():
    cands = (candidate("us", "aws/us-east-1", 0.5, 100, capacity=3), candidate("eu", "gcp/europe-west3", 0.4, 100))
    problem = Problem(cands, FakeOracle(), Limits(max_nodes=8))
    assert Searcher(problem).min_cost(110.0).solution.counts == (0, 2)  # the cheaper region alone
    mixed = Searcher(problem).min_cost(200.0)  # more than three nodes of one region can give
    assert mixed.solution is not None and all(mixed.solution.counts)
    assert Searcher(replace(problem, limits=Limits(max_nodes=8, max_regions=1))).min_cost(200.0).solution is None


def test_minimum_counts_are_kept_and_infeasible_targets_report_none():
    cands = (candidate("keep", "aws/us-east-1", 1.0, 100, minimum=2), candidate("cheap", "aws/us-east-1", 0.1, 100))
    problem = Problem(cands, FakeOracle(), Limits(max_nodes=6))
    result = Searcher(problem).min_cost(50.0)
    assert result.solution.counts[0] == 2
    assert Searcher(problem).min_cost(1e9).solution is None

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
from geotrain.solver.search import NEGLIGIBLE_RATE_SHARE, Searcher
from tests.helpers import examples


@dataclass(frozen=True)
class FakeOracle:
    """Round terms from small tables, so that instances are easy to vary. Places are zones
    ``cloud/region/zone``; tables are keyed by region."""

    strategy: str = "hivemind"
    samples_per_round: float = 4096.0
    local_steps: int = 8
    accumulation_steps: int = 4
    payload_bytes: float = 2e8
    inside: dict = field(default_factory=dict)  # region -> seconds per round at k nodes: a·(k−1)/k
    between: dict = field(default_factory=dict)  # (a, b) -> (seconds, per-node seconds)
    price: dict = field(default_factory=dict)  # (a, b) -> $/byte
    cross_zone_price: float = 1e-11  # $/byte between zones of one region
    bucket_share: float = 1.0  # allreduce: no overlap (a step is τ + T)
    backward_share: float = 0.0

    def step_s(self, compute_s: float, ring_s: float) -> float:
        return max(compute_s + self.bucket_share * ring_s, (1 - self.backward_share) * compute_s + ring_s)

    def overhead_s(self, k: int) -> float:
        return 0.5 + 0.1 * k

    def pair_share(self, k: int) -> float:
        return 1 / k

    def place_s(self, place: str, k: int) -> float:
        return self.inside.get(region_of(place), 0.2) * (k - 1) / k

    def slowest_place_s(self, place: str, k: int) -> float:
        return self.place_s(place, k)

    def pair_s(self, a: str, b: str, k: int) -> float:
        ra, rb = region_of(a), region_of(b)
        if ra == rb:
            return self.place_s(a, max(k, 2)) + 0.01
        fixed, per = self.between.get(tuple(sorted((ra, rb))), (5.0, 2.0))
        return fixed + per / max(k, 1)

    def broadcast_s(self, place: str) -> float:
        return 0.05

    def site_s(self, site: str, inside: int, k: int) -> float | None:
        return None

    def usd_per_byte(self, src: str, dst: str) -> float:
        ra, rb = region_of(src), region_of(dst)
        if src == dst:
            return 0.0
        if ra == rb:
            return self.cross_zone_price
        return self.price.get((ra, rb), 2e-11)


def region_of(place: str) -> str:
    return "/".join(place.split("/")[:2])


def candidate(key, region, price, rate, capacity=3, market="spot", zone=None, minimum=0, step=32, goodput=1.0,
              data=0.0, accelerators=1, share=0.6):
    """``share``: the node's step efficiency, the share of its rate it keeps inside Hivemind."""
    return Candidate(key=key, region=region, zone=zone or region + "/a", cloud=region.split("/")[0], market=market,
                     price_usd_per_hour=price, rate=rate, goodput=goodput, samples_per_step=step,
                     accelerators=accelerators, capacity=capacity, minimum=minimum, data_usd_per_hour=data,
                     step_efficiency=share)


def negligible(problem: Problem) -> float:
    """Rates below this are not planned (NEGLIGIBLE_RATE_SHARE of the slowest candidate)."""
    return min(c.rate * c.goodput for c in problem.candidates) * NEGLIGIBLE_RATE_SHARE


def brute_force(problem: Problem):
    ranges = [range(c.minimum, c.capacity + 1) for c in problem.candidates]
    for x in itertools.product(*ranges):
        if semantics.structurally_feasible(problem, x):
            yield x


def figures(problem: Problem, x):
    return semantics.referee_of(problem).evaluate(tuple(x))


def admissible(problem: Problem, x) -> bool:
    return semantics.admissible(problem, x, figures(problem, x))


def brute_min_cost(problem: Problem, target: float) -> float:
    best = math.inf
    for x in brute_force(problem):
        ev = figures(problem, x)
        if ev.samples_per_s >= target * (1 - 1e-9) and semantics.admissible(problem, x, ev):
            best = min(best, ev.usd_per_hour)
    return best


def brute_min_ratio(problem: Problem) -> float:
    """The lowest $/sample of any admissible mix."""
    best = math.inf
    for x in brute_force(problem):
        ev = figures(problem, x)
        if semantics.admissible(problem, x, ev) and ev.samples_per_s >= negligible(problem):
            best = min(best, ev.usd_per_hour / (3600 * ev.samples_per_s))
    return best


def operating_ratio(problem: Problem, counts) -> float:
    ev = figures(problem, counts)
    return ev.usd_per_hour / (3600 * ev.samples_per_s)


def brute_max_rate(problem: Problem) -> float:
    rates = (figures(problem, x).samples_per_s for x in brute_force(problem) if admissible(problem, x))
    return max((r for r in rates if r >= negligible(problem)), default=0.0)


def at_most(value: float, expected: float, tolerance: float) -> bool:
    """Certified within the searcher's tolerance: no better than the optimum, at most tolerance above."""
    return expected * (1 - 1e-9) - 1e-12 <= value <= expected * (1 + tolerance) + 1e-9


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
            data=draw(st.sampled_from([0.0, 0.0, 0.05, 0.4])),
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
        max_zone_share=draw(st.one_of(st.none(), st.sampled_from([0.5, 0.75]))),
        quotas=draw(st.sampled_from([(), (("aws", 2),), (("gcp/europe-west3", 1),), (("azure", 3), ("aws", 1))])),
    )
    return Problem(tuple(cands), oracle, limits)


# derandomize: CI runs the same examples every time (counterexamples found earlier are pinned below)
SETTINGS = settings(max_examples=examples(40, 150), deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(problem=instances(), fraction=st.floats(0.05, 1.0))
def test_min_cost_equals_brute_force(problem, fraction):
    top = max((figures(problem, x).samples_per_s for x in brute_force(problem)), default=0.0)
    target = max(top * fraction, 1e-6)
    expected = brute_min_cost(problem, target)
    result = Searcher(problem).min_cost(target)
    if math.isinf(expected):
        assert result.solution is None
        return
    assert result.solution is not None
    assert at_most(result.usd_per_hour, expected, 1e-3), (result.usd_per_hour, expected)
    counts = result.solution.counts
    assert admissible(problem, counts)
    assert figures(problem, counts).samples_per_s >= target * (1 - 1e-6)


def assert_cheapest_per_sample(problem: Problem) -> None:
    """The searcher's min $/sample equals brute force; the mix keeps every limit and the floor."""
    expected = brute_min_ratio(problem)
    result = Searcher(problem, tolerance=1e-4).min_cost_per_sample()
    if math.isinf(expected):
        assert result.solution is None
        return
    counts = result.solution.counts
    assert admissible(problem, counts)
    assert at_most(operating_ratio(problem, counts), expected, 3e-4), (operating_ratio(problem, counts), expected)


@SETTINGS
@given(problem=instances())
def test_min_cost_per_sample_equals_brute_force(problem):
    assert_cheapest_per_sample(problem)


@SETTINGS
@given(problem=instances())
def test_max_throughput_equals_brute_force(problem):
    expected = brute_max_rate(problem)
    result = Searcher(problem, tolerance=1e-4).max_throughput()
    if expected <= 0:
        assert result.solution is None or result.samples_per_s == pytest.approx(0, abs=1e-6)
        return
    assert result.samples_per_s == pytest.approx(expected, rel=2e-4)
    assert admissible(problem, result.solution.counts)


@SETTINGS
@given(problem=instances())
def test_the_rate_bound_is_above_every_admissible_mix(problem):
    """``upper_rate`` answers "out of reach" with no solve and bounds every bisection: no admissible mix
    (brute force on the referee) may train faster, whatever the strategy."""
    top = max((figures(problem, x).samples_per_s for x in brute_force(problem) if admissible(problem, x)),
              default=0.0)
    assert Searcher(problem).upper_rate() >= top * (1 - 1e-9)


# the same referee as min_cost_per_sample, with a rate floor: fewer suffice
@settings(SETTINGS, max_examples=examples(20, 60))
@given(problem=instances(), fraction=st.floats(0.05, 1.0))
def test_min_cost_by_deadline_equals_brute_force(problem, fraction):
    """min_cost_by_deadline is the cheapest $/sample among mixes that reach the deadline's rate floor."""
    top = max((figures(problem, x).samples_per_s for x in brute_force(problem)), default=0.0)
    assert_cheapest_per_sample(replace(problem, limits=replace(problem.limits,
                                                                min_samples_per_s=max(top * fraction, 1e-6))))


@SETTINGS
@given(problem=instances(), fraction=st.floats(0.05, 0.9), bump=st.floats(1.01, 3.0),
       which=st.integers(0, 3))
def test_raising_a_price_never_lowers_the_optimal_cost(problem, fraction, bump, which):
    top = max((figures(problem, x).samples_per_s for x in brute_force(problem)), default=0.0)
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


def test_a_mix_the_back_end_returns_in_error_is_caught_and_solved_again():
    """CBC (OR-Tools 9.15) calls (0, 2) optimal at 270.133 samples/s although its step-time row is
    violated by 11 samples; semantics says the mix trains 198.7 samples/s. The model checks every
    mix and solves again with SCIP, which proves the target infeasible."""
    cands = (candidate("o0", "aws/us-east-1", 1.0, 276.0, capacity=2, step=16, goodput=0.71875),
             candidate("o1", "aws/us-east-1", 1.0, 262.0, capacity=3, step=16))
    problem = Problem(cands, FakeOracle(strategy="allreduce"), Limits(max_nodes=4, quotas=(("aws", 2),)))
    assert semantics.throughput(problem, (0, 2)) == pytest.approx(198.67, abs=0.01)
    assert not Searcher(problem).solve_at(270.133).found
    result = Searcher(problem, tolerance=1e-4).max_throughput()
    assert result.solution.counts == (0, 1) and result.samples_per_s == pytest.approx(262.0, rel=2e-4)


def test_a_no_good_cut_keeps_the_mixes_that_leave_a_full_candidate_out():
    """Found by hypothesis: with capacity-1 candidates the no-good cut of (1, 0, 1) also cut off
    (1, 1, 0) (its big-M was the capacity, one too small for x = 0 when the cut count is the capacity),
    so the MIP certified (1, 0, 1) at $9.92/h where (1, 1, 0) costs $8.32/h."""
    def cand(key: str, zone: str, price: float, per_step: int) -> Candidate:
        return Candidate(key=key, region="gcp/europe-west3", zone=zone, cloud="gcp", market="spot",
                         price_usd_per_hour=price, rate=20.0, goodput=1.0, samples_per_step=per_step,
                         accelerators=1, capacity=1, minimum=0, data_usd_per_hour=0.0)
    pairs = [("aws/us-east-1", "gcp/europe-west3"), ("aws/us-east-1", "azure/eastus"),
             ("azure/eastus", "gcp/europe-west3")]
    oracle = FakeOracle(strategy="allreduce", samples_per_round=4096.0, local_steps=8,
                        accumulation_steps=4, payload_bytes=2e8, inside={}, between={k: (1.0, 0.0) for k in pairs},
                        price={**{k: 0.0 for k in pairs}, **{(b, a): 0.0 for a, b in pairs}},
                        cross_zone_price=1e-11)
    problem = Problem((cand("o0", "gcp/europe-west3/b", 1.0, 32), cand("o1", "gcp/europe-west3/a", 1.0, 16),
                       cand("o2", "gcp/europe-west3/a", 0.5, 32)), oracle, Limits(max_nodes=3, max_zone_share=0.75))
    feasible = [x for x in brute_force(problem) if semantics.structurally_feasible(problem, x)]
    target = max(figures(problem, x).samples_per_s for x in feasible) * 0.5
    expected = min(figures(problem, x).usd_per_hour for x in feasible if figures(problem, x).samples_per_s >= target)
    assert at_most(Searcher(problem).min_cost(target).usd_per_hour, expected, 1e-3)


def test_ties_on_throughput_go_to_the_cheaper_mix():
    """Two offers whose nodes train within 0.002 % of each other, one 60 % dearer, a budget for one node:
    max_throughput plans the cheaper (the search certifies rates only to its tolerance, 0.1 %)."""
    problem = Problem(
        (candidate("dear", "aws/us-east-1", 7.23, 100.002, capacity=1),
         candidate("cheap", "aws/us-west-2", 4.54, 100.0, capacity=1)),
        FakeOracle(strategy="allreduce"), Limits(max_nodes=1, budget_usd_per_hour=8.0))
    result = Searcher(problem, time_limit_s=10).max_throughput()
    assert result.solution.counts == (0, 1), result
    assert result.usd_per_hour == pytest.approx(4.54)

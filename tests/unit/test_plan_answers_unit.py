"""The search's progress callback, what limited a budget plan, a job's completion, and the egress an
unknown cloud is assumed to pay (planning.answers, solver.search, pricing.egress)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

import pytest

from geotrain.domain import Continent, JobSpec, LinkClass, Location, Objective, PlanTotals
from geotrain.errors import CatalogError, InputError
from geotrain.planning.answers import budget_use_of, completion_of, goal_misses
from geotrain.pricing.egress import EgressPrices
from geotrain.solver import semantics
from geotrain.solver.problem import Limits, Problem
from geotrain.solver.search import Searcher, SearchProgress
from tests.unit.test_solver import FakeOracle, candidate


def small_problem(limits: Limits, *, capacity: int = 3) -> Problem:
    """Three offers of one zone at one rate whose ring costs nothing: every node added trains faster."""
    cands = (candidate("a", "aws/us-east-1", 1.0, 100.0, capacity=capacity),
             candidate("b", "aws/us-east-1", 2.0, 100.0, capacity=capacity),
             candidate("c", "aws/us-east-1", 0.5, 100.0, capacity=capacity))
    return Problem(cands, FakeOracle(strategy="allreduce", inside={"aws/us-east-1": 0.0}), limits)


def test_the_progress_callback_hears_every_solve_with_the_best_mix_and_the_bound():
    events: list[SearchProgress] = []
    searcher = Searcher(small_problem(Limits(max_nodes=4, budget_usd_per_hour=5.0)), progress=events.append)
    result = searcher.max_throughput()
    assert result.solution is not None and events
    assert {e.phase for e in events} == {"max_throughput"}
    solves = [e.solves for e in events]
    assert solves == sorted(solves) and solves[-1] == searcher.solves > 0
    last = events[-1]
    chosen = {c.key: n for c, n in zip(searcher.problem.candidates, result.solution.counts, strict=True) if n}
    assert dict(last.best) == chosen and last.candidates == 3
    assert last.bound_unit == "samples_per_s" and last.bound >= last.best_samples_per_s * (1 - 1e-9)


def test_without_a_callback_nothing_is_reported_and_the_answer_is_the_same():
    problem = small_problem(Limits(max_nodes=4, budget_usd_per_hour=5.0))
    quiet = Searcher(problem).max_throughput()
    heard = Searcher(problem, progress=lambda p: None).max_throughput()
    assert quiet.solution.counts == heard.solution.counts


def reasons(problem: Problem) -> dict[str, int]:
    result = Searcher(problem).max_throughput()
    counts = result.solution.counts
    ev = semantics.referee_of(problem).evaluate(counts)
    use = budget_use_of(problem, counts, ev.usd_per_hour, ev.samples_per_s, tolerance=1e-3)
    assert use.unused_usd_per_hour == pytest.approx(problem.limits.budget_usd_per_hour - ev.usd_per_hour)
    return dict(use.limits), counts


def test_a_budget_plan_held_by_the_node_limit_says_max_nodes():
    found, counts = reasons(small_problem(Limits(max_nodes=2, budget_usd_per_hour=100.0)))
    assert sum(counts) == 2 and found == {"max nodes": 3}


def test_a_budget_plan_held_by_the_offers_capacity_says_capacity():
    found, counts = reasons(small_problem(Limits(max_nodes=20, budget_usd_per_hour=100.0), capacity=1))
    assert counts == (1, 1, 1) and found == {"capacity": 3}


def test_a_budget_plan_that_spends_what_it_can_says_budget():
    found, counts = reasons(small_problem(Limits(max_nodes=20, budget_usd_per_hour=2.2)))
    # three of the cheapest, and $0.70/h left: a and b cost more; c has no more nodes
    assert counts == (0, 0, 3) and found == {"budget": 2, "capacity": 1}


def test_a_budget_plan_where_one_more_node_trains_no_faster_says_communication():
    # hivemind keeps only 60% of the rate of two or more nodes (the candidates' step efficiency): the fast
    # node alone beats it with any other
    cands = (candidate("fast", "aws/us-east-1", 1.0, 1000.0, capacity=1),
             candidate("slow", "aws/us-east-1", 0.1, 10.0, capacity=5, zone="aws/us-east-1/b"))
    problem = Problem(cands, FakeOracle(strategy="hivemind"), Limits(max_nodes=8, budget_usd_per_hour=50.0))
    found, counts = reasons(problem)
    assert counts == (1, 0)
    assert found == {"capacity": 1, "communication": 1}


def test_a_given_mix_was_not_limited_by_anything():
    use = budget_use_of(small_problem(Limits(budget_usd_per_hour=10.0)), None, 4.0, 100.0, tolerance=0.0)
    assert use.unused_usd_per_hour == 6.0 and use.unused_share == pytest.approx(0.6) and "given" in use.words


def totals(raw: float, goodput: float, usd_per_hour: float) -> PlanTotals:
    return PlanTotals(samples_per_s=raw, goodput_samples_per_s=goodput, time_per_round_s=1.0, granularity=None,
                      compute_usd_per_hour=usd_per_hour, egress_usd_per_hour=0.0, data_egress_usd_per_hour=0.0,
                      usd_per_million_samples=usd_per_hour / (3600 * goodput) * 1e6, interruptions_per_hour=0.1,
                      bottleneck="compute")


def test_completion_counts_hours_and_dollars_with_and_without_interruptions():
    job = JobSpec("j", "convnext-large", Objective.MIN_COST_BY_DEADLINE, total_samples=36_000_000, deadline_h=48)
    done = completion_of(job, totals(raw=1000.0, goodput=800.0, usd_per_hour=2.0))
    assert done.raw_hours == pytest.approx(10.0) and done.hours == pytest.approx(12.5)
    assert done.raw_usd == pytest.approx(20.0) and done.usd == pytest.approx(25.0)
    assert completion_of(replace(job, total_samples=None, deadline_h=None), totals(1000.0, 800.0, 2.0)) is None


def test_goal_misses_name_what_was_predicted_and_what_was_asked():
    job = JobSpec("j", "convnext-large", Objective.MIN_COST, target_samples_per_s=500.0, budget_usd_per_hour=1.0,
                  total_samples=36_000_000, deadline_h=10)
    misses = goal_misses(job, totals(raw=1000.0, goodput=400.0, usd_per_hour=2.0))
    assert len(misses) == 3
    assert "400.0 samples/s" in misses[0] and "500.0" in misses[0]
    assert "$2.000/h" in misses[1] and "$1.00/h" in misses[1]
    assert "25.0 h" in misses[2] and "deadline 10 h" in misses[2]
    assert goal_misses(job, totals(raw=1200.0, goodput=1100.0, usd_per_hour=0.5)) == ()


LAMBDA = Location("lambda", "us-west-1", "", Continent.NORTH_AMERICA)
AWS = Location("aws", "us-west-2", "usw2-az1", Continent.NORTH_AMERICA)


def test_an_unknown_cloud_pays_the_median_internet_rate_of_its_continent_and_says_so():
    egress = EgressPrices.bundled()
    known = sorted(egress.rate(Location(c, "r", "z", Continent.NORTH_AMERICA), AWS).usd_per_gb
                   for c in ("azure", "gcp")) + [egress.rate(AWS, LAMBDA).usd_per_gb]
    rate = egress.rate(LAMBDA, AWS)
    assert rate.usd_per_gb == pytest.approx(sorted(known)[1]) and rate.source.startswith("assumed")
    assert not egress.knows("lambda") and egress.knows("aws") and egress.knows("onprem")
    [line] = egress.assumed_words([LAMBDA, AWS])
    assert "'lambda' assumed" in line and "--egress FILE" in line
    assert egress.assumed_words([AWS]) == []


def test_an_egress_file_gives_real_rows_that_win(tmp_path):
    path = tmp_path / "egress.csv"
    path.write_text("cloud,link_class,src_continent,dst_continent,usd_per_gb\n"
                    "lambda,internet,*,*,0\nlambda,cross_region,*,*,0.01\naws,internet,*,*,0.05\n")
    egress = EgressPrices.bundled().with_file(path)
    assert egress.knows("lambda") and egress.rate(LAMBDA, AWS).usd_per_gb == 0
    assert egress.rate(LAMBDA, replace(LAMBDA, region="us-east-1")).usd_per_gb == 0.01
    assert egress.rate(AWS, LAMBDA).usd_per_gb == 0.05 and egress.rate(AWS, LAMBDA).source == "egress.csv"
    assert egress.assumed_words([LAMBDA, AWS]) == []
    # a known cloud without a row for a link class is still an error that says what to do
    with pytest.raises(CatalogError, match="--egress FILE"):
        egress.rate(LAMBDA, replace(LAMBDA, region="eu-west-1", continent=Continent.EUROPE))
    assert egress.rate(LAMBDA, LAMBDA).link_class is LinkClass.SAME_ZONE


@pytest.mark.parametrize("text, problem", [
    ("cloud,link_class,usd_per_gb\nx,internet,1\n", "missing column"),
    ("cloud,link_class,src_continent,dst_continent,usd_per_gb\nx,wormhole,*,*,1\n", "line 2"),
    ("cloud,link_class,src_continent,dst_continent,usd_per_gb\nx,internet,mars,*,1\n", "line 2"),
    ("cloud,link_class,src_continent,dst_continent,usd_per_gb\nx,internet,*,*,-1\n", "line 2"),
])
def test_a_bad_egress_file_is_named_with_its_line(tmp_path, text, problem):
    path = tmp_path / "egress.csv"
    path.write_text(text)
    with pytest.raises(InputError, match=problem):
        EgressPrices.bundled().with_file(path)


def test_completion_finish_time_is_the_plan_time_plus_the_hours():
    from geotrain.planning.planfile import finishes_at

    class P:
        created_at = datetime(2026, 1, 1, tzinfo=timezone.utc)

    assert finishes_at(P(), 36.5) == datetime(2026, 1, 2, 12, 30, tzinfo=timezone.utc)

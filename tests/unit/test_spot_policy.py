"""The spot policy of a job with a deadline (``launcher.spot_policy``), the market watch it learns from
(``launcher.watch``) and the safety net (``launcher.deadline``), through the replay the product runs.

The property that matters most: over generated markets (``geotrain.sim.markets``), whenever an
on-demand gang alone could meet the deadline at the start, geotrain's policy meets it, whatever spot
does."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from geotrain.domain import Continent, Location
from geotrain.domain import Market as Mkt
from geotrain.launcher.deadline import Deadline, MarketRule
from geotrain.launcher.spot_policy import Mix, Situation, SpotPolicy
from geotrain.launcher.watch import MarketWatch, need_of
from geotrain.sim.engine import Replay
from geotrain.sim.job import SimJob
from geotrain.sim.launch import GeotrainPolicy
from geotrain.sim.market import UNLIMITED, ZoneTrace, align
from geotrain.sim.markets import MarketSpec, generate
from geotrain.sim.policies import baseline
from geotrain.sim.world import build_world
from tests.helpers import examples

H = 3600.0
ZONES = ("aws/us-east-1/use1-az1", "aws/us-east-1/use1-az2", "aws/us-east-2/use2-az1", "aws/us-west-2/usw2-az2")


# -- 1. the deadline is an invariant ------------------------------------------------------------------------


@st.composite
def deadline_cases(draw):
    """A generated market and a job (its deadline as a multiple of what an on-demand gang alone needs)."""
    count = draw(st.integers(1, 3))
    zones = tuple(draw(st.lists(st.sampled_from(ZONES), min_size=count, max_size=count, unique=True)))
    capacity = draw(st.sampled_from([0, 2, 4]))
    spec = MarketSpec(
        zones=zones, days=2.0, tick_s=draw(st.sampled_from([300.0, 600.0])), capacity=capacity,
        up_mean_h=draw(st.floats(0.2, 12.0)), down_mean_h=draw(st.floats(0.1, 6.0)),
        shape=draw(st.sampled_from([0.5, 1.0, 1.5])), flap_zones=draw(st.integers(0, 1)),
        partial_share=draw(st.sampled_from([0.0, 0.3])), outage_per_day=draw(st.sampled_from([0.0, 2.0])),
        spike_per_day=draw(st.sampled_from([0.0, 4.0])), price_noise=draw(st.sampled_from([0.0, 0.2])))
    nodes = draw(st.integers(1, max(1, capacity)))
    job = dict(nodes=nodes, work_gpu_hours=draw(st.floats(0.5, 10.0)) * nodes,
               restart_s=draw(st.sampled_from([0.0, 300.0, 900.0])),
               checkpoint_every_s=draw(st.sampled_from([600.0, 1800.0, 3600.0])),
               notice_s=draw(st.sampled_from([0.0, 120.0])))
    return spec, draw(st.integers(0, 1000)), job, draw(st.floats(1.0, 2.5)), draw(st.floats(0.0, 0.5))


def deadline_world(spec: MarketSpec, seed: int, job: dict, slack: float, start_share: float):
    market = align(generate(spec, seed), tick_s=spec.tick_s)
    world = build_world(market, SimJob(name="t", workload="resnet50", deadline_h=100.0, **job))
    od_rate = max(world.rate(world.gang(z, Mkt.ON_DEMAND))[0] for z in range(world.zones)
                  if world.on_demand[z] is not None)
    need_h = world.job.restart_s / H + world.work_samples / (H * od_rate)
    world.job = replace(world.job, deadline_h=need_h * slack + 1e-6)
    return world, int(start_share * market.ticks)


@settings(max_examples=examples(60, 300), deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(deadline_cases())
def test_geotrain_meets_every_deadline_an_on_demand_gang_could_meet(case):
    world, start = deadline_world(*case)
    out = Replay(world, start_tick=start, record=False).run(GeotrainPolicy())
    assert out.deadline_met, (f"{case}: finished {out.completion_h} h against {world.job.deadline_h:.3f} h: "
                              f"{out.preemptions} preemptions, {out.on_demand_node_h:.2f} on-demand node-h")


@given(samples=st.floats(0, 1e7), hours=st.floats(0, 50), rate=st.floats(1, 1000), at_risk=st.floats(0, 1e6),
       restart_h=st.floats(0, 1), look_h=st.floats(0, 1))
@settings(max_examples=examples(200, 1000), deadline=None, database=None)
def test_the_policy_commits_to_on_demand_exactly_when_the_net_says(samples, hours, rate, at_risk, restart_h, look_h):
    deadline = Deadline(samples, hours, rate, at_risk, restart_h, look_h)
    od = Mix((("od", 1),), 3.0, rate, ())
    spot = Mix((("spot", 1),), 1.0, rate, (("k", 1),))
    watch = MarketWatch()
    watch.observe("k", 0.0, 1)
    decision = SpotPolicy().decide(Situation(deadline, 0.5, False), [od, spot], watch)
    assert decision.committed == (deadline.rule() is MarketRule.ON_DEMAND)
    if decision.committed:
        assert decision.mix == od




@pytest.mark.parametrize("spot", [True, False])
def test_work_on_an_on_demand_gang_is_not_at_risk(spot):
    """The net counts the work since the last checkpoint as lost if the gang is taken: on spot it is; an
    on-demand gang is not taken, and a change the run makes checkpoints first, so a replay's deadline
    counts none of it there (counting it swung the margin by a checkpoint's worth of work)."""
    n = 6 * 8
    zone = _zone("us-east-1", "us-east-1a", [UNLIMITED if spot else 0] * n, 0.9)
    world = build_world(align([zone], tick_s=600), SimJob(name="t", workload="resnet50", nodes=1, deadline_h=3,
                                                           work_gpu_hours=2, restart_s=300, checkpoint_every_s=1800))
    policy, seen = GeotrainPolicy(), []
    act = policy.act

    def looked(replay: Replay) -> None:
        act(replay)
        seen.append(({x.market for x in replay.running()}, replay.progress - replay.committed,
                     policy.la.remaining().at_risk_samples))

    policy.act = looked
    assert Replay(world, record=False).run(policy).deadline_met
    market = Mkt.SPOT if spot else Mkt.ON_DEMAND
    held = [(since, risk) for markets, since, risk in seen if markets == {market}]
    assert any(since > 0 for since, _ in held)
    assert all(risk == (since if spot else 0.0) for since, risk in held)

# -- 2. the market watch ------------------------------------------------------------------------------------


def _watch(series: dict[str, list[int]], tick_s: float = 600.0) -> MarketWatch:
    watch = MarketWatch()
    for t in range(max(len(v) for v in series.values())):
        for key, values in series.items():
            watch.observe(key, t * tick_s, values[t])
    return watch


def test_a_zone_that_flaps_is_expected_to_break_soon_and_a_stable_one_to_hold():
    watch = _watch({"flap": [1, 0] * 72, "stable": [1] * 144})
    ahead = np.array([1.0])
    flap = watch.outlook((("flap", 1),))
    stable = watch.outlook((("stable", 1),))
    assert flap.up is False and stable.up is True
    assert flap.fresh_survival(ahead)[0] < 0.05  # its spells last one tick
    assert stable.survival(ahead)[0] > 0.9
    assert 0.4 < flap.up_share < 0.6


def test_a_spell_that_has_lasted_is_expected_to_last_where_the_zone_shows_heavy_tails():
    # spells of 10 minutes and of 20 hours: young spells break, old ones hold
    series = ([1] + [0]) * 20 + ([1] * 120 + [0]) * 3 + [1] * 13
    watch = _watch({"z": series})
    o = watch.outlook((("z", 1),))
    assert o.up and math.isclose(o.age_h, 2.0, rel_tol=1e-9)
    assert o.survival(np.array([4.0]))[0] > 2 * o.fresh_survival(np.array([4.0]))[0]


def test_a_gang_is_a_need_per_size_and_spread_over_zones_it_needs_them_all():
    watch = _watch({"a": [4, 4, 2, 2, 4, 4], "b": [UNLIMITED, 0, UNLIMITED, UNLIMITED, 0, UNLIMITED]})
    assert watch.holds((("a", 2),)) and watch.holds((("a", 4),))
    assert watch.holds(need_of({"a": 2, "b": 1}))  # the last look: both hold
    together = dict(watch.together(((("a", 4),), (("b", 1),))))
    assert together[(True, True)] == pytest.approx(1 * 600 / H)  # tick 0, and the last tick (not yet elapsed)
    assert together[(True, False)] == pytest.approx(2 * 600 / H)
    assert together[(False, True)] == pytest.approx(2 * 600 / H)
    some = watch.some_outlook(((("a", 5),),))
    assert some.up is False  # five nodes were never there


def test_the_first_spell_seen_is_not_counted_as_a_whole_one():
    watch = _watch({"z": [1] * 3 + [0] * 100})
    o = watch.outlook((("z", 1),))
    assert o.up_hazard.sum() == pytest.approx(watch.outlook((("never", 1),)).up_hazard.sum())


def test_the_usual_price_and_how_fast_prices_return_to_it():
    rng = np.random.default_rng(3)
    watch = MarketWatch()
    x, phi = 0.0, math.exp(-1 / 6)  # one tick of 10 minutes; e-folding time 1 h
    for t in range(6 * 24 * 20):
        x = phi * x + 0.2 * rng.standard_normal()
        watch.observe_price("z", t * 600.0, 2.0 * math.exp(x))
    assert watch.usual_price("z") == pytest.approx(2.0, rel=0.25)
    assert watch.reversion_h("z") == pytest.approx(1.0, rel=0.3)


# -- 3. the policy in a replay ------------------------------------------------------------------------------

START = datetime(2023, 1, 1, tzinfo=UTC)


def _zone(region: str, name: str, available, price: float) -> ZoneTrace:
    n = len(available)
    return ZoneTrace(Location("aws", region, name, Continent.NORTH_AMERICA), "p3.2xlarge", START,
                     np.arange(n) * 600.0, np.array(available, dtype=np.int64), np.full(n, price), 3.06, "test")


def test_a_cheap_zone_that_flaps_is_left_alone_while_up_s_keeps_losing_gangs_there():
    n = 6 * 24 * 3
    flapping = _zone("us-east-1", "us-east-1a", [UNLIMITED, 0] * (n // 2), 0.5)
    stable = _zone("us-east-2", "us-east-2a", [UNLIMITED] * n, 0.7)
    market = align([flapping, stable], tick_s=600)
    world = build_world(market, SimJob(name="t", workload="resnet50", nodes=1, deadline_h=12, work_gpu_hours=8,
                                       restart_s=300, checkpoint_every_s=1800))
    start = 6 * 24  # a day of the market's past
    geo = Replay(world, start_tick=start, record=False).run(GeotrainPolicy())
    ups = Replay(world, start_tick=start, record=False).run(baseline("up-s"))
    assert geo.deadline_met and geo.preemptions == 0
    assert ups.preemptions >= 1  # it takes the cheap zone first, and loses its gang there
    assert geo.usd < ups.usd


def test_with_twice_the_time_needed_an_outage_is_waited_out_where_uniform_progress_buys_on_demand():
    """A day of 6-hour spells broken by 2-hour outages, then the job (8 GPU-h, 16 h to do them): an hour
    on spot and a 2-hour outage. The margin left (about 7 h) pays for what the work left is expected to
    spend (its waiting and losses, about 3 h), so the run waits; the calendar's line (half of the hours
    left) is crossed half an hour into the outage, where up-s buys on-demand."""
    day = ([UNLIMITED] * 36 + [0] * 12) * 3
    window = [UNLIMITED] * 6 + [0] * 12 + [UNLIMITED] * 6 * 24
    zone = _zone("us-east-1", "us-east-1a", day + window, 0.9)
    market = align([zone], tick_s=600)
    world = build_world(market, SimJob(name="t", workload="resnet50", nodes=1, deadline_h=16, work_gpu_hours=8,
                                       restart_s=300, checkpoint_every_s=1800))
    geo = Replay(world, start_tick=len(day), record=False).run(GeotrainPolicy())
    ups = Replay(world, start_tick=len(day), record=False).run(baseline("up-s"))
    assert geo.deadline_met and geo.on_demand_node_h == 0
    assert ups.on_demand_node_h > 0 and geo.usd < ups.usd



def test_with_twice_the_time_needed_a_zone_down_half_its_day_is_still_waited_for():
    """A day of 1.5-hour spells and 1.5-hour outages, then the job (8 GPU-h, 16 h to do them) starts in an
    outage. The past day says the work left will spend more than the whole margin (an hour of waiting per
    hour of spot, and a loss every 1.5 h), so the calendar's line would be the pace, and an hour of
    waiting puts the run behind it: it bought on-demand. Capped at half the time the work needs, the
    line leaves the rest of the slack to wait in: no on-demand, cheaper than up-s."""
    day = ([UNLIMITED] * 9 + [0] * 9) * 8
    window = [0] * 9 + [UNLIMITED] * 6 * 24
    zone = _zone("us-east-1", "us-east-1a", day + window, 0.9)
    world = build_world(align([zone], tick_s=600), SimJob(name="t", workload="resnet50", nodes=1, deadline_h=16,
                                                           work_gpu_hours=8, restart_s=300, checkpoint_every_s=1800))
    geo = Replay(world, start_tick=len(day), record=False).run(GeotrainPolicy())
    uncapped = Replay(world, start_tick=len(day), record=False).run(GeotrainPolicy(spot_policy={"pace_cap": 0}))
    ups = Replay(world, start_tick=len(day), record=False).run(baseline("up-s"))
    assert geo.deadline_met and geo.on_demand_node_h == 0
    assert uncapped.on_demand_node_h > 0 and ups.on_demand_node_h > 0
    assert geo.usd < ups.usd < uncapped.usd

def test_the_spot_share_pays_for_waiting_as_spot_trains():
    """``q`` of ``V``: without waiting, the expected share before the (k+1)-th loss,
    ``(1/μ)·Σ_{j≤k} P(N(μ) > j)``; without losses, spot trains until the waiting ``w·t`` spends the margin:
    ``min(1, m/(w·T))``; more margin never less."""
    from geotrain.launcher.spot_policy import _spot_share

    mu, k = 10.0, 2
    exact = sum(1 - sum(math.exp(-mu) * mu**i / math.factorial(i) for i in range(j + 1)) for j in range(k + 1)) / mu
    assert _spot_share(10.0, 2.0, 1.0, 0.0, 1.0) == pytest.approx(exact, abs=2e-3)
    for margin_h, train_h, waiting in ((5.0, 20.0, 0.5), (12.0, 20.0, 0.5), (3.0, 10.0, 2.0)):
        assert _spot_share(train_h, margin_h, 0.0, waiting, 0.5) == pytest.approx(
            min(1.0, margin_h / (waiting * train_h)), abs=0.03)
    shares = _spot_share(np.full(40, 20.0), np.linspace(0, 30, 40), 0.4, 0.6, 0.4)
    assert np.all(np.diff(shares) >= -1e-12) and shares[0] == 0.0 and shares[-1] > 0.99


# -- 4. a launch steers by the same rule ---------------------------------------------------------------------


class _Cloud:
    """A provider with nothing running (what the steering reads of it)."""

    name = "aws"
    providers = frozenset({"aws"})

    def __init__(self) -> None:
        from geotrain.providers.base import Capabilities

        self.capabilities = Capabilities(spot=True, notice_s=120, preemption_injection=False)

    def list(self, run_id=None):  # noqa: ANN001, ANN201
        return []


@pytest.mark.parametrize("slack", [3.0, 1.0])
def test_a_launch_with_a_deadline_is_steered_by_the_same_net(tmp_path, monkeypatch, slack):
    from geotrain.domain import Constraints, JobSpec, Objective
    from geotrain.launcher.loop import Launcher
    from geotrain.launcher.options import LaunchOptions
    from geotrain.launcher.replanning import keep_the_deadline
    from geotrain.ledger import EventKind
    from geotrain.planning.planner import PlanOptions, make_plan
    from geotrain.pricing.snapshot import bundled_snapshot

    monkeypatch.setenv("GEOTRAIN_HOME", str(tmp_path / "home"))
    rates = tmp_path / "rates.csv"
    rates.write_text("workload,accelerator,samples_per_s\ntiny-cnn,T4,1000\n")
    job = JobSpec("d", "tiny-cnn", Objective.MIN_COST_BY_DEADLINE, total_samples=36_000_000, deadline_h=100.0,
                  rates_file=str(rates), constraints=Constraints(node_count=2, clouds=frozenset({"aws"}),
                                                                 accelerators=frozenset({"T4"})))
    plan = make_plan(job, bundled_snapshot(), options=PlanOptions(frontier_points=0))
    launcher = Launcher(plan, _Cloud(), options=LaunchOptions(block_s=300))
    run_id = launcher.start()
    od = max(m.samples_per_s for m in launcher.mixes() if m.on_demand)
    need_h = plan.recovery_h + job.total_samples / (3600 * od) + plan.recovery_h * plan.totals.samples_per_s / od
    launcher.plan = replace(plan, job=replace(job, deadline_h=need_h * slack))
    deadline = launcher.remaining()
    assert deadline.on_demand_samples_per_s == od
    assert (deadline.rule() is MarketRule.SPOT) == (slack > 1)
    changed = keep_the_deadline(launcher)  # the spot policy decides at the launcher's look
    markets = {launcher.offers[o].market.value for o in launcher.wanted}
    assert markets == ({"spot"} if slack > 1 else {"on_demand"}) and sum(launcher.wanted.values()) == 2
    events = launcher.ledger.events(run_id, kinds=(EventKind.REPLANNED,))
    if slack <= 1:  # the net: on-demand, recorded as the spot policy's decision
        assert changed and events[-1].detail["by"] == "spot policy" and events[-1].detail["committed"]
    else:
        assert not changed or not events[-1].detail["committed"]

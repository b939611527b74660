"""The deadline's safety net (``geotrain.launcher.deadline``): spot while the margin holds, on-demand
after; the numbers by hand."""

from __future__ import annotations

import math

from geotrain.launcher.deadline import Deadline, MarketRule

WORK = 3600 * 100 * 10  # 10 h of work for an on-demand gang of 100 samples/s


def test_the_margin_counts_the_look_the_restart_and_the_work_at_risk() -> None:
    d = Deadline(samples_left=WORK, hours_left=12.0, on_demand_samples_per_s=100.0,
                 at_risk_samples=3600 * 100 * 0.5, restart_h=0.25, look_h=0.1)
    assert math.isclose(d.need_h(), 0.25 + 10.5)
    assert math.isclose(d.margin_h(), 12.0 - 0.1 - 10.75)


def test_spot_while_the_margin_holds_then_on_demand() -> None:
    def rule(hours_left: float) -> MarketRule:
        return Deadline(WORK, hours_left, 100.0, restart_h=0.25, look_h=0.25).rule()

    assert rule(10.6) is MarketRule.SPOT
    assert rule(10.5) is MarketRule.SPOT  # exactly on the net: the on-demand gang started next look still makes it
    assert rule(10.49) is MarketRule.ON_DEMAND
    assert rule(9.0) is MarketRule.ON_DEMAND  # out of reach: on-demand all the same
    assert Deadline(0.0, 0.01, 100.0, restart_h=0.5).rule() is MarketRule.SPOT  # nothing left to train


def test_without_an_on_demand_gang_there_is_no_net() -> None:
    assert Deadline(WORK, 1.0, None).rule() is MarketRule.SPOT
    assert Deadline(WORK, 1.0, 0.0).margin_h() == math.inf


def test_an_on_demand_gang_started_now_loses_nothing() -> None:
    d = Deadline(WORK, 10.25, 100.0, at_risk_samples=WORK, restart_h=0.25, look_h=1.0)
    assert d.reachable_on_demand(100.0)  # a change the run makes checkpoints first: the work at risk is kept
    assert not d.reachable_on_demand(99.0)
    assert d.rule() is MarketRule.ON_DEMAND  # waiting a look, with everything at risk lost, would not

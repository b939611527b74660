"""The deadline rule (``geotrain.launcher.deadline``): spot while the slack holds one more
interruption, on-demand after; the numbers by hand."""

from __future__ import annotations

import math

from geotrain.launcher.deadline import Deadline, MarketRule


def test_the_slack_is_the_hours_left_less_the_work_at_the_rate() -> None:
    d = Deadline(samples_left=3600 * 100 * 10, hours_left=12.0, risk_h=0.5)  # 10 h of work at 100/s
    assert math.isclose(d.slack_h(100.0), 2.0)
    assert d.slack_h(0.0) == float("-inf")


def test_spot_while_the_slack_holds_one_more_interruption_then_on_demand() -> None:
    work = 3600 * 100 * 10
    assert Deadline(work, 10.6, risk_h=0.5).rule(100.0) is MarketRule.SPOT
    assert Deadline(work, 10.5, risk_h=0.5).rule(100.0) is MarketRule.ON_DEMAND  # exactly the risk: no more spot
    assert Deadline(work, 10.4, risk_h=0.5).rule(100.0) is MarketRule.ON_DEMAND
    assert Deadline(work, 9.0, risk_h=0.5).rule(100.0) is MarketRule.ON_DEMAND  # out of reach: on-demand all the same
    assert Deadline(0.0, 0.6, risk_h=0.5).rule(100.0) is MarketRule.SPOT  # nothing left to train

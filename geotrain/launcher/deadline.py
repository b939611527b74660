"""A job with a deadline: which market a re-plan may buy from, and whether to wait for spot.

The rule is Can't Be Late's safety net (Wu et al., NSDI '24), made for many zones: spot is worth
waiting for while the time left still holds the rest of the work on on-demand nodes, plus what one
more interruption can cost; once it does not, only on-demand is bought, and the run stays there.

With ``h`` hours left, ``S`` samples left, ``r`` the planned mix's samples/s and ``c`` the most one
interruption costs (``risk_h``: the work since the last checkpoint, a restart and the time until the
launcher looks again; where the work at risk is not known, about twice the plan's expected cost of
an interruption), the *slack* is ``h − S/(3600·r)``:

- slack > c → **spot only**: a re-plan leaves on-demand out and takes the cheapest spot mix per
  sample that keeps the deadline by the planner's expected goodput, else the cheapest per sample (the
  rule, not the expectation, keeps the deadline); when no spot can be had the launch waits (a later
  try may find capacity) instead of paying on-demand prices early;
- otherwise → **on-demand only**: one more interruption, and the restart on on-demand nodes, would
  leave no time to finish.

On-demand nodes are taken to train as fast as the plan (the same shape on the same hardware).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class MarketRule(StrEnum):
    SPOT = "spot"  # spot only; wait when none can be had
    ON_DEMAND = "on_demand"  # on-demand only


@dataclass(frozen=True, slots=True)
class Deadline:
    samples_left: float
    hours_left: float
    risk_h: float  # the most one interruption costs (see the module docstring)

    def slack_h(self, samples_per_s: float) -> float:
        if samples_per_s <= 0:
            return float("-inf")
        return self.hours_left - self.samples_left / (3600.0 * samples_per_s)

    def rule(self, samples_per_s: float) -> MarketRule:
        return MarketRule.SPOT if self.slack_h(samples_per_s) > self.risk_h else MarketRule.ON_DEMAND

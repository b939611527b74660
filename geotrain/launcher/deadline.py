"""A job with a deadline: the safety net that keeps it, whatever the spot market does.

The rule is Can't Be Late's safety net (Wu et al., NSDI '24), counted in what a launcher knows at
each decision. With

- ``h`` the hours left to the deadline, ``Δ`` the hours until the launcher decides again,
- ``S`` the samples not yet trained and ``a`` those trained since the last checkpoint (lost if the
  gang is taken without notice; 0 where a notice leaves time to checkpoint, and on an on-demand gang,
  which is not taken),
- ``R`` the hours from a change of gang to training again (launch, rendezvous, checkpoint load),
- ``r_od`` the samples/s of the fastest on-demand gang the job can buy,

the *margin* is ``m = h − Δ − (R + (S + a)/(3600·r_od))``: what waiting for spot, or training on spot
until the next decision, may still spend. Spot (or waiting for it) is allowed while ``m ≥ 0``; once
``m < 0`` the run buys the on-demand gang and stays there (``MarketRule.ON_DEMAND``).

Why it holds: a decision that allows spot leaves, at the next one, ``h' = h − Δ`` hours and at most
``S + a`` samples to train, even if the gang was lost the moment after (work only rolls back to the
last checkpoint). An on-demand gang started then (a change the launcher makes checkpoints first, so
nothing more is lost) finishes by ``R + (S + a)/r_od ≤ h'``. So whenever the on-demand gang alone could
meet the deadline at the start, the run meets it, whatever spot does; the spot policy chooses freely
inside that margin and never spends it. The launcher (``replanning.keep_the_deadline``) and a replay
(``geotrain.sim.launch``) ask this one rule.

A job no on-demand gang can serve (``r_od`` unknown or 0) has no net: spot is always allowed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

EPSILON_H = 1e-9  # rounding in hours: a margin of exactly 0 still keeps the deadline


class MarketRule(StrEnum):
    SPOT = "spot"  # spot allowed (or waiting for it): the margin holds
    ON_DEMAND = "on_demand"  # on-demand only, to the end


@dataclass(frozen=True, slots=True)
class Deadline:
    """What is left of a job with a deadline at one decision (see the module docstring)."""

    samples_left: float  # not yet trained
    hours_left: float
    on_demand_samples_per_s: float | None  # the fastest on-demand gang; None: none can be bought
    at_risk_samples: float = 0.0  # trained since the last checkpoint: lost if the gang is taken without notice
    restart_h: float = 0.0  # from a change of gang to training again
    look_h: float = 0.0  # until the next decision

    def need_h(self) -> float:
        """Hours the on-demand gang needs if everything at risk is lost: ``R + (S + a)/r_od``."""
        rate = self.on_demand_samples_per_s
        if self.samples_left <= 0:
            return 0.0
        if not rate or rate <= 0:
            return math.inf
        return self.restart_h + (self.samples_left + self.at_risk_samples) / (3600.0 * rate)

    def margin_h(self) -> float:
        """``h − Δ − need``: what spot may still spend before the on-demand gang is due."""
        if self.samples_left <= 0:
            return math.inf
        if not self.on_demand_samples_per_s or self.on_demand_samples_per_s <= 0:
            return math.inf  # nothing to fall back on: no net to keep
        return self.hours_left - self.look_h - self.need_h()

    def rule(self) -> MarketRule:
        return MarketRule.SPOT if self.margin_h() >= -EPSILON_H else MarketRule.ON_DEMAND

    def reachable_on_demand(self, samples_per_s: float) -> bool:
        """Whether a gang of ``samples_per_s``, started now (nothing lost: a change the run makes checkpoints
        first), finishes in the hours left."""
        if self.samples_left <= 0:
            return True
        if samples_per_s <= 0:
            return False
        return self.restart_h + self.samples_left / (3600.0 * samples_per_s) <= self.hours_left + EPSILON_H

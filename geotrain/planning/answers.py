"""Answers to the question the job asked, beside the mix itself.

- :func:`completion_of`: a job that gives ``total_samples`` — when they are trained and what that
  costs in all, at the plan's goodput (expected interruptions counted) and at its raw samples/s. The
  dollars are the plan's $/h times those hours.
- :func:`budget_use_of`: a job with a budget — the $/h the mix leaves unused, and what kept it from
  growing into the rest. The rule, checked by the referee (the perf model) and the solver's own
  limits: for every candidate, one more node of it is added to the plan's mix, and

  * it costs more than the budget (node price, or the egress it adds): *budget*;
  * it breaks a limit of the problem: the limit whose relaxation alone lets it in — *max nodes*,
    *capacity* (the offer has no more nodes to give), *capacity pools* (the capacity model's caps),
    *quotas*, *max regions*, *max nodes per zone*, *max GPUs per zone*, *zone share*, *spot share*,
    or *several limits* when no single one does;
  * it keeps every limit but the perf model says the mix trains no faster: *communication* (the
    plan's bottleneck);
  * it trains faster within the budget: *search tolerance* (the search stops within its tolerance).

  The answer names each reason with the number of candidates it stopped.
- :func:`goal_misses`: what a given mix (``--nodes``) misses of the job's goal, predicted vs asked.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from geotrain.domain import BudgetUse, Completion, JobSpec, PlanTotals
from geotrain.solver import semantics
from geotrain.solver.problem import Problem

BUDGET, COMMUNICATION, SEARCH, SEVERAL = "budget", "communication", "search tolerance", "several limits"
MAX_NODES, CAPACITY = "max nodes", "capacity"


def completion_of(job: JobSpec, totals: PlanTotals) -> Completion | None:
    """None unless the job gives total_samples and the mix trains at all."""
    if job.total_samples is None or totals.goodput_samples_per_s <= 0 or totals.samples_per_s <= 0:
        return None
    hours = job.total_samples / (3600 * totals.goodput_samples_per_s)
    raw_hours = job.total_samples / (3600 * totals.samples_per_s)
    return Completion(job.total_samples, hours, hours * totals.usd_per_hour, raw_hours, raw_hours * totals.usd_per_hour)


def goal_misses(job: JobSpec, totals: PlanTotals) -> tuple[str, ...]:
    """Each goal of the job the mix misses by the perf model, in words (predicted vs asked)."""
    out = []
    goodput = totals.goodput_samples_per_s
    if job.target_samples_per_s is not None and goodput < job.target_samples_per_s * (1 - 1e-6):
        out.append(f"it trains {goodput:,.1f} samples/s after expected interruptions, below the target "
                   f"{job.target_samples_per_s:,.1f} samples/s")
    budget = job.budget_usd_per_hour
    if budget is not None and totals.usd_per_hour > budget * (1 + 1e-6):
        out.append(f"it costs ${totals.usd_per_hour:,.3f}/h, over the budget ${budget:,.2f}/h")
    if job.total_samples is not None and job.deadline_h is not None:
        done = completion_of(job, totals)
        if done is None or done.hours > job.deadline_h * (1 + 1e-6):
            took = "never" if done is None else f"in {done.hours:,.1f} h"
            out.append(f"it trains {job.total_samples:,} samples {took}, past the deadline {job.deadline_h:g} h")
    return tuple(out)


def budget_use_of(problem: Problem, counts: tuple[int, ...] | None, usd_per_hour: float, samples_per_s: float,
                  *, tolerance: float, describe: Callable[[tuple[int, ...]], str] | None = None) -> BudgetUse | None:
    """None without a budget. ``counts``: the plan's mix over ``problem``'s candidates (None: a mix
    given by hand, which nothing limited). ``describe``: the perf model's bottleneck of a mix, in words
    (said of the best mix with one more node that trains no faster)."""
    budget = problem.limits.budget_usd_per_hour
    if budget is None:
        return None
    unused = max(0.0, budget - usd_per_hour)
    if counts is None:
        return BudgetUse(budget, unused, (("the given mix", 0),), "the mix was given (--nodes), not searched for")
    referee = semantics.referee_of(problem)
    reasons: Counter[str] = Counter()
    slowed: tuple[float, tuple[int, ...]] | None = None  # the fastest mix with one more node that gains nothing
    for i, c in enumerate(problem.candidates):
        if c.price_usd_per_hour + c.data_usd_per_hour > unused * (1 + 1e-9):
            reasons[BUDGET] += 1
            continue
        more = tuple(n + (j == i) for j, n in enumerate(counts))
        if not semantics.structurally_feasible(problem, more):
            reasons[_binding(problem, i, more)] += 1
            continue
        evaluation = referee.evaluate(more)
        if evaluation.usd_per_hour > budget * (1 + 1e-9):
            reasons[BUDGET] += 1
        elif evaluation.samples_per_s <= samples_per_s * (1 + tolerance):
            reasons[COMMUNICATION] += 1
            if slowed is None or evaluation.samples_per_s > slowed[0]:
                slowed = (evaluation.samples_per_s, more)
        else:
            reasons[SEARCH] += 1
    limits = tuple(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
    bottleneck = ""
    if slowed is not None and describe is not None:
        bottleneck = (f"the best of them trains {slowed[0]:,.1f} samples/s against the plan's {samples_per_s:,.1f}: "
                      + describe(slowed[1]))
    return BudgetUse(budget, unused, limits, _words(problem, limits, unused, bottleneck))


def _relaxations(problem: Problem, i: int) -> list[tuple[str, Callable[[], Problem]]]:
    """Each limit that may keep one more node of candidate ``i`` out, with the problem without it."""
    limits, cands = problem.limits, problem.candidates

    def bump(index: int, problem: Problem) -> Problem:
        grown = replace(cands[index], capacity=cands[index].capacity + 1)
        return replace(problem, candidates=cands[:index] + (grown,) + cands[index + 1:])

    def more_nodes() -> Problem:
        wider = replace(problem, limits=replace(limits, max_nodes=limits.max_nodes + 1))
        # an offer with no capacity hint holds at most the node limit: it grows with it
        return bump(i, wider) if cands[i].capacity >= limits.max_nodes else wider

    def without(**change: object) -> Callable[[], Problem]:
        return lambda: replace(problem, limits=replace(limits, **change))

    return [
        (MAX_NODES, more_nodes),
        (CAPACITY, lambda: bump(i, problem)),
        ("capacity pools", without(pool_caps=())),
        ("quotas", without(quotas=())),
        ("max regions", without(max_regions=None)),
        ("max nodes per zone", without(max_nodes_per_zone=None)),
        ("max GPUs per zone", without(max_accelerators_per_zone=None)),
        ("zone share", without(max_zone_share=None)),
        ("spot share", without(max_spot_share=None)),
    ]


def _binding(problem: Problem, i: int, more: tuple[int, ...]) -> str:
    for name, relaxed in _relaxations(problem, i):
        if semantics.structurally_feasible(relaxed(), more):
            return name
    return SEVERAL


_FLAGS = {
    MAX_NODES: "--max-nodes", "capacity pools": "--capacity-confidence", "quotas": "--quota",
    "max regions": "--max-regions", "max nodes per zone": "--max-per-zone", "max GPUs per zone": "--max-gpus-per-zone",
    "zone share": "--zone-share", "spot share": "--spot-share",
}


def _words(problem: Problem, limits: tuple[tuple[str, int], ...], unused: float, bottleneck: str) -> str:
    total = len(problem.candidates)
    parts = []
    for name, n in limits:
        whom = "every candidate" if n == total else f"{n} of {total} candidates"
        if name == BUDGET:
            parts.append(f"budget ({whom}: one more node costs more than the ${unused:,.2f}/h left)")
        elif name == COMMUNICATION:
            parts.append(f"communication ({whom}: one more node trains no faster"
                         + (f"; {bottleneck}" if bottleneck else "") + ")")
        elif name == SEARCH:
            parts.append(f"search tolerance ({whom}: one more node trains faster within the budget; the search "
                         "stops within its tolerance)")
        elif name == CAPACITY:
            parts.append(f"capacity ({whom}: the offer has no more nodes to give"
                         + ("; more offers (looser filters) would help" if n == total else "") + ")")
        elif name == MAX_NODES:
            parts.append(f"max nodes ({problem.limits.max_nodes}; {whom}; {_FLAGS[name]})")
        elif name == SEVERAL:
            parts.append(f"several limits at once ({whom})")
        else:
            parts.append(f"{name} ({whom}; {_FLAGS[name]})")
    return "; ".join(parts)

"""The "SkyPilot's pick" baseline is what SkyPilot's optimizer would buy for the same job: n nodes of one
accelerator type, the cheapest offer of that type holding all n, on-demand unless the job asks for spot
only; where the plan is one node, so is a choice SkyPilot can make (never "none reaches the target")."""

from __future__ import annotations

from dataclasses import replace

from geotrain.domain import BaselineKind, Constraints, JobSpec, Market, Objective
from geotrain.planning.planner import PlanOptions, make_plan
from geotrain.pricing.snapshot import bundled_snapshot

OPTIONS = PlanOptions(frontier_points=0, time_limit_s=10.0)


def skypilot(plan):
    return next(b for b in plan.baselines if b.kind is BaselineKind.CHEAPEST_IDENTICAL)


def test_a_one_node_plan_has_skypilots_pick_on_demand_of_one_type_and_saves_against_it():
    snapshot = bundled_snapshot()
    job = JobSpec("one", "resnet50", Objective.MIN_COST, target_samples_per_s=1000)
    plan = make_plan(job, snapshot, options=OPTIONS)
    pick = skypilot(plan)
    assert len(pick.groups) == 1 and pick.groups[0].offer.market == Market.ON_DEMAND
    assert plan.totals.usd_per_hour <= pick.usd_per_hour * (1 + 1e-9)
    # the cheapest on-demand offer of its type: no offer of the same accelerators per node costs less
    shape = pick.groups[0].offer.shape
    same = [o for o in snapshot.offers() if o.market == Market.ON_DEMAND and o.shape.accelerator == shape.accelerator
            and o.shape.accelerator_count == shape.accelerator_count]
    assert pick.groups[0].offer.price_usd_per_hour == min(o.price_usd_per_hour for o in same)


def test_a_spot_only_job_gets_skypilots_spot_pick():
    job = JobSpec("spot", "resnet50", Objective.MIN_COST, target_samples_per_s=1000,
                  constraints=Constraints(spot_only=True))
    plan = make_plan(job, bundled_snapshot(), options=OPTIONS)
    assert skypilot(plan).groups[0].offer.market == Market.SPOT
    on_demand = make_plan(replace(job, constraints=Constraints()), bundled_snapshot(), options=OPTIONS)
    assert skypilot(on_demand).usd_per_hour >= skypilot(plan).usd_per_hour

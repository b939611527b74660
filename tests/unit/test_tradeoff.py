"""A plan that is one homogeneous choice says what binds a mix that spreads further; a mix does not."""

from __future__ import annotations

from geotrain.domain import Constraints, JobSpec, NodeGroup, Objective, SyncSettings, SyncStrategyName
from geotrain.planning.planfile import load_plan, save_plan
from geotrain.planning.planner import PlanOptions, build_context, make_plan
from geotrain.planning.tradeoff import homogeneous, why_homogeneous
from geotrain.pricing.snapshot import bundled_snapshot

OPTIONS = PlanOptions(frontier_points=0, time_limit_s=20.0)
TERMS = ("capacity binds", "binding term: egress", "binding term: the round", "binding term: price")


def test_a_homogeneous_plan_names_its_binding_term_and_keeps_it_in_the_plan_file(tmp_path):
    job = JobSpec("one", "convnext-large", Objective.MIN_COST, target_samples_per_s=1500,
                  sync=SyncSettings(strategy=SyncStrategyName.HIVEMIND),
                  constraints=Constraints(max_gpus_per_zone=8, spot_only=True))
    plan = make_plan(job, bundled_snapshot(), options=OPTIONS)
    groups = [NodeGroup(i.offer, i.count) for i in plan.items]
    assert homogeneous(groups)
    assert any(term in plan.tradeoff for term in TERMS), plan.tradeoff
    assert "the best swap to another offer" in plan.tradeoff or "capacity binds" in plan.tradeoff
    save_plan(plan, tmp_path / "plan.json")
    assert load_plan(tmp_path / "plan.json").tradeoff == plan.tradeoff


def test_a_mix_of_offers_has_no_tradeoff_line():
    job = JobSpec("mix", "convnext-large", Objective.MIN_COST, target_samples_per_s=500,
                  sync=SyncSettings(strategy=SyncStrategyName.HIVEMIND),
                  constraints=Constraints(max_nodes_per_zone=8, accelerators=frozenset({"T4"})))
    snapshot = bundled_snapshot()
    ctx = build_context(job, snapshot, options=OPTIONS)
    offers = {c.key: ctx.candidates.offers[c.key] for c in ctx.problem.candidates}
    a = sorted(offers)[0]
    b = next(k for k in sorted(offers) if offers[k].shape.instance_type != offers[a].shape.instance_type)
    mix = [NodeGroup(offers[a], 1), NodeGroup(offers[b], 1)]
    assert not homogeneous(mix)
    assert why_homogeneous(ctx, mix) is None
    assert why_homogeneous(ctx, [NodeGroup(offers[a], 2)]) is not None

"""Launch failures are re-planned, not fatal: every fault a cloud throws at a launch ends in a completed
run (or a clear error when nothing feasible is left), with no node launched twice and none leaked.

The provider is ``geotrain.testing.FakeProvider``: real local nodes and real training workers, with
the failures injected at the provider's API, as a cloud SDK would raise them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from geotrain.domain import Constraints, JobSpec, Objective, SyncSettings, SyncStrategyName
from geotrain.errors import RunError, ThrottledError
from geotrain.launcher.loop import Launcher
from geotrain.launcher.options import LaunchOptions
from geotrain.launcher.preemptions import PreemptionEvent, PreemptionSchedule
from geotrain.ledger import EventKind, Ledger
from geotrain.planning.planner import PlanOptions, plan_for_nodes
from geotrain.pricing.snapshot import bundled_snapshot
from geotrain.testing import FakeProvider, Fault, FaultKind
from tests.integration.test_launch import assert_no_orphans

pytestmark = pytest.mark.slow

NODES = "aws/usw2-az1/g4dn.xlarge,aws/use1-az1/g4dn.xlarge"
ZONE_B = "aws/us-east-1/use1-az1"


def make_plan(**constraints):  # noqa: ANN201
    job = JobSpec("faults", "tiny-cnn", Objective.MIN_COST, target_samples_per_s=10,
                  sync=SyncSettings(SyncStrategyName.ALLREDUCE), constraints=Constraints(**constraints))
    return plan_for_nodes(job, bundled_snapshot(), NODES, options=PlanOptions(frontier_points=0, provider="local"))


def launch(tmp_path: Path, faults, plan=None, **kw):  # noqa: ANN001, ANN201
    provider = FakeProvider(faults)
    options = LaunchOptions(steps=kw.pop("steps", 24), checkpoint_every=8, progress_every=4, block_s=600,
                            checkpoint_url=str(tmp_path / "ckpt"), backoff_s=0.05, **kw)
    launcher = Launcher(plan or make_plan(), provider, options=options)
    run_id = launcher.start()
    return provider, launcher, run_id


def kinds(run_id: str) -> Counter:
    return Counter(e.kind for e in Ledger().events(run_id))


def assert_nothing_twice_nothing_left(provider: FakeProvider, run_id: str) -> None:
    ledger_nodes = [n.node_id for n in Ledger().nodes(run_id)]
    assert provider.untracked(run_id, ledger_nodes) == [], "a node the ledger does not know was launched"
    assert len(ledger_nodes) == len(set(ledger_nodes))
    requests = [n.request_id for n in Ledger().nodes(run_id)]
    assert len(requests) == len(set(requests)), "one request made two nodes"
    assert provider.leaked(run_id) == []
    assert all(n.ended_at is not None for n in Ledger().nodes(run_id))
    assert_no_orphans(run_id)


def test_capacity_throttling_and_an_unknown_outcome_are_met_and_the_run_completes(tmp_path):
    faults = [
        Fault(FaultKind.THROTTLE, times=2),  # the first launch is throttled twice, then goes through
        Fault(FaultKind.CAPACITY, scope=ZONE_B),  # the second planned node's zone has no capacity
        Fault(FaultKind.TIMEOUT, after=1),  # a later launch times out, though its node was made
    ]
    plan = make_plan()
    provider, launcher, run_id = launch(tmp_path, faults, plan)
    outcome = launcher.run()
    assert outcome.status == "completed", outcome
    seen = kinds(run_id)
    # the zone without capacity is met by the plan's first fallback for it: no solver runs
    assert seen[EventKind.THROTTLED] == 2 and seen[EventKind.LAUNCH_FAILED] == 1
    assert seen[EventKind.FELL_BACK] == 1 and seen[EventKind.REPLANNED] == 0
    failed = Ledger().events(run_id, kinds=(EventKind.LAUNCH_FAILED,))[0]
    assert failed.detail["failure"] == "capacity" and failed.detail["scope"] == ZONE_B
    assert ZONE_B in {e.detail["scope"] for e in Ledger().events(run_id, kinds=(EventKind.BLOCKED,))}
    reconciled = Ledger().events(run_id, kinds=(EventKind.RECONCILED,))
    assert len(reconciled) == 1 and len(reconciled[0].detail["found"]) == 1  # settled by listing, not relaunched
    nodes = Ledger().nodes(run_id)
    first = plan.fallbacks_for(ZONE_B)[0].moves[0][1]
    assert len(nodes) == 2 and not any(n.zone == "use1-az1" for n in nodes)
    assert first.offer_id in {n.offer_id for n in nodes}
    assert reconciled[0].detail["found"][0] in {n.node_id for n in nodes}
    assert_nothing_twice_nothing_left(provider, run_id)


def test_fallbacks_are_walked_in_order_then_the_job_is_planned_again(tmp_path):
    plan = make_plan()
    fallbacks = plan.fallbacks_for(ZONE_B)
    assert len(fallbacks) >= 2
    # the plan's figures for each fallback are the perf model's for the moved mix
    from geotrain.planning.planner import build_context, predict_groups
    from geotrain.domain import NodeGroup

    ctx = build_context(plan.job, bundled_snapshot(), options=PlanOptions(frontier_points=0, provider="local"))
    kept = [NodeGroup(i.offer, i.count) for i in plan.items if i.offer.location.zone_scope != ZONE_B]
    for f in fallbacks:
        moved = predict_groups(ctx, kept + [NodeGroup(o, 1) for _, o in f.moves])
        assert f.usd_per_hour == pytest.approx(moved.usd_per_hour, rel=1e-6)
    assert [f.usd_per_hour for f in fallbacks] == sorted(f.usd_per_hour for f in fallbacks)
    second = fallbacks[1].moves[0][1]
    faults = [Fault(FaultKind.CAPACITY, scope=ZONE_B), Fault(FaultKind.CAPACITY, scope=fallbacks[0].moves[0][1].offer_id)]
    provider, launcher, run_id = launch(tmp_path, faults, plan)
    assert launcher.run().status == "completed"
    fell = Ledger().events(run_id, kinds=(EventKind.FELL_BACK,))
    assert [e.detail["moves"] for e in fell] == [{k: o.offer_id for k, o in f.moves} for f in fallbacks[:2]]
    assert fell[-1].detail["wanted"] == {plan.items[0].offer.offer_id: 1, second.offer_id: 1} or \
        fell[-1].detail["wanted"] == {i.offer.offer_id: 1 for i in plan.items if i.offer.location.zone_scope != ZONE_B}
    assert second.offer_id in {n.offer_id for n in Ledger().nodes(run_id)}
    assert kinds(run_id)[EventKind.REPLANNED] == 0
    assert_nothing_twice_nothing_left(provider, run_id)

    # every fallback of the zone out of capacity too: the job is planned again around them
    faults = [Fault(FaultKind.CAPACITY, scope=ZONE_B)] + [Fault(FaultKind.CAPACITY, scope=f.moves[0][1].offer_id)
                                                           for f in fallbacks]
    provider, launcher, run_id = launch(tmp_path / "again", faults, plan)
    assert launcher.run().status == "completed"
    seen = kinds(run_id)
    assert seen[EventKind.FELL_BACK] == len(fallbacks) and seen[EventKind.REPLANNED] >= 1
    assert_nothing_twice_nothing_left(provider, run_id)


def test_a_launcher_resumed_from_the_ledger_wants_what_the_fallback_left(tmp_path):
    from geotrain.launcher.provisioning import block, fall_back

    plan = make_plan()
    _, launcher, run_id = launch(tmp_path, [], plan)
    block(launcher, ZONE_B, "no capacity")
    assert fall_back(launcher, Counter(), cause="capacity in " + ZONE_B)
    target = plan.fallbacks_for(ZONE_B)[0].moves[0][1]
    assert launcher.wanted[target.offer_id] == 1 and launcher.stand_ins == {
        next(i.offer.offer_id for i in plan.items if i.offer.location.zone_scope == ZONE_B): target.offer_id}
    again = Launcher(plan, FakeProvider([]), options=launcher.options)
    again.adopt(run_id)
    assert again.wanted == launcher.wanted and again.stand_ins == launcher.stand_ins
    assert again.offers[target.offer_id] == target and ZONE_B in again.blocked
    assert not fall_back(again, Counter(), cause="nothing is missing in a blocked zone now")


def test_a_quota_blocks_the_cloud_and_a_lost_launch_is_sent_again(tmp_path):
    faults = [Fault(FaultKind.QUOTA, scope="aws"), Fault(FaultKind.TIMEOUT, made=False, after=0, scope="gcp"),
              Fault(FaultKind.TIMEOUT, made=False, after=0, scope="azure")]
    provider, launcher, run_id = launch(tmp_path, faults)
    outcome = launcher.run()
    assert outcome.status == "completed", outcome
    assert "aws" in {e.detail["scope"] for e in Ledger().events(run_id, kinds=(EventKind.BLOCKED,))}
    nodes = Ledger().nodes(run_id)
    assert nodes and all(n.cloud != "aws" for n in nodes)
    reconciled = Ledger().events(run_id, kinds=(EventKind.RECONCILED,))
    assert reconciled and all(e.detail["found"] == [] for e in reconciled)  # nothing made: sent again, same id
    assert_nothing_twice_nothing_left(provider, run_id)


def test_nodes_that_fail_to_boot_or_die_before_their_worker_are_replaced(tmp_path):
    faults = [Fault(FaultKind.BOOT, after=0, times=1), Fault(FaultKind.DIES_BOOTING, after=1, times=1),
              Fault(FaultKind.DIES_BEFORE_START, after=3, times=1)]
    schedule = PreemptionSchedule((PreemptionEvent(at_step=8, node=0, notice_s=1.0), PreemptionEvent(at_step=16)))
    provider, launcher, run_id = launch(tmp_path, faults, steps=32, preemptions=schedule)
    outcome = launcher.run()
    assert outcome.status == "completed", outcome
    seen = kinds(run_id)
    assert seen[EventKind.LAUNCH_FAILED] == 1 and seen[EventKind.BOOT_FAILED] == 2
    assert seen[EventKind.PREEMPTED] >= 2 and seen[EventKind.NOTICE] >= 1
    failures = [e.detail for e in Ledger().events(run_id, kinds=(EventKind.WORKER_FAILED,))]
    assert outcome.restarts == 0, failures  # boot failures and preemptions never use the restart budget
    boot = {n.node_id: n.end_reason for n in Ledger().nodes(run_id) if n.end_reason == "boot_failed"}
    assert len(boot) == 2
    assert_nothing_twice_nothing_left(provider, run_id)


def test_endless_throttling_is_a_clear_error_and_leaves_nothing(tmp_path):
    provider, launcher, run_id = launch(tmp_path, [Fault(FaultKind.THROTTLE, after=1, times=100)],
                                        launch_attempts=3)
    with pytest.raises(ThrottledError, match="kept throttling"):
        launcher.run()
    assert Ledger().run(run_id).status == "failed"
    assert_nothing_twice_nothing_left(provider, run_id)


def test_when_nothing_feasible_is_left_the_run_fails_with_the_reasons(tmp_path):
    plan = make_plan(clouds=frozenset({"aws"}))
    provider, launcher, run_id = launch(tmp_path, [Fault(FaultKind.QUOTA, scope="aws", times=100)], plan=plan)
    with pytest.raises(RunError, match="no node is left and none could be launched") as failed:
        launcher.run()
    assert "quota" in str(failed.value)
    assert Ledger().run(run_id).status == "failed" and Ledger().nodes(run_id) == []
    assert_nothing_twice_nothing_left(provider, run_id)


def test_the_fake_provider_records_every_call(tmp_path):
    provider = FakeProvider([Fault(FaultKind.CAPACITY)])
    plan = make_plan()
    from geotrain.providers.base import LaunchRequest

    offer = plan.items[0].offer
    with pytest.raises(Exception, match="no capacity"):
        provider.launch(LaunchRequest("r/1", "run-x", offer))
    node = provider.launch(LaunchRequest("r/2", "run-x", offer))
    provider.terminate(node.node_id)
    assert [(c.method, c.outcome.split()[0]) for c in provider.calls] == [
        ("launch", "fault"), ("launch", "node"), ("terminate", "terminated")]
    assert provider.leaked("run-x") == []
    assert replace(Fault(FaultKind.QUOTA), times=2).times == 2

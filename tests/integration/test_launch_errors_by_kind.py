"""Errors by kind, through the real boto3 against the moto-based AWS fake: a launch refused as configured (an
image that does not exist, an instance type the zone does not offer) is no capacity failure. It blocks no zone
and fails over nowhere: the launch stops with one line (what was launched is released), or, when one offer
alone is refused while the mix has others, that offer is left out and the mix mended without it. Capacity
still fails over as before. And whatever the launcher moves on its own (fallbacks, re-plans) never lands in a
place a new account must opt in to (AWS opt-in regions, Local and Wavelength Zones) that the plan did not name.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from geotrain.clouds.geography import needs_opt_in
from geotrain.domain import Constraints, JobSpec, Objective, SyncSettings, SyncStrategyName
from geotrain.errors import ConfigurationError
from geotrain.launcher.loop import Launcher
from geotrain.launcher.options import LaunchOptions
from geotrain.launcher.provisioning import provision
from geotrain.launcher.replanning import replan
from geotrain.ledger import EventKind, Ledger, RunStatus
from geotrain.planning.planner import PlanOptions, plan_for_nodes
from geotrain.pricing.snapshot import bundled_snapshot
from tests.contract.harness_aws import aws_provider
from tests.fakes.aws import FakeAws

pytestmark = pytest.mark.slow

TWO_ZONES = "aws/usw2-az1/g4dn.xlarge,aws/use1-az1/g4dn.xlarge"  # the use1 offer sorts first: launched first


@pytest.fixture
def fake():  # noqa: ANN201
    aws = FakeAws()
    try:
        yield aws
    finally:
        aws.stop()


def make_plan(nodes: str = TWO_ZONES):  # noqa: ANN201
    job = JobSpec("by-kind", "convnext-large", Objective.MIN_COST, target_samples_per_s=1,
                  sync=SyncSettings(SyncStrategyName.ALLREDUCE), constraints=Constraints(clouds=frozenset({"aws"})))
    return plan_for_nodes(job, bundled_snapshot(), nodes, options=PlanOptions(frontier_points=0))


def launcher(fake: FakeAws, home: Path, tmp_path: Path, plan=None, **settings) -> Launcher:  # noqa: ANN001
    options = LaunchOptions(train_workload="tiny-cnn", steps=8, checkpoint_every=8, block_s=600, checkpoint_url=str(tmp_path / "ckpt"),
                            control_address="127.0.0.1", backoff_s=0.05)
    la = Launcher(plan or make_plan(), aws_provider(fake, home, **settings), options=options)
    la.start()
    return la


def kinds(run_id: str) -> Counter:
    return Counter(e.kind for e in Ledger().events(run_id))


def live(la: Launcher) -> list:
    return [n for n in la.provider.list(la.run_id) if not n.ended]


def release(la: Launcher) -> None:
    for node in live(la):
        la.provider.terminate(node.node_id, reason="test over")


def test_a_missing_image_ends_the_launch_with_one_line_releases_what_was_launched_and_goes_nowhere_else(
        fake, geotrain_home, tmp_path):
    la = launcher(fake, geotrain_home, tmp_path)
    fake.vms.run_errors = [None, "InvalidAMIID.NotFound"]  # the first node is made, the second's AMI is refused
    with pytest.raises(ConfigurationError) as info:
        la.run()
    line = str(info.value)
    assert "\n" not in line and "InvalidAMIID.NotFound" in line and "image_id" in line
    assert info.value.exit_code == 4
    assert len(fake.vms.run_requests) == 2, "a launch was tried elsewhere after the image was refused"
    assert live(la) == [], "the node launched before the refusal was not released"
    seen = kinds(la.run_id)
    assert seen[EventKind.FELL_BACK] == seen[EventKind.REPLANNED] == seen[EventKind.BLOCKED] == 0
    failed = Ledger().events(la.run_id, kinds=(EventKind.LAUNCH_FAILED,))
    assert [e.detail["failure"] for e in failed] == ["configuration"]
    assert Ledger().run(la.run_id).status == RunStatus.FAILED


def test_an_image_parameter_missing_in_the_region_stops_before_any_instance_is_asked_for(fake, geotrain_home,
                                                                                        tmp_path):
    la = launcher(fake, geotrain_home, tmp_path, image_parameter="/no/such/parameter")
    with pytest.raises(ConfigurationError, match="/no/such/parameter .*does not exist in us-east-1"):
        provision(la)
    assert fake.vms.run_requests == [] and live(la) == []
    assert kinds(la.run_id)[EventKind.BLOCKED] == 0


def test_an_unsupported_type_in_one_zone_leaves_that_offer_out_and_the_rest_is_mended_without_it(
        fake, geotrain_home, tmp_path):
    la = launcher(fake, geotrain_home, tmp_path)
    refused = sorted(la.wanted)[0]
    fake.vms.run_errors = [("Unsupported", "Your requested instance type (g4dn.xlarge) is not supported in your "
                            "requested Availability Zone (us-east-1a).")]
    try:
        nodes = provision(la)
        blocked = {e.detail["scope"]: e.detail["reason"] for e in Ledger().events(la.run_id, kinds=(EventKind.BLOCKED,))}
        assert list(blocked) == [refused] and "left out" in blocked[refused]  # the offer, not its zone
        failed = Ledger().events(la.run_id, kinds=(EventKind.LAUNCH_FAILED,))
        assert [(e.detail["failure"], e.detail["offer_id"]) for e in failed] == [("configuration", refused)]
        assert len(nodes) == la.plan.nodes and refused not in {n.offer_id for n in nodes}
        assert all(needs_opt_in(n.location) is None for n in nodes), [n.location for n in nodes]
        assert kinds(la.run_id)[EventKind.FELL_BACK] + kinds(la.run_id)[EventKind.REPLANNED] >= 1
    finally:
        release(la)


def test_the_only_offer_of_the_mix_refused_as_configured_stops_the_launch(fake, geotrain_home, tmp_path):
    la = launcher(fake, geotrain_home, tmp_path, plan=make_plan("aws/usw2-az1/g4dn.xlarge=2"))
    fake.vms.run_errors = ["Unsupported"]
    with pytest.raises(ConfigurationError, match="does not offer g4dn.xlarge in zone usw2-az1"):
        provision(la)
    assert len(fake.vms.run_requests) == 1 and live(la) == []
    assert kinds(la.run_id)[EventKind.FELL_BACK] == kinds(la.run_id)[EventKind.REPLANNED] == 0


def test_no_capacity_still_fails_over_to_another_zone(fake, geotrain_home, tmp_path):
    la = launcher(fake, geotrain_home, tmp_path)
    first = la.offers[sorted(la.wanted)[0]]
    fake.vms.run_errors = ["InsufficientInstanceCapacity"]
    try:
        nodes = provision(la)
        blocked = [e.detail["scope"] for e in Ledger().events(la.run_id, kinds=(EventKind.BLOCKED,))]
        assert blocked == [first.location.zone_scope]
        assert len(nodes) == la.plan.nodes and all(n.location.zone_scope != first.location.zone_scope for n in nodes)
        assert all(needs_opt_in(n.location) is None for n in nodes)
        assert kinds(la.run_id)[EventKind.FELL_BACK] + kinds(la.run_id)[EventKind.REPLANNED] == 1
    finally:
        release(la)


def test_a_replan_never_picks_an_opt_in_region_or_local_zone_the_plan_did_not_name(fake, geotrain_home, tmp_path):
    la = launcher(fake, geotrain_home, tmp_path)
    # every AWS place any account can use is out: what is left needs opting in (af-south-1, me-south-1, …)
    offers = bundled_snapshot().offers()
    assert any(needs_opt_in(o.location) for o in offers if o.location.cloud == "aws")
    la.blocked.update({o.location.region_scope: la.clock.time() + 3600 for o in offers
                       if o.location.cloud == "aws" and needs_opt_in(o.location) is None})
    la.wanted = Counter()
    replan(la, Counter(), cause="test")
    wanted = {la.offers[k].location for k, n in la.wanted.items() if n}
    assert all(needs_opt_in(loc) is None for loc in wanted), wanted
    assert all(needs_opt_in(f.moves[0][1].location) is None for f in la.plan.fallbacks)



def test_a_replan_of_a_one_region_run_leaves_out_every_network_no_rule_joins(fake, geotrain_home, tmp_path):
    from geotrain.launcher.replanning import other_networks

    from datetime import datetime, timezone

    from geotrain.domain import Continent, InstanceShape, InterruptionSignal, Location, Market, Offer

    site = Offer(Location("onprem", "lab", "", Continent.EUROPE), InstanceShape("ws", 16, 64, "T4", 1), Market.OWNED,
                 0.0, None, InterruptionSignal(None, None), datetime(2026, 1, 1, tzinfo=timezone.utc), "test")
    offers = [*bundled_snapshot().offers(), site]
    one_region = launcher(fake, geotrain_home, tmp_path, plan=make_plan("aws/usw2-az1/g4dn.xlarge=2"))
    # the other regions and clouds are joined by per-peer rules; a site's machines are not
    assert other_networks(one_region, offers) == frozenset({"onprem/lab"})
    release(one_region)
    apart = launcher(fake, geotrain_home, tmp_path)  # a plan already across two regions is left as it is
    assert other_networks(apart, offers) == frozenset()
    release(apart)

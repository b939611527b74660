"""The AWS provider through real boto3 clients against the AWS fake (moto server + tests/fakes/aws/vms.py).

Every call goes over HTTP to the fake on 127.0.0.1 (``endpoint_url``), never through moto's in-process
decorator; what the fake holds is read back with a second, independent boto3 client (``aws``) or from
the fake's records (``fake.vms``). Throttling: retried by the provider (``throttle_attempts`` rounds of
backoff, after botocore's own attempts) and then ThrottledError; the tests give botocore one attempt.
"""

from __future__ import annotations

import base64
import os
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from geotrain.domain import Continent, InstanceShape, InterruptionSignal, Location, Market, Offer
from geotrain.errors import (
    CapacityError,
    ConfigurationError,
    CredentialsError,
    InputError,
    NotFoundError,
    ProviderError,
    ProviderTimeoutError,
    QuotaError,
    ThrottledError,
)
from geotrain.providers.aws import AwsProvider
from geotrain.providers.base import LaunchRequest, NodeState, Provider
from geotrain.providers.cloudnodes import SSH_PORT
from tests.contract.harness_aws import LOOPBACK_NODES
from geotrain.providers.remote import run_token
from tests.fakes.aws import DLAMI_IMAGE_ID, FakeAws

pytestmark = pytest.mark.slow  # ~25 s: one moto server for the module, a few hundred EC2 calls
REGION = "us-west-2"
WEST = Location("aws", REGION, "usw2-az1", Continent.NORTH_AMERICA)  # us-west-2b in moto's account
WEST_ZONE_NAME = "us-west-2b"


@pytest.fixture(scope="module")
def fake():
    with FakeAws() as server:
        yield server


@pytest.fixture(autouse=True)
def _fresh_knobs(fake):
    fake.reset()
    yield
    fake.reset()


@pytest.fixture
def aws(fake):
    """An independent client: what AWS (the fake) really holds."""
    return client(fake, "ec2")


def client(fake: FakeAws, service: str, region: str = REGION, **config):
    return boto3.client(service, region_name=region, endpoint_url=fake.endpoint_url,
                        config=Config(retries={"total_max_attempts": 1}, **config),
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def provider(fake: FakeAws, home: Path, pauses: list[float] | None = None, **settings) -> AwsProvider:
    config = settings.pop("config", {})

    def make(service: str, region: str):
        return client(fake, service, region, **config)

    settings.setdefault("control_cidr", "127.0.0.0/8")
    settings.setdefault("nodes", LOOPBACK_NODES)
    return AwsProvider(make, home=home, sleep=(pauses if pauses is not None else []).append, **settings)


def aws_offer(market: Market = Market.SPOT, location: Location = WEST, instance_type: str = "g4dn.xlarge") -> Offer:
    return Offer(location, InstanceShape(instance_type, 4, 16, "T4", 1), market, 0.2, None,
                 InterruptionSignal(None, None), datetime(2026, 1, 1, tzinfo=timezone.utc), "test")


_runs = iter(range(10**6))


def new_run() -> str:
    return f"run-{os.getpid()}-{next(_runs)}"


def request(run_id: str, n: int = 0, offer: Offer | None = None) -> LaunchRequest:
    offer = offer or aws_offer()
    return LaunchRequest(f"{run_id}/{offer.offer_id}/{n}", run_id, offer)


def instances(aws, run_id: str) -> list[dict]:
    answer = aws.describe_instances(Filters=[{"Name": "tag:geotrain-run", "Values": [run_id]}])
    return [i for r in answer["Reservations"] for i in r["Instances"]]


def groups(aws, run_id: str) -> list[dict]:
    return aws.describe_security_groups(Filters=[{"Name": "group-name", "Values": [f"geotrain-{run_id}"]}])[
        "SecurityGroups"]


# ---------------------------------------------------------------------------------------- launch


def test_a_spot_launch_makes_a_spot_instance_in_the_planned_zone_with_the_script_and_tags(fake, aws, geotrain_home):
    p = provider(fake, geotrain_home)
    assert isinstance(p, Provider)
    assert (p.capabilities.spot, p.capabilities.notice_s, p.capabilities.preemption_injection) == (True, 120.0, False)
    run = new_run()
    req = request(run)
    node = p.launch(req)
    assert node.state in (NodeState.PENDING, NodeState.RUNNING)
    assert (node.request_id, node.run_id, node.offer_id) == (req.request_id, run, req.offer.offer_id)
    assert node.location == WEST
    assert node.address.startswith("127.0.") and node.launched_at.tzinfo == timezone.utc

    [inst] = instances(aws, run)
    assert inst["InstanceId"] == node.node_id
    assert inst["Placement"]["AvailabilityZone"] == WEST_ZONE_NAME
    assert inst["InstanceType"] == "g4dn.xlarge" and inst["ImageId"] == DLAMI_IMAGE_ID
    assert inst["InstanceLifecycle"] == "spot"
    assert inst["PublicIpAddress"] == node.address
    assert inst["MetadataOptions"]["HttpTokens"] == "required"
    tags = {t["Key"]: t["Value"] for t in inst["Tags"]}
    assert tags == {"geotrain-run": run, "geotrain-request": req.request_id, "geotrain-offer": req.offer.offer_id,
                    "Name": f"geotrain {run}"}
    [group] = groups(aws, run)
    assert [g["GroupId"] for g in inst["SecurityGroups"]] == [group["GroupId"]]
    volumes = aws.describe_volumes(Filters=[{"Name": "tag:geotrain-run", "Values": [run]}])["Volumes"]
    assert volumes and all({t["Key"]: t["Value"] for t in v["Tags"]}["geotrain-request"] == req.request_id
                           for v in volumes)

    user_data = aws.describe_instance_attribute(InstanceId=node.node_id, Attribute="userData")["UserData"]["Value"]
    script = base64.b64decode(user_data).decode()
    # the VM gets an sshd of geotrain's own with this node's host key and the run's login key, nothing else
    from geotrain.providers.runkeys import host_key, login_key
    assert script.startswith("#!/bin/bash") and f"Port {SSH_PORT}" in script
    assert host_key(run, req.request_id).private.strip() in script and login_key(run)[1] in script
    assert run_token(run) not in script

    [sent] = fake.vms.run_requests
    assert sent["InstanceMarketOptions.MarketType"] == "spot"
    assert sent["InstanceMarketOptions.SpotOptions.SpotInstanceType"] == "one-time"
    assert sent["InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior"] == "terminate"
    assert sent["InstanceInitiatedShutdownBehavior"] == "terminate"
    assert (sent["MinCount"], sent["MaxCount"]) == ("1", "1")
    assert 0 < len(sent["ClientToken"]) <= 64
    assert "KeyName" not in sent


def test_an_on_demand_launch_has_no_spot_options(fake, aws, geotrain_home):
    run = new_run()
    node = provider(fake, geotrain_home).launch(request(run, offer=aws_offer(Market.ON_DEMAND)))
    [sent] = fake.vms.run_requests
    assert not [k for k in sent if k.startswith("InstanceMarketOptions")]
    [inst] = instances(aws, run)
    assert inst["InstanceId"] == node.node_id and "InstanceLifecycle" not in inst


def test_a_region_wide_offer_lets_aws_pick_the_zone(fake, geotrain_home):
    offer = aws_offer(location=Location("aws", REGION, "", Continent.NORTH_AMERICA))
    node = provider(fake, geotrain_home).launch(request(new_run(), offer=offer))
    [sent] = fake.vms.run_requests
    assert not [k for k in sent if k.startswith("Placement")]
    assert node.location.zone == "" and node.location.zone_scope == f"aws/{REGION}"


def test_launch_is_idempotent_per_request_id(fake, aws, geotrain_home):
    p = provider(fake, geotrain_home)
    run = new_run()
    req = request(run)
    first = p.launch(req)
    again = p.launch(req)
    other = provider(fake, geotrain_home).launch(req)  # a new process: the state file
    assert first.node_id == again.node_id == other.node_id
    assert len(instances(aws, run)) == 1 and fake.count("RunInstances") == 1
    p.terminate(first.node_id)
    ended = p.launch(req)
    assert (ended.node_id, ended.state) == (first.node_id, NodeState.TERMINATED)
    with pytest.raises(ValueError, match="request id"):
        p.launch(LaunchRequest(req.request_id, new_run(), req.offer))


def test_concurrent_launches_of_one_request_make_one_instance(fake, aws, geotrain_home):
    run = new_run()
    req = request(run)
    ids: list[str] = []
    threads = [threading.Thread(target=lambda p=provider(fake, geotrain_home): ids.append(p.launch(req).node_id))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ids) == 4 and len(set(ids)) == 1
    assert len(instances(aws, run)) == 1 and len(groups(aws, run)) == 1


def test_the_fake_honours_client_token_as_aws_does(fake, aws):
    params = dict(ImageId=DLAMI_IMAGE_ID, InstanceType="g4dn.xlarge", MinCount=1, MaxCount=1, ClientToken="t-1")
    a = aws.run_instances(**params)["Instances"][0]["InstanceId"]
    b = aws.run_instances(**params)["Instances"][0]["InstanceId"]
    assert a == b
    with pytest.raises(ClientError, match="IdempotentParameterMismatch"):
        aws.run_instances(**{**params, "InstanceType": "g5.xlarge"})
    aws.terminate_instances(InstanceIds=[a])


def test_bad_input_makes_no_call(fake, geotrain_home):
    gcp = Location("gcp", "us-central1", "us-central1-a", Continent.NORTH_AMERICA)
    with pytest.raises(InputError, match="not an AWS offer"):
        provider(fake, geotrain_home).launch(request(new_run(), offer=aws_offer(location=gcp)))
    with pytest.raises(InputError, match="control_cidr"):
        provider(fake, geotrain_home, control_cidr=None).launch(request(new_run()))
    with pytest.raises(InputError, match="not an IP network"):
        provider(fake, geotrain_home, control_cidr="launcher").launch(request(new_run()))
    assert fake.calls == []


# ---------------------------------------------------------------------------------------- errors

ERRORS = [
    ("InsufficientInstanceCapacity", CapacityError, "aws/us-west-2/usw2-az1", "capacity"),
    ("InsufficientCapacity", CapacityError, "aws/us-west-2/usw2-az1", "capacity"),
    ("Unsupported", ConfigurationError, "aws/us-west-2/usw2-az1", "does not offer g4dn.xlarge in zone usw2-az1"),
    ("InvalidAMIID.NotFound", ConfigurationError, "aws/us-west-2", "image_id"),
    ("InvalidParameterCombination", ConfigurationError, "aws/us-west-2", "InvalidParameterCombination"),
    ("MaxSpotInstanceCountExceeded", QuotaError, "aws/us-west-2", "g4dn"),
    ("VcpuLimitExceeded", QuotaError, "aws/us-west-2", "All G and VT Spot Instance Requests"),
    ("InstanceLimitExceeded", QuotaError, "aws/us-west-2", "g4dn"),
    ("AuthFailure", CredentialsError, "aws", "aws sso login"),
    ("InvalidClientTokenId", CredentialsError, "aws", "AWS_ACCESS_KEY_ID"),
    ("ExpiredToken", CredentialsError, "aws", "AWS_PROFILE"),
    ("UnauthorizedOperation", CredentialsError, "aws", "ec2:RunInstances"),
    ("InvalidParameterValue", ConfigurationError, "aws/us-west-2", "InvalidParameterValue"),
]


@pytest.mark.parametrize(("code", "kind", "scope", "said"), ERRORS)
def test_run_instances_errors_are_geotrains_and_leave_nothing_behind(fake, aws, geotrain_home, code, kind, scope, said):
    fake.vms.run_errors = [code]
    p = provider(fake, geotrain_home)
    run = new_run()
    with pytest.raises(kind) as info:
        p.launch(request(run))
    assert type(info.value) is kind
    assert info.value.scope == scope and said in info.value.message
    assert isinstance(info.value.__cause__, ClientError)
    assert instances(aws, run) == [] and groups(aws, run) == []  # the group made for it is gone too
    assert p.list(run) == []
    assert fake.vms.run_requests and fake.vms.run_errors == []


def test_an_unsupported_type_is_about_that_offer_and_a_missing_ami_about_the_request(fake, geotrain_home):
    fake.vms.run_errors = [("Unsupported", "Your requested instance type (g4dn.xlarge) is not supported in your "
                            "requested Availability Zone (us-west-2b).")]
    with pytest.raises(ConfigurationError) as info:
        provider(fake, geotrain_home).launch(request(new_run()))
    assert info.value.offer_id == request("x").offer.offer_id and info.value.exit_code == 4
    fake.vms.run_errors = ["InvalidAMIID.NotFound"]
    with pytest.raises(ConfigurationError) as info:
        provider(fake, geotrain_home).launch(request(new_run()))
    assert info.value.offer_id is None


def test_an_image_parameter_missing_in_the_region_is_a_configuration_error_and_nothing_is_sent(fake, aws,
                                                                                              geotrain_home):
    p = provider(fake, geotrain_home, image_parameter="/no/such/image/parameter")
    run = new_run()
    with pytest.raises(ConfigurationError, match="/no/such/image/parameter .*does not exist in us-west-2") as info:
        p.launch(request(run))
    assert info.value.scope == "aws/us-west-2" and info.value.offer_id is None
    assert "\n" not in str(info.value) and "image_id" in str(info.value)
    assert fake.vms.run_requests == [] and instances(aws, run) == [] and groups(aws, run) == []


def test_a_failed_launch_keeps_the_group_while_another_node_of_the_run_lives(fake, aws, geotrain_home):
    p = provider(fake, geotrain_home)
    run = new_run()
    first = p.launch(request(run, 0))
    fake.vms.run_errors = ["InsufficientInstanceCapacity"]
    with pytest.raises(CapacityError):
        p.launch(request(run, 1))
    assert len(groups(aws, run)) == 1
    assert [n.node_id for n in p.list(run)] == [first.node_id]


def test_throttling_is_retried_then_throttled_error(fake, aws, geotrain_home):
    pauses: list[float] = []
    p = provider(fake, geotrain_home, pauses, throttle_attempts=3, first_pause_s=0.5)
    run = new_run()
    fake.throttle["RunInstances"] = 2
    node = p.launch(request(run, 0))  # two throttled answers, then made
    assert pauses == [0.5, 1.0] and [i["InstanceId"] for i in instances(aws, run)] == [node.node_id]
    fake.throttle["RunInstances"] = 10
    with pytest.raises(ThrottledError) as info:
        p.launch(request(run, 1))
    assert info.value.scope == f"aws/{REGION}" and "same request id" in info.value.message
    assert len(instances(aws, run)) == 1


def test_no_credentials_is_a_credentials_error(fake, geotrain_home, monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")

    def make(service: str, region: str):
        return boto3.session.Session().client(service, region_name=region, endpoint_url=fake.endpoint_url,
                                              config=Config(retries={"total_max_attempts": 1}))

    p = AwsProvider(make, home=geotrain_home, control_cidr="127.0.0.0/8")
    with pytest.raises(CredentialsError, match="AWS_PROFILE.*aws sso login"):
        p.check_credentials()
    run = new_run()
    with pytest.raises(CredentialsError):
        p.launch(request(run))
    assert p.list(run) == []


def test_a_denied_describe_names_the_permission(fake, geotrain_home):
    p = provider(fake, geotrain_home)
    run = new_run()
    p.launch(request(run))
    fake.denied.add("DescribeInstances")
    with pytest.raises(CredentialsError, match="ec2:DescribeInstances"):
        p.list(run)


def test_check_credentials_and_from_environment(fake, geotrain_home, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", fake.endpoint_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    p = AwsProvider.from_environment(control_cidr="127.0.0.0/8", home=geotrain_home)
    assert p.home_region == REGION
    p.check_credentials()
    assert fake.calls == [("GetCallerIdentity", REGION)]
    node = p.launch(request(new_run()))
    assert node.address


# ---------------------------------------------------------------------------------------- timeouts


def test_a_timed_out_launch_is_found_by_the_retry_never_made_twice(fake, aws, geotrain_home):
    aws.describe_vpcs()  # moto builds the region on its first call: not inside the short timeout below
    fake.vms.run_timeouts, fake.vms.run_delay_s = 1, 3.0
    run = new_run()
    req = request(run)
    slow = provider(fake, geotrain_home, config={"read_timeout": 1.0, "connect_timeout": 1.0})
    with pytest.raises(ProviderTimeoutError, match="outcome is unknown") as info:
        slow.launch(req)
    assert info.value.scope == f"aws/{REGION}"
    [made] = instances(aws, run)  # the fake made it all the same
    again = provider(fake, geotrain_home).launch(req)  # the retry, from another process
    assert again.node_id == made["InstanceId"]
    assert len(instances(aws, run)) == 1 and fake.count("RunInstances") == 1  # found by its tag, not sent again


def test_a_server_error_keeps_the_request_in_flight_and_the_retry_makes_one(fake, aws, geotrain_home):
    p = provider(fake, geotrain_home)
    run = new_run()
    req = request(run)
    fake.vms.run_errors = ["InternalError"]
    with pytest.raises(ProviderError, match="InternalError"):
        p.launch(req)
    assert len(groups(aws, run)) == 1  # an in-flight request keeps its group
    node = p.launch(req)
    assert [i["InstanceId"] for i in instances(aws, run)] == [node.node_id]
    sent = fake.vms.run_requests
    assert len(sent) == 2 and sent[0]["ClientToken"] == sent[1]["ClientToken"] and sent[0] == sent[1]


# ---------------------------------------------------------------------------------------- list, terminate


def test_list_from_a_new_provider_instance_finds_the_runs_nodes_in_order(fake, geotrain_home):
    p = provider(fake, geotrain_home)
    run, other = new_run(), new_run()
    ids = [p.launch(request(run, n)).node_id for n in range(2)]
    p.launch(request(other))
    fresh = provider(fake, geotrain_home)
    listed = fresh.list(run)
    assert [n.node_id for n in listed] == ids
    assert {n.state for n in listed} == {NodeState.RUNNING} and all(n.address for n in listed)
    assert {n.node_id for n in fresh.list()} >= set(ids)
    assert fresh.list(new_run()) == []
    state = geotrain_home / "providers" / "aws" / "state.json"
    assert state.stat().st_mode & 0o777 == 0o600


def test_terminate_is_idempotent_keeps_the_first_reason_and_deletes_the_group(fake, aws, geotrain_home):
    p = provider(fake, geotrain_home)
    run = new_run()
    a, b = (p.launch(request(run, n)) for n in range(2))
    p.terminate(a.node_id, reason="stopped")
    assert len(groups(aws, run)) == 1  # b still uses it
    p.terminate(a.node_id)
    provider(fake, geotrain_home).terminate(a.node_id, reason="again")
    by_id = {n.node_id: n for n in p.list(run)}
    assert (by_id[a.node_id].state, by_id[a.node_id].end_reason) == (NodeState.TERMINATED, "stopped")
    assert by_id[a.node_id].ended_at >= by_id[a.node_id].launched_at
    assert by_id[b.node_id].state is NodeState.RUNNING
    inst = {i["InstanceId"]: i for i in instances(aws, run)}
    assert inst[a.node_id]["State"]["Name"] == "terminated"
    assert {t["Key"]: t["Value"] for t in inst[a.node_id]["Tags"]}["geotrain-end-reason"] == "stopped"
    assert fake.count("TerminateInstances") == 1
    p.terminate(b.node_id)
    assert groups(aws, run) == []  # the run's last node in the region is gone: so is its group
    with pytest.raises(NotFoundError):
        p.terminate("i-0000000000000000")


def test_a_node_terminated_behind_our_back_is_lost(fake, aws, geotrain_home):
    p = provider(fake, geotrain_home)
    run = new_run()
    node = p.launch(request(run))
    aws.terminate_instances(InstanceIds=[node.node_id])  # the console, another tool
    [lost] = p.list(run)
    assert (lost.state, lost.end_reason) == (NodeState.TERMINATED, "lost") and lost.ended_at is not None
    p.terminate(node.node_id, reason="stopped")
    assert provider(fake, geotrain_home).list(run)[0].end_reason == "lost"  # persisted, first reason kept
    assert groups(aws, run) == []


def test_a_node_stopped_behind_our_back_is_lost_and_terminate_still_ends_it_in_aws(fake, aws, geotrain_home):
    p = provider(fake, geotrain_home)
    run = new_run()
    node = p.launch(request(run, offer=aws_offer(Market.ON_DEMAND)))
    aws.stop_instances(InstanceIds=[node.node_id])
    [lost] = p.list(run)
    assert (lost.state, lost.end_reason) == (NodeState.TERMINATED, "lost")
    p.terminate(node.node_id, reason="stopped")  # its disk would cost on: terminated all the same
    assert instances(aws, run)[0]["State"]["Name"] == "terminated"
    assert p.list(run)[0].end_reason == "lost"


def test_list_finds_the_runs_instances_another_machine_launched(fake, geotrain_home, tmp_path):
    here, there = provider(fake, geotrain_home), provider(fake, tmp_path / "other-home")
    run = new_run()
    mine = here.launch(request(run, 0))
    theirs = there.launch(request(run, 1))  # the same run from another GEOTRAIN_HOME: found by its tags
    assert [n.node_id for n in here.list(run)] == [mine.node_id, theirs.node_id]
    here.terminate(theirs.node_id, reason="stopped")
    assert {n.node_id: n.end_reason for n in there.list(run)}[theirs.node_id] == "stopped"  # the end-reason tag


def test_a_spot_reclaim_is_a_preemption(fake, aws, geotrain_home):
    p = provider(fake, geotrain_home)
    run = new_run()
    node = p.launch(request(run))
    fake.vms.reclaim(node.node_id)
    [inst] = instances(aws, run)
    assert inst["State"]["Name"] == "terminated" and inst["StateReason"]["Code"] == "Server.SpotInstanceTermination"
    [ended] = p.list(run)
    assert (ended.state, ended.end_reason) == (NodeState.PREEMPTED, "preempted")
    p.terminate(node.node_id)
    assert provider(fake, geotrain_home).list(run)[0].state is NodeState.PREEMPTED
    assert groups(aws, run) == []


def test_a_node_aws_no_longer_lists_ends_as_the_state_file_says(fake, geotrain_home):
    p = provider(fake, geotrain_home)
    run = new_run()
    ours, gone, young = (p.launch(request(run, n)) for n in range(3))
    p.terminate(ours.node_id, reason="stopped")
    for node in (ours, gone, young):
        fake.vms.forget(node.node_id)
    listed = {n.node_id: n for n in p.list(run)}  # within the grace period: not listed yet, maybe
    assert (listed[ours.node_id].state, listed[ours.node_id].end_reason) == (NodeState.TERMINATED, "stopped")
    assert not listed[gone.node_id].ended and not listed[young.node_id].ended  # as last seen
    later = {n.node_id: n for n in provider(fake, geotrain_home, unlisted_grace_s=0).list(run)}
    assert (later[gone.node_id].state, later[gone.node_id].end_reason) == (NodeState.TERMINATED, "lost")
    assert later[ours.node_id].end_reason == "stopped"


def test_start_refuses_ended_and_unknown_nodes(fake, geotrain_home, tmp_path):
    p = provider(fake, geotrain_home)
    node = p.launch(request(new_run()))
    p.terminate(node.node_id)
    with pytest.raises(ProviderError, match="terminated") as info:
        p.start(node.node_id, ["true"], {}, tmp_path / "x.log")
    assert info.value.scope == WEST.zone_scope
    with pytest.raises(NotFoundError):
        p.start("i-0000000000000000", ["true"], {}, tmp_path / "x.log")


# ---------------------------------------------------------------------------------------- firewall, dry run


def test_the_runs_group_opens_only_the_ssh_port_to_the_launcher_and_tcp_between_nodes(fake, aws, geotrain_home):
    p = provider(fake, geotrain_home, control_cidr="203.0.113.7/32")
    run = new_run()
    p.launch(request(run, 0))
    p.launch(request(run, 1))
    provider(fake, geotrain_home, control_cidr="203.0.113.7/32").launch(request(run, 2))
    [group] = groups(aws, run)
    assert fake.count("CreateSecurityGroup") == 1
    assert group["VpcId"] == aws.describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}])["Vpcs"][0]["VpcId"]
    rules = sorted(((r["IpProtocol"], r["FromPort"], r["ToPort"], tuple(x["CidrIp"] for x in r.get("IpRanges", [])),
                     tuple(x["GroupId"] for x in r.get("UserIdGroupPairs", []))) for r in group["IpPermissions"]),
                   key=lambda r: r[1])
    assert rules == [("tcp", 0, 65535, (), (group["GroupId"],)),
                     ("tcp", SSH_PORT, SSH_PORT, ("203.0.113.7/32",), ())]
    assert {t["Key"]: t["Value"] for t in group["Tags"]}["geotrain-run"] == run
    other = new_run()
    p.launch(request(other))
    assert len(groups(aws, other)) == 1 and groups(aws, other)[0]["GroupId"] != group["GroupId"]


def test_dry_run_makes_no_call_and_no_key(fake, geotrain_home):
    def no_client(service: str, region: str):
        raise AssertionError(f"dry_run made a {service} client")

    p = AwsProvider(no_client, home=geotrain_home, control_cidr="203.0.113.7/32", nodes=LOOPBACK_NODES)
    run = new_run()
    req = request(run)
    calls = p.dry_run(req)
    assert fake.calls == [] and not (geotrain_home / "providers" / "tokens").exists()
    assert not (geotrain_home / "providers" / "keys").exists()
    assert [c["call"] for c in calls] == [
        "ec2.describe_availability_zones", "ec2.describe_vpcs", "ec2.describe_security_groups",
        "ec2.create_security_group", "ec2.authorize_security_group_ingress", "ssm.get_parameter",
        "ec2.run_instances"]
    run_params = calls[-1]["params"]
    assert "<this node's host key>" in run_params["UserData"] and run_params["UserData"].startswith("#!/bin/bash")
    assert run_params["InstanceMarketOptions"]["MarketType"] == "spot"
    assert run_params["InstanceType"] == "g4dn.xlarge" and run_params["MinCount"] == run_params["MaxCount"] == 1
    assert calls[4]["params"]["IpPermissions"][0]["IpRanges"][0]["CidrIp"] == "203.0.113.7/32"
    # the launch sends what the dry run showed, but for the looked-up values and the token
    real = provider(fake, geotrain_home)
    real.launch(req)
    [sent] = fake.vms.run_requests
    from geotrain.providers.runkeys import host_key, login_key
    assert base64.b64decode(sent["UserData"]).decode() == run_params["UserData"].replace(
        "<this node's host key>", host_key(run, req.request_id).private.strip()).replace(
        "ssh-ed25519 <run-login-key>", login_key(run)[1])
    assert sent["ClientToken"] == run_params["ClientToken"]


# ---------------------------------------------------------------------------------------- end to end


def test_start_runs_a_command_on_the_vm_and_a_reclaim_with_notice_preempts_it(tmp_path, geotrain_home):
    vms = pytest.importorskip("tests.fakes.vms", reason="the shared Hypervisor (tests/fakes/vms.py) is not there yet")
    from geotrain.providers.remote import AgentChannel
    from tests.fakes.metadata import FakeMetadata

    with FakeMetadata() as metadata:
        hv = vms.Hypervisor(tmp_path / "vms", metadata)
        try:
            with FakeAws(hypervisor=hv) as server:
                p = provider(server, geotrain_home, channel=AgentChannel(ready_timeout_s=60))
                run = new_run()
                a, b = (p.launch(request(run, n)) for n in range(2))
                assert hv.addresses[a.node_id] == a.address
                log = tmp_path / "echo.log"
                proc = p.start(a.node_id, [sys.executable, "-c", "print('hello from aws')"], dict(os.environ), log)
                assert proc.wait(timeout=60) == 0
                assert "hello from aws" in log.read_text()
                p.terminate(a.node_id)
                assert not hv.alive(a.node_id)

                server.vms.reclaim(b.node_id, notice_s=0.3)  # AWS: the notice, two minutes later the reclaim
                assert b.node_id in metadata.notices and hv.alive(b.node_id)
                deadline = time.monotonic() + 10
                while not p.list(run)[1].ended and time.monotonic() < deadline:
                    time.sleep(0.05)
                ended = p.list(run)[1]
                assert (ended.node_id, ended.state, ended.end_reason) == (b.node_id, NodeState.PREEMPTED, "preempted")
                assert not hv.alive(b.node_id)
        finally:
            hv.close()


def test_the_nodes_get_the_instance_profile_the_launch_names(fake, aws, geotrain_home):
    iam = client(fake, "iam", "us-east-1")
    iam.create_role(RoleName="geotrain-nodes", AssumeRolePolicyDocument='{"Version": "2012-10-17", "Statement": []}')
    made = iam.create_instance_profile(InstanceProfileName="geotrain-nodes")["InstanceProfile"]
    iam.add_role_to_instance_profile(InstanceProfileName="geotrain-nodes", RoleName="geotrain-nodes")
    try:
        for role in ("geotrain-nodes", made["Arn"]):
            run = new_run()
            provider(fake, geotrain_home, instance_role=role).launch(request(run))
            [inst] = instances(aws, run)
            assert inst["IamInstanceProfile"]["Arn"] == made["Arn"], inst.get("IamInstanceProfile")
        sent = fake.vms.run_requests
        assert sent[-2]["IamInstanceProfile.Name"] == "geotrain-nodes" and sent[-1]["IamInstanceProfile.Arn"] == made["Arn"]
    finally:
        iam.remove_role_from_instance_profile(InstanceProfileName="geotrain-nodes", RoleName="geotrain-nodes")
        iam.delete_instance_profile(InstanceProfileName="geotrain-nodes")
        iam.delete_role(RoleName="geotrain-nodes")


def test_a_request_with_its_own_image_boots_it_and_asks_no_parameter(fake, aws, geotrain_home):
    mine = aws.describe_images(Owners=["amazon"])["Images"]
    image = next(i["ImageId"] for i in mine if i["ImageId"] != DLAMI_IMAGE_ID)
    run = new_run()
    base = request(run)
    provider(fake, geotrain_home).launch(LaunchRequest(base.request_id, run, base.offer, image=image))
    [inst] = instances(aws, run)
    assert inst["ImageId"] == image



def test_peer_rules_admit_the_runs_nodes_public_addresses_and_revoke_those_gone(fake, aws, geotrain_home):
    from geotrain.providers.base import PeerRules

    p = provider(fake, geotrain_home)
    assert isinstance(p, PeerRules)
    run = new_run()
    p.launch(request(run))

    def peers() -> set[str]:
        [group] = groups(aws, run)
        return {r["CidrIp"] for perm in group["IpPermissions"] for r in perm.get("IpRanges") or []
                if r.get("Description") == "a node of the run in another network"}

    p.admit_peers(run, ["198.51.100.7", "203.0.113.9"])
    assert peers() == {"198.51.100.7/32", "203.0.113.9/32"}
    p.admit_peers(run, ["203.0.113.9", "192.0.2.4"])  # one node gone, one new
    assert peers() == {"203.0.113.9/32", "192.0.2.4/32"}
    [group] = groups(aws, run)
    assert any(pair.get("GroupId") == group["GroupId"] for perm in group["IpPermissions"]
               for pair in perm.get("UserIdGroupPairs") or [])  # the group's own rule stays


def test_a_task_s_boot_disk_goes_on_the_image_s_root_device_with_its_size_and_tier(fake, aws, geotrain_home):
    from geotrain.domain import BootDisk

    run = new_run()
    base = request(run)
    provider(fake, geotrain_home).launch(LaunchRequest(base.request_id, run, base.offer, disk=BootDisk(300, "high")))
    [inst] = instances(aws, run)
    [image] = aws.describe_images(ImageIds=[inst["ImageId"]])["Images"]
    sent = fake.vms.run_requests[-1]
    assert sent["BlockDeviceMapping.1.DeviceName"] == image["RootDeviceName"]
    assert (sent["BlockDeviceMapping.1.Ebs.VolumeSize"], sent["BlockDeviceMapping.1.Ebs.VolumeType"],
            sent["BlockDeviceMapping.1.Ebs.Iops"]) == ("300", "gp3", "16000")
    [root] = [m for m in inst["BlockDeviceMappings"] if m["DeviceName"] == image["RootDeviceName"]]
    [volume] = aws.describe_volumes(VolumeIds=[root["Ebs"]["VolumeId"]])["Volumes"]
    assert volume["Size"] == 300  # moto made the root volume the size asked for

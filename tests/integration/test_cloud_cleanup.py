"""``geotrain cleanup --cloud aws|gcp|azure``: after a launcher is killed, its run's instances, disks,
addresses and firewall rules are found by their tags from another machine (a fresh GEOTRAIN_HOME: no state
file, no ledger) and released. Each test launches with a provider whose GEOTRAIN_HOME is its own, then runs
the CLI (typer's runner) with nothing but the cloud's endpoint and credentials in the environment."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest
from typer.testing import CliRunner

from geotrain.cli import app
from geotrain.domain import Continent, Location
from geotrain.providers.base import LaunchRequest
from tests.contract.harness_aws import aws_provider
from tests.fakes.aws import FakeAws
from tests.perf_helpers import AWS_US, offer

pytestmark = pytest.mark.slow

runner = CliRunner()


def request(location: Location, run_id: str, n: int = 0) -> LaunchRequest:
    the_offer = offer(location)
    return LaunchRequest(f"{run_id}/{the_offer.offer_id}/{n}", run_id, the_offer)


def fresh_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str = "elsewhere") -> Path:
    home = tmp_path / name
    home.mkdir()
    monkeypatch.setenv("GEOTRAIN_HOME", str(home))
    return home


# ---- AWS ------------------------------------------------------------------------------------------


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    with FakeAws() as fake:
        fake.regions = {"us-west-2", "us-east-1", "eu-west-1"}  # DescribeRegions lists these (moto: 38)
        for key in ("AWS_PROFILE", "AWS_ENDPOINT_URL_EC2"):
            monkeypatch.delenv(key, raising=False)
        monkeypatch.setenv("AWS_ENDPOINT_URL", fake.endpoint_url)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        yield fake


def ec2(fake: FakeAws, region: str = "us-west-2"):  # noqa: ANN201
    return boto3.client("ec2", region_name=region, endpoint_url=fake.endpoint_url, aws_access_key_id="testing",
                        aws_secret_access_key="testing")


def test_aws_cleanup_from_a_fresh_home_terminates_the_run_and_deletes_its_group(aws, tmp_path, monkeypatch):
    launcher_home = tmp_path / "launcher-home"
    provider = aws_provider(aws, launcher_home)
    nodes = [provider.launch(request(AWS_US, "run-killed", n)) for n in range(2)]
    other = provider.launch(request(AWS_US, "run-other"))  # another run: left alone by --run
    # the launcher is killed -9 here: nothing else runs; another machine has only the credentials
    fresh_home(tmp_path, monkeypatch)

    listed = runner.invoke(app, ["cleanup", "--cloud", "aws", "--run", "run-killed", "--dry-run"])
    assert listed.exit_code == 0, listed.output
    assert all(n.node_id in listed.output for n in nodes) and "would terminate" in listed.output
    assert aws.vms.live() == 3  # a dry run changes nothing

    result = runner.invoke(app, ["cleanup", "--cloud", "aws", "--run", "run-killed", "--yes"])
    assert result.exit_code == 0, result.output
    print(result.output)
    for node in nodes:
        assert aws.vms.instance(node.node_id).state == "terminated"
        assert f"instance {node.node_id} (run run-killed) [running]: terminated" in result.output
    assert aws.vms.instance(other.node_id).state == "running"
    client = ec2(aws)
    names = {g["GroupName"] for g in client.describe_security_groups()["SecurityGroups"]}
    assert "geotrain-run-killed" not in names and "geotrain-run-other" in names
    assert "security-group" in result.output and "released all" in result.output
    assert "eu-west-1" not in result.output  # nothing there; every region was asked
    assert {region for op, region in aws.calls if op == "DescribeInstances"} >= {"us-west-2", "us-east-1", "eu-west-1"}

    again = runner.invoke(app, ["cleanup", "--cloud", "aws", "--run", "run-killed", "--yes"])
    assert again.exit_code == 0 and "nothing of run run-killed found" in again.output, again.output
    # the launcher's own provider sees why its nodes ended
    assert {n.end_reason for n in provider.list("run-killed")} == {"cleanup"}


def test_aws_cleanup_of_every_run_in_one_region_and_a_group_still_in_use(aws, tmp_path, monkeypatch):
    provider = aws_provider(aws, tmp_path / "launcher-home")
    node = provider.launch(request(AWS_US, "run-a"))
    provider.launch(request(AWS_US, "run-b"))
    fresh_home(tmp_path, monkeypatch)
    result = runner.invoke(app, ["cleanup", "--cloud", "aws", "--region", "us-west-2", "--yes"])
    assert result.exit_code == 0, result.output
    assert aws.vms.live() == 0
    assert {op for op, region in aws.calls if region != "us-west-2" and op == "DescribeInstances"} == set()
    assert not [g for g in ec2(aws).describe_security_groups()["SecurityGroups"] if g["GroupName"].startswith(
        "geotrain-")]
    assert aws.vms.instance(node.node_id).state == "terminated"


def test_aws_cleanup_without_yes_off_a_terminal_refuses(aws, tmp_path, monkeypatch):
    aws_provider(aws, tmp_path / "launcher-home").launch(request(AWS_US, "run-x"))
    fresh_home(tmp_path, monkeypatch)
    result = runner.invoke(app, ["cleanup", "--cloud", "aws", "--region", "us-west-2"])
    assert result.exit_code == 2 and "--yes" in result.output, result.output
    assert aws.vms.live() == 1


# ---- GCP ------------------------------------------------------------------------------------------

GCP_US = Location("gcp", "us-central1", "us-central1-a", Continent.NORTH_AMERICA)
GCP_EU = Location("gcp", "europe-west4", "europe-west4-a", Continent.EUROPE)


@pytest.fixture
def gcp(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    from tests.fakes.gcp import PROJECT, GcpComputeFake

    fake = GcpComputeFake(strict_types=False).start()
    monkeypatch.setenv("GEOTRAIN_GCP_ENDPOINT", fake.url)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    try:
        yield fake
    finally:
        fake.stop()


def gcp_provider(fake, home: Path):  # noqa: ANN001, ANN201
    from google.auth.credentials import AnonymousCredentials

    from geotrain.providers.gcp import ComputeClients, GcpProvider
    from tests.fakes.gcp import PROJECT

    return GcpProvider(PROJECT, clients=ComputeClients.build(AnonymousCredentials(), api_endpoint=fake.url),
                       home=home, control_cidr="127.0.0.0/8", poll_s=0.05)


def test_gcp_cleanup_from_a_fresh_home_deletes_the_run_vms_and_firewall_rules(gcp, tmp_path, monkeypatch):
    provider = gcp_provider(gcp, tmp_path / "launcher-home")
    nodes = [provider.launch(request(GCP_US, "run-killed", 0)), provider.launch(request(GCP_EU, "run-killed", 1))]
    other = provider.launch(request(GCP_US, "run-other"))
    rules = {name for name in gcp.firewalls}
    assert {"gt-run-killed-agent", "gt-run-killed-peers", "gt-run-other-agent"} <= rules
    fresh_home(tmp_path, monkeypatch)

    listed = runner.invoke(app, ["cleanup", "--cloud", "gcp", "--run", "run-killed", "--dry-run"])
    assert listed.exit_code == 0, listed.output
    assert all(n.node_id in listed.output for n in nodes) and len(gcp.live_instances()) == 3

    result = runner.invoke(app, ["cleanup", "--cloud", "gcp", "--run", "run-killed", "--yes"])
    print(result.output)
    assert result.exit_code == 0, result.output
    assert gcp.find(nodes[0].node_id) is None and gcp.find(nodes[1].node_id) is None
    assert gcp.find(other.node_id) is not None
    assert "gt-run-killed-agent" not in gcp.firewalls and "gt-run-killed-peers" not in gcp.firewalls
    assert "gt-run-other-agent" in gcp.firewalls
    assert "released all 4 resource(s)" in result.output


def test_gcp_cleanup_in_one_region_leaves_the_rules_other_regions_still_use(gcp, tmp_path, monkeypatch):
    provider = gcp_provider(gcp, tmp_path / "launcher-home")
    provider.launch(request(GCP_US, "run-a", 0))
    eu = provider.launch(request(GCP_EU, "run-a", 1))
    fresh_home(tmp_path, monkeypatch)
    result = runner.invoke(app, ["cleanup", "--cloud", "gcp", "--region", "us-central1", "--yes"])
    assert result.exit_code == 4, result.output  # the rules stay while the EU VM uses them
    assert "left: VMs of its target tag still exist" in result.output
    assert [i["name"] for i in gcp.live_instances()] == [eu.node_id]
    result = runner.invoke(app, ["cleanup", "--cloud", "gcp", "--yes"])
    assert result.exit_code == 0, result.output
    assert gcp.live_instances() == [] and not [n for n in gcp.firewalls if n.startswith("gt-run-a")]


# ---- Azure ----------------------------------------------------------------------------------------


def test_azure_sweep_from_a_fresh_home_deletes_the_run_vms_and_its_resource_group(tmp_path, monkeypatch):
    """The Azure stack has no endpoint variable for its ARM URL (AWS_ENDPOINT_URL, GEOTRAIN_GCP_ENDPOINT), so
    the sweep is called with the fake's clients rather than through the CLI; nothing else is shared."""
    from geotrain.providers.azure import azure_clients
    from geotrain.providers.azure.sweep import sweep
    from tests.contract.harness_azure import AZURE_LOCATION, FakeCredential, azure_provider
    from tests.fakes.azure_server import SUBSCRIPTION_ID
    from tests.fakes.azure_vms import AzureVmFake

    fake = AzureVmFake(regions=set()).start()
    try:
        provider = azure_provider(fake, tmp_path / "launcher-home")
        nodes = [provider.launch(request(AZURE_LOCATION, "run-killed", n)) for n in range(2)]
        other = provider.launch(request(AZURE_LOCATION, "run-other"))
        fresh_home(tmp_path, monkeypatch)
        clients = azure_clients(credential=FakeCredential(), subscription_id=SUBSCRIPTION_ID, arm_url=fake.url,
                                enforce_https=False, retry_total=0)
        listed = sweep(run_id="run-killed", dry_run=True, clients=clients)
        assert {s.resource_id for s in listed if s.kind == "vm"} == {n.node_id for n in nodes}
        assert fake.vm(nodes[0].node_id) is not None
        swept = sweep(run_id="run-killed", clients=clients)
        assert all(s.released for s in swept) and {s.kind for s in swept} == {"vm", "resource-group"}
        assert all(fake.vm(n.node_id) is None for n in nodes) and fake.vm(other.node_id) is not None
        assert sweep(run_id="run-killed", clients=clients) == []
    finally:
        fake.stop()

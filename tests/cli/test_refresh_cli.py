"""``geotrain catalog refresh``, ``catalog history`` and ``geotrain check`` as a user runs them: the real
SDKs and their standard credential chains, AWS pointed at the local fake by ``AWS_ENDPOINT_URL``."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from geotrain.cli import app
from geotrain.pricing.snapshot import SnapshotStore
from tests.fakes.aws import FakeAws

runner = CliRunner()
NO_CLOUD_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
                "AWS_ENDPOINT_URL", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT",
                "CLOUDSDK_CORE_PROJECT", "GCLOUD_PROJECT", "AZURE_SUBSCRIPTION_ID", "AZURE_CLIENT_ID",
                "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET")


@pytest.fixture
def no_clouds(monkeypatch, tmp_path):
    """No credentials for any cloud, and no metadata servers to ask (this is no cloud VM)."""
    for name in NO_CLOUD_ENV:
        monkeypatch.delenv(name, raising=False)
    for name in ("AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"):
        monkeypatch.setenv(name, str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
    monkeypatch.setenv("NO_GCE_CHECK", "True")


@pytest.fixture(scope="module")
def aws_fake():
    with FakeAws() as fake:
        yield fake


@pytest.fixture
def aws_env(no_clouds, monkeypatch, aws_fake):
    aws_fake.reset()
    monkeypatch.setenv("AWS_ENDPOINT_URL", aws_fake.endpoint_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("GEOTRAIN_AWS_SPOT_ADVISOR_URL", aws_fake.spot_advisor_url)
    return aws_fake


def test_check_without_credentials_says_per_cloud_what_to_set(no_clouds):
    result = runner.invoke(app, ["check", "--json"])
    assert result.exit_code == 4, result.output
    reports = {r["cloud"]: r for r in json.loads(result.stdout)["clouds"]}
    assert set(reports) == {"aws", "gcp", "azure"} and not any(r["ok"] for r in reports.values())
    assert "AWS_PROFILE" in reports["aws"]["message"]
    assert "GOOGLE_APPLICATION_CREDENTIALS" in reports["gcp"]["message"]
    assert "AZURE_SUBSCRIPTION_ID" in reports["azure"]["message"]


def test_check_against_the_aws_fake_is_ok_and_names_the_account(aws_env):
    result = runner.invoke(app, ["check", "--cloud", "aws", "--json"])
    assert result.exit_code == 0, result.output
    (report,) = json.loads(result.stdout)["clouds"]
    assert report["ok"] and report["identity"] and report["missing"] == []


def test_refresh_then_list_plan_and_history_use_the_live_prices(aws_env):
    store = SnapshotStore()
    before = store.current_id()
    result = runner.invoke(app, ["catalog", "refresh", "--cloud", "aws", "--regions", "us-east-1", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["parent_id"] != summary["snapshot_id"] and summary["offers"] > 0
    assert store.current_id() == summary["snapshot_id"] != before
    (aws,) = summary["clouds"]
    assert aws["offers"] == summary["offers"] and aws["calls"]
    listed = json.loads(runner.invoke(app, ["catalog", "list", "--cloud", "aws", "--region", "us-east-1",
                                            "--json"]).stdout)["offers"]
    live = [r for r in listed if r["source"].startswith("aws-")]
    assert len(live) == summary["offers"]
    plain = runner.invoke(app, ["catalog", "list", "--cloud", "aws", "--region", "us-east-1", "--accelerator", "T4",
                                "--market", "spot", "--limit", "3"])
    assert "note: prices observed" not in plain.output  # fresh prices: no staleness note
    plan = runner.invoke(app, ["plan", "--workload", "convnext-large", "--accelerators", "T4", "--regions", "us-east-1",
                               "--target-sps", "80", "--time-limit", "10", "--json"])
    assert plan.exit_code == 0, plan.output
    items = json.loads(plan.stdout)["items"]
    assert all(i["offer"]["source"].startswith("aws-") for i in items)
    assert not any("days ago" in a for a in json.loads(plan.stdout)["assumptions"])
    zone = next(r["zone"] for r in live if r["instance_type"] == "g4dn.xlarge" and r["market"] == "spot")
    history = json.loads(runner.invoke(app, ["catalog", "history", "--instance-type", "g4dn.xlarge", "--zone", zone,
                                             "--json"]).stdout)["prices"]
    assert {h["source"] for h in history} >= {"aws-spot-price-history"} and len(history) >= 2  # bundled + live
    live = runner.invoke(app, ["catalog", "history", "--instance-type", "g4dn.xlarge", "--zone", zone, "--live", "7",
                               "--json"])
    assert live.exit_code == 0, live.output
    api = [h for h in json.loads(live.stdout)["prices"] if h["source"] == "aws-spot-price-history-api"]
    assert api and all(h["zone"] == zone and h["snapshot_id"] is None for h in api)



def test_refresh_asks_placement_scores_for_the_gang_it_is_told(aws_env):
    """``--gang-nodes 16``: the stored placement scores are for a gang of 16 (8 without it); 0 is refused."""
    args = ["catalog", "refresh", "--cloud", "aws", "--regions", "us-east-1", "--accelerators", "V100", "--json"]
    result = runner.invoke(app, [*args, "--gang-nodes", "16"])
    assert result.exit_code == 0, result.output
    listed = json.loads(runner.invoke(app, ["catalog", "list", "--cloud", "aws", "--region", "us-east-1",
                                            "--accelerator", "V100", "--market", "spot", "--json"]).stdout)["offers"]
    scored = [r for r in listed if "placement score" in r["source"]]
    assert scored and all("for 16 instances" in r["source"] for r in scored)
    assert all(r["capacity_hint"] in (None, 16) and r["availability"] is not None for r in scored)
    refused = runner.invoke(app, [*args, "--gang-nodes", "0"])
    assert refused.exit_code == 2 and "--gang-nodes" in refused.output

def test_refresh_of_an_unknown_cloud_or_one_without_credentials_stores_nothing(no_clouds):
    store = SnapshotStore()
    before = store.current_id()
    result = runner.invoke(app, ["catalog", "refresh", "--cloud", "foo"])
    assert result.exit_code == 2 and "not a cloud geotrain can refresh" in result.output
    result = runner.invoke(app, ["catalog", "refresh", "--cloud", "azure"])
    assert result.exit_code == 4 and "AZURE_SUBSCRIPTION_ID" in result.output and "nothing was stored" in result.output
    assert store.current_id() == before and store.ids() == []


def test_no_credential_is_stored_or_printed(aws_env, monkeypatch, geotrain_home):
    secret = "geotrain-test-secret-7f3a9c"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_SESSION_TOKEN", secret + "-token")
    result = runner.invoke(app, ["catalog", "refresh", "--cloud", "aws", "--regions", "us-east-1"])
    assert result.exit_code == 0, result.output
    assert secret not in result.output
    checked = runner.invoke(app, ["check", "--cloud", "aws", "--json"])
    assert secret not in checked.output
    stored = [p for p in geotrain_home.rglob("*") if p.is_file()]
    assert stored and not any(secret.encode() in p.read_bytes() for p in stored)

"""``geotrain catalog refresh --cloud aws`` against a plain moto server: an AWS fake nobody here wrote.

moto (5.2.x, server mode) implements what a refresh reads from EC2: DescribeRegions,
DescribeAvailabilityZones, DescribeInstanceTypes (its own table of 1,395 types with their GpuInfo),
DescribeInstanceTypeOfferings and DescribeSpotPriceHistory (one record per offered (type, zone), at a
constant $0.00001 from 2006: these tests check which offers come back and how, never their prices).
It has no Price List API (``pricing:GetProducts`` gets an HTML 500 page) and no
GetSpotPlacementScores (an HTML page botocore cannot parse: ``ResponseParserError``, which is neither
a ``ClientError`` nor a ``BotoCoreError``). So a refresh against it is a refresh where the on-demand
prices and the placement scores fail, as they do on real AWS for a role without those permissions:
the spot offers must still be stored, observed now, the current snapshot's on-demand prices kept with
their own source, and each missing kind of data named in one line, with no traceback.

The referee for the offers is moto's own answer, read here with boto3 directly (not through geotrain).
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import boto3
import pytest

from geotrain.pricing.live.aws import AwsSource
from geotrain.pricing.live.base import INTERRUPTION_BANDS, ON_DEMAND_PRICES, PLACEMENT_SCORES, FetchRequest
from geotrain.pricing.snapshot import SnapshotStore, bundled_snapshot

pytestmark = pytest.mark.slow  # `make test-all` runs the integration suite

REGIONS = ("us-east-1", "us-west-2")
KEYS = dict(aws_access_key_id="testing", aws_secret_access_key="testing")


@pytest.fixture(scope="module")
def moto_url():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def moto_spot_offers(url: str) -> set[tuple[str, str, str]]:
    """(region, AZ id, type) of every spot price moto has in REGIONS for the accelerated types each
    region offers (whole GPUs, Neuron or Inferentia devices by moto's DescribeInstanceTypes), read
    with boto3."""
    out = set()
    for region in REGIONS:
        ec2 = boto3.client("ec2", region_name=region, endpoint_url=url, **KEYS)
        ids = {z["ZoneName"]: z["ZoneId"] for z in ec2.describe_availability_zones()["AvailabilityZones"]}
        offered = sorted({o["InstanceType"] for o in ec2.describe_instance_type_offerings(
            LocationType="region", MaxResults=1000)["InstanceTypeOfferings"]})
        accelerated = []
        for i in range(0, len(offered), 100):
            for t in ec2.describe_instance_types(InstanceTypes=offered[i:i + 100])["InstanceTypes"]:
                whole = all(float(g.get("GpuPartitionSize", 1.0)) >= 1 for g in t.get("GpuInfo", {}).get("Gpus", []))
                if whole and (t.get("GpuInfo") or t.get("NeuronInfo") or t.get("InferenceAcceleratorInfo")):
                    accelerated.append(t["InstanceType"])
        pages = ec2.get_paginator("describe_spot_price_history").paginate(
            InstanceTypes=accelerated, ProductDescriptions=["Linux/UNIX"])
        out |= {(region, ids[r["AvailabilityZone"]], r["InstanceType"]) for p in pages for r in p["SpotPriceHistory"]}
    return out


def gpus(url: str, instance_type: str) -> tuple[str, int]:
    """(name, count) of a type's GPUs by moto's own DescribeInstanceTypes."""
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=url, **KEYS)
    (gpu,) = ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"][0]["GpuInfo"]["Gpus"]
    return gpu["Name"], gpu["Count"]


def test_the_source_keeps_every_spot_offer_moto_has_and_names_what_it_lacks(moto_url):
    at = datetime(2026, 12, 7, 12, 0, tzinfo=timezone.utc)

    def make(service: str, region: str):
        return boto3.client(service, region_name=region, endpoint_url=moto_url, **KEYS)

    source = AwsSource(make, spot_advisor_url=f"{moto_url}/spot-advisor-data.json", sleep=lambda s: None)
    result = source.fetch(FetchRequest(regions=frozenset(REGIONS), observed_at=at))
    got = {(r["region"], r["zone"], r["instance_type"]) for r in result.rows if r["accelerator"]}
    assert got == moto_spot_offers(moto_url) and len(got) > 100
    assert {r["market"] for r in result.rows} == {"spot"}
    assert {r["observed_at"] for r in result.rows} == {"2026-12-07T12:00:00Z"}
    assert {r["source"] for r in result.rows} == {"aws-spot-price-history"}
    # accelerators as moto's own GpuInfo says (p4d: 8 A100s, p5: 8 H100s), named the way offers are
    assert gpus(moto_url, "p4d.24xlarge") == ("A100", 8) and gpus(moto_url, "p5.48xlarge") == ("H100", 8)
    p4d = next(r for r in result.rows if r["instance_type"] == "p4d.24xlarge")
    assert (p4d["accelerator"], p4d["accelerator_count"]) == ("A100", 8)
    p5 = next(r for r in result.rows if r["instance_type"] == "p5.48xlarge")
    assert (p5["accelerator"], p5["accelerator_count"]) == ("H100", 8)
    kinds = {(s.region, s.data): s.why for s in result.skipped}
    assert set(kinds) == {("us-east-1", ON_DEMAND_PRICES), ("us-west-2", ON_DEMAND_PRICES),
                          ("*", PLACEMENT_SCORES), ("*", INTERRUPTION_BANDS)}
    assert "GetProducts: 500" in kinds[("us-east-1", ON_DEMAND_PRICES)]
    assert "cannot parse" in kinds[("*", PLACEMENT_SCORES)]  # the ResponseParserError, in one line
    assert all("\n" not in why and "Traceback" not in why for why in kinds.values())


@pytest.fixture
def moto_env(monkeypatch, tmp_path, moto_url):
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ROLE_ARN",
                 "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    for name in ("AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"):
        monkeypatch.setenv(name, str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("GEOTRAIN_AWS_SPOT_ADVISOR_URL", f"{moto_url}/spot-advisor-data.json")
    return moto_url


def geotrain(*argv: str) -> subprocess.CompletedProcess:
    """The command as a user runs it: its own process (the moto server stays in this one)."""
    return subprocess.run([str(Path(sys.executable).parent / "geotrain"), *argv], capture_output=True, text=True,
                          timeout=600)


def test_catalog_refresh_against_plain_moto_stores_the_spot_offers_observed_now(moto_env):
    store = SnapshotStore()
    before = store.current_id()
    result = geotrain("catalog", "refresh", "--cloud", "aws", "--regions", ",".join(REGIONS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    said = " ".join(result.stdout.split())  # as printed, lines wrapped to the terminal
    assert "skipped on-demand prices of us-east-1: GetProducts: 500" in said
    assert "skipped placement scores of every region: GetSpotPlacementScores: an answer botocore cannot parse" in said
    assert store.current_id() != before
    table = store.current().table
    live = table[(table.cloud == "aws") & (table.source == "aws-spot-price-history")]
    assert set(live.region) == set(REGIONS) and set(live.market) == {"spot"}
    today = datetime.now(timezone.utc).date()
    assert {datetime.fromisoformat(str(t).replace("Z", "+00:00")).date() for t in live.observed_at} == {today}
    # on-demand prices: the current snapshot's (the bundled one's here), kept with their own source and age
    bundled = bundled_snapshot().table
    kept = table[(table.cloud == "aws") & table.region.isin(REGIONS) & (table.market == "on_demand")]
    was = bundled[(bundled.cloud == "aws") & bundled.region.isin(REGIONS) & (bundled.market == "on_demand")]
    assert len(kept) == len(was) > 0 and set(kept.source) == set(was.source)
    assert not any(s.startswith("aws-") for s in kept.source)
    summary = geotrain("catalog", "refresh", "--cloud", "aws", "--regions", "us-east-1", "--json")
    assert summary.returncode == 0, summary.stderr
    (aws,) = json.loads(summary.stdout)["clouds"]
    assert {"region": "us-east-1", "data": ON_DEMAND_PRICES} in [{k: s[k] for k in ("region", "data")}
                                                                 for s in aws["skipped"]]

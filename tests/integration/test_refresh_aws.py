"""The AWS price source through real boto3 clients against the local fake (moto + our handlers).

The referee: a refresh of every region through ``AwsSource`` must give exactly the bundled AWS rows
the fake serves (same keys, prices within 1e-6 relative). The other tests narrow to us-east-1 (and
us-west-2) to stay fast.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import boto3
import pandas as pd
import pytest
from botocore.config import Config

from geotrain.clouds.geography import continent_of
from geotrain.errors import CatalogError, CredentialsError
from geotrain.pricing.live.aws import AwsSource, canonical_accelerator
from geotrain.pricing.live.aws.placement import ScoreCache
from geotrain.pricing.live.base import ON_DEMAND_PRICES, PLACEMENT_SCORES, SPOT_PRICES, FetchRequest, PriceSource
from geotrain.pricing.schema import KEY_COLUMNS, parse_offers
from tests.fakes.aws import FakeAws, bundled_aws_rows, placement_score

pytestmark = pytest.mark.slow  # `make test-all` runs the integration suite

EAST = frozenset({"us-east-1"})


@pytest.fixture(scope="module")
def fake():
    with FakeAws() as server:
        yield server


@pytest.fixture(autouse=True)
def _fresh_knobs(fake):
    fake.reset()
    yield
    fake.reset()


def factory(fake: FakeAws):
    config = Config(retries={"total_max_attempts": 1})  # throttling reaches with_backoff

    def make(service: str, region: str):
        return boto3.client(service, region_name=region, endpoint_url=fake.endpoint_url, config=config,
                            aws_access_key_id="testing", aws_secret_access_key="testing")
    return make


def source(fake: FakeAws, sleeps: list[float] | None = None, **kwargs) -> AwsSource:
    """The source on the fake; the fake has no daily allowance of placement-score configurations (real AWS
    has: ``test_scores_asked_within_24_hours…`` keeps one)."""
    pauses = sleeps if sleeps is not None else []
    kwargs.setdefault("daily_configurations", 1000)
    return AwsSource(factory(fake), spot_advisor_url=fake.spot_advisor_url, sleep=pauses.append, **kwargs)


def keyed(rows) -> dict[tuple, dict]:
    return {tuple(r[k] for k in KEY_COLUMNS): r for r in rows}


@pytest.fixture(scope="module")
def full(fake):
    """One refresh of every region (shared by the referee tests)."""
    progress: list[tuple[str, str, str]] = []
    result = source(fake).fetch(FetchRequest(), progress=lambda *call: progress.append(call))
    return result, progress


# ---------------------------------------------------------------------------------------- referee


def test_referee_every_served_bundled_row_comes_back_with_its_price(fake, full):
    result, _ = full
    expected = fake.expected_rows()
    got = keyed(result.rows)
    assert result.skipped == ()
    assert sorted(set(expected) - set(got)) == []
    assert sorted(set(got) - set(expected)) == []
    wrong = [(k, got[k]["price_usd_per_hour"], p) for k, p in expected.items()
             if not math.isclose(got[k]["price_usd_per_hour"], p, rel_tol=1e-6)]
    assert wrong == []
    # 2297 bundled AWS rows less 13 in Local Zones moto does not have and 277 regional spot figures of CPU-only
    # types (AWS prices spot per AZ); the CPU-only types' on-demand rows come back like the GPU ones
    assert len(expected) == 2007
    assert {r.zone for r in fake.data.left_out if r.zone} == {"use1-atl2-az1", "usw2-lax1-az1", "usw2-lax1-az2"}
    assert {(r.market, r.accelerator) for r in fake.data.left_out if not r.zone} == {("spot", "")}
    assert sum(1 for k in got if got[k]["accelerator"] == "" and got[k]["accelerator_count"] == 0) == 277


def test_referee_signals_and_names_match_the_bundled_rows(fake, full):
    result, _ = full
    got = keyed(result.rows)
    # a placement score is asked for an accelerator model's types together: it holds for each of them in the AZ
    group_score: dict[tuple[str, str, str], int] = {}
    for r in fake.data.served:
        if r.availability:
            key = (r.region, r.zone, r.accelerator)
            group_score[key] = max(group_score.get(key, 0), placement_score(float(r.availability)))
    scored = 0
    for r in fake.data.served:
        row = got[("aws", r.region, r.zone, r.instance_type, r.market)]
        assert (row["accelerator"], row["accelerator_count"]) == (r.accelerator, r.accelerator_count), r
        if r.market == "on_demand":
            assert (row["interruption_band"], row["interruptions_per_hour"]) == ("none", 0.0)
        else:
            assert row["interruption_band"] == r.band
        score = group_score.get((r.region, r.zone, r.accelerator)) if r.market == "spot" else None
        if score is not None:
            assert row["availability"] == score / 10 and "placement score" in row["source"], r
            scored += 1
        else:
            assert row["availability"] == "", r
    # the SkyNomad p3.2xlarge AZs of us-east-1, for every V100 type offered spot there
    assert result.signals["availability"] == scored >= 4
    assert result.signals["interruption_band"] == sum(1 for r in fake.data.spot if r.band)


def test_rows_pass_the_offer_schema(full):
    result, _ = full
    raw = pd.DataFrame([{k: "" if v == "" else str(v) for k, v in r.items()} for r in result.rows])
    table = parse_offers(raw, "aws refresh", continent_of=lambda c, r: getattr(continent_of(c, r), "value", None))
    assert len(table) == len(result.rows)


def test_progress_reports_each_region_and_step(full):
    result, progress = full
    regions = {r["region"] for r in result.rows}
    for region in regions:
        for step in ("zones", "instance types", "offerings", "spot prices", "on-demand prices"):
            assert ("aws", region, step) in progress
    assert ("aws", "*", "spot advisor feed") in progress
    assert ("aws", "*", "placement scores") in progress
    assert result.calls["DescribeInstanceTypes"] < 40  # specs fetched once, not per region


def test_a_source_is_a_price_source(fake):
    typed: PriceSource = source(fake)  # the seam, checked by mypy
    assert typed.cloud == "aws" and callable(typed.fetch) and callable(typed.check)


# ---------------------------------------------------------------------------------------- knobs


def test_pagination_gives_the_same_rows(fake):
    at = datetime(2026, 12, 1, tzinfo=timezone.utc)
    whole = source(fake).fetch(FetchRequest(regions=EAST, observed_at=at))
    fake.reset()
    fake.page_size = 25
    paged = source(fake).fetch(FetchRequest(regions=EAST, observed_at=at))
    assert keyed(paged.rows) == keyed(whole.rows)
    assert {r["observed_at"] for r in paged.rows} == {"2026-12-01T00:00:00Z"}
    spot = sum(1 for k in fake.expected_rows(EAST) if k[4] == "spot")
    assert fake.count("DescribeSpotPriceHistory") == math.ceil(spot / 25) > 1
    assert fake.count("GetProducts") > whole.calls["GetProducts"]
    assert fake.count("DescribeInstanceTypeOfferings") > 2 * whole.calls["DescribeInstanceTypeOfferings"]
    assert paged.calls["DescribeSpotPriceHistory"] == fake.count("DescribeSpotPriceHistory")


def test_throttling_is_retried_with_backoff(fake):
    unthrottled = source(fake).fetch(FetchRequest(regions=EAST)).calls["DescribeSpotPriceHistory"]
    fake.throttle = {"DescribeSpotPriceHistory": 2, "GetProducts": 1, "DescribeRegions": 1}
    sleeps: list[float] = []
    result = source(fake, sleeps, first_pause_s=0.1).fetch(FetchRequest(regions=EAST))
    assert result.skipped == ()
    assert keyed(result.rows).keys() == set(fake.expected_rows(EAST))
    assert sorted(sleeps) == pytest.approx([0.1, 0.1, 0.1, 0.2])
    assert result.calls["DescribeSpotPriceHistory"] == unthrottled + 2  # each throttled call sent again


def test_throttling_that_outlasts_the_retries_skips_that_kind_of_data(fake):
    fake.throttle = {"DescribeSpotPriceHistory": 3}  # all 3 attempts of us-east-1 (the first region)
    result = source(fake, attempts=3).fetch(FetchRequest(regions=frozenset({"us-east-1", "us-west-2"})))
    assert [(s.region, s.data) for s in result.skipped] == [("us-east-1", SPOT_PRICES)]
    assert "RequestLimitExceeded" in result.skipped[0].why
    # the throttles were used up on us-east-1's spot prices: its on-demand rows and all of us-west-2 are kept
    assert {(r["region"], r["market"]) for r in result.rows} == {
        ("us-east-1", "on_demand"), ("us-west-2", "on_demand"), ("us-west-2", "spot")}


def test_a_refused_price_list_keeps_the_spot_rows(fake):
    """A role without pricing:GetProducts (or a policy that blocks us-east-1, where the Price List API
    lives) still refreshes every spot price; on-demand prices are skipped with the reason."""
    fake.denied = {"GetProducts"}
    result = source(fake).fetch(FetchRequest(regions=frozenset({"us-east-1", "us-west-2"})))
    want = {k for k in fake.expected_rows(frozenset({"us-east-1", "us-west-2"})) if k[4] == "spot"}
    assert keyed(result.rows).keys() == want and want
    assert [(s.region, s.data) for s in result.skipped] == [("us-east-1", ON_DEMAND_PRICES),
                                                           ("us-west-2", ON_DEMAND_PRICES)]
    assert all("GetProducts: AccessDeniedException" in s.why and "pricing:GetProducts" in s.why
               for s in result.skipped)


def test_one_failing_region_is_skipped_with_the_reason(fake):
    fake.failing_regions = {"us-west-2"}
    result = source(fake).fetch(FetchRequest(regions=frozenset({"us-east-1", "us-west-2"})))
    assert [s.region for s in result.skipped] == ["us-west-2"]
    assert "Unavailable" in result.skipped[0].why
    assert {r["region"] for r in result.rows} == {"us-east-1"}
    assert keyed(result.rows).keys() == set(fake.expected_rows(EAST))


def test_a_failing_home_region_refreshes_nothing_and_says_why(fake):
    fake.failing_regions = {"us-east-1"}
    result = source(fake).fetch(FetchRequest(regions=EAST))
    assert result.rows == ()
    assert result.skipped[0].region == "*" and "DescribeRegions" in result.skipped[0].why


def test_a_region_the_account_does_not_list_is_skipped(fake):
    fake.regions = {"us-east-1", "eu-west-1"}
    result = source(fake).fetch(FetchRequest(regions=frozenset({"us-east-1", "us-west-2"})))
    assert [s.region for s in result.skipped] == ["us-west-2"]
    assert "DescribeRegions" in result.skipped[0].why


@pytest.mark.parametrize("operation, words", [
    ("DescribeSpotPriceHistory", "is not a number"),
    ("DescribeInstanceTypes", "VCpuInfo"),
    ("GetProducts", "terms.OnDemand"),
    ("SpotAdvisorFeed", "unexpected shape"),
])
def test_an_answer_of_unexpected_shape_is_a_catalog_error(fake, operation, words):
    fake.bad_shape = {operation}
    with pytest.raises(CatalogError, match=words):
        source(fake).fetch(FetchRequest(regions=EAST))


def test_regions_and_accelerators_filters(fake):
    result = source(fake).fetch(FetchRequest(regions=EAST, accelerators=frozenset({"V100", "V100-32GB"})))
    assert {r["region"] for r in result.rows} == {"us-east-1"}
    assert {r["accelerator"] for r in result.rows} == {"V100", "V100-32GB"}
    want = {k: p for k, p in fake.expected_rows(EAST).items()
            if k[3].startswith(("p3.", "p3dn."))}
    assert keyed(result.rows).keys() == want.keys()
    # one request per accelerator model, its types together: V100 (p3.2xlarge, p3.8xlarge, p3.16xlarge)
    # and V100-32GB (p3dn.24xlarge)
    assert fake.count("GetSpotPlacementScores") == 2


def test_capacity_hint_follows_the_placement_score(fake):
    result = source(fake, likely_score=5, placement_capacity=4).fetch(
        FetchRequest(regions=EAST, accelerators=frozenset({"V100"})))
    scored = [r for r in result.rows if r["availability"] != ""]
    # the group's score holds for every V100 type's spot row in the AZ
    assert {(r["zone"], r["availability"]) for r in scored} == {
        ("use1-az1", 0.4), ("use1-az2", 0.2), ("use1-az5", 0.6), ("use1-az6", 0.5)}
    assert {(r["zone"], r["capacity_hint"]) for r in scored} == {
        ("use1-az1", ""), ("use1-az2", ""), ("use1-az5", 4), ("use1-az6", 4)}
    assert {r["instance_type"] for r in scored} == {"p3.2xlarge", "p3.8xlarge", "p3.16xlarge"} & {
        r["instance_type"] for r in result.rows if r["zone"] in {"use1-az1", "use1-az2", "use1-az5", "use1-az6"}}
    assert result.signals["capacity_hint"] == sum(1 for r in scored if r["capacity_hint"] == 4) >= 2
    assert all("instances of p3.16xlarge, p3.2xlarge, p3.8xlarge, asked 20" in r["source"] for r in scored)



def test_placement_scores_are_asked_for_the_gang_a_refresh_names(fake, geotrain_home):
    """``catalog refresh --gang-nodes 4``: the group is asked for 4 instances (the job's gang) instead of
    the source's 8, and a likely score's capacity hint is the gang."""
    result = source(fake, likely_score=5).fetch(
        FetchRequest(regions=EAST, accelerators=frozenset({"V100"}), gang_nodes=4))
    scored = [r for r in result.rows if r["availability"] != ""]
    assert {(r["zone"], r["capacity_hint"]) for r in scored} == {
        ("use1-az1", ""), ("use1-az2", ""), ("use1-az5", 4), ("use1-az6", 4)}
    assert all("placement score" in r["source"] and "/10 for 4 instances" in r["source"] for r in scored)
    default = source(fake, likely_score=5).fetch(FetchRequest(regions=EAST, accelerators=frozenset({"V100"})))
    assert {r["capacity_hint"] for r in default.rows if r["availability"] != ""} == {"", 8}

def test_scores_asked_within_24_hours_come_from_the_cache_and_new_groups_keep_the_allowance(fake, geotrain_home):
    """AWS lets an account ask a limited number of new configurations in 24 hours and repeat those it
    asked: a refresh asks each group once a day, and stops at the allowance."""
    at = datetime(2026, 12, 7, 12, 0, tzinfo=timezone.utc)
    now = [at]
    both = FetchRequest(regions=EAST, accelerators=frozenset({"V100", "V100-32GB"}))
    cache = ScoreCache(geotrain_home / "scores.json")  # a file under GEOTRAIN_HOME: private

    def refresh(**kw):  # noqa: ANN003, ANN202
        return AwsSource(factory(fake), spot_advisor_url=fake.spot_advisor_url, sleep=lambda s: None,
                         clock=lambda: now[0], score_cache=ScoreCache(cache.path), **kw).fetch(both)

    first = refresh(daily_configurations=1)  # one of the two groups fits the allowance
    assert fake.count("GetSpotPlacementScores") == 1
    assert [s.data for s in first.skipped] == [PLACEMENT_SCORES] and "1 of 2 groups" in first.skipped[0].why
    fake.calls.clear()
    now[0] = at + timedelta(hours=3)
    again = refresh(daily_configurations=2)  # the first group from the cache; the second is new
    assert fake.count("GetSpotPlacementScores") == 1 and again.skipped == ()
    assert any("asked 2026-12-07T12:00:00Z" in r["source"] for r in again.rows)
    assert {r["availability"] for r in again.rows if r["instance_type"] == "p3.2xlarge"} >= {0.4, 0.6}
    fake.calls.clear()
    now[0] = at + timedelta(hours=25)  # a day later: the first group is asked again
    refresh(daily_configurations=2)
    assert fake.count("GetSpotPlacementScores") == 1
    assert cache.path.exists() and oct(cache.path.stat().st_mode & 0o777) == "0o600"


def test_refused_placement_scores_leave_capacity_unknown(fake):
    fake.denied = {"GetSpotPlacementScores"}
    result = source(fake).fetch(FetchRequest(regions=EAST, accelerators=frozenset({"V100"})))
    assert result.rows and all(r["availability"] == "" for r in result.rows)
    assert result.skipped[0].region == "*" and "UnauthorizedOperation" in result.skipped[0].why


def test_unreachable_spot_advisor_feed_leaves_bands_empty(fake):
    def offline(url: str):
        raise OSError("connection refused")
    result = AwsSource(factory(fake), fetch_json=offline, sleep=lambda s: None).fetch(
        FetchRequest(regions=EAST, accelerators=frozenset({"V100"})))
    spot = [r for r in result.rows if r["market"] == "spot"]
    assert spot and all(r["interruption_band"] == "" for r in spot)
    assert any(s.region == "*" and "Spot Advisor" in s.why for s in result.skipped)


# ---------------------------------------------------------------------------------------- credentials


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_DEFAULT_PROFILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_missing_credentials_raise_credentials_error_naming_what_to_set(fake, no_credentials):
    src = AwsSource(endpoint_url=fake.endpoint_url, spot_advisor_url=fake.spot_advisor_url, sleep=lambda s: None)
    with pytest.raises(CredentialsError, match="AWS_PROFILE") as caught:
        src.fetch(FetchRequest(regions=EAST))
    assert "AWS_ACCESS_KEY_ID" in caught.value.message and "aws configure" in caught.value.message


def test_check_without_credentials_says_what_to_set(fake, no_credentials):
    report = AwsSource(endpoint_url=fake.endpoint_url).check()
    assert not report.ok and report.identity == ""
    assert "AWS_PROFILE" in report.message and "aws configure" in report.message


def test_aws_endpoint_url_reaches_the_fake_without_code_changes(fake, no_credentials, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", fake.endpoint_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    report = AwsSource().check()
    assert report.ok, report.message


# ---------------------------------------------------------------------------------------- check


def test_check_is_ok_against_the_fake(fake):
    report = source(fake).check()
    assert report.ok and report.identity == "123456789012" and report.missing == ()
    assert fake.count("DescribeSpotPriceHistory") == 1  # a DryRun probe: no data


@pytest.mark.parametrize("operation, permission", [
    ("GetSpotPlacementScores", "ec2:GetSpotPlacementScores"),
    ("DescribeSpotPriceHistory", "ec2:DescribeSpotPriceHistory"),
    ("GetProducts", "pricing:GetProducts"),
])
def test_check_lists_a_refused_permission(fake, operation, permission):
    fake.denied = {operation}
    report = source(fake).check()
    assert not report.ok and report.missing == (permission,)
    assert permission in report.message and report.identity == "123456789012"


# ---------------------------------------------------------------------------------------- names


@pytest.mark.parametrize("name, mib, canonical", [
    ("A100", 40960, "A100"), ("A100", 81920, "A100-80GB"), ("V100", 16384, "V100"), ("V100", 32768, "V100-32GB"),
    ("RTX PRO Server 6000", 98304, "RTXPRO6000"), ("Radeon Pro V520", 8192, "RadeonProV520"),
    ("Qualcomm AI100", 16000, "QualcommAI100"), ("Trainium2", 524288, "Trainium2"), ("H200", 144384, "H200"),
])
def test_canonical_accelerator_names(name, mib, canonical):
    assert canonical_accelerator(name, mib) == canonical


def test_every_bundled_accelerator_name_is_reachable():
    bundled = {r.accelerator for r in bundled_aws_rows() if r.accelerator}
    assert "A100-80GB" in bundled and "RTXPRO6000" in bundled

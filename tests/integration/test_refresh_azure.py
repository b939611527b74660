"""The Azure price source against a local fake of the Retail Prices API, ARM and Resource Graph.

The real clients (requests for the Retail Prices API, azure-mgmt-compute and its azure-core pipeline for
ARM and Resource Graph) talk to ``tests/fakes/azure_server.py`` on 127.0.0.1 over http; the real
bearer-token policy sends the fake credential's token (``enforce_https=False``), which the fake checks.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pandas as pd
import pytest

pytest.importorskip("azure.mgmt.compute")
pytest.importorskip("requests")

from azure.core.credentials import AccessToken, AccessTokenInfo  # noqa: E402
from azure.core.exceptions import ClientAuthenticationError  # noqa: E402

from geotrain.clouds.geography import continent_of  # noqa: E402
from geotrain.errors import CatalogError, CredentialsError  # noqa: E402
from geotrain.pricing.interruption import interruptions_per_hour_for_band  # noqa: E402
from geotrain.pricing.live.azure import (  # noqa: E402
    AzureSource,
    accelerator_of,
    band_of_eviction_rate,
    parse_eviction_rows,
)
from geotrain.pricing.live.base import EVERY_OFFER, FetchRequest, Skipped  # noqa: E402
from geotrain.pricing.schema import KEY_COLUMNS, parse_offers  # noqa: E402
from tests.fakes.azure_server import CPU_ONLY_SIZE, SUBSCRIPTION_ID, AzureFake, bundled_azure_rows  # noqa: E402

pytestmark = pytest.mark.slow  # `make test-all` runs the integration suite

OBSERVED = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
TWO_REGIONS = frozenset({"eastus", "westeurope"})


class FakeCred:
    """The credential of environment-notes §5: a token that the fake accepts."""

    def __init__(self, token: str = "fake-token") -> None:
        self.token = token

    def get_token(self, *scopes, **kwargs):
        return AccessToken(self.token, int(time.time()) + 3600)

    def get_token_info(self, *scopes, options=None):
        return AccessTokenInfo(self.token, int(time.time()) + 3600)


class NoCred:
    """What DefaultAzureCredential does when nothing is configured."""

    def get_token(self, *scopes, **kwargs):
        raise ClientAuthenticationError("DefaultAzureCredential failed to retrieve a token from the included credentials.")

    def get_token_info(self, *scopes, options=None):
        raise ClientAuthenticationError("DefaultAzureCredential failed to retrieve a token from the included credentials.")


# most tests need a few regions only: the fake then lists a short resource SKU list (the SDK's model
# deserialisation of the whole list is what costs time); the referee serves every bundled region
FEW_REGIONS = {"eastus", "westeurope", "westus2", "japaneast", "australiacentral"}


@pytest.fixture
def fake():
    with AzureFake(regions=set(FEW_REGIONS)) as server:
        yield server


@pytest.fixture
def full_fake():
    with AzureFake() as server:
        yield server


def source(fake: AzureFake, sleeps: list[float] | None = None, **kwargs) -> AzureSource:
    options = dict(credential=FakeCred(), subscription_id=SUBSCRIPTION_ID, prices_url=fake.url, arm_url=fake.url,
                   enforce_https=False, retry_total=0, sleep=(sleeps.append if sleeps is not None else lambda s: None))
    options.update(kwargs)
    return AzureSource(**options)


def fetch(fake: AzureFake, regions=None, accelerators=None, **kwargs):
    request = FetchRequest(regions=regions, accelerators=accelerators, observed_at=OBSERVED)
    return source(fake, **kwargs).fetch(request)


def keyed(rows) -> dict[tuple, dict]:
    return {tuple(str(r[k]) for k in KEY_COLUMNS): r for r in rows}


def test_referee_every_bundled_azure_row_comes_back_with_its_price(full_fake):
    fake = full_fake
    result = fetch(fake)
    got, want = keyed(result.rows), keyed(fake.served_rows())
    assert len(want) == len(bundled_azure_rows())  # every bundled Azure row is served

    assert result.skipped == ()
    assert len(got) == len(result.rows)  # one row per key
    assert set(got) == set(want)
    for key, row in got.items():
        expected = want[key]
        assert row["price_usd_per_hour"] == pytest.approx(float(expected["price_usd_per_hour"]), rel=1e-6), key
        assert row["accelerator"] == expected["accelerator"]
        assert row["accelerator_count"] == int(expected["accelerator_count"])
        assert row["vcpus"] == float(expected["vcpus"]) and row["memory_gib"] == float(expected["memory_gib"])
        assert row["continent"] == expected["continent"]
        if row["market"] == "on_demand":
            assert (row["interruption_band"], row["interruptions_per_hour"]) == ("none", 0.0)
        else:  # no public Azure eviction data is served by default: unknown
            assert (row["interruption_band"], row["interruptions_per_hour"]) == ("", "")
        assert row["observed_at"] == "2026-12-01T12:00:00Z" and row["source"] == "azure-retail-prices"
    assert CPU_ONLY_SIZE not in {r["instance_type"] for r in result.rows}
    assert result.signals.get("placement_scores_unavailable") == 1  # the fake's default 404
    # the rows are valid offers of the schema
    raw = pd.DataFrame([{k: str(v) for k, v in r.items()} for r in result.rows]).astype("string")
    table = parse_offers(raw, "azure refresh", continent_of=lambda c, r: (x.value if (x := continent_of(c, r)) else None))
    assert len(table) == len(result.rows)


def test_refresh_catalog_validates_and_stores_the_azure_offers(fake, tmp_path):
    from geotrain.pricing.live.refresh import refresh_catalog
    from geotrain.pricing.snapshot import SnapshotStore

    outcome = refresh_catalog([source(fake)], store=SnapshotStore(tmp_path),
                              request=FetchRequest(regions=TWO_REGIONS, observed_at=OBSERVED))
    want = {k: r for k, r in keyed(fake.served_rows()).items() if r["region"] in TWO_REGIONS}
    assert outcome.offers == len(want) and outcome.failed == ()
    table = outcome.snapshot.table
    fresh = table[(table["cloud"] == "azure") & table["region"].isin(TWO_REGIONS)]
    assert len(fresh) == len(want)
    for row in fresh.itertuples(index=False):
        expected = want[(row.cloud, row.region, row.zone, row.instance_type, row.market)]
        assert row.price_usd_per_hour == pytest.approx(float(expected["price_usd_per_hour"]), rel=1e-6)
        assert row.source == "azure-retail-prices"


def test_series_table_names_every_bundled_size_as_the_bundled_data_does():
    for row in bundled_azure_rows():
        assert accelerator_of(row["instance_type"]) == row["accelerator"], row["instance_type"]
    for size in ("Standard_NV6ads_A10_v5", "Standard_NV12ads_A10_v5", "Standard_B4ms", "Standard_NV4as_v4",
                 "Standard_NC6s_v2",
                 "Standard_ND96is_MI300X_v5", "Standard_NG8ads_V620_v1"):
        assert accelerator_of(size) is None, size


def test_pagination_follows_next_page_link_and_sku_next_link(fake):
    fake.regions = {"eastus", "westus2"}  # a short resource SKU list, so that pages of 4 stay few
    whole = fetch(fake, regions=frozenset({"eastus"}))
    fake.page_size, fake.sku_page_size = 7, 4
    fake.requests.clear()
    paged = fetch(fake, regions=frozenset({"eastus"}))

    assert keyed(paged.rows) == keyed(whole.rows) and len(paged.rows) == len(whole.rows) > 0
    skips = [q.get("$skip") for _, path, q in fake.requests if path == "/api/retail/prices"]
    assert skips[0] is None and skips[1:] == [str(7 * i) for i in range(1, len(skips))]
    assert paged.calls["retail_prices.get"] == len(skips) > whole.calls["retail_prices.get"]
    assert paged.calls["resource_skus.list"] == fake.calls()["skus"] > 1


def test_throttling_is_retried_with_backoff_and_recovers(fake):
    fake.throttle = {"prices": 2, "skus": 1, "graph": 1}
    sleeps: list[float] = []
    result = fetch(fake, regions=TWO_REGIONS, sleeps=sleeps)

    want = {k for k, r in keyed(fake.served_rows()).items() if r["region"] in TWO_REGIONS}
    assert set(keyed(result.rows)) == want and result.skipped == ()
    assert sorted(sleeps) == [0.5, 0.5, 0.5, 1.0]  # skus 1, prices 2 (doubling), graph 1
    assert "eviction_rates_unavailable" not in result.signals


def test_throttling_that_does_not_stop_skips_the_region(fake):
    fake.throttle = {"prices": 100}
    result = fetch(fake, regions=frozenset({"eastus"}), backoff_attempts=3)
    assert result.rows == ()
    assert result.skipped == (Skipped("eastus", EVERY_OFFER,
                                      "Retail Prices API still throttling after 3 tries; try again later"),)


def test_resource_skus_that_cannot_be_listed_skip_every_region_asked(fake):
    fake.throttle = {"skus": 100}
    result = fetch(fake, regions=TWO_REGIONS, backoff_attempts=2)
    assert result.rows == () and [s.region for s in result.skipped] == sorted(TWO_REGIONS)
    assert all("resource SKUs could not be listed (HTTP 429" in s.why for s in result.skipped)
    assert fake.calls()["prices"] == 0


def test_a_failing_region_is_skipped_with_the_reason_and_the_others_are_kept(fake):
    fake.failing_regions = {"westeurope"}
    result = fetch(fake, regions=TWO_REGIONS)

    assert [s.region for s in result.skipped] == ["westeurope"]
    assert "HTTP 503" in result.skipped[0].why
    assert {r["region"] for r in result.rows} == {"eastus"}
    assert set(keyed(result.rows)) == {k for k, r in keyed(fake.served_rows()).items() if r["region"] == "eastus"}


def test_missing_subscription_names_the_variable_and_az_login(fake):
    src = source(fake, subscription_id=None, environ={})
    with pytest.raises(CredentialsError) as caught:
        src.fetch(FetchRequest(regions=TWO_REGIONS))
    assert "AZURE_SUBSCRIPTION_ID" in str(caught.value) and "az login" in str(caught.value)
    assert fake.requests == []


def test_missing_credentials_name_az_login(fake):
    with pytest.raises(CredentialsError) as caught:
        fetch(fake, regions=TWO_REGIONS, credential=NoCred())
    assert "az login" in str(caught.value) and "AZURE_SUBSCRIPTION_ID" in str(caught.value)


def test_rejected_token_is_a_credentials_error(fake):
    with pytest.raises(CredentialsError) as caught:
        fetch(fake, regions=TWO_REGIONS, credential=FakeCred("expired-token"))
    assert "az login" in str(caught.value)
    assert "expired-token" not in str(caught.value)


@pytest.mark.parametrize("endpoint, words", [("prices", "Items"), ("skus", "resource SKUs"),
                                             ("graph", "data list"), ("placement", "placementScores")])
def test_an_answer_of_unexpected_shape_is_a_catalog_error(fake, endpoint, words):
    fake.bad_shape = {endpoint}
    if endpoint == "placement":
        fake.placement_scores = {}
    with pytest.raises(CatalogError) as caught:
        fetch(fake, regions=TWO_REGIONS)
    assert words in str(caught.value) and "Azure" in str(caught.value)


def test_regions_and_accelerators_filters(fake):
    result = fetch(fake, regions=TWO_REGIONS, accelerators=frozenset({"T4", "A100-80GB"}))

    want = {k for k, r in keyed(fake.served_rows()).items()
            if r["region"] in TWO_REGIONS and r["accelerator"] in {"T4", "A100-80GB"}}
    assert set(keyed(result.rows)) == want and want
    asked = {q["$filter"].split("armRegionName eq '")[1].split("'")[0]
             for _, path, q in fake.requests if path == "/api/retail/prices" and "$filter" in q}
    assert asked == set(TWO_REGIONS)


def test_a_fake_serving_a_subset_of_regions_gives_exactly_those(fake):
    fake.regions = {"eastus", "japaneast"}
    result = fetch(fake)  # every region the subscription's resource SKUs list
    assert {r["region"] for r in result.rows} == {"eastus", "japaneast"}
    assert set(keyed(result.rows)) == set(keyed(fake.served_rows()))


def test_a_region_without_gpu_sizes_is_skipped_with_the_reason(fake):
    fake.regions = {"eastus"}
    result = fetch(fake, regions=frozenset({"eastus", "westeurope"}))
    assert [s.region for s in result.skipped] == ["westeurope"]
    assert "no GPU VM size" in result.skipped[0].why


def test_progress_is_reported_per_region_and_step(fake):
    seen: list[tuple[str, str, str]] = []
    source(fake).fetch(FetchRequest(regions=TWO_REGIONS, observed_at=OBSERVED), lambda *call: seen.append(call))

    assert seen[0] == ("azure", "", "resource SKUs")
    assert ("azure", "eastus", "spot and on-demand prices") in seen
    assert ("azure", "westeurope", "spot and on-demand prices") in seen
    assert ("azure", "", "eviction rates") in seen
    assert all(cloud == "azure" for cloud, _, _ in seen)


def test_restricted_sizes_are_left_out_where_restricted(fake):
    fake.zones = {"eastus": ["1", "2", "3"]}
    fake.restrictions = [("Standard_NC4as_T4_v3", "eastus", ()),  # the whole region
                         ("Standard_NC8as_T4_v3", "eastus", ("1", "2", "3")),  # every zone
                         ("Standard_NC16as_T4_v3", "eastus", ("1",))]  # one zone: the region stays usable
    result = fetch(fake, regions=TWO_REGIONS)

    east = {r["instance_type"] for r in result.rows if r["region"] == "eastus"}
    assert "Standard_NC4as_T4_v3" not in east and "Standard_NC8as_T4_v3" not in east
    assert "Standard_NC16as_T4_v3" in east
    west = {r["instance_type"] for r in result.rows if r["region"] == "westeurope"}
    assert "Standard_NC4as_T4_v3" in west
    assert result.signals["restricted"] == 2 and result.signals["zone_restricted"] == 1


def test_eviction_rates_set_band_and_rate_of_spot_rows(fake):
    # a clearly-labelled SAMPLE (no public Azure eviction data exists in ../shared/data): made-up bands
    fake.eviction_rows = [{"skuName": "standard_nc4as_t4_v3", "location": "eastus", "spotEvictionRate": "0-5"},
                          {"skuName": "Standard_NC8as_T4_v3", "location": "eastus", "spotEvictionRate": "20+"},
                          {"skuName": "Standard_NC8as_T4_v3", "location": "japaneast", "spotEvictionRate": "5-10"}]
    result = fetch(fake, regions=TWO_REGIONS)

    rows = keyed(result.rows)
    low = rows[("azure", "eastus", "", "Standard_NC4as_T4_v3", "spot")]
    high = rows[("azure", "eastus", "", "Standard_NC8as_T4_v3", "spot")]
    assert low["interruption_band"] == "<5%"
    assert low["interruptions_per_hour"] == pytest.approx(interruptions_per_hour_for_band("<5%"))
    assert high["interruption_band"] == ">20%"
    assert rows[("azure", "eastus", "", "Standard_NC4as_T4_v3", "on_demand")]["interruption_band"] == "none"
    assert rows[("azure", "westeurope", "", "Standard_NC8as_T4_v3", "spot")]["interruption_band"] == ""
    assert result.signals["interruption_band"] == 2


def test_eviction_parser_on_a_sample_row():
    sample = [{"skuName": "Standard_NC4as_T4_v3", "location": "EastUS", "spotEvictionRate": "10-15"}]  # SAMPLE
    assert parse_eviction_rows(sample) == {("eastus", "standard_nc4as_t4_v3"): "10-15%"}
    assert [band_of_eviction_rate(x) for x in ("0-5", "5-10", "10-15", "15-20", "20+")] == \
        ["<5%", "5-10%", "10-15%", "15-20%", ">20%"]
    with pytest.raises(CatalogError, match="30-40"):
        band_of_eviction_rate("30-40")
    with pytest.raises(CatalogError, match="spotEvictionRate"):
        parse_eviction_rows([{"skuName": "x", "location": "eastus"}])


def test_refused_resource_graph_means_no_interruption_signal_not_an_error(fake):
    fake.forbidden = {"graph"}
    result = fetch(fake, regions=TWO_REGIONS)
    assert result.rows and result.signals["eviction_rates_unavailable"] == 1


def test_placement_scores_where_the_subscription_has_them(fake):
    # SAMPLE scores (the default fake answers 404, like a subscription without the feature)
    fake.placement_scores = {("Standard_NC4as_T4_v3", "eastus"): "High",
                             ("Standard_NC8as_T4_v3", "eastus"): "Medium"}
    result = fetch(fake, regions=TWO_REGIONS, placement_count=4)

    rows = keyed(result.rows)
    assert rows[("azure", "eastus", "", "Standard_NC4as_T4_v3", "spot")]["capacity_hint"] == 4
    assert rows[("azure", "eastus", "", "Standard_NC8as_T4_v3", "spot")]["capacity_hint"] == ""
    assert rows[("azure", "eastus", "", "Standard_NC4as_T4_v3", "on_demand")]["capacity_hint"] == ""
    assert all(r["availability"] == "" for r in result.rows)
    assert result.signals["capacity_hint"] == 1 and result.signals["placement_high"] == 1
    assert result.signals["placement_medium"] == 1 and "placement_scores_unavailable" not in result.signals



def test_placement_scores_are_asked_for_the_gang_a_refresh_names(fake):
    fake.placement_scores = {("Standard_NC4as_T4_v3", "eastus"): "High"}
    request = FetchRequest(regions=TWO_REGIONS, observed_at=OBSERVED, gang_nodes=6)
    rows = keyed(source(fake, placement_count=4).fetch(request).rows)
    assert rows[("azure", "eastus", "", "Standard_NC4as_T4_v3", "spot")]["capacity_hint"] == 6

def test_placement_scores_refused_is_counted_not_an_error(fake):
    fake.placement_scores = {}
    fake.forbidden = {"placement"}
    result = fetch(fake, regions=TWO_REGIONS)
    assert result.rows and result.signals["placement_scores_unavailable"] == 1
    assert result.calls["spot_placement_scores.generate"] == 1  # the first refusal stops asking


def test_check_ok_against_the_fake(fake):
    report = source(fake).check()
    assert report.ok and report.identity == SUBSCRIPTION_ID and report.missing == ()


def test_check_without_credentials_says_what_to_do(fake):
    report = source(fake, subscription_id=None, environ={}).check()
    assert not report.ok and "AZURE_SUBSCRIPTION_ID" in report.message and "az login" in report.message
    report = source(fake, credential=NoCred()).check()
    assert not report.ok and "az login" in report.message


def test_check_lists_refused_permissions(fake):
    fake.forbidden = {"skus"}
    report = source(fake).check()
    assert not report.ok and report.missing == ("Microsoft.Compute/skus/read",)
    fake.forbidden = {"graph"}
    report = source(fake).check()
    assert report.ok and report.missing == ("Microsoft.ResourceGraph/resources/read",)


def test_from_environment_without_a_subscription_is_not_ready(monkeypatch):
    monkeypatch.delenv("AZURE_SUBSCRIPTION_ID", raising=False)
    report = AzureSource.from_environment().check()  # fails before any network call
    assert not report.ok and "AZURE_SUBSCRIPTION_ID" in report.message

"""The GCP price source against a local fake of the Cloud Billing Catalog and Compute Engine: the real
google-cloud-billing (REST) and google-cloud-compute clients, pointed at 127.0.0.1."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from datetime import datetime, timezone

import pytest
from google.auth.credentials import AnonymousCredentials

from geotrain.errors import CatalogError, CredentialsError, ProviderError, ThrottledError
from geotrain.pricing.live.base import EVERY_OFFER, FetchRequest, Skipped
from geotrain.pricing.live.gcp import GcpClients, GcpSource
from geotrain.pricing.live.refresh import refresh_catalog
from geotrain.pricing.schema import KEY_COLUMNS
from geotrain.pricing.snapshot import SnapshotStore
from tests.fakes.gcp import ENDPOINTS, PROJECT, GcpFake

pytestmark = pytest.mark.slow  # `make test-all` runs the integration suite

OBSERVED = datetime(2026, 8, 1, 12, 0, tzinfo=timezone.utc)
FEW = {"us-central1", "europe-west4", "asia-east1"}  # N1 zones, a2, a3 (zonal spot in us-central1), g2


@pytest.fixture(scope="module")
def server() -> Iterator[GcpFake]:
    with GcpFake() as fake:
        yield fake


@pytest.fixture
def fake(server: GcpFake) -> Iterator[GcpFake]:
    """The module's server with its knobs reset for each test."""
    server.page_size, server.regions = 200, None
    server.failing_regions, server.throttle, server.bad_shape, server.forbidden = set(), {}, set(), set()
    server.requests.clear()
    yield server


def source(fake: GcpFake, **kw) -> GcpSource:  # noqa: ANN003
    clients = GcpClients.build(AnonymousCredentials(), api_endpoint=fake.url)
    kw.setdefault("sleep", lambda s: None)
    return GcpSource(PROJECT, clients=clients, **kw)


def key(row) -> tuple:  # noqa: ANN001
    return tuple(str(row[k]) for k in KEY_COLUMNS)


def referee(fake: GcpFake, rows, expected=None) -> None:  # noqa: ANN001
    """The rows equal the bundled rows the fake serves: same keys, specs, prices within 1e-6 relative
    (N1 offers of more than one GPU: within anycloud's own rounding, see GcpFake.expected_deviation_usd)."""
    expected = {key(r): r for r in (fake.served_rows() if expected is None else expected)}
    got = {key(r): r for r in rows}
    assert len(got) == len(rows), "one row per key"
    assert sorted(set(expected) - set(got)) == [] and sorted(set(got) - set(expected)) == []
    for k, want in expected.items():
        row = got[k]
        price, bundled = row["price_usd_per_hour"], float(want["price_usd_per_hour"])
        allowed = fake.expected_deviation_usd(want) + 1e-6 * bundled
        assert abs(price - bundled) <= allowed, (k, price, bundled)
        assert (row["accelerator"], int(row["accelerator_count"])) == (want["accelerator"],
                                                                      int(want["accelerator_count"])), k
        assert (float(row["vcpus"]), float(row["memory_gib"])) == (float(want["vcpus"]), float(want["memory_gib"])), k
        assert row["capacity_hint"] == "" and row["availability"] == "", k  # GCP publishes neither
        if row["market"] == "on_demand":
            assert (row["interruption_band"], row["interruptions_per_hour"]) == ("none", 0.0), k
        else:
            assert (row["interruption_band"], row["interruptions_per_hour"]) == ("", ""), k
        assert row["observed_at"] == "2026-08-01T12:00:00Z" and row["source"] == "gcp-cloud-billing-catalog"


def test_referee_every_bundled_gcp_offer(fake: GcpFake) -> None:
    result = source(fake).fetch(FetchRequest(observed_at=OBSERVED))
    assert result.cloud == "gcp" and result.skipped == ()
    assert len(result.rows) == len(fake.served_rows()) == 1143
    referee(fake, result.rows)
    # exact where the bundled data is: every offer but the N1 ones of 2+ GPUs within 1e-6 relative
    bundled = {key(r): r for r in fake.served_rows()}
    exact = [r for r in result.rows if fake.expected_deviation_usd(bundled[key(r)]) == 0]
    assert len(exact) == 751  # 567 a2/a3/g2 rows and 184 N1 1-GPU rows
    assert all(abs(r["price_usd_per_hour"] - float(bundled[key(r)]["price_usd_per_hour"]))
               <= 1e-6 * float(bundled[key(r)]["price_usd_per_hour"]) for r in exact)
    assert result.signals == {"capacity_hint": 0, "interruption_band": 0, "availability": 0}
    assert result.calls == {"cloudbilling.services.list": 1, "cloudbilling.services.skus.list": 4,
                            "compute.zones.list": 1, "compute.machineTypes.list": 1,
                            "compute.acceleratorTypes.list": 1}


def test_names_and_zone_conventions_match_the_bundled_rows(fake: GcpFake) -> None:
    fake.regions = {"us-central1"}
    rows = source(fake).fetch(FetchRequest(observed_at=OBSERVED)).rows
    names = {(r["zone"], r["instance_type"], r["market"]) for r in rows}
    assert ("us-central1-c", "n1-standard-8+V100", "spot") in names
    assert ("us-central1-c", "n1-standard-64+8xV100", "on_demand") in names
    assert ("", "a2-megagpu-16g", "spot") in names  # GPU-bundled types: region-wide
    assert ("", "a3-highgpu-1g", "on_demand") in names
    assert ("us-central1-a", "a3-highgpu-1g", "spot") in names  # ...except where the bundled data is per zone
    assert ("", "a3-highgpu-1g", "spot") not in names
    assert not any(r["instance_type"].startswith(("e2-", "n1-standard-4")) for r in rows)  # CPU-only decoys
    referee(fake, rows)


def test_refresh_through_the_catalog_replaces_the_bundled_gcp_rows(fake: GcpFake) -> None:
    fake.regions = set(FEW)
    store = SnapshotStore()
    before = store.current()
    outcome = refresh_catalog([source(fake)], store=store, request=FetchRequest(observed_at=OBSERVED))
    assert outcome.failed == () and outcome.unmapped == ()
    assert outcome.offers == len(fake.served_rows())
    assert len(outcome.snapshot) == len(before)  # every refreshed offer replaced the bundled one of its key
    table = outcome.snapshot.table
    mine = table[(table["cloud"] == "gcp") & table["region"].isin(FEW)]
    gpu = mine[mine["accelerator"].notna() & (mine["accelerator"] != "")]
    assert set(gpu["source"]) == {"gcp-cloud-billing-catalog"}
    assert len(gpu) == len(fake.served_rows())
    # the refresh prices GPU machine types only: the bundled CPU-only rows stay, as they were, with their source
    cpu = mine[mine["accelerator"].isna() | (mine["accelerator"] == "")]
    assert len(cpu) > 0 and set(cpu["source"]) == {"anycloud-gcp-2026-05-20"}


def test_pagination_reads_every_page(fake: GcpFake) -> None:
    fake.regions, fake.page_size = set(FEW), 7
    result = source(fake).fetch(FetchRequest(observed_at=OBSERVED))
    referee(fake, result.rows)
    skus = len(fake.skus())
    zones = len(fake.zones())
    assert result.calls["cloudbilling.services.skus.list"] == -(-skus // 7) > 5
    assert result.calls["compute.zones.list"] == -(-zones // 7)
    assert result.calls["compute.machineTypes.list"] == result.calls["compute.acceleratorTypes.list"] == -(-zones // 7)
    tokens = [q.get("pageToken") for _, path, q in fake.requests if path.endswith("/skus")]
    assert tokens[0] is None and tokens[1:] == [str(7 * n) for n in range(1, len(tokens))]
    billing = [q for _, path, q in fake.requests if path.startswith("/v1/")]
    assert billing and all(q["$alt"] == "json;enum-encoding=int" for q in billing)  # the SDK's own, tolerated


def test_throttling_is_retried_with_backoff(fake: GcpFake) -> None:
    fake.regions = {"europe-west4"}
    fake.throttle = {"skus": 2, "zones": 1, "machineTypes": 1, "acceleratorTypes": 1}
    pauses: list[float] = []
    result = source(fake, sleep=pauses.append, first_pause_s=0.25).fetch(FetchRequest(observed_at=OBSERVED))
    referee(fake, result.rows)
    assert pauses == [0.25, 0.5, 0.25, 0.25, 0.25]
    assert result.calls["cloudbilling.services.skus.list"] == 3 and result.calls["compute.zones.list"] == 2
    assert fake.throttle == {"skus": 0, "zones": 0, "machineTypes": 0, "acceleratorTypes": 0}


def test_throttling_that_persists_is_a_throttled_error(fake: GcpFake) -> None:
    fake.regions, fake.throttle = {"europe-west4"}, {"services": 99}
    pauses: list[float] = []
    with pytest.raises(ThrottledError, match="cloudbilling.services.list.*after 3 tries"):
        source(fake, sleep=pauses.append, attempts=3).fetch(FetchRequest())
    assert len(pauses) == 2


def test_a_failing_region_is_skipped_with_the_reason(fake: GcpFake) -> None:
    fake.regions, fake.failing_regions = set(FEW), {"europe-west4"}
    result = source(fake).fetch(FetchRequest(observed_at=OBSERVED))
    assert [s.region for s in result.skipped] == ["europe-west4"]
    assert "UNREACHABLE" in result.skipped[0].why and "503" in result.skipped[0].why
    assert {r["region"] for r in result.rows} == FEW - {"europe-west4"}
    referee(fake, result.rows, [r for r in fake.served_rows() if r["region"] != "europe-west4"])


def test_missing_credentials_name_what_to_set(fake: GcpFake, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # noqa: ANN001
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-such-key.json"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    gcp = GcpSource.from_environment()  # reads nothing yet
    with pytest.raises(CredentialsError) as caught:
        gcp.fetch(FetchRequest())
    message = str(caught.value)
    assert "GOOGLE_APPLICATION_CREDENTIALS" in message and "gcloud auth application-default login" in message
    report = gcp.check()
    assert not report.ok and report.identity == "" and "GOOGLE_APPLICATION_CREDENTIALS" in report.message


def test_credentials_without_a_project_name_the_project_setting(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # noqa: ANN001
    key_file = tmp_path / "adc.json"
    key_file.write_text(json.dumps({"type": "authorized_user", "client_id": "id", "client_secret": "s",
                                    "refresh_token": "r"}))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key_file))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    for name in ("GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT", "GCLOUD_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(CredentialsError, match="GOOGLE_CLOUD_PROJECT"):
        GcpSource.from_environment().fetch(FetchRequest())


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_an_answer_of_unexpected_shape_is_a_catalog_error(fake: GcpFake, endpoint: str) -> None:
    fake.regions, fake.bad_shape = {"europe-west4"}, {endpoint}
    with pytest.raises(CatalogError, match="shape geotrain does not understand"):
        source(fake).fetch(FetchRequest())


def test_a_price_in_an_unknown_unit_is_a_catalog_error(fake: GcpFake, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.regions = {"europe-west4"}
    served = fake.skus

    def skus():  # noqa: ANN202
        out = served()
        for sku in out:
            if "Instance Ram" in sku["description"]:
                sku["pricingInfo"][0]["pricingExpression"]["usageUnit"] = "MiBy.h"
        return out

    monkeypatch.setattr(fake, "skus", skus)
    with pytest.raises(CatalogError, match=r"priced per 'MiBy.h', geotrain expects 'GiBy.h'"):
        source(fake).fetch(FetchRequest())


def test_regions_filter(fake: GcpFake) -> None:
    result = source(fake).fetch(FetchRequest(regions=frozenset({"us-east1", "asia-northeast1", "mars-north1"}),
                                             observed_at=OBSERVED))
    assert {r["region"] for r in result.rows} == {"us-east1", "asia-northeast1"}
    assert result.skipped == (Skipped("mars-north1", EVERY_OFFER, f"not a Compute Engine region of project {PROJECT}"),)
    referee(fake, result.rows, [r for r in fake.served_rows() if r["region"] in {"us-east1", "asia-northeast1"}])


def test_fake_region_subset(fake: GcpFake) -> None:
    fake.regions = {"us-west1"}
    result = source(fake).fetch(FetchRequest(observed_at=OBSERVED))
    assert {r["region"] for r in result.rows} == {"us-west1"}
    referee(fake, result.rows)


def test_accelerators_filter(fake: GcpFake) -> None:
    fake.regions = set(FEW)
    wanted = frozenset({"T4", "H100"})
    result = source(fake).fetch(FetchRequest(accelerators=wanted, observed_at=OBSERVED))
    assert {r["accelerator"] for r in result.rows} == set(wanted)
    referee(fake, result.rows, [r for r in fake.served_rows() if r["accelerator"] in wanted])
    assert any(r["instance_type"] == "a3-megagpu-8g" for r in result.rows)  # H100 "Mega" is an H100 too


def test_progress_is_reported(fake: GcpFake) -> None:
    fake.regions = set(FEW)
    calls: list[tuple[str, str, str]] = []
    source(fake).fetch(FetchRequest(), progress=lambda *a: calls.append(a))
    assert calls[:4] == [("gcp", "global", "Compute Engine SKUs"), ("gcp", "global", "zones"),
                         ("gcp", "global", "machine types"), ("gcp", "global", "accelerator types")]
    assert calls[4:] == [("gcp", region, "offers") for region in sorted(FEW)]


def test_check_ok_against_the_fake(fake: GcpFake) -> None:
    report = source(fake).check()
    assert report.ok and report.identity == PROJECT and report.missing == ()
    assert "readable" in report.message


@pytest.mark.parametrize(("endpoint", "operation"), [("zones", "compute.zones.list"),
                                                     ("acceleratorTypes", "compute.acceleratorTypes.list"),
                                                     ("services", "cloudbilling.services.list")])
def test_check_lists_a_refused_permission(fake: GcpFake, endpoint: str, operation: str) -> None:
    fake.forbidden = {endpoint}
    report = source(fake).check()
    assert not report.ok and report.missing == (operation,)
    assert operation in report.message and "roles/compute.viewer" in report.message


def test_fetch_with_a_refused_permission_is_a_credentials_error(fake: GcpFake) -> None:
    fake.regions, fake.forbidden = {"europe-west4"}, {"machineTypes"}
    with pytest.raises(CredentialsError, match="compute.machineTypes.list"):
        source(fake).fetch(FetchRequest())


def test_an_endpoint_that_does_not_answer_is_one_line_not_a_traceback() -> None:
    """No server on the port: the REST transport's own connection error becomes a ProviderError of one
    line (the refresh then goes on with the other clouds)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    clients = GcpClients.build(AnonymousCredentials(), api_endpoint=closed)
    with pytest.raises(ProviderError) as info:
        GcpSource(PROJECT, clients=clients, sleep=lambda s: None).fetch(FetchRequest(regions=frozenset(FEW)))
    assert "got no answer (ConnectionError" in str(info.value) and "\n" not in str(info.value)

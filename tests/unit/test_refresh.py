"""catalog refresh: what the sources answer is validated and merged into the current snapshot; a
refresh that fails in any way stores nothing and leaves the current snapshot as it was."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from geotrain.clouds.retry import with_backoff
from geotrain.errors import CatalogError, CredentialsError, ProviderError
from geotrain.pricing.catalog import import_into_catalog
from geotrain.pricing.live.base import SPOT_PRICES, FetchRequest, Skipped, SourceResult, offer_row
from geotrain.pricing.live.refresh import refresh_catalog
from geotrain.pricing.snapshot import OfferFilter, SnapshotStore, bundled_snapshot

BUNDLED_T4 = dict(cloud="aws", region="us-east-1", zone="use1-az1", instance_type="g4dn.xlarge", market="spot")


def row(**over):  # noqa: ANN003, ANN201
    base = dict(BUNDLED_T4, accelerator="T4", accelerator_count=1, vcpus=4, memory_gib=16, price_usd_per_hour=0.1234,
                interruption_band="<5%", interruptions_per_hour=0.0017, source="test-source")
    base.update(over)
    return offer_row(**base)


@dataclass
class ListSource:
    """A source that answers what it is given (the adapters' own tests point the real SDKs at fakes)."""

    cloud: str
    rows: list = field(default_factory=list)
    error: BaseException | None = None
    calls: int = 0

    def fetch(self, request, progress=None):  # noqa: ANN001, ANN201
        self.calls += 1
        if self.error is not None:
            raise self.error
        return SourceResult(self.cloud, tuple(self.rows), skipped=(Skipped("us-west-9", SPOT_PRICES, "throttled"),))

    def check(self):  # noqa: ANN201
        raise NotImplementedError


def price_of(snapshot, **key) -> float:  # noqa: ANN001
    table = snapshot.table
    mask = True
    for k, v in key.items():
        mask = mask & (table[k] == v)
    return float(table[mask]["price_usd_per_hour"].iloc[0])


def test_refreshed_offers_replace_their_keys_and_everything_else_stays(tmp_path):
    store = SnapshotStore()
    mine = tmp_path / "mine.csv"
    mine.write_text("cloud,region,instance_type,vcpus,memory_gib,market,price_usd_per_hour,accelerator,"
                    "accelerator_count,continent\nlambda,us-east-1,gpu_1x_a10,30,200,on_demand,0.75,A10,1,north_america\n")
    import_into_catalog(mine, store=store)
    before = store.current()
    old = price_of(before, **BUNDLED_T4)
    outcome = refresh_catalog([ListSource("aws", [row()]), ListSource("gcp", error=CredentialsError("set X"))],
                              store=store)
    now = store.current()
    assert now.snapshot_id == outcome.snapshot.snapshot_id != before.snapshot_id
    assert outcome.parent_id == before.snapshot_id and outcome.offers == 1
    assert price_of(now, **BUNDLED_T4) == 0.1234 != old
    assert len(now) == len(before)  # one offer replaced, none dropped
    assert len(now.select(OfferFilter(clouds=("lambda",)))) == 1  # the user's own import stays
    assert outcome.failed == (("gcp", "set X"),)
    assert outcome.results[0].skipped == (Skipped("us-west-9", SPOT_PRICES, "throttled"),)
    fresh = now.table[now.table["source"] == "test-source"]
    assert fresh["observed_at"].iloc[0] > bundled_snapshot().observed_range[1]  # stamped with the refresh time


@pytest.mark.parametrize("sources, error, words", [
    ([ListSource("aws", error=CredentialsError("set AWS_PROFILE"))], ProviderError, "set AWS_PROFILE"),
    ([ListSource("aws", [row(price_usd_per_hour="abc")])], CatalogError, "price_usd_per_hour"),
    ([ListSource("aws", [row(), row()])], CatalogError, "same key"),
    ([ListSource("aws", [row(region="mars-north-1")])], ProviderError, "mars-north-1"),
    ([ListSource("aws", [row()]), ListSource("gcp", error=KeyboardInterrupt())], KeyboardInterrupt, ""),
])
def test_a_failed_refresh_stores_nothing_and_the_current_snapshot_stays(sources, error, words):
    store = SnapshotStore()
    before_id, stored = store.current_id(), store.ids()
    with pytest.raises(error) as info:
        refresh_catalog(sources, store=store)
    assert words in str(info.value)
    assert store.current_id() == before_id and store.ids() == stored


def test_a_region_off_the_map_is_left_out_and_named():
    store = SnapshotStore()
    outcome = refresh_catalog([ListSource("aws", [row(), row(region="mars-north-1", zone="")])], store=store)
    assert outcome.unmapped == (("aws", "mars-north-1"),) and outcome.offers == 1


def test_backoff_retries_throttling_only_and_gives_up_after_its_attempts():
    pauses, answers = [], iter([RuntimeError("Throttling"), RuntimeError("Throttling"), "ok"])

    def call():  # noqa: ANN202
        value = next(answers)
        if isinstance(value, Exception):
            raise value
        return value

    throttled = lambda e: "Throttling" in str(e)  # noqa: E731
    assert with_backoff(call, throttled=throttled, sleep=pauses.append, first_pause_s=0.5) == "ok"
    assert pauses == [0.5, 1.0]
    with pytest.raises(RuntimeError, match="Throttling"):
        with_backoff(lambda: (_ for _ in ()).throw(RuntimeError("Throttling")), throttled=throttled, attempts=3,
                     sleep=pauses.append)
    with pytest.raises(ValueError):
        with_backoff(lambda: (_ for _ in ()).throw(ValueError("bad")), throttled=throttled, sleep=pauses.append)
    assert len(pauses) == 4


def test_fetch_request_defaults():
    assert FetchRequest().regions is None and FetchRequest().accelerators is None

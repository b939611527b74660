from __future__ import annotations

import os

import pytest

from geotrain.errors import CatalogError, NotFoundError
from geotrain.files import atomic_write_bytes
from geotrain.pricing.snapshot import BUNDLED, OfferFilter, PriceSnapshot, SnapshotStore, bundled_snapshot
from tests.helpers import offer_table

ROWS = [
    dict(cloud="aws", region="us-east-1", zone="use1-az1", instance_type="g4dn.xlarge", market="spot",
         price_usd_per_hour=0.1578),
    dict(cloud="aws", region="us-east-1", zone="use1-az1", instance_type="g4dn.xlarge", market="on_demand",
         price_usd_per_hour=0.526),
    dict(cloud="azure", region="westeurope", instance_type="Standard_NC4as_T4_v3", market="spot",
         price_usd_per_hour=0.0631),
]


def test_id_is_stable_under_row_order_and_changes_with_content():
    a = PriceSnapshot.from_table(offer_table(*ROWS), label="a")
    b = PriceSnapshot.from_table(offer_table(*reversed(ROWS)), label="b")
    assert a.snapshot_id == b.snapshot_id
    assert a.snapshot_id.startswith("snap-") and len(a.snapshot_id) == 5 + 16
    changed = [dict(ROWS[0], price_usd_per_hour=0.1579), *ROWS[1:]]
    assert PriceSnapshot.from_table(offer_table(*changed), label="c").snapshot_id != a.snapshot_id


def test_table_is_a_copy():
    snap = PriceSnapshot.from_table(offer_table(*ROWS), label="a")
    table = snap.table
    table.loc[0, "price_usd_per_hour"] = 99.0
    assert snap.table["price_usd_per_hour"].max() < 1


def test_store_round_trip_and_current(tmp_path):
    store = SnapshotStore(tmp_path / "snaps")
    assert store.current_id() == BUNDLED
    snap = PriceSnapshot.from_table(offer_table(*ROWS), label="mine")
    store.save(snap)
    again = store.load(snap.snapshot_id)
    assert again.snapshot_id == snap.snapshot_id and again.label == "mine"
    assert again.csv_bytes == snap.csv_bytes
    store.set_current(snap.snapshot_id)
    assert store.current().snapshot_id == snap.snapshot_id
    store.set_current("bundled")
    assert store.current().snapshot_id == bundled_snapshot().snapshot_id


def test_corrupt_stored_snapshot_is_detected(tmp_path):
    store = SnapshotStore(tmp_path)
    snap = PriceSnapshot.from_table(offer_table(*ROWS), label="mine")
    path = store.save(snap)
    path.write_bytes(path.read_bytes().replace(b"0.1578", b"0.0001"))
    with pytest.raises(CatalogError, match="corrupt"):
        store.load(snap.snapshot_id)


def test_unknown_snapshot_is_not_found(tmp_path):
    with pytest.raises(NotFoundError, match="snap-0000"):
        SnapshotStore(tmp_path).load("snap-0000")


def test_atomic_write_keeps_old_content_on_failure(tmp_path):
    target = tmp_path / "offers.csv"
    atomic_write_bytes(target, b"old")

    class Exploding(bytes):
        pass

    with pytest.raises(TypeError):
        atomic_write_bytes(target, "not bytes")  # type: ignore[arg-type]
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["offers.csv"]  # no temp file left behind


def test_atomic_write_gives_the_mode_of_a_plain_open_and_keeps_an_existing_one(tmp_path):
    old = os.umask(0o027)
    try:
        atomic_write_bytes(tmp_path / "plan.json", b"{}")
        assert (tmp_path / "plan.json").stat().st_mode & 0o777 == 0o640
        (tmp_path / "plan.json").chmod(0o604)
        atomic_write_bytes(tmp_path / "plan.json", b"{ }")
        assert (tmp_path / "plan.json").stat().st_mode & 0o777 == 0o604
    finally:
        os.umask(old)


def test_merge_replaces_same_key_and_keeps_the_rest():
    base = PriceSnapshot.from_table(offer_table(*ROWS), label="base")
    update = offer_table(dict(ROWS[0], price_usd_per_hour=0.2),
                         dict(cloud="gcp", region="us-central1", zone="us-central1-a",
                              instance_type="n1-standard-8+T4", market="spot", price_usd_per_hour=0.3049))
    merged = base.merged(update, label="merged")
    assert len(merged) == 4
    assert merged.parent_id == base.snapshot_id
    spot = merged.select(OfferFilter(clouds=("aws",), markets=("spot",)))
    assert spot["price_usd_per_hour"].tolist() == [0.2]


def test_filter_and_offers_boundary():
    snap = PriceSnapshot.from_table(offer_table(*ROWS), label="a")
    offers = snap.offers(OfferFilter(continents=("europe",)))
    assert len(offers) == 1
    offer = offers[0]
    assert offer.offer_id == "azure/westeurope/-/Standard_NC4as_T4_v3/spot"
    assert offer.location.zone == "" and offer.shape.accelerator == "T4"
    assert offer.price_usd_per_accelerator_hour == pytest.approx(0.0631)
    assert snap.select(OfferFilter(max_price_usd_per_hour=0.2))["price_usd_per_hour"].max() <= 0.2


def test_accelerator_filter_matches_variants():
    table = offer_table(
        dict(cloud="aws", region="us-east-1", zone="use1-az1", instance_type="p4d.24xlarge", market="spot",
             price_usd_per_hour=10, accelerator="A100", accelerator_count=8),
        dict(cloud="aws", region="us-east-1", zone="use1-az1", instance_type="p4de.24xlarge", market="spot",
             price_usd_per_hour=12, accelerator="A100-80GB", accelerator_count=8),
        dict(cloud="aws", region="us-east-1", zone="use1-az1", instance_type="g5.xlarge", market="spot",
             price_usd_per_hour=0.4, accelerator="A10G", accelerator_count=1),
    )
    snap = PriceSnapshot.from_table(table, label="a")
    assert set(snap.select(OfferFilter(accelerators=("a100",)))["instance_type"]) == {"p4d.24xlarge", "p4de.24xlarge"}
    assert set(snap.select(OfferFilter(accelerators=("A10",)))["instance_type"]) == set()

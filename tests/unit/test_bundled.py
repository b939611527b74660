"""The bundled snapshot: real offers, with provenance, of the three clouds in several continents."""

from __future__ import annotations

import csv

import pandas as pd
import pytest

from geotrain.pricing.bundled import data_bytes
from geotrain.pricing.snapshot import OfferFilter, bundled_snapshot


@pytest.fixture(scope="module")
def table():
    return bundled_snapshot().table


def test_covers_three_clouds_three_continents_both_markets(table):
    assert {"aws", "gcp", "azure"} <= set(table["cloud"])
    for cloud in ("aws", "gcp", "azure"):
        rows = table[table["cloud"] == cloud]
        assert {"spot", "on_demand"} <= set(rows["market"]), cloud
        assert rows["continent"].nunique() >= 3, cloud
    assert table["source"].str.len().gt(0).all()
    assert table["price_usd_per_hour"].gt(0).all()


def test_t4_spot_on_three_clouds_and_a100_in_europe():
    snap = bundled_snapshot()
    t4 = snap.select(OfferFilter(accelerators=("T4",), markets=("spot",)))
    assert {"aws", "gcp", "azure"} <= set(t4["cloud"])
    assert not snap.select(OfferFilter(accelerators=("A100",), continents=("europe",))).empty


def test_interruption_signal_is_consistent(table):
    on_demand = table[table["market"] == "on_demand"]
    assert (on_demand["interruption_band"] == "none").all()
    assert (on_demand["interruptions_per_hour"] == 0).all()
    spot_aws = table[(table["market"] == "spot") & (table["cloud"] == "aws")]
    assert spot_aws["interruptions_per_hour"].notna().mean() > 0.5  # Spot Advisor covers most of AWS
    known = table["interruptions_per_hour"].dropna()
    assert (known >= 0).all()


def test_every_region_is_in_the_region_map(table):
    regions = {(r["cloud"], r["region"]) for r in csv.DictReader(data_bytes("regions.csv").decode().splitlines())}
    assert set(zip(table["cloud"], table["region"], strict=True)) <= regions


def test_aws_spot_prices_match_the_public_source(table, shared_data):
    """Every AWS spot row from the SkyPilot catalog has exactly the source's price."""
    source = pd.read_csv(shared_data / "prices/skypilot-catalog-aws-gpu/aws_gpu_vms_skypilot_v8.csv")
    source = source.dropna(subset=["SpotPrice"])
    expected = {(r.Region, r.AvailabilityZone, r.InstanceType): r.SpotPrice for r in source.itertuples()}
    ours = table[(table["cloud"] == "aws") & (table["market"] == "spot") & table["zone"].isin({k[1] for k in expected})]
    assert len(ours) > 100
    for row in ours.itertuples():
        key = (row.region, row.zone, row.instance_type)
        if key in expected:
            assert row.price_usd_per_hour == pytest.approx(expected[key], abs=1e-9), key

"""GCP SKUs are matched by the descriptions the Cloud Billing Catalog publishes: real catalogue rows
(``../shared/data/skynomad``: live SKUs of 2025-10-23), the spellings public parsers and their
fixtures show (cited in ``geotrain.pricing.live.gcp.descriptions``), and the look-alike SKUs that
must not be read as a VM's price (sole tenancy, DWS, reservations, commitments)."""

from __future__ import annotations

import json

import pytest
from google.cloud import compute_v1

from geotrain.pricing.live.gcp.descriptions import GPU_SKUS, SERIES_SKUS, gpu_description, series_description
from geotrain.pricing.live.gcp.skus import (
    ACCELERATORS,
    SPOT_PREFIX,
    Rates,
    Zone,
    build_offers,
    classify_sku,
    market_of,
    series_of,
)

LOCATIONS = ("Americas", "Virginia", "Iowa", "Netherlands", "Tokyo", "EMEA")


def read(resource_group: str, usage_type: str, description: str) -> tuple[str | None, str | None, str]:
    """(market, kind, key) as the price source reads one SKU."""
    kind, key = classify_sku(resource_group, SPOT_PREFIX.sub("", description.strip()))
    return market_of(usage_type, description), kind, key


@pytest.mark.parametrize("sku", GPU_SKUS, ids=lambda s: s.accelerator_type)
def test_every_published_gpu_spelling_is_read_as_its_gpu(sku):
    assert sku.accelerator_type in ACCELERATORS
    for where in LOCATIONS:
        for name in (sku.on_demand, *sku.also):
            assert read("GPU", "OnDemand", f"{name} GPU running in {where}") == ("on_demand", "gpu",
                                                                                 sku.accelerator_type)
        if sku.spot is not None:
            assert read("GPU", "Preemptible", gpu_description(sku, where, spot=True)) == ("spot", "gpu",
                                                                                         sku.accelerator_type)


@pytest.mark.parametrize("series", sorted(SERIES_SKUS))
def test_every_published_series_spelling_is_read_as_its_series(series):
    for spot, usage, market in ((False, "OnDemand", "on_demand"), (True, "Preemptible", "spot")):
        for kind in ("Core", "Ram"):
            got = read("CPU", usage, series_description(series, kind, "Americas", spot=spot))
            assert got == (market, kind.lower(), series)


def test_the_a100_80gb_is_spelled_with_tesla_and_the_h100_mega_as_plus_or_mega():
    """The two spellings an earlier table missed (a2-ultragpu and a3-megagpu offers vanished)."""
    assert read("GPU", "OnDemand", "Nvidia Tesla A100 80GB GPU running in Netherlands")[1:] == ("gpu", "nvidia-a100-80gb")
    assert read("GPU", "Preemptible", "Nvidia Tesla A100 80GB GPU attached to Spot Preemptible VMs running in "
                                      "Americas") == ("spot", "gpu", "nvidia-a100-80gb")
    assert read("GPU", "OnDemand", "Nvidia H100 80GB Plus GPU running in Americas")[2] == "nvidia-h100-mega-80gb"
    assert read("GPU", "Preemptible", "Nvidia H100 80GB Mega GPU attached to Spot Preemptible VMs running in "
                                      "Tokyo")[2] == "nvidia-h100-mega-80gb"
    assert read("GPU", "OnDemand", "H200 141GB GPU running in Netherlands")[2] == "nvidia-h200-141gb"
    assert read("CPU", "OnDemand", "A3Plus Instance Core running in Americas") == ("on_demand", "core", "a3-mega")
    assert series_of("a3-megagpu-8g") == "a3-mega" and series_of("a3-ultragpu-8g") == "a3-ultra"
    assert series_of("a3-highgpu-8g") == "a3"


@pytest.mark.parametrize("usage, description", [
    ("OnDemand", "Nvidia Tesla T4 GPU attached to Sole Tenancy VMs running in Americas"),
    ("OnDemand", "Nvidia L4 GPU attached to DWS Defined Duration VMs running in Frankfurt"),
    ("OnDemand", "Nvidia H100 Mega 80GB GPU attached to DWS Defined Duration VMs running in Americas"),
    ("OnDemand", "Reserved Nvidia Tesla A100 80GB GPU in Seoul"),
    ("OnDemand", "Reserved Nvidia H100 80GB Mega GPU in Americas in Calendar Mode"),
    ("Commit1Yr", "Commitment v1: Nvidia H100 80GB GPU running in Virginia for 1 Year"),
    ("Commit3Yr", "Commitment v1: H200 141GB GPU running in Americas for 3 Years"),
])
def test_look_alike_gpu_skus_are_not_a_vms_price(usage, description):
    market, kind, _ = read("GPU", usage, description)
    assert market is None or kind is None


def test_the_b200_slice_prices_the_whole_a4_vm_and_its_spot_slice_is_spot_whatever_its_usage_type():
    """A4's B200 has no core or RAM SKU: one "(1 gpu slice)" SKU is an eighth of the VM. Its Spot slice
    is filed with usageType OnDemand; the description says Spot."""
    assert read("GPU", "OnDemand", "A4 Nvidia B200 (1 gpu slice) running in Americas") == ("on_demand", "slice",
                                                                                             "nvidia-b200")
    assert read("GPU", "OnDemand", "Spot Preemptible A4 Nvidia B200 (1 gpu slice) running in Americas") == (
        "spot", "slice", "nvidia-b200")
    a4 = compute_v1.MachineType(name="a4-highgpu-8g", guest_cpus=224, memory_mb=3968 * 1024, accelerators=[
        compute_v1.Accelerators(guest_accelerator_type="nvidia-b200", guest_accelerator_count=8)])
    rates = Rates(host={}, gpu={("us-central1", "on_demand", "nvidia-b200"): 16.11,
                                ("us-central1", "spot", "nvidia-b200"): 5.0})
    rows = build_offers("us-central1", [Zone("us-central1-b", "us-central1", {"a4-highgpu-8g": a4}, {})], rates,
                        frozenset(), None, "2026-12-07T00:00:00Z")
    prices = {r["market"]: r["price_usd_per_hour"] for r in rows}
    assert prices == pytest.approx({"on_demand": 8 * 16.11, "spot": 8 * 5.0})
    assert {(r["accelerator"], r["accelerator_count"], r["vcpus"]) for r in rows} == {("B200", 8, 224.0)}


def test_every_description_of_live_catalogue_rows_is_read(shared_data):
    """Real SKUs (A3 High Spot in eight regions, 2025-10-23): every GPU, core and RAM component is read,
    as the SKU that prices it."""
    files = sorted((shared_data / "skynomad" / "data" / "spot_price_cache" / "gcp").glob("*.json"))
    assert len(files) >= 8
    seen = set()
    for path in files:
        record = json.loads(path.read_text())
        for part in record["components"]:
            group = {"cpu": "CPU", "ram": "RAM", "gpu": "GPU"}[part["label"]]
            market, kind, key = read(group, "Preemptible", part["description"])
            assert market == "spot" and (kind, key) == {"cpu": ("core", "a3"), "ram": ("ram", "a3"),
                                                        "gpu": ("gpu", "nvidia-h100-80gb")}[part["label"]], part
            seen.add(part["description"].rsplit(" running in ", 1)[1])
    assert {"Virginia", "Americas", "Delhi"} <= seen

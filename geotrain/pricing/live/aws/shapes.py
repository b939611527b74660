"""AWS answers → specs, prices and bands: pure functions of the JSON that the API calls return.

An answer of unexpected shape → :class:`~geotrain.errors.CatalogError` naming the call and the field.
Imports nothing from its siblings."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from geotrain.errors import CatalogError
from geotrain.pricing import interruption

# GpuInfo names → canonical names where they differ (memory disambiguates A100 and V100)
GPU_NAMES = {"RTX PRO Server 6000": "RTXPRO6000", "RTX PRO 6000": "RTXPRO6000",
             "Radeon Pro V520": "RadeonProV520", "Qualcomm AI100": "QualcommAI100",
             "Qualcomm AI 100": "QualcommAI100"}


def canonical_accelerator(name: str, memory_mib: int | None) -> str:
    """The canonical accelerator name of an AWS GPU/Neuron/inference device, as the bundled rows
    spell it: A100 with ≥ 80 GB per GPU → A100-80GB, V100 with ≥ 32 GB → V100-32GB (PROVENANCE.md),
    a few renamed (``GPU_NAMES``), others as AWS names them with spaces removed (T4, H100, Trainium2)."""
    name = name.strip()
    if name == "A100" and (memory_mib or 0) >= 80 * 1000:
        return "A100-80GB"
    if name == "V100" and (memory_mib or 0) >= 32 * 1000:
        return "V100-32GB"
    return GPU_NAMES.get(name, name.replace(" ", ""))


# CPU-only families offered (a task without accelerators runs on one): general purpose, compute and memory
# optimized, current Intel generations, as in the bundled catalog; bare-metal sizes left out
CPU_FAMILIES = frozenset({"m5", "m6i", "m7i", "c5", "c6i", "c7i", "r5", "t3"})


@dataclass(frozen=True, slots=True)
class InstanceSpec:
    instance_type: str
    vcpus: float
    memory_gib: float
    accelerator: str  # "" for a CPU-only type
    accelerator_count: int


def instance_spec(record: Mapping[str, Any]) -> InstanceSpec | None:
    """The spec of one DescribeInstanceTypes record: a type with whole accelerators, or a CPU-only type of
    ``CPU_FAMILIES`` (accelerator "", count 0); None for others."""
    name = record["InstanceType"]
    devices: list[Mapping[str, Any]] = []
    if record.get("GpuInfo"):
        devices = record["GpuInfo"].get("Gpus") or []
        if any(float(g.get("GpuPartitionSize", 1.0)) < 1.0 for g in devices):
            return None  # fractional GPU (g6f, gr6f): left out, as in the bundled data
    elif record.get("NeuronInfo"):
        devices = record["NeuronInfo"].get("NeuronDevices") or []
    elif record.get("InferenceAcceleratorInfo"):
        devices = record["InferenceAcceleratorInfo"].get("Accelerators") or []
    if not devices:
        family, _, size = name.partition(".")
        if family in CPU_FAMILIES and size != "metal" and not size.startswith("metal-"):
            return InstanceSpec(name, float(record["VCpuInfo"]["DefaultVCpus"]),
                                float(record["MemoryInfo"]["SizeInMiB"]) / 1024.0, "", 0)
        return None
    first = devices[0]
    accelerator = canonical_accelerator(first["Name"], (first.get("MemoryInfo") or {}).get("SizeInMiB"))
    count = sum(int(d["Count"]) for d in devices)
    return InstanceSpec(name, float(record["VCpuInfo"]["DefaultVCpus"]),
                        float(record["MemoryInfo"]["SizeInMiB"]) / 1024.0, accelerator, count)


def enabled_regions(answer: Mapping[str, Any]) -> list[str]:
    """The regions of a DescribeRegions answer that the account may use (not "not-opted-in"), sorted."""
    try:
        return sorted(r["RegionName"] for r in answer["Regions"]
                      if r.get("OptInStatus", "opt-in-not-required") != "not-opted-in")
    except (KeyError, TypeError) as exc:
        raise CatalogError(f"AWS DescribeRegions: unexpected answer ({exc!r} missing)") from exc


def spot_advisor_bands(feed: Any, url: str) -> dict[tuple[str, str], str]:
    """(region, instance type) → Spot Advisor band label (Linux) of the feed fetched from ``url``."""
    try:
        labels = {int(r["index"]): r["label"] for r in feed["ranges"]}
        for band in interruption.SPOT_ADVISOR_BANDS:
            if labels.get(band.index) != band.label:
                raise CatalogError(f"Spot Advisor feed: band {band.index} is {labels.get(band.index)!r}, "
                                   f"expected {band.label!r}; geotrain.pricing.interruption needs updating")
        return {(region, itype): interruption.band_label(int(entry["r"]))
                for region, by_os in feed["spot_advisor"].items()
                for itype, entry in (by_os.get("Linux") or {}).items()}
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise CatalogError(f"Spot Advisor feed {url}: unexpected shape ({exc!r}); expected "
                           f"'ranges' and 'spot_advisor' -> region -> Linux -> type -> r") from exc


def checked_price(text: Any, where: str) -> float:
    """A non-negative price of an answer; ``where`` names the call for the error."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise CatalogError(f"AWS {where}: price {text!r} is not a number") from None
    if not value >= 0:
        raise CatalogError(f"AWS {where}: price {text!r} is negative")
    return value


def product_price(entry: Any, region: str) -> tuple[str, float | None]:
    """(instance type, hourly USD on-demand price) of one Price List entry (a JSON string)."""
    where = f"GetProducts for {region}"
    try:
        product = json.loads(entry) if isinstance(entry, str) else entry
        itype = product["product"]["attributes"]["instanceType"]
        terms = product["terms"]["OnDemand"]
    except (ValueError, KeyError, TypeError) as exc:
        raise CatalogError(f"AWS {where}: a PriceList entry lacks {exc!r}; expected product.attributes.instanceType "
                           f"and terms.OnDemand.*.priceDimensions.*.pricePerUnit.USD") from exc
    try:
        for term in terms.values():
            for dimension in term["priceDimensions"].values():
                if dimension.get("unit", "Hrs") in ("Hrs", "Hours", "hours"):
                    return itype, checked_price(dimension["pricePerUnit"]["USD"], where)
    except (KeyError, TypeError, AttributeError) as exc:
        raise CatalogError(f"AWS {where}: {itype} has an on-demand term without {exc!r}") from exc
    return itype, None

"""Compute Engine SKUs and offers: which Cloud Billing Catalog SKU prices what (the accelerator and
machine-series names), a SKU's unit price, and the offers named and priced from those prices."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from geotrain.clouds.gcp.accelerators import ACCELERATORS, N1_ATTACHABLE
from geotrain.errors import CatalogError
from geotrain.pricing.live.base import offer_row
from geotrain.pricing.live.gcp.descriptions import GPU_SKUS, SERIES_SKUS, SLICE_SKUS

CLOUD = "gcp"
SOURCE = "gcp-cloud-billing-catalog"

N1_VCPUS_PER_GPU = 8  # host rule of the bundled data: n1-standard-(8·N) for N GPUs
GPU_COUNTS = (1, 2, 4, 8, 16)
# the words before " GPU" in a GPU SKU's description (lower case) -> GCE accelerator type
GPU_SKU_NAMES = {" ".join(name.lower().split()): sku.accelerator_type for sku in GPU_SKUS
                 for name in (sku.on_demand, sku.spot, *sku.also) if name}
# the words of a GPU slice SKU (A4's B200: the whole VM by the GPU, no core or RAM SKU), lower case -> type
SLICE_SKU_NAMES = {" ".join(words.lower().split()): gpu for gpu, words in SLICE_SKUS.items()}
# the words before " Instance Core|Ram" in a core/RAM SKU's description (lower case) -> pricing series
SERIES_SKU_NAMES = {words.lower(): series for series, names in SERIES_SKUS.items() for words in names}
UNITS = {"core": "h", "ram": "GiBy.h", "gpu": "h", "slice": "h"}
MARKETS = {"OnDemand": "on_demand", "Preemptible": "spot"}
SPOT_PREFIX = re.compile(r"^(?:spot preemptible|preemptible)\s+", re.I)
_GPU_SKU = re.compile(r"^(?P<name>.+?) GPU(?: attached to Spot Preemptible VMs)? running in ", re.I)
_SLICE_SKU = re.compile(r"^(?P<name>.+? \(1 gpu slice\)) running in ", re.I)
_HOST_SKU = re.compile(r"^(?P<series>.+?) Instance (?P<kind>Core|Ram) running in ", re.I)


def market_of(usage_type: str, description: str) -> str | None:
    """"spot", "on_demand" or None (commitments …) of a SKU: its usageType, except that a description
    beginning "Spot Preemptible" is Spot whatever the usageType says (A4's B200 slices are filed as
    OnDemand)."""
    market = MARKETS.get(usage_type)
    if market is not None and SPOT_PREFIX.match(description.strip()):
        return "spot"
    return market


def series_of(machine_type: str) -> str:
    """The pricing series of a machine type: the SKUs that price its cores and RAM."""
    if machine_type.startswith("a3-megagpu"):
        return "a3-mega"
    if machine_type.startswith("a3-ultragpu"):
        return "a3-ultra"
    return machine_type.split("-")[0]


def n1_offer_name(count: int, accelerator: str) -> str:
    host = f"n1-standard-{N1_VCPUS_PER_GPU * count}"
    return f"{host}+{accelerator}" if count == 1 else f"{host}+{count}x{accelerator}"


@lru_cache(maxsize=1)
def bundled_zonal_offers() -> frozenset[tuple[str, str, str]]:
    """(region, instance type, market) of GPU-bundled types that the bundled snapshot writes per zone."""
    import csv
    import io

    from geotrain.pricing.bundled import data_bytes

    text = data_bytes("offers.csv").decode("utf-8")
    return frozenset((r["region"], r["instance_type"], r["market"]) for r in csv.DictReader(io.StringIO(text))
                     if r["cloud"] == CLOUD and r["zone"] and "+" not in r["instance_type"])


def classify_sku(resource_group: str, description: str) -> tuple[str | None, str]:
    """("gpu" | "slice", accelerator type), ("core" | "ram", series) or (None, "") for a SKU description
    (with any "Spot Preemptible" in front already taken off)."""
    if resource_group == "GPU":
        match = _SLICE_SKU.match(description)
        if match:
            name = " ".join(match["name"].lower().split())
            return ("slice", SLICE_SKU_NAMES[name]) if name in SLICE_SKU_NAMES else (None, "")
        match = _GPU_SKU.match(description)
        name = " ".join(match["name"].lower().split()) if match else ""
        return ("gpu", GPU_SKU_NAMES[name]) if name in GPU_SKU_NAMES else (None, "")
    match = _HOST_SKU.match(description)
    if not match:
        return None, ""
    series = SERIES_SKU_NAMES.get(" ".join(match["series"].lower().split()))
    if series is None:
        return None, ""
    return ("core" if match["kind"].lower() == "core" else "ram"), series


def unit_price(sku: Any, unit: str) -> float:
    """units + nanos/1e9 of the first tiered rate of the SKU's current pricing, in $ per ``unit``."""
    where = f"SKU {sku.sku_id} ({sku.description!r})"
    if not sku.pricing_info or not sku.pricing_info[0].pricing_expression.tiered_rates:
        raise CatalogError(f"GCP Cloud Billing Catalog: {where} has no tiered rate; nothing was stored")
    expression = sku.pricing_info[0].pricing_expression
    if expression.usage_unit != unit:
        raise CatalogError(f"GCP Cloud Billing Catalog: {where} is priced per {expression.usage_unit!r}, "
                           f"geotrain expects {unit!r}; nothing was stored")
    price = expression.tiered_rates[0].unit_price
    if price.currency_code and price.currency_code != "USD":
        raise CatalogError(f"GCP Cloud Billing Catalog: {where} is priced in {price.currency_code}, not USD; "
                           "nothing was stored")
    usd = int(price.units) + int(price.nanos) / 1e9
    if usd < 0:
        raise CatalogError(f"GCP Cloud Billing Catalog: {where} has a negative price {usd}; nothing was stored")
    return usd


@dataclass(frozen=True, slots=True)
class Rates:
    """Unit prices in $/h: (region, market, series, "core" | "ram") and (region, market, accelerator type)."""

    host: dict[tuple[str, str, str, str], float]
    gpu: dict[tuple[str, str, str], float]


@dataclass(frozen=True, slots=True)
class Zone:
    name: str
    region: str
    machine_types: dict[str, Any]  # name -> compute_v1.MachineType
    accelerators: dict[str, int]  # accelerator type -> maximum cards per instance


def build_offers(region: str, zones: list[Zone], rates: Rates, zonal: frozenset[tuple[str, str, str]],
                 accelerators: frozenset[str] | None, stamp: str) -> list[dict[str, Any]]:
    """The offers of one region, from its zones and the unit prices (see the package docstring)."""
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}

    def add(zone: str, name: str, accelerator: str, count: int, vcpus: float, gib: float, series: str,
            gpu_type: str, *, attached: bool) -> None:
        if accelerators is not None and accelerator not in accelerators:
            return
        for market in ("on_demand", "spot"):
            core = rates.host.get((region, market, series, "core"))
            ram = rates.host.get((region, market, series, "ram"))
            per_gpu = rates.gpu.get((region, market, gpu_type))
            if gpu_type in SLICE_SKUS:  # the slice is the whole VM by the GPU: no core or RAM SKU
                core = ram = 0.0
            if core is None or ram is None or per_gpu is None:
                continue
            # N1 + attached GPUs per zone; GPU-bundled types region-wide, unless the bundled data has them per zone
            where = zone if (attached or (region, name, market) in zonal) else ""
            if (where, name, market) in rows:
                continue
            spot = market == "spot"
            rows[(where, name, market)] = offer_row(
                cloud=CLOUD, region=region, zone=where, instance_type=name, accelerator=accelerator,
                accelerator_count=count, vcpus=vcpus, memory_gib=gib, market=market,
                price_usd_per_hour=vcpus * core + gib * ram + count * per_gpu,
                interruption_band="" if spot else "none", interruptions_per_hour="" if spot else 0.0,
                observed_at=stamp, source=SOURCE)

    for zone in zones:
        for name, machine in sorted(zone.machine_types.items()):
            if _obsolete(machine) or not machine.accelerators:
                continue
            gpus = machine.accelerators[0]
            accelerator = ACCELERATORS.get(gpus.guest_accelerator_type)
            if accelerator is None or gpus.guest_accelerator_count <= 0:
                continue
            add(zone.name, name, accelerator, int(gpus.guest_accelerator_count), float(machine.guest_cpus),
                machine.memory_mb / 1024, series_of(name), gpus.guest_accelerator_type, attached=False)
        for gpu_type, most in sorted(zone.accelerators.items()):
            accelerator = ACCELERATORS.get(gpu_type)
            if gpu_type not in N1_ATTACHABLE or accelerator is None:
                continue
            for count in (n for n in GPU_COUNTS if n <= most):
                host = zone.machine_types.get(f"n1-standard-{N1_VCPUS_PER_GPU * count}")
                if host is None or _obsolete(host):
                    continue
                add(zone.name, n1_offer_name(count, accelerator), accelerator, count, float(host.guest_cpus),
                    host.memory_mb / 1024, "n1", gpu_type, attached=True)
    return [rows[key] for key in sorted(rows)]


def _obsolete(machine: Any) -> bool:
    deprecated = getattr(machine, "deprecated", None)
    return bool(deprecated) and deprecated.state in ("OBSOLETE", "DELETED")

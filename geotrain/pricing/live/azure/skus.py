"""Azure resource SKUs (azure-mgmt-compute ``resource_skus.list()``): the specs of the mapped GPU sizes
and where the subscription may use them (``Location`` and ``Zone`` restrictions)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from geotrain.errors import CatalogError
from geotrain.pricing.live.azure.series import accelerator_of


@dataclass(frozen=True, slots=True)
class Spec:
    instance_type: str  # as ARM spells it
    region: str
    accelerator: str
    accelerator_count: int
    vcpus: float
    memory_gib: float


def list_skus(client: Any, calls: Counter[str], call_options: Mapping[str, Any]) -> list[Any]:
    """Every resource SKU of the subscription, page by page."""
    from azure.mgmt.compute.models import ResourceSku

    skus: list[Any] = []
    for page in client.resource_skus.list(**call_options).by_page():
        calls["resource_skus.list"] += 1
        skus.extend(page)
    # the SDK's deserializer turns a "value" that is not a list of objects into junk, not an error
    bad = next((s for s in skus if not isinstance(s, ResourceSku)), None)
    if bad is not None:
        raise CatalogError(f"Azure resource SKUs: an entry is {type(bad).__name__}, not a resource SKU object; "
                           "expected {\"value\": [...], \"nextLink\"}")
    return skus


def specs_of(skus: Iterable[Any], asked: frozenset[str] | None, accelerators: frozenset[str] | None,
             signals: Counter[str]) -> dict[tuple[str, str], Spec]:
    """(region, size) -> spec for the mapped sizes (GPU, and CPU-only: accelerator "") the subscription may use
    there."""
    specs: dict[tuple[str, str], Spec] = {}
    seen: set[tuple[str, str]] = set()
    for sku in skus:
        if (getattr(sku, "resource_type", None) or "").lower() != "virtualmachines":
            continue
        name = sku.name or ""
        accelerator = accelerator_of(name)
        if accelerator is None or (accelerators is not None and (accelerator or "CPU") not in accelerators):
            continue
        capabilities = {(c.name or ""): (c.value or "") for c in (sku.capabilities or [])}
        try:
            vcpus = float(capabilities["vCPUs"])
            memory_gib = float(capabilities["MemoryGB"])
            count = int(float(capabilities["GPUs"])) if accelerator else 0  # a CPU-only series has no GPUs
        except (KeyError, ValueError):
            signals["sizes_without_specs"] += 1
            continue
        if accelerator and count <= 0:
            signals["sizes_without_specs"] += 1
            continue
        zones_of = {(li.location or "").lower(): set(li.zones or []) for li in (sku.location_info or [])}
        for location in sku.locations or []:
            region = location.lower()
            if asked is not None and region not in asked:
                continue
            if (region, name.lower()) in seen:
                continue
            seen.add((region, name.lower()))
            if _restricted(sku, region, zones_of.get(region, set()), signals):
                continue
            specs[(region, name)] = Spec(name, region, accelerator, count, vcpus, memory_gib)
    return specs


def _restricted(sku: Any, region: str, zones: set[str], signals: Counter[str]) -> bool:
    closed_zones: set[str] = set()
    for restriction in sku.restrictions or []:
        kind = (restriction.type or "").lower()
        info = restriction.restriction_info
        # azure-mgmt-compute ≥ 35 names the field values_property (values() is the mapping method)
        listed = getattr(restriction, "values_property", None)
        if listed is None and not callable(getattr(restriction, "values", None)):
            listed = getattr(restriction, "values", None)
        locations = {v.lower() for v in (listed or [])}
        locations |= {v.lower() for v in ((info.locations if info else None) or [])}
        if region not in locations:
            continue
        if kind == "location":
            signals["restricted"] += 1
            return True
        if kind == "zone":
            closed_zones |= set((info.zones if info else None) or [])
    if closed_zones:
        if not zones or zones <= closed_zones:
            signals["restricted"] += 1
            return True
        signals["zone_restricted"] += 1
    return False

"""Turn a user's file into a validated price table.

Three formats:

- ``geotrain``: a CSV in geotrain's own offer schema (``geotrain.pricing.schema``). ``continent``
  may be left empty for regions geotrain knows; ``observed_at`` defaults to the file's
  modification time and ``source`` to the file name.
- ``skypilot``: SkyPilot's ``vms.csv`` catalog (InstanceType, AcceleratorName, AcceleratorCount,
  vCPUs, MemoryGiB, Price, SpotPrice, Region[, AvailabilityZone]). A row gives an on-demand offer
  when Price is set and a spot offer when SpotPrice is set. The cloud is not in the file: pass it,
  or geotrain infers it from the region names. Rows without an instance type (GCP's accelerator-only
  rows) and rows with fractional accelerator counts are skipped and counted.
- ``inventory``: an on-prem inventory in YAML (``geotrain.pricing.inventory``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from enum import StrEnum
from pathlib import Path

import pandas as pd

from geotrain.clouds.geography import clouds_of_region, continent_of
from geotrain.domain import Market
from geotrain.errors import CatalogError, InputError
from geotrain.pricing.csvfile import read_csv_strings
from geotrain.pricing.inventory import inventory_table, load_inventory
from geotrain.pricing.schema import parse_offers


class FileFormat(StrEnum):
    AUTO = "auto"
    GEOTRAIN = "geotrain"
    SKYPILOT = "skypilot"
    INVENTORY = "inventory"


SKYPILOT_REQUIRED = ("InstanceType", "vCPUs", "MemoryGiB", "Price", "SpotPrice", "Region")


@dataclass(frozen=True, slots=True)
class ImportResult:
    table: pd.DataFrame
    file_format: FileFormat
    skipped: tuple[str, ...] = ()  # one line per kind of skipped row, with its count


def import_offers(path: str | Path, file_format: FileFormat = FileFormat.AUTO, *,
                  cloud: str | None = None) -> ImportResult:
    """Read ``path`` in the given (or detected) format into a validated price table."""
    path = Path(path)
    if file_format == FileFormat.AUTO:
        file_format = FileFormat.INVENTORY if path.suffix.lower() in (".yaml", ".yml") else FileFormat.AUTO
    if file_format == FileFormat.INVENTORY:
        return ImportResult(inventory_table(load_inventory(path)), FileFormat.INVENTORY)

    raw = read_csv_strings(path)
    if file_format == FileFormat.AUTO:
        file_format = _detect(raw, path)
    if file_format == FileFormat.SKYPILOT:
        return _skypilot(raw, path, cloud)
    observed = _mtime(path)
    table = parse_offers(raw, str(path), continent_of=continent_of,
                         defaults={"observed_at": observed, "source": path.name})
    return ImportResult(table, FileFormat.GEOTRAIN)


def _detect(raw: pd.DataFrame, path: Path) -> FileFormat:
    columns = set(raw.columns)
    if "InstanceType" in columns:
        return FileFormat.SKYPILOT
    if "instance_type" in columns:
        return FileFormat.GEOTRAIN
    raise CatalogError(
        f"{path}: line 1: cannot tell the format from the header; expected geotrain's offer schema "
        "(cloud, region, instance_type, …), SkyPilot's vms.csv (InstanceType, Region, Price, SpotPrice, …) "
        "or a YAML inventory; pass --format"
    )


def _mtime(path: Path) -> str:
    return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _skypilot(raw: pd.DataFrame, path: Path, cloud: str | None) -> ImportResult:
    origin = str(path)
    missing = [c for c in SKYPILOT_REQUIRED if c not in raw.columns]
    if missing:
        raise CatalogError(f"{origin}: missing SkyPilot column{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    skipped = []
    no_type = raw["InstanceType"].str.strip() == ""
    if no_type.any():
        skipped.append(f"{int(no_type.sum())} accelerator-only rows (no InstanceType)")
    raw = raw[~no_type]

    counts = raw.get("AcceleratorCount", pd.Series("", index=raw.index)).str.strip()
    numeric = pd.to_numeric(counts.where(counts != "", "0"), errors="coerce")
    fractional = numeric.notna() & (numeric != numeric.round())
    if fractional.any():
        skipped.append(f"{int(fractional.sum())} rows with a fractional accelerator count")
    raw, counts, numeric = raw[~fractional], counts[~fractional], numeric[~fractional]

    cloud = (cloud or _infer_cloud(raw, origin)).lower()
    observed = _mtime(path)
    parts = []
    for market, column in ((Market.ON_DEMAND, "Price"), (Market.SPOT, "SpotPrice")):
        priced = raw[column].str.strip() != ""
        rows = raw[priced]
        if rows.empty:
            continue
        count_text = numeric[priced].map(lambda v: str(int(v)) if pd.notna(v) else "")
        count_text = count_text.where(numeric[priced].notna(), counts[priced])
        accel = rows["AcceleratorName"].str.strip() if "AcceleratorName" in rows else ""
        parts.append(pd.DataFrame({
            "cloud": cloud,
            "region": rows["Region"],
            "zone": rows["AvailabilityZone"] if "AvailabilityZone" in rows else "",
            "instance_type": rows["InstanceType"],
            "accelerator": accel,
            "accelerator_count": count_text,
            "vcpus": rows["vCPUs"],
            "memory_gib": rows["MemoryGiB"],
            "market": market.value,
            "price_usd_per_hour": rows[column],
            "interruption_band": "none" if market == Market.ON_DEMAND else "",
            "interruptions_per_hour": "0" if market == Market.ON_DEMAND else "",
            "observed_at": observed,
            "source": f"skypilot {path.name}",
        }, index=rows.index, dtype="string"))
    if not parts:
        raise CatalogError(f"{origin}: no row has a Price or SpotPrice; nothing to import")
    table = parse_offers(pd.concat(parts), origin, continent_of=continent_of)
    return ImportResult(table, FileFormat.SKYPILOT, tuple(skipped))


def _infer_cloud(raw: pd.DataFrame, origin: str) -> str:
    candidates: set[str] | None = None
    for region in raw["Region"].str.strip().unique():
        clouds = clouds_of_region(str(region))
        candidates = clouds if candidates is None else candidates & clouds
    if candidates and len(candidates) == 1:
        return candidates.pop()
    raise InputError(
        f"{origin}: cannot tell which cloud this SkyPilot catalog is for from its regions; pass --cloud aws|gcp|azure"
    )

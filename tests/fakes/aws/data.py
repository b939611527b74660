"""What the AWS fake serves: the bundled AWS rows of ``offers.csv``, indexed the way the handlers need them."""

from __future__ import annotations

import csv
import threading
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from geotrain.pricing import interruption

OFFERS_CSV = Path(__file__).resolve().parents[3] / "geotrain" / "pricing" / "data" / "offers.csv"
ACCOUNT_ID = "123456789012"

# canonical accelerator → (AWS GpuInfo name, manufacturer, MiB per GPU); only for types moto lacks
GPU_OF_CANONICAL = {
    "V100": ("V100", "NVIDIA", 16384), "V100-32GB": ("V100", "NVIDIA", 32768),
    "K80": ("K80", "NVIDIA", 12288), "M60": ("M60", "NVIDIA", 8192), "K520": ("K520", "NVIDIA", 4096),
    "T4": ("T4", "NVIDIA", 16384), "A10G": ("A10G", "NVIDIA", 24576),
    "RadeonProV520": ("Radeon Pro V520", "AMD", 8192),
}
SPEC_FIELDS = ("CurrentGeneration", "VCpuInfo", "MemoryInfo", "GpuInfo", "NeuronInfo", "InferenceAcceleratorInfo")


@dataclass(frozen=True)
class BundledRow:
    region: str
    zone: str  # AZ id or ""
    instance_type: str
    accelerator: str
    accelerator_count: int
    vcpus: float
    memory_gib: float
    market: str
    price: str  # as written in offers.csv
    band: str
    availability: str
    observed_at: str


def bundled_aws_rows(path: Path = OFFERS_CSV) -> list[BundledRow]:
    with path.open(newline="", encoding="utf-8") as handle:
        return [BundledRow(r["region"], r["zone"], r["instance_type"], r["accelerator"],
                           int(r["accelerator_count"] or 0), float(r["vcpus"]), float(r["memory_gib"]),
                           r["market"], r["price_usd_per_hour"], r["interruption_band"], r["availability"],
                           r["observed_at"])
                for r in csv.DictReader(handle) if r["cloud"] == "aws"]


def placement_score(availability: float) -> int:
    return max(1, min(10, round(10 * availability)))


class _Data:
    """The bundled figures, indexed the way the handlers need them (built once per process)."""

    def __init__(self) -> None:
        from moto.ec2.models.availability_zones_and_regions import RegionsAndZonesBackend
        from moto.ec2.models.instance_types import INSTANCE_TYPES

        rows = bundled_aws_rows()
        # moto's describe_availability_zones answers from this table (the same for every account);
        # reading it directly spares building 29 region backends (~12 s)
        self.zone_name: dict[tuple[str, str], str] = {}  # (region, AZ id) → moto zone name
        for region, zones in RegionsAndZonesBackend.zones.items():
            for zone in zones:
                self.zone_name[(region, zone.zone_id)] = zone.name
        # AWS publishes spot prices per AZ: a region-wide spot row (the bundled CPU-only types' regional figure)
        # has no AZ to be served in, and zones moto does not have (Local Zones) are left out too
        self.served = [r for r in rows if (r.region, r.zone) in self.zone_name or (not r.zone and r.market != "spot")]
        self.left_out = [r for r in rows if r not in self.served]
        self.spot = [r for r in self.served if r.market == "spot"]
        self.on_demand: dict[tuple[str, str], BundledRow] = {}
        for r in self.served:
            if r.market == "on_demand":
                self.on_demand.setdefault((r.region, r.instance_type), r)
        self.bundled_types = {r.instance_type for r in rows}
        self.offered: dict[str, list[tuple[str, str]]] = defaultdict(list)  # region → (type, zone name)
        self.in_region: dict[str, set[str]] = defaultdict(set)  # region → types with any bundled row there
        for r in self.served:
            self.in_region[r.region].add(r.instance_type)
            if r.market == "on_demand" and r.zone:
                self.offered[r.region].append((r.instance_type, self.zone_name[(r.region, r.zone)]))
        self.scores: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)  # (region, type) → AZ id → score
        for r in self.spot:
            if r.availability and r.zone:
                self.scores[(r.region, r.instance_type)][r.zone] = placement_score(float(r.availability))
        self.bands: dict[str, dict[str, int]] = defaultdict(dict)
        index = {b.label: b.index for b in interruption.SPOT_ADVISOR_BANDS}
        for r in self.spot:
            if r.band in index:
                self.bands[r.region][r.instance_type] = index[r.band]
        extra = {}
        for r in rows:
            if r.instance_type in INSTANCE_TYPES or r.instance_type in extra:
                continue
            spec: dict[str, Any] = {"InstanceType": r.instance_type,
                                    "VCpuInfo": {"DefaultVCpus": int(r.vcpus)},
                                    "MemoryInfo": {"SizeInMiB": int(round(r.memory_gib * 1024))}}
            if r.accelerator:
                name, maker, mib = GPU_OF_CANONICAL[r.accelerator]
                spec["GpuInfo"] = {"Gpus": [{"Name": name, "Manufacturer": maker, "Count": r.accelerator_count,
                                             "MemoryInfo": {"SizeInMiB": mib}}],
                                   "TotalGpuMemoryInMiB": mib * r.accelerator_count}
            extra[r.instance_type] = spec
        # only the fields a price source reads (moto's full records take ~6 s per region to serialize)
        self.instance_types = sorted([*({"InstanceType": k, **{f: v[f] for f in SPEC_FIELDS if f in v}}
                                        for k, v in INSTANCE_TYPES.items()),
                                      *extra.values()], key=lambda t: t["InstanceType"])
        self.moto_offerings = {kind: {region: [o for o in offers if o["InstanceType"] not in self.bundled_types]
                                      for region, offers in by_region.items()}
                               for kind, by_region in _moto_offerings().items()}


def _moto_offerings() -> Mapping[str, Mapping[str, list[dict[str, Any]]]]:
    from moto.ec2.models.instance_types import INSTANCE_TYPE_OFFERINGS
    return INSTANCE_TYPE_OFFERINGS


_DATA: _Data | None = None
_DATA_LOCK = threading.Lock()


def data() -> _Data:
    global _DATA
    with _DATA_LOCK:
        if _DATA is None:
            _DATA = _Data()
        return _DATA

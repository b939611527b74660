#!/usr/bin/env python3
"""Rebuild geotrain's bundled price snapshot, ``geotrain/pricing/data/``, from the shared data folder.

    .venv/bin/python scripts/build_bundled_data.py [--data-dir ../shared/data] [--out-dir DIR]

Writes ``offers.csv`` (through :mod:`geotrain.pricing.schema`), ``regions.csv``, ``egress.csv``,
``PROVENANCE.md`` and ``LICENSES/``. Every number comes from a file under ``--data-dir``; a row
without a real figure is left out. The output is deterministic: two runs give identical bytes.
Everything is computed first and written in one go at the end, so a failed run writes nothing.

One function per source (``aws_skypilot_offers``, ``gcp_bundled_offers`` …); ``build`` composes them.
The rules each function applies are stated in its docstring and repeated in PROVENANCE.md.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import re
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from io import StringIO
from pathlib import Path

import pandas as pd

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # run as a plain script from a checkout
    sys.path.insert(0, str(REPO_ROOT))

from geotrain.pricing import interruption  # noqa: E402
from geotrain.errors import CatalogError  # noqa: E402
from geotrain.pricing.schema import COLUMN_NAMES, parse_offers, to_csv_bytes  # noqa: E402

DEFAULT_DATA_DIR = REPO_ROOT.parent / "shared" / "data"
DEFAULT_OUT_DIR = REPO_ROOT / "geotrain" / "pricing" / "data"

NA, SA, EU, ASIA, ME, AF, OC = (
    "north_america", "south_america", "europe", "asia", "middle_east", "africa", "oceania",
)
CLOUDS = ("aws", "gcp", "azure")


class BuildError(Exception):
    """The shared data is missing or not what this script expects; the message says which file."""


# --------------------------------------------------------------------------------------------------
# Sources: ids, dates, where they live
# --------------------------------------------------------------------------------------------------

SRC_SKYPILOT_AWS = "skypilot-catalog-aws-v8"
SRC_TSAOL = "tsaol-aws-gpu-ondemand-2026-01-21"
SRC_HIVEMIND = "hivemind-2023-04-25"
SRC_ANYCLOUD_GCP = "anycloud-gcp-2026-05-20"
SRC_ANYCLOUD_AZURE = "anycloud-azure-2026-05-20"
SRC_GCP_HISTORY = "gcp-pricing-history-2026-07-30"
SRC_COROOT_AWS_CPU = "coroot-aws-cpu-2024-08-09"
COROOT_OBSERVED_AT = "2024-08-09T00:00:00Z"

# The SkyPilot AWS file has no date; its on-demand prices equal vantage.sh data of 2026-01-21 for all
# 216 overlapping (type, region) pairs (prices/skypilot-catalog-aws-gpu/README.txt). Approximation.
SKYPILOT_AWS_OBSERVED_AT = "2026-01-21T00:00:00Z"
TSAOL_OBSERVED_AT = "2026-01-21T00:00:00Z"
# hivemind's snapshot says "2023-04-25 10:40:00" with no time zone; written as UTC.
HIVEMIND_OBSERVED_AT = "2023-04-25T10:40:00Z"

P = {  # every shared-data file this script reads, relative to --data-dir
    "skypilot_aws": "prices/skypilot-catalog-aws-gpu/aws_gpu_vms_skypilot_v8.csv",
    "tsaol": "prices/tsaol-aws-gpu-ondemand/aws_gpu_ondemand_by_region_2026-01-21.csv",
    "anycloud_gcp": "prices/anycloud-catalog-azure-gcp/gcp_n1_gpu_vms_2026-05-20.csv",
    "anycloud_gcp_snapshots": "prices/anycloud-catalog-azure-gcp/gcp_snapshots.txt",
    "anycloud_azure": "prices/anycloud-catalog-azure-gcp/azure_gpu_vms_2026-05-20.csv",
    "anycloud_azure_snapshots": "prices/anycloud-catalog-azure-gcp/azure_snapshots.txt",
    "gcp_history": "gcp-pricing-history/gcp_gpu_vm_price_changes.csv",
    "gcp_history_dates": "gcp-pricing-history/snapshot_dates.txt",
    "spot_advisor": "aws-spot-advisor/spot-advisor-data.min.json",
    "hivemind_aws": "hivemind-multi-cloud/bin/notebooks/aws-spot-pricing-25-april.csv",
    "hivemind_gc": "hivemind-multi-cloud/bin/notebooks/gc-spot-pricing-25-april.csv",
    "hivemind_azure": "hivemind-multi-cloud/bin/notebooks/azure-spot-pricing-25-april.csv",
    "v100_traces": "skynomad/data/real_availability_2023-02-15",
    "v100_prices": "skynomad/data/v100_spot_prices.json",
    "v100_archive": "skynomad/data/v100_spot_price_archive_summary.csv",
    "h100_probes": "skynomad/gcp_h100_16x_probe_counts.csv",
    "dime_gcp_logs": "training-on-a-dime-2020/logs/gcp/availability",
    "skyplane_egress": "skyplane/egress_cost_pairs.csv",
    "skyplane_aws_transfer": "skyplane/aws_transfer_costs.csv",
    "skyplane_latency": "skyplane/latency.csv",
    "skyplane_tp_2022_01": "skyplane/throughput_grid_2022-01.csv",
    "skyplane_tp_2022_11": "skyplane/throughput_grid_2022-11-28.csv",
    "skyplane_gcp_tp": "skyplane/gcp_intracloud_throughput_2022-04.csv",
    "skynomad_egress": "skynomad/research/data/aws_egress_pricing.csv",
    "erben": "erben-calibration.md",
    "coroot_latest": "prices/coroot-cloud-pricing/coroot_latest_2024-08-09_gpu.csv",
    "coroot_snapshots": "prices/coroot-cloud-pricing/snapshots.txt",
}

LICENSE_COPIES = {  # file name under LICENSES/ → shared-data file
    "skyplane-LICENSE": "skyplane/LICENSE",
    "hivemind-multi-cloud-LICENSE": "hivemind-multi-cloud/LICENSE",
    "skynomad-LICENSE": "skynomad/LICENSE",
    "skynomad-NOTICE": "skynomad/NOTICE",
    "training-on-a-dime-LICENSE": "training-on-a-dime-2020/LICENSE",
    "coroot-cloud-pricing-LICENSE": "prices/coroot-cloud-pricing/LICENSE",
}

LICENSE_NOTES = {  # sources whose licence is stated only in a README (or not at all)
    "gcp-pricing-history-LICENSE.txt": (
        "gcp-pricing-history (GitHub Cyclenerd/google-cloud-pricing-cost-calculator, pricing.yml,\n"
        "versions 2022-02-09 .. 2026-07-30, HEAD dac31281f2a4575f0a8bff20ac04fc71a5ff2190)\n\n"
        "Licence: Apache-2.0, as stated in the pricing.yml header and the repository's LICENSE file\n"
        "(per ../shared/data/gcp-pricing-history/README.txt; the licence text itself was not copied\n"
        "into the shared data). The full Apache-2.0 text is the same as in skyplane-LICENSE.\n"
        "The numbers are GCP Cloud Billing Catalog list prices.\n"
    ),
    "skypilot-catalog-aws-NOTE.txt": (
        "skypilot-catalog AWS (GitHub skypilot-org/skypilot-catalog, catalogs/v8/aws/vms.csv at commit\n"
        "00148f2af3672e2229b4f7bf8157d5a3f36e3c35)\n\n"
        "Licence: NOT STATED. No LICENSE file for skypilot-org/skypilot-catalog was found. The file is\n"
        "generated by SkyPilot's fetch_aws.py (SkyPilot is Apache-2.0). The numbers are AWS public list\n"
        "prices (on-demand) and AWS spot prices; they are kept here with their origin (PROVENANCE.md).\n"
        "To remove the doubt, regenerate with SkyPilot's Apache-2.0 fetcher.\n"
    ),
    "anycloud-catalog-NOTE.txt": (
        "anycloud catalog (GitHub anycloud-sh/catalog, azure/vms.csv and gcp/vms.csv at\n"
        "62ff0a987e0c257a89235415d2877812fb1aaf29, 2026-05-20)\n\n"
        "Licence: NOT STATED (no LICENSE or README in the repository). Format and fetch logic come from\n"
        "SkyPilot (Apache-2.0); the numbers are Azure Retail Prices API and GCP Cloud Billing Catalog\n"
        "list prices. Kept here with their origin (PROVENANCE.md); regenerate with SkyPilot's Apache-2.0\n"
        "fetchers (fetch_azure.py --all-regions, fetch_gcp.py) to remove the doubt.\n"
    ),
    "tsaol-aws-gpu-NOTE.txt": (
        "tsaol/aws-gpu (GitHub, data/all_gpu_instances.js, last changed in commit\n"
        "7412fd256c5eda04a70a17742a68e8e44824b2cb, 2026-01-21; generated from instances.vantage.sh)\n\n"
        "Licence: MIT claimed by a README badge; the repository has no LICENSE file. The numbers are AWS\n"
        "public list prices as republished by instances.vantage.sh (ec2instances.info code is MIT).\n"
    ),
    "aws-spot-advisor-NOTE.txt": (
        "AWS Spot Instance Advisor feed (spot-advisor-data.json), snapshot committed in GitHub\n"
        "ETOgaosion/bamboo, data/spot-advisor-data.json, commit 0faa479fbca26f06d74fa8e356ca06d88ab1f862\n"
        "(2024-02-28).\n\n"
        "Licence: AWS public feed (AWS site terms apply); the repository that holds the snapshot is MIT\n"
        "(code). Only derived figures (band labels and rates per region and instance type) are bundled.\n"
    ),
    "erben-calibration-NOTE.txt": (
        "Erben, Mayer, Jacobsen, PVLDB 17(6), 2024 (arXiv 2306.03163): the cross-zone egress prices of\n"
        "the study's price table (April 2023). Figures from the paper and its MIT artifact\n"
        "(cirquit/hivemind-multi-cloud; see hivemind-multi-cloud-LICENSE).\n"
    ),
}


# --------------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------------


def read_csv(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        raise BuildError(f"{path}: file not found; is --data-dir the shared data folder?")
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def need_columns(rows: list[dict[str, str]], columns: Iterable[str], path: Path) -> None:
    if not rows:
        raise BuildError(f"{path}: no rows")
    missing = [c for c in columns if c not in rows[0]]
    if missing:
        raise BuildError(f"{path}: missing column(s) {', '.join(missing)}; the format changed")


def dec(value: str, where: str) -> Decimal:
    try:
        number = Decimal(value.strip())
    except InvalidOperation:
        raise BuildError(f"{where}: {value!r} is not a number") from None
    if not number.is_finite() or number < 0:
        raise BuildError(f"{where}: {value!r} is not a non-negative number")
    return number


def whole(value: str, where: str) -> int | None:
    """A count written as '4' or '4.0'; None for a fractional count such as '0.125'."""
    number = dec(value, where)
    return int(number) if number == number.to_integral_value() else None


def num(value: float | Decimal) -> str:
    """A derived number as text: up to 6 decimals, no trailing zeros (0.0875, 0.02, 0)."""
    text = f"{float(value):.6f}".rstrip("0").rstrip(".")
    return text if text not in ("", "-0") else "0"


def sig(value: float) -> str:
    """A rate or share with 6 significant digits (deterministic text for floats)."""
    return f"{value:.6g}"


def utc_iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def last_snapshot_time(path: Path) -> str:
    """The commit time of the last line of an anycloud *_snapshots.txt file, in UTC."""
    if not path.is_file():
        raise BuildError(f"{path}: file not found")
    lines = [line.split() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return utc_iso(datetime.fromisoformat(lines[-1][0]))


def offer(**fields: str) -> dict[str, str]:
    row = dict.fromkeys(COLUMN_NAMES, "")
    for name, value in fields.items():
        if name not in row:
            raise KeyError(f"{name} is not a column of the offer schema")
        row[name] = value
    return row


def on_demand_signal() -> dict[str, str]:
    return {"interruption_band": "none", "interruptions_per_hour": "0"}


# --------------------------------------------------------------------------------------------------
# Regions → continents
# --------------------------------------------------------------------------------------------------

AWS_PREFIX = {"us": NA, "ca": NA, "mx": NA, "sa": SA, "eu": EU, "me": ME, "il": ME, "af": AF, "ap": ASIA}
AWS_OCEANIA = {"ap-southeast-2", "ap-southeast-4", "ap-southeast-6"}  # Sydney, Melbourne, New Zealand
GCP_PREFIX = {"us": NA, "northamerica": NA, "southamerica": SA, "europe": EU, "asia": ASIA,
              "australia": OC, "me": ME, "africa": AF}
AZURE_CONTINENT = {
    **dict.fromkeys(["eastus", "eastus2", "centralus", "northcentralus", "southcentralus",
                     "westcentralus", "westus", "westus2", "westus3", "canadacentral", "canadaeast",
                     "mexicocentral"], NA),
    **dict.fromkeys(["brazilsouth", "brazilsoutheast", "chilecentral"], SA),
    **dict.fromkeys(["northeurope", "westeurope", "uksouth", "ukwest", "francecentral",
                     "francesouth", "germanynorth", "germanywestcentral", "norwayeast", "norwaywest",
                     "swedencentral", "swedensouth", "switzerlandnorth", "switzerlandwest",
                     "polandcentral", "italynorth", "spaincentral", "austriaeast", "belgiumcentral",
                     "denmarkeast"], EU),
    **dict.fromkeys(["eastasia", "southeastasia", "japaneast", "japanwest", "koreacentral",
                     "koreasouth", "centralindia", "southindia", "westindia", "jioindiacentral",
                     "jioindiawest", "indonesiacentral", "malaysiawest"], ASIA),
    **dict.fromkeys(["australiaeast", "australiasoutheast", "australiacentral",
                     "australiacentral2", "newzealandnorth"], OC),
    **dict.fromkeys(["uaenorth", "uaecentral", "qatarcentral", "israelcentral"], ME),
    **dict.fromkeys(["southafricanorth", "southafricawest"], AF),
}
AWS_REGION_RE = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d+$")
GCP_REGION_RE = re.compile(r"^[a-z]+-[a-z]+\d+$")


def continent_of(cloud: str, region: str) -> str | None:
    """The continent of a region by its location; None when no rule covers it."""
    if cloud == "aws":
        if not AWS_REGION_RE.match(region):
            return None
        return OC if region in AWS_OCEANIA else AWS_PREFIX.get(region.split("-")[0])
    if cloud == "gcp":
        if not GCP_REGION_RE.match(region):
            return None
        return GCP_PREFIX.get(region.split("-")[0])
    if cloud == "azure":
        return AZURE_CONTINENT.get(region)
    return None


def require_continent(cloud: str, region: str, where: str) -> str:
    continent = continent_of(cloud, region)
    if continent is None:
        raise BuildError(
            f"{where}: region {cloud}:{region} is not in the region map; add a rule to "
            f"continent_of() in scripts/build_bundled_data.py"
        )
    return continent


def gcp_region_of_zone(zone: str) -> str:
    return re.sub(r"-[a-z]$", "", zone)


# --------------------------------------------------------------------------------------------------
# Accelerator names (canonical: short upper-case models, as SkyPilot writes them)
# --------------------------------------------------------------------------------------------------

# tsaol/vantage (gpu_model, gpu_memory) → canonical name; gpu_memory only where it disambiguates.
TSAOL_ACCELERATORS = {
    "NVIDIA T4": "T4", "NVIDIA A10G": "A10G", "NVIDIA L4": "L4", "NVIDIA L40S": "L40S",
    "NVIDIA L40": "L40", "NVIDIA H100": "H100", "NVIDIA H200": "H200", "NVIDIA K80": "K80",
    "NVIDIA M60": "M60", "NVIDIA GRID K520": "K520", "NVIDIA B200 Blackwell": "B200",
    "NVIDIA B300 Blackwell": "B300", "NVIDIA RTX PRO 6000 Blackwell": "RTXPRO6000",
    "AMD Radeon Pro V520": "RadeonProV520", "AWS Inferentia": "Inferentia",
    "AWS Inferentia2": "Inferentia2", "AWS Trainium": "Trainium", "Qualcomm AI 100": "QualcommAI100",
    ("NVIDIA A100", "320 GB HBM2"): "A100", ("NVIDIA A100", "640 GB HBM2e"): "A100-80GB",
    ("NVIDIA V100", "16 GB HBM2"): "V100", ("NVIDIA V100", "32 GB HBM2"): "V100-32GB",
}
# g5g: the source names its GPU "ARM Mali-G78MP12", which AWS does not; left out rather than guessed.
TSAOL_MISLABELLED = {"ARM Mali-G78MP12"}


def tsaol_accelerator(model: str, memory: str, where: str) -> str | None:
    if model in TSAOL_MISLABELLED:
        return None
    name = TSAOL_ACCELERATORS.get((model, memory)) or TSAOL_ACCELERATORS.get(model)
    if name is None:
        raise BuildError(f"{where}: accelerator {model!r} ({memory}) has no canonical name; add it")
    return name


# GCP machine types with bundled GPUs → (accelerator, count). The count is in the name (…-Ng) for a2
# and a3; for g2 it follows GCP's g2 shapes. Checked against anycloud's accelerator rows below.
GCP_BUNDLED = {
    **{f"a2-highgpu-{n}g": ("A100", n) for n in (1, 2, 4, 8)},
    "a2-megagpu-16g": ("A100", 16),
    **{f"a2-ultragpu-{n}g": ("A100-80GB", n) for n in (1, 2, 4, 8)},
    **{f"a3-highgpu-{n}g": ("H100", n) for n in (1, 2, 4, 8)},
    "a3-megagpu-8g": ("H100", 8),
    **{f"g2-standard-{v}": ("L4", 1) for v in (4, 8, 12, 16, 32)},
    "g2-standard-24": ("L4", 2), "g2-standard-48": ("L4", 4), "g2-standard-96": ("L4", 8),
}
# anycloud/SkyPilot labels a3-megagpu's GPUs "H100-MEGA" (the network variant); same H100 GPU.
ANYCLOUD_GPU_ALIAS = {("a3-megagpu-8g", "H100"): "H100-MEGA"}

# GCP N1 + attached GPUs: host machine per GPU count, 8 vCPUs per GPU. Within GCP's vCPU maximum per
# GPU count for every GPU model used (tightest: 1×V100 allows 12 vCPUs); n1-standard-8 + 1 GPU is the
# VM of Erben et al.
N1_HOST = {1: "n1-standard-8", 2: "n1-standard-16", 4: "n1-standard-32", 8: "n1-standard-64"}
N1_GPUS = ("T4", "V100", "P100", "P4")  # the anycloud accelerator rows that attach to N1 VMs


def n1_offer_name(host: str, accelerator: str, count: int) -> str:
    return f"{host}+{accelerator}" if count == 1 else f"{host}+{count}x{accelerator}"


# --------------------------------------------------------------------------------------------------
# Interruption signals: AWS Spot Advisor, traces
# --------------------------------------------------------------------------------------------------


def spot_advisor_bands(data: Path) -> dict[tuple[str, str], str]:
    """(region, instance type) → band label, Linux, from the Spot Advisor feed snapshot."""
    path = data / P["spot_advisor"]
    if not path.is_file():
        raise BuildError(f"{path}: file not found")
    feed = json.loads(path.read_text(encoding="utf-8"))
    feed_labels = {r["index"]: r["label"] for r in feed["ranges"]}
    for band in interruption.SPOT_ADVISOR_BANDS:
        if feed_labels.get(band.index) != band.label:
            raise BuildError(f"{path}: band {band.index} is {feed_labels.get(band.index)!r}, "
                             f"expected {band.label!r}; update geotrain.pricing.interruption")
    bands = {}
    for region, by_os in feed["spot_advisor"].items():
        for instance_type, entry in by_os.get("Linux", {}).items():
            bands[(region, instance_type)] = interruption.band_label(int(entry["r"]))
    return bands


def spot_signal(bands: Mapping[tuple[str, str], str], region: str, instance_type: str) -> dict[str, str]:
    label = bands.get((region, instance_type))
    if label is None:
        return {}
    return {"interruption_band": label,
            "interruptions_per_hour": sig(interruption.interruptions_per_hour_for_band(label))}


@dataclass
class ZoneMapping:
    """Zone names of the SkyNomad V100 traces that the archive maxima tie to one AZ ID."""

    mapped: dict[str, str] = field(default_factory=dict)  # zone name → AZ id
    unproven: dict[str, str] = field(default_factory=dict)  # zone name → why not


def v100_zone_mapping(data: Path, az_region: Mapping[str, str]) -> ZoneMapping:
    """Map trace zone *names* to AZ IDs where the data proves it.

    A zone name maps to an AZ ID when the maximum of its per-tick spot price series
    (v100_spot_prices.json) equals, to the cent-hundredth, the archive maximum of exactly one AZ ID of
    the same region (v100_spot_price_archive_summary.csv), and no other zone name claims that AZ ID.
    """
    prices_path = data / P["v100_prices"]
    if not prices_path.is_file():
        raise BuildError(f"{prices_path}: file not found")
    series = json.loads(prices_path.read_text(encoding="utf-8"))
    archive = read_csv(data / P["v100_archive"])
    need_columns(archive, ["az_id", "max"], data / P["v100_archive"])
    result = ZoneMapping()
    candidates: dict[str, list[str]] = {}
    for key, ticks in sorted(series.items()):
        zone = key.split("_")[0]
        region = zone[:-1]
        top = Decimal(str(max(ticks))).quantize(Decimal("0.0001"))
        same_region = [r for r in archive if az_region.get(r["az_id"]) == region]
        hits = [r["az_id"] for r in same_region if Decimal(r["max"]).quantize(Decimal("0.0001")) == top]
        candidates[zone] = hits
        if len(hits) != 1:
            result.unproven[zone] = (f"series max {top} matches {len(hits)} archive AZ maxima in "
                                     f"{region} ({', '.join(r['max'] for r in same_region) or 'none'})")
    claimed = Counter(h[0] for h in candidates.values() if len(h) == 1)
    for zone, hits in candidates.items():
        if len(hits) == 1:
            if claimed[hits[0]] == 1:
                result.mapped[zone] = hits[0]
            else:
                result.unproven[zone] = f"AZ {hits[0]} is claimed by more than one zone name"
    return result


def v100_availability(data: Path, mapping: ZoneMapping) -> dict[str, interruption.ProbeStats]:
    """AZ id → availability of p3.2xlarge spot, from the Can't-Be-Late 2023-02-15 trace.

    The trace records per tick whether a spot p3.2xlarge could be had (an *availability* trace, not
    a preemption log of one running VM), so only availability is derived; the Spot Advisor band stays.
    Times are naive in the files and read as UTC (only durations matter).
    """
    folder = data / P["v100_traces"]
    stats = {}
    for zone, az_id in sorted(mapping.mapped.items()):
        path = folder / f"{zone}_v100_1.csv.gz"
        if not path.is_file():
            raise BuildError(f"{path}: trace file not found")
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        need_columns(rows, ["date", "availability"], path)
        times = [datetime.fromisoformat(r["date"]).replace(tzinfo=timezone.utc) for r in rows]
        up = [r["availability"].strip() == "1" for r in rows]
        stats[az_id] = interruption.stats_from_probes(times, up)
    return stats


@dataclass(frozen=True)
class ProbeZone:
    stats: interruption.ProbeStats
    capacity: int
    requested: int


def h100_probes(data: Path) -> dict[str, ProbeZone]:
    """GCP zone → availability and capacity of a3-highgpu-1g spot, from SkyNomad's 16×H100 probes.

    A probe succeeded when at least one of the 16 requested instances launched (SkyNomad's own gang
    threshold of 1). capacity = lower median of instances created per probe (≤ 16 by construction).
    Launch probes keep no VM running: no preemption figure.
    """
    path = data / P["h100_probes"]
    rows = read_csv(path)
    need_columns(rows, ["scheduled_at", "zone", "instances_requested", "instances_created"], path)
    by_zone: dict[str, list[tuple[datetime, int, int]]] = defaultdict(list)
    for i, r in enumerate(rows, start=2):
        where = f"{path}: line {i}"
        created = whole(r["instances_created"], where)
        requested = whole(r["instances_requested"], where)
        if created is None or requested is None:
            raise BuildError(f"{where}: instance counts must be whole numbers")
        by_zone[r["zone"]].append((datetime.fromisoformat(r["scheduled_at"]), created, requested))
    result = {}
    for zone, samples in sorted(by_zone.items()):
        samples.sort(key=lambda s: s[0])
        result[zone] = ProbeZone(
            stats=interruption.stats_from_probes([s[0] for s in samples], [s[1] >= 1 for s in samples]),
            capacity=interruption.capacity_from_probes([s[1] for s in samples]),
            requested=max(s[2] for s in samples),
        )
    return result


DIME_EVENT = re.compile(r"^\[(?P<time>[^\]]+)\] (?P<msg>.*)$")
DIME_CREATED = re.compile(
    r"^Created instance (?P<name>\S+) with (?P<count>\d+) GPU\(s\) of type (?P<gpu>\S+) in zone (?P<zone>\S+)$")
DIME_STATE = re.compile(r"^Instance (?P<name>\S+) (?P<state>running|not running|creation failed)\b")
DIME_GPU = {"nvidia-tesla-v100": "V100", "nvidia-tesla-p100": "P100", "nvidia-tesla-k80": "K80",
            "nvidia-tesla-t4": "T4", "nvidia-tesla-p4": "P4"}


@dataclass(frozen=True)
class DimeSlot:
    zone: str
    accelerator: str
    count: int
    stats: interruption.TraceStats
    first: datetime
    last: datetime


def dime_gcp_preemptions(data: Path) -> dict[tuple[str, str, int], DimeSlot]:
    """(zone, GPU, count) → preemption statistics from Training-on-a-Dime's GCP logs (March 2020).

    One "slot" (instanceN) keeps one preemptible VM running, pinged every ~15 min; when it is gone it
    is deleted and relaunched. Samples: created / running → available; not running / creation
    failed → unavailable. A running → not running transition is a preemption. Slots that never
    launched (type unknown in the log) are skipped.
    """
    folder = data / P["dime_gcp_logs"]
    files = sorted(folder.glob("persistent_*.out"))
    if not files:
        raise BuildError(f"{folder}: no persistent_*.out logs found")
    result: dict[tuple[str, str, int], DimeSlot] = {}
    for path in files:
        kind: dict[str, tuple[str, str, int]] = {}
        samples: dict[str, list[tuple[datetime, bool]]] = defaultdict(list)
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            event = DIME_EVENT.match(line.strip())
            if not event:
                continue
            moment = datetime.fromisoformat(event["time"].replace("Z", "+00:00"))
            msg = event["msg"]
            created = DIME_CREATED.match(msg)
            if created:
                slot = (created["zone"], DIME_GPU.get(created["gpu"], created["gpu"]), int(created["count"]))
                if kind.setdefault(created["name"], slot) != slot:
                    raise BuildError(f"{path}: line {n}: {created['name']} changed type or zone")
                samples[created["name"]].append((moment, True))
                continue
            state = DIME_STATE.match(msg)
            if state:
                samples[state["name"]].append((moment, state["state"] == "running"))
        for name, slot in sorted(kind.items()):
            series = samples[name]
            if slot in result:
                raise BuildError(f"{path}: slot {slot} appears twice in the logs; merge rule needed")
            result[slot] = DimeSlot(
                zone=slot[0], accelerator=slot[1], count=slot[2],
                stats=interruption.stats_from_availability([s[0] for s in series], [s[1] for s in series]),
                first=series[0][0], last=series[-1][0],
            )
    return result


# --------------------------------------------------------------------------------------------------
# Offers, one function per source
# --------------------------------------------------------------------------------------------------


@dataclass
class Notes:
    """Facts gathered while building, for the summary and PROVENANCE.md."""

    lines: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def add(self, topic: str, text: str) -> None:
        self.lines[topic].append(text)


def aws_skypilot_offers(data: Path, bands, v100: Mapping[str, interruption.ProbeStats],
                        notes: Notes) -> list[dict[str, str]]:
    """Per-AZ on-demand and spot rows of the SkyPilot v8 AWS catalog (26 GPU/Trainium types).

    zone = AZ ID. Empty Price → no on-demand row; empty SpotPrice → no spot row. Spot rows get the
    Spot Advisor band of (region, type); p3.2xlarge spot in AZs with a proven trace mapping gets the
    trace's availability.
    """
    path = data / P["skypilot_aws"]
    rows = read_csv(path)
    need_columns(rows, ["InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB",
                        "Price", "SpotPrice", "Region", "AvailabilityZone"], path)
    out = []
    for i, r in enumerate(rows, start=2):
        where = f"{path}: line {i}"
        count = whole(r["AcceleratorCount"], where)
        if count is None or not r["AcceleratorName"]:
            raise BuildError(f"{where}: accelerator {r['AcceleratorName']!r} × {r['AcceleratorCount']!r}")
        base = dict(cloud="aws", region=r["Region"], zone=r["AvailabilityZone"],
                    continent=require_continent("aws", r["Region"], where),
                    instance_type=r["InstanceType"], accelerator=r["AcceleratorName"],
                    accelerator_count=str(count), vcpus=r["vCPUs"], memory_gib=r["MemoryGiB"],
                    observed_at=SKYPILOT_AWS_OBSERVED_AT, source=SRC_SKYPILOT_AWS)
        if r["Price"].strip():
            dec(r["Price"], where)
            out.append(offer(**base, market="on_demand", price_usd_per_hour=r["Price"], **on_demand_signal()))
        if r["SpotPrice"].strip():
            dec(r["SpotPrice"], where)
            extra = spot_signal(bands, r["Region"], r["InstanceType"])
            trace = v100.get(r["AvailabilityZone"]) if r["InstanceType"] == "p3.2xlarge" else None
            if trace is not None:
                extra["availability"] = sig(trace.availability)
                notes.add("traced", f"aws {r['AvailabilityZone']} p3.2xlarge spot: availability "
                                    f"{trace.availability:.4f} over {trace.observed_h:.0f} h "
                                    f"({trace.probes} ticks)")
            out.append(offer(**base, market="spot", price_usd_per_hour=r["SpotPrice"], **extra))
    return out


def aws_tsaol_offers(data: Path, covered: set[tuple[str, str]],
                     skypilot_on_demand: Mapping[tuple[str, str], str], notes: Notes) -> list[dict[str, str]]:
    """Region-wide on-demand rows (zone "") from tsaol/vantage, for (type, region) SkyPilot lacks.

    Left out: Local Zone / Wavelength pseudo-regions and GovCloud (not ordinary regions), fractional
    GPUs (g6f, gr6f), and g5g (the source mislabels its GPU).
    """
    path = data / P["tsaol"]
    rows = read_csv(path)
    need_columns(rows, ["instance_type", "gpu_model", "gpu_count", "gpu_memory", "vcpus", "memory_gb",
                        "region", "ondemand_usd_per_hour"], path)
    out = []
    dropped: Counter[str] = Counter()
    agree = disagree = 0
    for i, r in enumerate(rows, start=2):
        where = f"{path}: line {i}"
        region, itype = r["region"], r["instance_type"]
        key = (itype, region)
        if key in skypilot_on_demand:
            same = dec(r["ondemand_usd_per_hour"], where) == dec(skypilot_on_demand[key], where)
            agree, disagree = agree + same, disagree + (not same)
        if key in covered:
            continue
        if not AWS_REGION_RE.match(region):
            dropped["Local Zone / Wavelength pseudo-region"] += 1
            continue
        if region.startswith("us-gov-"):
            dropped["GovCloud region"] += 1
            continue
        count = whole(r["gpu_count"], where)
        if count is None:
            dropped[f"fractional GPU ({itype.split('.')[0]})"] += 1
            continue
        accelerator = tsaol_accelerator(r["gpu_model"], r["gpu_memory"], where)
        if accelerator is None:
            dropped[f"mislabelled accelerator ({itype.split('.')[0]}: {r['gpu_model']})"] += 1
            continue
        if not r["ondemand_usd_per_hour"].strip():
            dropped["no on-demand price"] += 1
            continue
        dec(r["ondemand_usd_per_hour"], where)
        out.append(offer(cloud="aws", region=region, zone="",
                         continent=require_continent("aws", region, where), instance_type=itype,
                         accelerator=accelerator, accelerator_count=str(count), vcpus=r["vcpus"],
                         memory_gib=tsaol_memory(r["memory_gb"], where), market="on_demand",
                         price_usd_per_hour=r["ondemand_usd_per_hour"], observed_at=TSAOL_OBSERVED_AT,
                         source=SRC_TSAOL, **on_demand_signal()))
    for reason, n in sorted(dropped.items()):
        notes.add("tsaol-dropped", f"{n} rows: {reason}")
    notes.add("checks", f"tsaol vs SkyPilot on-demand, overlapping (type, region): {agree} equal, "
                        f"{disagree} different")
    if disagree:
        raise BuildError(f"{path}: {disagree} on-demand prices differ from the SkyPilot file; check")
    return out


def tsaol_memory(value: str, where: str) -> str:
    """tsaol's memory column holds '32' or, for a few rows, '1152 GiB' (vantage's unit is GiB)."""
    text = re.sub(r"\s*GiB$", "", value.strip())
    dec(text, where)
    return text


def aws_hivemind_spot_offers(data: Path, bands, tsaol_rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """g4dn.2xlarge spot per AZ from the Erben et al. snapshot of 2023-04-25 (the VM they trained on).

    vCPUs, memory and GPU come from the tsaol row of the same type (the snapshot has only prices).
    """
    path = data / P["hivemind_aws"]
    rows = read_csv(path)
    need_columns(rows, ["InstanceType", "Region", "AZ", "SpotPrice ($)", "Date"], path)
    shape = {r["instance_type"]: r for r in tsaol_rows}
    out = []
    for i, r in enumerate(rows, start=2):
        where = f"{path}: line {i}"
        itype = r["InstanceType"]
        if itype not in shape:
            raise BuildError(f"{where}: no vCPU/memory figure for {itype} in {P['tsaol']}")
        if not r["Date"].startswith("2023-04-25"):
            raise BuildError(f"{where}: date {r['Date']!r}, expected the 2023-04-25 snapshot")
        dec(r["SpotPrice ($)"], where)
        ref = shape[itype]
        out.append(offer(cloud="aws", region=r["Region"], zone=r["AZ"],
                         continent=require_continent("aws", r["Region"], where), instance_type=itype,
                         accelerator=ref["accelerator"], accelerator_count=ref["accelerator_count"],
                         vcpus=ref["vcpus"], memory_gib=ref["memory_gib"], market="spot",
                         price_usd_per_hour=r["SpotPrice ($)"], observed_at=HIVEMIND_OBSERVED_AT,
                         source=SRC_HIVEMIND, **spot_signal(bands, r["Region"], itype)))
    return out


def read_anycloud_gcp(data: Path) -> list[dict[str, str]]:
    path = data / P["anycloud_gcp"]
    rows = read_csv(path)
    need_columns(rows, ["InstanceType", "vCPUs", "MemoryGiB", "AcceleratorName", "AcceleratorCount",
                        "Region", "AvailabilityZone", "Price", "SpotPrice"], path)
    return rows


def gcp_n1_offers(data: Path, anycloud: list[dict[str, str]],
                  dime: Mapping[tuple[str, str, int], DimeSlot], notes: Notes) -> list[dict[str, str]]:
    """N1 VMs with attached GPUs, per zone: machine row + accelerator row of the same zone and count.

    Host per GPU count from N1_HOST. A spot row only where both parts have a spot price. Zones with a
    Training-on-a-Dime slot of the same GPU model and count get the trace's availability and
    preemption rate (band "trace").
    """
    path = data / P["anycloud_gcp"]
    observed = last_snapshot_time(data / P["anycloud_gcp_snapshots"])
    machines = {(r["AvailabilityZone"], r["InstanceType"]): r for r in anycloud if r["InstanceType"]}
    out = []
    used_slots = set()
    for i, r in enumerate(anycloud, start=2):
        if r["InstanceType"] or r["AcceleratorName"] not in N1_GPUS:
            continue
        where = f"{path}: line {i}"
        count = whole(r["AcceleratorCount"], where)
        host = N1_HOST.get(count or 0)
        if host is None:
            raise BuildError(f"{where}: no N1 host rule for {r['AcceleratorCount']} GPUs")
        machine = machines.get((r["AvailabilityZone"], host))
        if machine is None:
            continue
        zone, region = r["AvailabilityZone"], r["Region"]
        base = dict(cloud="gcp", region=region, zone=zone,
                    continent=require_continent("gcp", region, where),
                    instance_type=n1_offer_name(host, r["AcceleratorName"], count),
                    accelerator=r["AcceleratorName"], accelerator_count=str(count),
                    vcpus=num(dec(machine["vCPUs"], where)), memory_gib=num(dec(machine["MemoryGiB"], where)),
                    observed_at=observed, source=SRC_ANYCLOUD_GCP)
        if r["Price"].strip() and machine["Price"].strip():
            total = dec(r["Price"], where) + dec(machine["Price"], where)
            out.append(offer(**base, market="on_demand", price_usd_per_hour=str(total), **on_demand_signal()))
        if r["SpotPrice"].strip() and machine["SpotPrice"].strip():
            total = dec(r["SpotPrice"], where) + dec(machine["SpotPrice"], where)
            extra = {}
            slot = dime.get((zone, r["AcceleratorName"], count))
            if slot is not None:
                used_slots.add((zone, r["AcceleratorName"], count))
                s = slot.stats
                extra = {"interruption_band": "trace", "interruptions_per_hour": sig(s.interruptions_per_hour),
                         "availability": sig(s.availability)}
                notes.add("traced", f"gcp {zone} {base['instance_type']} spot: availability "
                                    f"{s.availability:.4f}, {s.preemptions} preemptions in "
                                    f"{s.available_h:.1f} h held → {s.interruptions_per_hour:.4f}/h "
                                    f"(Training-on-a-Dime {slot.first:%Y-%m-%d}..{slot.last:%Y-%m-%d})")
            out.append(offer(**base, market="spot", price_usd_per_hour=str(total), **extra))
    for key, slot in sorted(dime.items()):
        if key not in used_slots:
            notes.add("untraced", f"Training-on-a-Dime slot {slot.count}×{slot.accelerator} in "
                                  f"{slot.zone}: no such offer shipped (not in the 2026 catalog)")
    return out


def gcp_bundled_offers(data: Path, anycloud: list[dict[str, str]], probes: Mapping[str, ProbeZone],
                       notes: Notes) -> list[dict[str, str]]:
    """a2/a3/g2 VMs (GPUs bundled) from gcp-pricing-history: the latest value per (type, region).

    Kept only in regions where the 2026-05-20 anycloud catalog lists the machine type in some zone
    (pricing.yml prices every region, offered or not). vCPUs/memory from that catalog's machine row.
    A price not above 1.2 × the host-only machine price lacks its GPU component: left out. g4 types:
    no vCPU/memory figure in the shared data, left out. a3-highgpu-1g spot in regions with H100
    probes is written per zone (every zone the catalog lists there, same regional price) so the
    probed zones can carry availability and capacity; its region-wide spot row is then not written.
    """
    path = data / P["gcp_history"]
    rows = read_csv(path)
    need_columns(rows, ["effective_from_snapshot", "instance_type", "region",
                        "ondemand_usd_per_hour", "spot_usd_per_hour"], path)
    dates_path = data / P["gcp_history_dates"]
    if not dates_path.is_file():
        raise BuildError(f"{dates_path}: file not found")
    last_date = max(d.strip() for d in dates_path.read_text(encoding="utf-8").splitlines() if d.strip())
    observed = f"{last_date}T00:00:00Z"
    if f"gcp-pricing-history-{last_date}" != SRC_GCP_HISTORY:
        raise BuildError(f"{dates_path}: last snapshot {last_date}; update SRC_GCP_HISTORY")

    latest: dict[tuple[str, str], dict[str, str]] = {}
    for r in sorted(rows, key=lambda r: r["effective_from_snapshot"]):
        latest[(r["instance_type"], r["region"])] = r
    zones_of: dict[tuple[str, str], set[str]] = defaultdict(set)
    host: dict[tuple[str, str], dict[str, str]] = {}
    accel_zones: dict[tuple[str, int], set[str]] = defaultdict(set)
    for r in anycloud:
        if r["InstanceType"]:
            zones_of[(r["InstanceType"], r["Region"])].add(r["AvailabilityZone"])
            host[(r["InstanceType"], r["Region"])] = r
        else:
            count = whole(r["AcceleratorCount"], str(path))
            accel_zones[(r["AcceleratorName"], count or 0)].add(r["AvailabilityZone"])

    # A type is offered in a zone when anycloud lists both its machine row and the accelerator row of
    # its GPU and count there. The GPU mapping must be backed by such zones.
    for (itype, region), zones in list(zones_of.items()):
        if itype in GCP_BUNDLED:
            gpu, count = GCP_BUNDLED[itype]
            label = ANYCLOUD_GPU_ALIAS.get((itype, gpu), gpu)
            with_gpu = zones & accel_zones[(label, count)]
            if zones - with_gpu:
                notes.add("gcp-no-gpu-zone", f"{itype} {', '.join(sorted(zones - with_gpu))}")
            zones_of[(itype, region)] = with_gpu
    for itype in GCP_BUNDLED:
        if not any(z for (t, _), z in zones_of.items() if t == itype):
            raise BuildError(f"{itype}: no zone lists both the machine and its GPU; check GCP_BUNDLED")
    zones_of = {key: zones for key, zones in zones_of.items() if zones}

    out = []
    skipped: Counter[str] = Counter()
    for (itype, region), r in sorted(latest.items()):
        where = f"{path}: {itype} {region}"
        if itype not in GCP_BUNDLED:
            skipped[f"{itype.split('-')[0]}: no vCPU/memory figure in the shared data"] += 1
            continue
        if (itype, region) not in zones_of:
            skipped["region where the 2026-05-20 catalog lists no zone with the type and its GPU"] += 1
            continue
        gpu, count = GCP_BUNDLED[itype]
        machine = host[(itype, region)]
        base = dict(cloud="gcp", region=region, continent=require_continent("gcp", region, where),
                    instance_type=itype, accelerator=gpu, accelerator_count=str(count),
                    vcpus=num(dec(machine["vCPUs"], where)), memory_gib=num(dec(machine["MemoryGiB"], where)),
                    observed_at=observed, source=SRC_GCP_HISTORY)
        defective = False  # the on-demand figure lacks its GPU part: the spot one of that entry does too
        for market, column, host_column in (("on_demand", "ondemand_usd_per_hour", "Price"),
                                            ("spot", "spot_usd_per_hour", "SpotPrice")):
            if not r[column].strip():
                skipped[f"{market}: no price"] += 1
                continue
            price = dec(r[column], where)
            if machine[host_column].strip() and price <= Decimal("1.2") * dec(machine[host_column], where):
                notes.add("gcp-host-only", f"{itype} {region} {market} {r[column]} ≤ 1.2 × host-only "
                                           f"{machine[host_column]}")
                defective = True
                continue
            if defective:
                notes.add("gcp-host-only", f"{itype} {region} {market} {r[column]}: same pricing entry as the "
                                           "on-demand figure without its GPU part")
                continue
            if market == "on_demand":
                out.append(offer(**base, zone="", market=market, price_usd_per_hour=r[column],
                                 **on_demand_signal()))
                continue
            probed = itype == "a3-highgpu-1g" and any(gcp_region_of_zone(z) == region for z in probes)
            if not probed:
                out.append(offer(**base, zone="", market=market, price_usd_per_hour=r[column]))
                continue
            for zone in sorted(zones_of[(itype, region)]):
                extra = {}
                if zone in probes:
                    p = probes[zone]
                    extra = {"availability": sig(p.stats.availability), "capacity_hint": str(p.capacity)}
                    notes.add("traced", f"gcp {zone} a3-highgpu-1g spot: availability "
                                        f"{p.stats.availability:.4f} ({p.stats.successes}/{p.stats.probes} "
                                        f"probes launched ≥1 of {p.requested}), capacity_hint {p.capacity}")
                out.append(offer(**base, zone=zone, market=market, price_usd_per_hour=r[column], **extra))
    for reason, n in sorted(skipped.items()):
        notes.add("gcp-history-skipped", f"{n} (type, region) rows: {reason}")
    unprobed = sorted(z for z in probes if not any(o["zone"] == z for o in out))
    if unprobed:
        raise BuildError(f"H100 probe zones without an a3-highgpu-1g offer: {unprobed}")
    return out


def gcp_history_vs_anycloud(data: Path, anycloud: list[dict[str, str]], notes: Notes) -> None:
    """Cross-check (report only): history on-demand vs anycloud machine + accelerator, for a2-highgpu/g2."""
    rows = read_csv(data / P["gcp_history"])
    latest = {}
    for r in sorted(rows, key=lambda r: r["effective_from_snapshot"]):
        latest[(r["instance_type"], r["region"])] = r
    machine = {(r["InstanceType"], r["Region"]): r for r in anycloud if r["InstanceType"]}
    accel = {(r["AcceleratorName"], whole(r["AcceleratorCount"], "anycloud"), r["Region"]): r
             for r in anycloud if not r["InstanceType"]}
    checked = close = 0
    for (itype, region), r in latest.items():
        if not (itype.startswith("g2-") or itype.startswith("a2-highgpu")) or itype not in GCP_BUNDLED:
            continue
        gpu, count = GCP_BUNDLED[itype]
        m, a = machine.get((itype, region)), accel.get((gpu, count, region))
        if not m or not a or not r["ondemand_usd_per_hour"]:
            continue
        checked += 1
        total = float(m["Price"]) + float(a["Price"])
        close += abs(total - float(r["ondemand_usd_per_hour"])) <= 0.01 * total
    notes.add("checks", f"gcp-pricing-history on-demand vs anycloud machine+accelerator (a2-highgpu, g2): "
                        f"{close} of {checked} (type, region) within 1 %")


def azure_offers(data: Path, notes: Notes) -> list[dict[str, str]]:
    """Azure GPU sizes, region-wide (zone ""), on-demand and (where a spot meter exists) spot.

    CPU-only sizes are kept (accelerator empty, count 0). Left out: sizes whose accelerator the source leaves unnamed, and
    fractional-GPU sizes (NV*ads_A10_v5 below one GPU; NV4/8/16as_v4, 1/8 to 1/2 of an MI25).
    """
    path = data / P["anycloud_azure"]
    rows = read_csv(path)
    need_columns(rows, ["InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB",
                        "Price", "SpotPrice", "Region"], path)
    observed = last_snapshot_time(data / P["anycloud_azure_snapshots"])
    out = []
    dropped: Counter[str] = Counter()
    for i, r in enumerate(rows, start=2):
        where = f"{path}: line {i}"
        itype, region = r["InstanceType"], r["Region"]
        if not r["AcceleratorName"] and re.match(r"^Standard_N", itype):
            dropped[f"GPU size with unnamed accelerator ({itype})"] += 1
            continue
        if itype in AZURE_FRACTIONAL_SIZES:
            dropped[f"fractional GPU, {AZURE_FRACTIONAL_SIZES[itype]} (the source says 1) ({itype})"] += 1
            continue
        count = whole(r["AcceleratorCount"], where) if r["AcceleratorName"] else 0
        if count == 0 and not r["AcceleratorName"]:
            pass  # a CPU-only size: what a task without accelerators runs on
        elif not count:
            dropped[f"fractional GPU ({itype})"] += 1
            continue
        base = dict(cloud="azure", region=region, zone="", continent=require_continent("azure", region, where),
                    instance_type=itype, accelerator=r["AcceleratorName"], accelerator_count=str(count or 0),
                    vcpus=r["vCPUs"], memory_gib=r["MemoryGiB"], observed_at=observed,
                    source=SRC_ANYCLOUD_AZURE)
        if r["Price"].strip():
            dec(r["Price"], where)
            out.append(offer(**base, market="on_demand", price_usd_per_hour=r["Price"], **on_demand_signal()))
        if r["SpotPrice"].strip():
            dec(r["SpotPrice"], where)
            out.append(offer(**base, market="spot", price_usd_per_hour=r["SpotPrice"]))
        else:
            dropped["no spot meter (spot row not written; on-demand kept)"] += 1
    by_reason: Counter[str] = Counter()
    for reason, n in dropped.items():
        by_reason[re.sub(r" \(Standard_\S+\)$", "", reason)] += n
    for reason, n in sorted(by_reason.items()):
        sizes = sorted({re.search(r"\((Standard_\S+)\)", k)[1] for k in dropped
                        if k.startswith(reason + " (")})
        notes.add("azure-dropped", f"{n} rows: {reason}" + (f" — {', '.join(sizes)}" if sizes else ""))
    return out


# CPU-only VMs: what a task without accelerators runs on (SkyPilot's default: 8 vCPUs, 4 GiB each).
GCP_CPU_TYPES = ("n1-standard-4", "n1-standard-8", "n1-standard-16", "n1-standard-32", "n1-highmem-8",
                 "n1-highmem-16", "n1-highcpu-16", "n1-highcpu-32", "n2-standard-8", "n2-standard-16",
                 "e2-standard-8", "c3-standard-8")
AWS_CPU_TYPES = {  # coroot's AWS reference sizes: vCPUs, GiB (AWS's published sizes; coroot has no shape columns)
    "t3.medium": (2, 4), "c5.xlarge": (4, 8), "c5.2xlarge": (8, 16), "c6i.2xlarge": (8, 16), "c7i.2xlarge": (8, 16),
    "m5.xlarge": (4, 16), "m5.2xlarge": (8, 32), "m6i.xlarge": (4, 16), "m6i.2xlarge": (8, 32),
    "m7i.xlarge": (4, 16), "r5.xlarge": (4, 32),
}
# Azure sizes that are a fraction of one GPU (Microsoft's NVv4 and NVadsA10 v5 size tables), whatever count
# the source gives: never offered as a whole accelerator
AZURE_FRACTIONAL_SIZES = {"Standard_NV4as_v4": "1/8 MI25", "Standard_NV8as_v4": "1/4 MI25",
                          "Standard_NV16as_v4": "1/2 MI25"}


def gcp_cpu_offers(data: Path, anycloud: list[dict[str, str]]) -> list[dict[str, str]]:
    """GCP CPU-only VMs, per zone: the machine rows of GCP_CPU_TYPES alone (no accelerator row)."""
    path = data / P["anycloud_gcp"]
    observed = last_snapshot_time(data / P["anycloud_gcp_snapshots"])
    out = []
    for i, r in enumerate(anycloud, start=2):
        if r["InstanceType"] not in GCP_CPU_TYPES or r["AcceleratorName"]:
            continue
        where = f"{path}: line {i}"
        base = dict(cloud="gcp", region=r["Region"], zone=r["AvailabilityZone"],
                    continent=require_continent("gcp", r["Region"], where), instance_type=r["InstanceType"],
                    accelerator="", accelerator_count="0", vcpus=num(dec(r["vCPUs"], where)),
                    memory_gib=num(dec(r["MemoryGiB"], where)), observed_at=observed, source=SRC_ANYCLOUD_GCP)
        if r["Price"].strip():
            out.append(offer(**base, market="on_demand", price_usd_per_hour=str(dec(r["Price"], where)),
                             **on_demand_signal()))
        if r["SpotPrice"].strip():
            out.append(offer(**base, market="spot", price_usd_per_hour=str(dec(r["SpotPrice"], where))))
    return out


def aws_cpu_offers(data: Path, bands, notes: Notes) -> list[dict[str, str]]:
    """AWS CPU-only VMs, region-wide, from coroot's last snapshot (2024-08-09): on-demand is the lowest of
    its last 30 snapshots (coroot's on-demand flips between tenancies and the lowest is the shared Linux
    list price, e.g. m6i.2xlarge us-east-1 0.384), spot its latest regional figure."""
    path = data / P["coroot_latest"]
    rows = read_csv(path)
    need_columns(rows, ["cloud", "region", "instance_type", "ondemand_min_last30_snapshots",
                        "spot_usd_per_hour_latest"], path)
    out = []
    for i, r in enumerate(rows, start=2):
        if r["cloud"] != "aws" or r["instance_type"] not in AWS_CPU_TYPES:
            continue
        where = f"{path}: line {i}"
        region = r["region"]
        if continent_of("aws", region) is None or "-gov-" in region:
            notes.add("cpu-dropped", f"aws {region} {r['instance_type']}: region left out (no continent or GovCloud)")
            continue
        vcpus, memory = AWS_CPU_TYPES[r["instance_type"]]
        base = dict(cloud="aws", region=region, zone="", continent=require_continent("aws", region, where),
                    instance_type=r["instance_type"], accelerator="", accelerator_count="0", vcpus=num(vcpus),
                    memory_gib=num(memory), observed_at=COROOT_OBSERVED_AT, source=SRC_COROOT_AWS_CPU)
        if r["ondemand_min_last30_snapshots"].strip():
            out.append(offer(**base, market="on_demand",
                             price_usd_per_hour=str(dec(r["ondemand_min_last30_snapshots"], where)),
                             **on_demand_signal()))
        if r["spot_usd_per_hour_latest"].strip():
            out.append(offer(**base, market="spot", price_usd_per_hour=str(dec(r["spot_usd_per_hour_latest"], where)),
                             **spot_signal(bands, region, r["instance_type"])))
    return out


# --------------------------------------------------------------------------------------------------
# Regions and egress
# --------------------------------------------------------------------------------------------------

HIVEMIND_AZURE_REGION = {"US West": "westus", "US West 2": "westus2", "US West 3": "westus3"}


def network_regions(data: Path) -> dict[tuple[str, str], set[str]]:
    """(cloud, region) → data sets that name it: Skyplane, hivemind, SkyNomad egress (GCP zones → region)."""
    seen: dict[tuple[str, str], set[str]] = defaultdict(set)

    def add(cloud_region: str, tag: str) -> None:
        cloud, _, region = cloud_region.partition(":")
        if cloud == "gcp":
            region = gcp_region_of_zone(region)
        if cloud in CLOUDS:
            seen[(cloud, region)].add(tag)

    for key in ("skyplane_latency", "skyplane_tp_2022_01", "skyplane_tp_2022_11", "skyplane_gcp_tp"):
        for r in read_csv(data / P[key]):
            add(r["src_region"], "skyplane")
            add(r["dst_region"], "skyplane")
    for r in read_csv(data / P["skyplane_egress"]):
        add(r["src"], "skyplane")
        add(r["dest"], "skyplane")
    for r in read_csv(data / P["skyplane_aws_transfer"]):
        for region in (r["src"], r["dst"]):
            if region != "internet":
                add(f"aws:{region}", "skyplane")
    for r in read_csv(data / P["skynomad_egress"]):
        add(f"aws:{r['from_region']}", "skynomad")
        add(f"aws:{r['to_region']}", "skynomad")
    for r in read_csv(data / P["hivemind_aws"]):
        add(f"aws:{r['Region']}", "hivemind")
    for r in read_csv(data / P["hivemind_gc"]):
        add(f"gcp:{r['Region']}", "hivemind")
    for r in read_csv(data / P["hivemind_azure"]):
        if r["Region"] not in HIVEMIND_AZURE_REGION:
            raise BuildError(f"{data / P['hivemind_azure']}: Azure region {r['Region']!r} has no id mapping")
        add(f"azure:{HIVEMIND_AZURE_REGION[r['Region']]}", "hivemind")
    return seen


def regions_csv(offers: list[dict[str, str]], network: Mapping[tuple[str, str], set[str]]) -> bytes:
    seen: dict[tuple[str, str], set[str]] = defaultdict(set)
    for o in offers:
        seen[(o["cloud"], o["region"])].add("offers")
    for key, tags in network.items():
        seen[key] |= tags
    lines = [["cloud", "region", "continent", "source"]]
    for (cloud, region) in sorted(seen):
        continent = require_continent(cloud, region, "regions.csv")
        lines.append([cloud, region, continent, ";".join(sorted(seen[(cloud, region)]))])
    return csv_bytes(lines)


def csv_bytes(lines: list[list[str]]) -> bytes:
    buffer = StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerows(lines)
    return buffer.getvalue().encode("utf-8")


@dataclass(frozen=True)
class EgressRow:
    cloud: str
    link_class: str
    src: str
    dst: str
    usd_per_gb: str
    source: str
    pairs: int | None = None  # None: one figure, not a median
    low: float | None = None
    high: float | None = None
    note: str = ""
    payer: str = "sender"  # sender: the sending VM's cloud bills it; receiver: the receiving VM's cloud does


def median_rows(cloud: str, link_class: str, pairs: list[tuple[str, str, float]], source: str,
                with_src_rows: bool) -> list[EgressRow]:
    """Median $/GB per (src, dst) continent, per (src, *) if asked, and over all pairs (*, *)."""
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for src, dst, price in pairs:
        groups[(src, dst)].append(price)
        if with_src_rows:
            groups[(src, "*")].append(price)
        groups[("*", "*")].append(price)
    rows = {key: EgressRow(cloud, link_class, key[0], key[1], num(statistics.median(v)), source, len(v),
                           min(v), max(v))
            for key, v in groups.items()}

    def fallback(key: tuple[str, str]) -> EgressRow | None:
        src, dst = key
        if dst != "*" and (src, "*") in rows:
            return rows[(src, "*")]
        return rows[("*", "*")] if key != ("*", "*") else None

    # a row equal to the row a lookup would fall back to adds nothing: left out
    kept = [row for key, row in rows.items()
            if (parent := fallback(key)) is None or parent.usd_per_gb != row.usd_per_gb]
    return sorted(kept, key=lambda e: (e.src, e.dst))


def egress_table(data: Path) -> list[EgressRow]:
    """Egress $/GB by cloud and link class (see PROVENANCE.md for what each figure is)."""
    out: list[EgressRow] = []
    for cloud in CLOUDS:
        out.append(EgressRow(cloud, "same_zone", "*", "*", "0", "list-pricing",
                             note="traffic inside one zone is free on all three clouds' list pricing"))

    erben = erben_egress(data)
    for cloud in CLOUDS:
        out.append(EgressRow(cloud, "cross_zone", "*", "*", num(dec(erben[cloud]["egress inter-zone $/GB"], "erben")),
                             "erben-2023", note="Erben et al. price table, April 2023"))
    # AWS bills traffic between Availability Zones of one region on both sides: the same $/GB "in each
    # direction" (EC2 pricing page, "Data Transfer within the same AWS Region")
    out.append(EgressRow("aws", "cross_zone", "*", "*", num(dec(erben["aws"]["egress inter-zone $/GB"], "erben")),
                         "aws-ec2-pricing", note="the receiving instance pays the inter-zone rate too (in each direction)",
                         payer="receiver"))

    def cont(cloud: str, region: str, where: str) -> str:
        return require_continent(cloud, region, where)

    # AWS inter-region: SkyNomad (AWS Pricing API export, newest)
    path = data / P["skynomad_egress"]
    aws_pairs = []
    for r in read_csv(path):
        if r["from_region"] == r["to_region"]:
            continue
        aws_pairs.append((cont("aws", r["from_region"], str(path)), cont("aws", r["to_region"], str(path)),
                          float(dec(r["price_usd_per_gb"], str(path)))))
    # GCP and Azure inter-region, and every cloud's traffic to another cloud: Skyplane
    path = data / P["skyplane_egress"]
    intra: dict[str, list[tuple[str, str, float]]] = defaultdict(list)
    cross: dict[str, list[tuple[str, str, float]]] = defaultdict(list)
    seen_pairs = set()
    for r in read_csv(path):
        (sc, _, sr), (dc, _, dr) = r["src"].partition(":"), r["dest"].partition(":")
        sr = gcp_region_of_zone(sr) if sc == "gcp" else sr
        dr = gcp_region_of_zone(dr) if dc == "gcp" else dr
        if (sc, sr, dc, dr) in seen_pairs or (sc, sr) == (dc, dr):
            continue
        seen_pairs.add((sc, sr, dc, dr))
        item = (cont(sc, sr, str(path)), cont(dc, dr, str(path)), float(dec(r["cost"], str(path))))
        (intra if sc == dc else cross)[sc].append(item)

    for cloud, pairs, source in (("aws", aws_pairs, "skynomad-aws-egress"),
                                 ("gcp", intra["gcp"], "skyplane-egress"),
                                 ("azure", intra["azure"], "skyplane-egress")):
        same = [p for p in pairs if p[0] == p[1]]
        other = [p for p in pairs if p[0] != p[1]]
        out += median_rows(cloud, "cross_region", same, source, with_src_rows=False)
        out += median_rows(cloud, "cross_continent", other, source, with_src_rows=True)
    for cloud in CLOUDS:
        out += median_rows(cloud, "internet", cross[cloud], "skyplane-egress", with_src_rows=True)
    return sorted(out, key=lambda e: (e.cloud, LINK_ORDER.index(e.link_class), e.payer != "sender", e.src, e.dst))


LINK_ORDER = ("same_zone", "cross_zone", "cross_region", "cross_continent", "internet")


def erben_egress(data: Path) -> dict[str, dict[str, str]]:
    """cloud → {row label → $/GB} from the 'Prices used by the study' table of erben-calibration.md."""
    path = data / P["erben"]
    if not path.is_file():
        raise BuildError(f"{path}: file not found")
    table = None
    result: dict[str, dict[str, str]] = {c: {} for c in CLOUDS}
    columns = {"GC": "gcp", "AWS": "aws", "Azure": "azure"}
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else None
        if cells and cells[1:] == ["GC", "AWS", "Azure"]:
            table = [columns[c] for c in cells[1:]]
            continue
        if table and cells and cells[0].startswith("egress"):
            for cloud, value in zip(table, cells[1:], strict=True):
                result[cloud][cells[0]] = value
        elif table and not cells:
            table = None
    if not all("egress inter-zone $/GB" in v for v in result.values()):
        raise BuildError(f"{path}: no 'egress inter-zone $/GB' row in the price table")
    return result


def egress_csv(rows: list[EgressRow]) -> bytes:
    lines = [["cloud", "link_class", "src_continent", "dst_continent", "usd_per_gb", "payer", "source"]]
    lines += [[e.cloud, e.link_class, e.src, e.dst, e.usd_per_gb, e.payer, e.source] for e in rows]
    return csv_bytes(lines)


def aws_internet_crosscheck(data: Path, rows: list[EgressRow], notes: Notes) -> None:
    """Report: Skyplane's aws_transfer_costs.csv 'internet' prices vs the cross-cloud medians."""
    figures = [float(r["cost"]) for r in read_csv(data / P["skyplane_aws_transfer"]) if r["dst"] == "internet"]
    star = next(e for e in rows if (e.cloud, e.link_class, e.src, e.dst) == ("aws", "internet", "*", "*"))
    notes.add("checks", f"aws_transfer_costs.csv AWS→internet: {len(figures)} regions, median "
                        f"{num(statistics.median(figures))} $/GB (min {num(min(figures))}, max "
                        f"{num(max(figures))}) vs cross-cloud median {star.usd_per_gb}")


# --------------------------------------------------------------------------------------------------
# Composition
# --------------------------------------------------------------------------------------------------


@dataclass
class Build:
    files: dict[str, bytes]
    offers: pd.DataFrame
    notes: Notes
    egress: list[EgressRow]


def build(data: Path) -> Build:
    notes = Notes()
    bands = spot_advisor_bands(data)

    skypilot_rows = read_csv(data / P["skypilot_aws"])
    az_region = {r["AvailabilityZone"]: r["Region"] for r in skypilot_rows}
    mapping = v100_zone_mapping(data, az_region)
    for zone, az in sorted(mapping.mapped.items()):
        notes.add("zone-map", f"{zone} → {az} (series maximum equals the archive maximum)")
    for zone, why in sorted(mapping.unproven.items()):
        notes.add("zone-map", f"{zone}: not mapped — {why}")
    v100 = v100_availability(data, mapping)

    aws = aws_skypilot_offers(data, bands, v100, notes)
    covered = {(r["InstanceType"], r["Region"]) for r in skypilot_rows}
    skypilot_od = {(r["InstanceType"], r["Region"]): r["Price"] for r in skypilot_rows if r["Price"].strip()}
    tsaol = aws_tsaol_offers(data, covered, skypilot_od, notes)
    hivemind = aws_hivemind_spot_offers(data, bands, tsaol)

    anycloud = read_anycloud_gcp(data)
    dime = dime_gcp_preemptions(data)
    probes = h100_probes(data)
    gcp = (gcp_n1_offers(data, anycloud, dime, notes) + gcp_bundled_offers(data, anycloud, probes, notes)
           + gcp_cpu_offers(data, anycloud))
    aws_cpu = aws_cpu_offers(data, bands, notes)
    gcp_history_vs_anycloud(data, anycloud, notes)
    azure = azure_offers(data, notes)

    all_offers = aws + tsaol + hivemind + aws_cpu + gcp + azure
    raw = pd.DataFrame(all_offers, columns=list(COLUMN_NAMES), dtype="string")
    raw.index = range(2, len(raw) + 2)
    table = parse_offers(raw, "offers.csv (built)")
    missing_source = table["source"].isna() | (table["source"] == "")
    if missing_source.any():
        raise BuildError("some offers have no source")

    egress = egress_table(data)
    aws_internet_crosscheck(data, egress, notes)
    network = network_regions(data)

    files = {
        "offers.csv": to_csv_bytes(table),
        "regions.csv": regions_csv(all_offers, network),
        "egress.csv": egress_csv(egress),
    }
    for name, rel in LICENSE_COPIES.items():
        src = data / rel
        if not src.is_file():
            raise BuildError(f"{src}: licence file not found")
        files[f"LICENSES/{name}"] = src.read_bytes()
    for name, text in LICENSE_NOTES.items():
        files[f"LICENSES/{name}"] = text.encode("utf-8")
    result = Build(files=files, offers=table, notes=notes, egress=egress)
    files["PROVENANCE.md"] = provenance(result, mapping, v100, probes, dime).encode("utf-8")
    return result


# --------------------------------------------------------------------------------------------------
# PROVENANCE.md
# --------------------------------------------------------------------------------------------------


def counts_table(table: pd.DataFrame) -> str:
    grouped = table.groupby(["cloud", "market", "continent"]).size()
    lines = ["| cloud | market | continent | rows |", "|---|---|---|---:|"]
    lines += [f"| {c} | {m} | {k} | {n} |" for (c, m, k), n in grouped.items()]
    per_source = table.groupby(["source", "market"]).size()
    lines += ["", "| source | market | rows |", "|---|---|---:|"]
    lines += [f"| {s} | {m} | {n} |" for (s, m), n in per_source.items()]
    return "\n".join(lines)


def egress_md(rows: list[EgressRow]) -> str:
    lines = ["| cloud | link class | src → dst | $/GB | payer | source | what it is |", "|---|---|---|---:|---|---|---|"]
    for e in rows:
        what = (f"median of {e.pairs} region pairs (min {num(e.low)}, max {num(e.high)})"
                if e.pairs is not None else e.note)
        lines.append(f"| {e.cloud} | {e.link_class} | {e.src} → {e.dst} | {e.usd_per_gb} | {e.payer} | {e.source} "
                     f"| {what} |")
    return "\n".join(lines)


def bullet(notes: Notes, topic: str, indent: str = "") -> str:
    return "\n".join(f"{indent}- {line}" for line in notes.lines.get(topic, [])) or f"{indent}- (none)"


def provenance(b: Build, mapping: ZoneMapping, v100, probes, dime) -> str:
    t = b.offers
    accelerators = sorted(t["accelerator"].dropna().unique())
    regions = t.groupby("cloud")["region"].nunique()
    spot = t[t["market"] == "spot"]
    aws_spot = spot[spot["cloud"] == "aws"]
    band_known = aws_spot["interruption_band"].notna().sum()
    return f"""# Bundled price snapshot: provenance

Generated by `scripts/build_bundled_data.py` from the shared data folder (`../shared/data`); do not
edit by hand — change the script and rerun it. Every number below comes from a file in that folder;
rows without a real figure are left out. The prices are public list prices (and spot prices) of
AWS, GCP and Azure, bundled so that `geotrain plan` runs offline. Re-fetch live prices for real use.

Files: `offers.csv` ({len(t)} offers, {len(accelerators)} accelerator models, regions per cloud:
{", ".join(f"{c} {n}" for c, n in regions.items())}), `regions.csv`, `egress.csv`, this file, `LICENSES/`.

## Sources

| id (`source` column) | shared-data file(s) | upstream | date of the figures | licence |
|---|---|---|---|---|
| `{SRC_SKYPILOT_AWS}` | `{P["skypilot_aws"]}` | skypilot-org/skypilot-catalog `catalogs/v8/aws/vms.csv` @ 00148f2af3672e2229b4f7bf8157d5a3f36e3c35 | unknown; "late 2025 / early 2026". Written as **{SKYPILOT_AWS_OBSERVED_AT}** (approximation: its on-demand prices equal vantage.sh data of 2026-01-21 for all 216 overlapping pairs) | not stated (`LICENSES/skypilot-catalog-aws-NOTE.txt`) |
| `{SRC_TSAOL}` | `{P["tsaol"]}` | tsaol/aws-gpu `data/all_gpu_instances.js` @ 7412fd256c5eda04a70a17742a68e8e44824b2cb (from instances.vantage.sh) | 2026-01-21 | MIT claimed, no LICENSE file (`LICENSES/tsaol-aws-gpu-NOTE.txt`) |
| `{SRC_HIVEMIND}` | `{P["hivemind_aws"]}` | cirquit/hivemind-multi-cloud @ 654cc023d1ee5e049d8ed72ed66194e137fcc114 (Erben et al., PVLDB 2024) | 2023-04-25 10:40, time zone not stated, written as **{HIVEMIND_OBSERVED_AT}** | MIT (`LICENSES/hivemind-multi-cloud-LICENSE`) |
| `{SRC_ANYCLOUD_GCP}` | `{P["anycloud_gcp"]}`, `{P["anycloud_gcp_snapshots"]}` | anycloud-sh/catalog `gcp/vms.csv` @ 62ff0a987e0c257a89235415d2877812fb1aaf29 | commit time of that version (last line of gcp_snapshots.txt) | not stated (`LICENSES/anycloud-catalog-NOTE.txt`) |
| `{SRC_ANYCLOUD_AZURE}` | `{P["anycloud_azure"]}`, `{P["anycloud_azure_snapshots"]}` | anycloud-sh/catalog `azure/vms.csv` @ 62ff0a987e0c257a89235415d2877812fb1aaf29 | commit time of that version (last line of azure_snapshots.txt) | not stated (`LICENSES/anycloud-catalog-NOTE.txt`) |
| `{SRC_COROOT_AWS_CPU}` | `{P["coroot_latest"]}` | coroot/cloud-pricing gh-pages `data/cloud-pricing.json.gz` @ af03eada15b25d80863f2547ba281e71af9d5c91 (from the Infracost pricing DB) | last snapshot, 2024-08-09 (written as **2024-08-09T00:00:00Z**) | Apache-2.0 (`LICENSES/coroot-cloud-pricing-LICENSE`) |
| `{SRC_GCP_HISTORY}` | `{P["gcp_history"]}`, `{P["gcp_history_dates"]}` | Cyclenerd/google-cloud-pricing-cost-calculator `pricing.yml`, HEAD dac31281f2a4575f0a8bff20ac04fc71a5ff2190 | the latest value per (type, region) holds until the last snapshot, so written as that snapshot's date (00:00 UTC) | Apache-2.0 per its README (`LICENSES/gcp-pricing-history-LICENSE.txt`) |

Interruption and availability signals (not prices; they do not change `source`):

| signal | shared-data file(s) | upstream | date | licence |
|---|---|---|---|---|
| AWS Spot Advisor bands | `{P["spot_advisor"]}` | public feed, snapshot in ETOgaosion/bamboo @ 0faa479fbca26f06d74fa8e356ca06d88ab1f862 | fetched on or before 2024-02-28 | AWS public feed (`LICENSES/aws-spot-advisor-NOTE.txt`) |
| AWS p3.2xlarge availability | `{P["v100_traces"]}/*.csv.gz`, `{P["v100_prices"]}`, `{P["v100_archive"]}` | andylizf/skynomad-artifact @ 62b9aaa1942e30c40cb9f6f5d7d03d6823d1d1f7 (Can't-Be-Late trace) | 2023-02-15 .. 2023-04-02 | Apache-2.0 (`LICENSES/skynomad-LICENSE`, `skynomad-NOTICE`) |
| GCP a3-highgpu-1g availability, capacity | `{P["h100_probes"]}` | same SkyNomad artifact | 2025-10-03 .. 2025-10-18 | Apache-2.0 |
| GCP N1+GPU preemptions | `{P["dime_gcp_logs"]}/persistent_*.out` | stanford-futuredata/training_on_a_dime @ 85f659572ff9da2701e5f309fbad7e828e6be46b | 2020-03-01 .. 2020-03-07 | MIT (`LICENSES/training-on-a-dime-LICENSE`) |

Coroot is used for AWS CPU-only VMs only (no other shared source prices them); its README warns that
its on-demand figures flip between tenancies, so the lowest of its last 30 snapshots is taken (the
shared-tenancy Linux list price: m6i.2xlarge us-east-1 $0.384, c6i.2xlarge $0.34, m5.xlarge $0.192),
and its spot figures are regional (no zone). Its GPU rows are not used (price-history replay only). Not used for signals: Bamboo/Parcae traces (AWS pools without zones;
GCP counts with undocumented semantics and unsorted timestamps), Training-on-a-Dime AWS logs (zone
*names* of 2020 with no way to prove their AZ IDs), hivemind's "Availability"/"Interruption Ratio"
columns (semantics not documented).

## offers.csv: rules

Common: `price_usd_per_hour` = Linux price of one VM for one hour. `market` spot | on_demand.
On-demand rows: `interruption_band` none, `interruptions_per_hour` 0. Spot rows: see "Interruption
signal". `observed_at` = date of the price (not of the signals). `capacity_hint` only from the H100
probes.

**AWS.** (1) `{SRC_SKYPILOT_AWS}`: one on-demand and one spot row per (type, AZ) as in the file;
`zone` = AZ ID (incl. Local Zones use1-atl2-az1, usw2-lax1-az1/az2, kept with their parent region).
Empty Price (p5e, trn2: reservation only) → no on-demand row; empty SpotPrice → no spot row.
(2) `{SRC_TSAOL}`: on-demand only, region-wide (`zone` ""), for every (type, region) the SkyPilot file
does not cover. GPU names mapped to canonical ones (A100 40 GB/80 GB, V100 16/32 GB by GPU memory;
"NVIDIA B200 Blackwell" → B200; "AWS Trainium" → Trainium; RTX PRO 6000 → RTXPRO6000; AMD Radeon Pro
V520 → RadeonProV520; Qualcomm AI 100 → QualcommAI100). Left out:
{bullet(b.notes, "tsaol-dropped")}
(4) `{SRC_COROOT_AWS_CPU}`: CPU-only VMs (what a task without accelerators runs on), region-wide:
{", ".join(f"{k} ({v[0]} vCPUs, {v[1]} GiB)" for k, v in AWS_CPU_TYPES.items())}; on-demand = the
lowest of coroot's last 30 snapshots, spot = its latest regional figure with the Spot Advisor band.
(3) `{SRC_HIVEMIND}`: g4dn.2xlarge spot in 5 AZs of us-west-1/us-west-2 (the AWS VM of Erben et al.),
with vCPU/memory/GPU from the tsaol row of g4dn.2xlarge.

**GCP.** (1) `{SRC_ANYCLOUD_GCP}` — N1 VMs with attached GPUs (T4, V100, P100, P4), per zone: price =
machine row + accelerator row of the same zone and GPU count (SkyPilot convention), both on-demand
and spot (spot only where both parts have a spot price). Host rule: **n1-standard-(8·N) for N GPUs**
(1 → n1-standard-8 as in Erben et al., 2 → n1-standard-16, 4 → n1-standard-32, 8 → n1-standard-64),
i.e. 8 vCPUs per GPU, within GCP's vCPU maximum for every GPU count of these models (tightest: 1×V100,
12 vCPUs). Named `<machine>+<GPU>` (1 GPU) or `<machine>+<N>x<GPU>`. vCPUs/memory = the machine's.
A100/L4/H100 accelerator rows of this file are not used (those GPUs come bundled in a2/g2/a3; its
H100/H200/B200 rows look like non-list prices, see its README).
CPU-only VMs from the same file, per zone, the machine row alone: {", ".join(GCP_CPU_TYPES)}.
(2) `{SRC_GCP_HISTORY}` — a2-highgpu/megagpu/ultragpu, a3-highgpu/megagpu, g2-standard: latest value
per (type, region), region-wide (`zone` ""). GPU model/count from the type name (a2-highgpu-Ng: N×A100;
a2-ultragpu-Ng: N×A100-80GB; a2-megagpu-16g: 16×A100; a3-highgpu-Ng: N×H100; a3-megagpu-8g: 8×H100 —
SkyPilot's "H100-MEGA" label is the same GPU; g2-standard-4/8/12/16/32: 1×L4, -24: 2, -48: 4, -96: 8),
checked against the anycloud accelerator rows listed in the same zones. vCPUs/memory from the anycloud
machine row. Kept only in regions where the 2026-05-20 anycloud catalog lists the type (pricing.yml
prices every region whether offered or not). Left out:
{bullet(b.notes, "gcp-history-skipped")}
- prices not above 1.2 × the host-only machine price (the GPU component is missing in pricing.yml):
{chr(10).join("  - " + x for x in b.notes.lines.get("gcp-host-only", [])) or "  - (none)"}
a3-highgpu-1g spot in the regions of the H100 probes is written per zone (every zone the anycloud
catalog lists for a3-highgpu-1g there, with the regional price — GCP prices are per region) instead
of one region-wide row, so the probed zones carry availability and capacity.

**Azure.** `{SRC_ANYCLOUD_AZURE}`: region-wide (`zone` ""), on-demand from Price, spot from SpotPrice
(empty SpotPrice = no spot meter → no spot row). The 2026-05-20 version has Linux prices (the
Linux/Windows flip of 2026-05-01..02 in the change log is not in it). Its CPU-only sizes (D/E/F
series) are kept with accelerator empty. Left out:
{bullet(b.notes, "azure-dropped")}

## Interruption signal

- **AWS spot rows**: Spot Advisor band of (region, instance type), Linux ({band_known} of {len(aws_spot)}
  AWS spot rows; the others are types/regions the 2024 feed does not list → empty = unknown). Rate
  λ = −ln(1 − p)/730 h with p = band midpoint (2.5, 7.5, 12.5, 17.5 %) and p = 25 % for ">20%"
  (open band; a lower estimate), see `geotrain/pricing/interruption.py`. The band is per region, not per
  zone, and is ~2 years older than the prices.
- **Traced zones**:
{bullet(b.notes, "traced", "  ")}
- AWS zone-name → AZ-ID mapping for the V100 trace (only where the data proves it):
{bullet(b.notes, "zone-map", "  ")}
  The V100 trace is an availability trace (can a spot p3.2xlarge be had at each tick), not a log
  of a running VM, so only `availability` is set; the Spot Advisor band stays.
  The H100 probes are launch probes (no VM kept running): `availability` = time-weighted share of
  10-min probes that launched ≥ 1 of 16; `capacity_hint` = lower median of instances created (≤ 16
  by construction: a lower bound); no interruption figure (band and rate left empty).
  Training-on-a-Dime (GCP preemptible VMs, March 2020, 24 h lifetime cap then in force) follows a
  running VM: band "trace", `interruptions_per_hour` = preemptions / hours held. The log names the GPU
  and zone, not the host machine: applied to the shipped N1 host of the same GPU model and count.
{bullet(b.notes, "untraced", "  ")}
- **GCP and Azure spot rows otherwise**: interruption unknown (empty); no public per-type feed in the
  shared data.

## Row counts

{counts_table(t)}

Accelerators ({len(accelerators)}): {", ".join(accelerators)}.

## regions.csv

Every (cloud, region) in offers.csv, in Skyplane's latency/throughput/egress files (GCP zones such as
`gcp:us-central1-a` reduced to the region), in SkyNomad's AWS egress file, and in hivemind's price
snapshots (Azure display names "US West", "US West 2", "US West 3" → westus, westus2, westus3).
`source` lists where the region appears (offers; skyplane; skynomad; hivemind). Continent by the
region's location: AWS prefix us-/ca-/mx- → north_america, sa- → south_america, eu- → europe,
me-/il- → middle_east, af- → africa, ap- → asia except ap-southeast-2 (Sydney), -4 (Melbourne),
-6 (New Zealand) → oceania (GovCloud us-gov-* → north_america); GCP us-/northamerica- →
north_america, southamerica- → south_america, europe- → europe, asia- → asia, australia- → oceania,
me- → middle_east, africa- → africa; Azure by an explicit name table in the script. The script fails
on a region without a rule.

## egress.csv

Price per GB of traffic between two VMs, billed by `cloud`: the sending VM's cloud (`payer` sender)
or, where a cloud bills incoming traffic too, the receiving VM's (`payer` receiver). A transfer costs
the sender's row plus the receiver's row, if its cloud has one for that link class.

Billing rules, as each cloud's price page states them (geotrain follows them in plans, in launch's
spend so far and in cost-report alike):
- **Direction.** Traffic into a cloud is free on all three (AWS EC2 pricing, "Data Transfer IN To
  Amazon EC2 From Internet: $0.00"; Google Cloud "VPC network pricing": ingress free; Azure
  "Bandwidth pricing": inbound data transfer free) — except between **AWS** Availability Zones of
  one region, which AWS bills "in each direction" (EC2 On-Demand pricing, "Data Transfer within the
  same AWS Region": $0.01/GB in and $0.01/GB out), hence the `receiver` row. **GCP** bills traffic
  between zones of one region once, on egress ($0.01/GB, "VPC network pricing"). **Azure** announced
  inter-zone charges in 2021 and withdrew them in May 2024 (Bandwidth pricing): 0, as in Erben et al.'s
  table; Azure prices are region-wide in this catalog anyway.
- **Free tiers** (AWS 100 GB/month of internet egress per account, Azure the first 100 GB/month, GCP
  Standard Tier 200 GB/month) are per account and month: geotrain cannot know what else the account
  sent, so it does not deduct them; a run's cost is an upper bound by at most that allowance.
- **Object storage** in the VM's own region is free to write to and read from on all three clouds
  (S3, Cloud Storage and Blob Storage in-region transfer): checkpoint traffic is priced only when the
  storage is in another region (cost-report's storage line).

`same_zone` = 0 on all three clouds: that is the clouds' list
pricing (traffic within one zone over private IPs is free); no file in the shared data states it —
Erben's table starts at inter-zone. `cross_zone` = Erben et al.'s table (April 2023; Azure 0.00 there).
`cross_region` (same continent) and `cross_continent` (same cloud): AWS from SkyNomad's
`aws_egress_pricing.csv` (AWS Pricing API export, 2026 artifact; 1,122 pairs), GCP and Azure from
Skyplane's `egress_cost_pairs.csv` (Skyplane commit 1e920e4a…, 2023-02-06; list prices of 2022 —
GCP has since changed its inter-region pricing, so GCP figures are dated). `internet` = traffic to
another cloud, on-prem or the internet: Skyplane's cross-cloud pairs by source cloud (the price a cloud
charges for internet egress). Each figure is the median over the region pairs in its group;
`*` = any continent; a lookup picks the most specific row, and every (cloud, link class) has a `*,*`
row. Cross-checks:
{bullet(b.notes, "checks")}

For comparison, Erben et al.'s April-2023 figures: inter-region US 0.01/0.01/0.02 (GC/AWS/Azure),
between continents 0.08/0.02/0.02.

{egress_md(b.egress)}

## What is missing or doubtful

- No spot price for AWS types outside the SkyPilot file except g4dn.2xlarge in 5 AZs (2023); tsaol
  rows are on-demand only. No AWS on-demand for p5e.48xlarge and trn2 (reservation only).
- Azure prices are region-wide only (no zone-level prices); Azure has no interruption figure.
- GCP interruption is unknown except the traced zones above; GCP a2/a3/g2 prices are region-wide;
  g4 (RTX PRO 6000) is left out for want of vCPU/memory figures; a3-ultragpu/a3-edgegpu/a4 have no
  price in gcp-pricing-history and their anycloud accelerator prices are not list prices.
- The AWS Spot Advisor snapshot (≤ 2024-02-28) is older than the prices; types launched later
  (p5e, p5en, p6, g6e …) may have no band. Availability traces are from 2020, 2023 and 2025.
- Dates approximated: SkyPilot AWS ({SKYPILOT_AWS_OBSERVED_AT}), hivemind time zone.
- Licences not stated for the SkyPilot and anycloud catalogs and only claimed for tsaol; the figures are
  public list prices, kept here with their origin.
- GCP egress figures come from 2022 list prices (Skyplane); cross_zone figures from April 2023.
"""


# --------------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------------


def summary(b: Build) -> str:
    t = b.offers
    lines = ["rows per cloud × market × continent:"]
    for (cloud, market, continent), n in t.groupby(["cloud", "market", "continent"]).size().items():
        lines.append(f"  {cloud:5} {market:9} {continent:13} {n:6}")
    lines.append(f"total {len(t)} offers; {t['accelerator'].nunique()} accelerators: "
                 f"{', '.join(sorted(t['accelerator'].dropna().unique()))}")
    t4 = t[(t["accelerator"] == "T4") & (t["market"] == "spot")].groupby("cloud").size()
    lines.append("T4 spot offers per cloud: " + ", ".join(f"{c} {n}" for c, n in t4.items()))
    a100 = t[t["accelerator"].isin(["A100", "A100-80GB"]) & (t["continent"] == "europe")].groupby(
        ["cloud", "market"]).size()
    lines.append("A100 offers in Europe: " + ", ".join(f"{c}/{m} {n}" for (c, m), n in a100.items()))
    for topic in ("checks", "zone-map", "traced"):
        lines += [f"{topic}: {x}" for x in b.notes.lines.get(topic, [])]
    lines += [f"{name}: {len(data):,} bytes" for name, data in sorted(b.files.items())]
    return "\n".join(lines)


def write_all(out_dir: Path, files: Mapping[str, bytes]) -> None:
    for name, content in sorted(files.items()):
        path = out_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    stale = sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*")
                   if p.is_file() and str(p.relative_to(out_dir)) not in files)
    for name in stale:
        print(f"warning: {out_dir / name} was not made by this script; remove it if it is stale",
              file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR,
                        help=f"the shared data folder (default: {DEFAULT_DATA_DIR})")
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT_DIR,
                        help=f"where to write the bundled files (default: {DEFAULT_OUT_DIR})")
    args = parser.parse_args(argv)
    data = args.data_dir.resolve()
    if not (data / "README.md").is_file() or not (data / "prices").is_dir():
        print(f"error: {data} is not the shared data folder (no README.md and prices/ there); "
              f"pass --data-dir PATH", file=sys.stderr)
        return 2
    try:
        result = build(data)
    except (BuildError, CatalogError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    write_all(args.out_dir, result.files)
    print(summary(result))
    print(f"wrote {len(result.files)} files to {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

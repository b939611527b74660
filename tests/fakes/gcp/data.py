"""What the GCP fake serves, derived from the bundled GCP rows of ``offers.csv``: the names GCE uses, the
per-component unit prices that reproduce the bundled per-VM prices, and the Money encoding."""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from geotrain.pricing.bundled import data_bytes
from geotrain.pricing.live.gcp.descriptions import GPU_SKUS as PUBLISHED_GPU_SKUS

PROJECT = "geotrain-fake-project"
SERVICE_ID = "6F81-5844-456A"  # Compute Engine's service id in the real catalog
ENDPOINTS = ("services", "skus", "zones", "machineTypes", "acceleratorTypes")
DECOY_FACTORS = {"commitment": 0.55, "sole_tenancy": 1.1, "custom": 1.05, "storage": 1.0}
COMPUTE_BASE = "https://www.googleapis.com/compute/v1"

# canonical accelerator of the bundled rows -> GCE accelerator type (N1-attached GPUs)
N1_GPU_TYPES = {"T4": "nvidia-tesla-t4", "V100": "nvidia-tesla-v100", "P100": "nvidia-tesla-p100",
                "P4": "nvidia-tesla-p4"}
# GCE accelerator type -> its GPU SKUs' names: the product's table of the catalogue's own descriptions
GPU_SKUS = {sku.accelerator_type: sku for sku in PUBLISHED_GPU_SKUS}
MAX_CARDS = {"nvidia-tesla-a100": 16, "nvidia-a100-80gb": 8, "nvidia-l4": 8, "nvidia-h100-80gb": 8,
             "nvidia-h100-mega-80gb": 8}
# pricing series -> its core/RAM SKUs' resourceGroup (the words are the product's table, SERIES_SKUS)
SERIES_GROUPS = {"n1": ("N1Standard", "N1Standard"), "a2": ("CPU", "RAM"), "a3": ("CPU", "RAM"),
                 "a3-mega": ("CPU", "RAM"), "g2": ("CPU", "RAM")}
# the location word of a region in SKU descriptions, where public catalogue rows show it; elsewhere the
# multi-region word the catalogue also uses (Americas, EMEA, APAC)
LOCATION_WORDS = {"us-east4": "Virginia", "us-east5": "Columbus", "us-central1": "Iowa", "europe-west1": "Belgium",
                  "europe-west3": "Frankfurt", "europe-west4": "Netherlands", "asia-south2": "Delhi",
                  "asia-southeast1": "Singapore", "asia-northeast1": "Tokyo"}


def location_word(region: str) -> str:
    if region in LOCATION_WORDS:
        return LOCATION_WORDS[region]
    if region.startswith(("us-", "northamerica-", "southamerica-")):
        return "Americas"
    return "EMEA" if region.startswith(("europe-", "me-", "africa-")) else "APAC"


N1_HOSTS = {8: 30.0, 16: 60.0, 32: 120.0, 64: 240.0}  # n1-standard-<vCPUs>: GiB
DECOY_MACHINES = {"n1-standard-4": (4, 15.0), "e2-standard-8": (8, 32.0)}


def bundled_gcp_rows() -> list[dict[str, str]]:
    """The GCP GPU rows of the bundled offers.csv, as strings (the fake's catalogue sells GPU VMs only)."""
    text = data_bytes("offers.csv").decode("utf-8")
    return [row for row in csv.DictReader(io.StringIO(text)) if row["cloud"] == "gcp" and row["accelerator"]]


def series_of(instance_type: str) -> str:
    """The pricing series of a bundled instance type: n1-standard-8+T4 -> n1, a3-megagpu-8g -> a3-mega."""
    if instance_type.startswith("a3-megagpu"):
        return "a3-mega"
    return instance_type.split("-")[0]


def gpu_type_of(row: dict[str, str]) -> str:
    """The GCE accelerator type of a bundled row."""
    name, accelerator = row["instance_type"], row["accelerator"]
    if "+" in name:
        return N1_GPU_TYPES[accelerator]
    if name.startswith("a2-ultragpu"):
        return "nvidia-a100-80gb"
    if name.startswith("a2-"):
        return "nvidia-tesla-a100"
    if name.startswith("a3-megagpu"):
        return "nvidia-h100-mega-80gb"
    if name.startswith("a3-"):
        return "nvidia-h100-80gb"
    if name.startswith("g2-"):
        return "nvidia-l4"
    raise ValueError(f"no GCE accelerator type for {name}")


def host_of(row: dict[str, str]) -> str:
    """The machine type that carries an offer: the N1 host of an N1+GPU offer, else the type itself."""
    return row["instance_type"].split("+")[0]


@dataclass(frozen=True)
class Rate:
    """One component's unit price: region, market, what ("core", "ram" or a GCE accelerator type), series."""

    region: str
    market: str
    series: str
    what: str
    usd: float


def decompose(rows: list[dict[str, str]]) -> list[Rate]:
    """Per-component unit prices that reproduce the bundled per-VM prices (see the package docstring)."""
    groups: dict[tuple[str, str, str], dict[str, dict[str, str]]] = defaultdict(dict)
    for row in rows:
        key = (row["region"], row["market"], series_of(row["instance_type"]))
        seen = groups[key].get(row["instance_type"])
        if seen is not None and float(seen["price_usd_per_hour"]) != float(row["price_usd_per_hour"]):
            raise AssertionError(f"{key} {row['instance_type']}: zones of a region disagree on the price")
        groups[key][row["instance_type"]] = row
    rates: list[Rate] = []
    for (region, market, series), by_type in sorted(groups.items()):
        chosen = list(by_type.values())
        if series == "n1":  # the 1-GPU row of each model (the others are N x it, to anycloud's rounding)
            smallest: dict[str, dict[str, str]] = {}
            for row in chosen:
                best = smallest.get(row["accelerator"])
                if best is None or int(row["accelerator_count"]) < int(best["accelerator_count"]):
                    smallest[row["accelerator"]] = row
            chosen = list(smallest.values())
        gpus = sorted({gpu_type_of(r) for r in chosen})
        if series == "n1":  # one host, several GPU models: the minimum-norm split can go negative
            cheapest = min(chosen, key=lambda r: float(r["price_usd_per_hour"]))
            host = 2 / 3 * float(cheapest["price_usd_per_hour"])  # vCPUs, RAM, GPU: a third each of the cheapest
            core, ram = host / 2 / float(cheapest["vcpus"]), host / 2 / float(cheapest["memory_gib"])
            rates += [Rate(region, market, series, "core", core), Rate(region, market, series, "ram", ram)]
            for row in sorted(chosen, key=gpu_type_of):
                per_gpu = (float(row["price_usd_per_hour"]) - float(row["vcpus"]) * core
                           - float(row["memory_gib"]) * ram) / int(row["accelerator_count"])
                if per_gpu <= 0:
                    raise AssertionError(f"{(region, market, series)}: {row['instance_type']}: GPU rate {per_gpu}")
                rates.append(Rate(region, market, series, gpu_type_of(row), per_gpu))
            continue
        matrix = np.array([[float(r["vcpus"]), float(r["memory_gib"])]
                           + [float(r["accelerator_count"]) if gpu_type_of(r) == g else 0.0 for g in gpus]
                           for r in chosen])
        prices = np.array([float(r["price_usd_per_hour"]) for r in chosen])
        norms = np.linalg.norm(matrix, axis=0)
        solution = np.linalg.lstsq(matrix / norms, prices, rcond=None)[0] / norms
        fitted = matrix @ solution
        if not np.all(np.abs(fitted - prices) <= 1e-9 * prices):
            raise AssertionError(f"{(region, market, series)}: bundled prices are not linear in the components")
        if not np.all(solution > 0):
            raise AssertionError(f"{(region, market, series)}: a component came out non-positive: {solution}")
        for what, usd in zip(["core", "ram", *gpus], solution, strict=True):
            rates.append(Rate(region, market, series, what, float(usd)))
    return rates


def money(usd: float) -> dict[str, Any]:
    """A google.type.Money of whole nano-dollars."""
    nanos_total = round(usd * 1e9)
    units, nanos = divmod(nanos_total, 1_000_000_000)
    return {"currencyCode": "USD", "units": str(units), "nanos": nanos}


def money_usd(usd: float) -> float:
    """What :func:`money` writes, read back (the price a client computes from it)."""
    nanos_total = round(usd * 1e9)
    units, nanos = divmod(nanos_total, 1_000_000_000)
    return units + nanos / 1e9

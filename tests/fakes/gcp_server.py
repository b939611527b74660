"""A local fake of the Google Cloud APIs geotrain's GCP price source reads, on 127.0.0.1 (threaded, port 0).

It speaks the published REST shapes, so the real ``google-cloud-billing`` (``transport="rest"``) and
``google-cloud-compute`` clients work against it unchanged (only ``api_endpoint`` and the credentials
point here; see environment-notes §4). The clients add ``$alt=json;enum-encoding=int`` to every query
string; it is accepted and ignored (the one enum served, ``geoTaxonomy.type``, is an integer).

- **Cloud Billing Catalog** ``GET /v1/services`` (one page) and ``GET /v1/services/{id}/skus``
  (``pageSize`` / ``pageToken`` → ``nextPageToken``, at most :attr:`GcpFake.page_size` a page): SKUs
  with ``category`` (``resourceFamily``, ``resourceGroup``, ``usageType`` "OnDemand" or "Preemptible"),
  ``serviceRegions`` (one region each), ``pricingInfo[0].pricingExpression`` (``usageUnit`` "h" for
  cores and GPUs, "GiBy.h" for RAM, one tiered rate from 0 with ``unitPrice`` {currencyCode, units,
  nanos}) and ``geoTaxonomy``, described the way GCE's SKUs are ("N1 Predefined Instance Core running
  in …", "Spot Preemptible A2 Instance Ram running in …", "Nvidia Tesla T4 GPU attached to Spot
  Preemptible VMs running in …").
- **Compute Engine** ``GET /compute/v1/projects/{p}/zones`` (``maxResults`` / ``pageToken``),
  ``GET /compute/v1/projects/{p}/aggregated/machineTypes`` and ``…/aggregated/acceleratorTypes``
  (``{"items": {"zones/<zone>": {"machineTypes": [...]}}, "nextPageToken"}``, at most
  :attr:`GcpFake.page_size` zone scopes a page; a zone without accelerators answers the
  ``NO_RESULTS_ON_PAGE`` warning GCE sends). A wrong project answers 404.

Figures. Every price and spec comes from the bundled GCP rows of ``geotrain/pricing/data/offers.csv``
(from ``../shared/data``: anycloud's N1+GPU rows and the Cyclenerd pricing.yml a2/a3/g2 rows). GCE
prices VMs by component, so the fake turns the per-VM figures into per-component unit prices, per
region and market and per *pricing series* (N1, A2, A3, A3 Mega, G2: the series whose machine types
share core, RAM and GPU SKUs):

- price(VM) = vCPUs × core rate + GiB × RAM rate + Σ GPUs × GPU rate, the way GCE bills and the way
  pricing.yml computed the a2/a3/g2 figures; an N1+GPU offer is its n1-standard-(8·N) host plus N
  attached GPUs (the bundled host rule, PROVENANCE.md).
- The rates are the solution of that linear system over the series' rows of the region and market.
  Where the rows do not tell the components apart (all N1 hosts have 3.75 GiB per vCPU, all a3-highgpu
  types are multiples of a3-highgpu-1g, …) the fake takes the minimum-norm solution in column-normalised
  units: for a family whose types all scale together this gives the vCPUs, the RAM and the GPUs equal
  shares of the price. Any split gives the same VM prices, which is all the bundled data (and the
  referee) can check; the split itself is not a published figure. Every rate is positive (checked).
- N1 has one host (the N1 core and RAM SKUs) for several GPU models, where the minimum-norm split can
  make a GPU negative; there the rule is spelled out: the region's cheapest 1-GPU N1 offer is split in
  equal thirds (its 8 vCPUs, its 30 GiB, its GPU), which fixes the core and RAM rates, and each other
  model's GPU rate is its 1-GPU offer less that host (for a region with one model this is the
  minimum-norm split again).
- N1: the rows solved are the smallest GPU count of each model (1 GPU). anycloud rounded its machine
  and accelerator figures to 5 decimals before adding them, so its 2-, 4- and 8-GPU rows are N × the
  1-GPU row only to within that rounding: :meth:`GcpFake.expected_deviation_usd` gives the bound the
  referee allows for them ((N + 1) × 1e-5 $/h); every other row is reproduced to 1e-9 relative
  before the nanos rounding of the unit prices (checked at start).
- Unit prices are written as units + nanos (whole nano-dollars), as the API does.
- Machine types: guestCpus / memoryMb (GiB × 1024) of the bundled rows; GPU-bundled types (a2, a3, g2)
  carry ``accelerators`` [{guestAcceleratorType, guestAcceleratorCount}]. N1 hosts n1-standard-8/16/32/
  64 are listed in every zone, plus decoys the source must not price (n1-standard-4, e2-standard-8:
  CPU only, no SKUs). Bundled types are listed in every zone of their region, except the
  (region, type, market) offers the bundled data writes per zone (a3-highgpu-1g in the H100-probe
  regions), which are listed only in the zones of those rows.
- Accelerator types per zone: the N1 GPUs of the zone's rows, ``maximumCardsPerInstance`` = the largest
  count of those rows; the GPUs of the bundled types listed in the zone (nvidia-tesla-a100: 16,
  nvidia-a100-80gb / nvidia-l4 / nvidia-h100-80gb / nvidia-h100-mega-80gb: 8, GCE's own maxima).
- Zones: those of the bundled rows of a region; a region whose rows are all region-wide gets one
  zone ``<region>-a`` (not a figure: somewhere to list its machine types).
- Decoy SKUs the source must leave out, priced as a real SKU's figure times :data:`DECOY_FACTORS`
  (so picking one shows in a price comparison; they are not prices): 1-year commitments
  (usageType "Commit1Yr"), sole-tenancy cores, custom cores, and a storage SKU.

Knobs (attributes, settable while running): ``page_size`` (SKUs, zones or zone scopes a page),
``throttle`` (endpoint → number of 429 RESOURCE_EXHAUSTED answers before success; endpoints
``services``, ``skus``, ``zones``, ``machineTypes``, ``acceleratorTypes``), ``failing_regions`` (the
aggregated lists report their zones as GCE does when a scope fails: a ``warning`` of code
``UNREACHABLE`` whose message carries the backend's 503), ``bad_shape`` (endpoints answering JSON of an
unexpected shape), ``regions`` (serve only these), ``forbidden`` (endpoints answering 403
PERMISSION_DENIED). ``requests`` logs every request as (method, path, query dict).
"""

from __future__ import annotations

import csv
import io
import json
import re
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np

from geotrain.pricing.bundled import data_bytes
from tests.fakes.http import LocalServer

PROJECT = "geotrain-fake-project"
SERVICE_ID = "6F81-5844-456A"  # Compute Engine's service id in the real catalog
ENDPOINTS = ("services", "skus", "zones", "machineTypes", "acceleratorTypes")
DECOY_FACTORS = {"commitment": 0.55, "sole_tenancy": 1.1, "custom": 1.05, "storage": 1.0}
COMPUTE_BASE = "https://www.googleapis.com/compute/v1"

# canonical accelerator of the bundled rows -> GCE accelerator type (N1-attached GPUs)
N1_GPU_TYPES = {"T4": "nvidia-tesla-t4", "V100": "nvidia-tesla-v100", "P100": "nvidia-tesla-p100",
                "P4": "nvidia-tesla-p4"}
# GCE accelerator type -> the name in its GPU SKUs' descriptions
GPU_SKU_NAMES = {
    "nvidia-tesla-t4": "Nvidia Tesla T4", "nvidia-tesla-v100": "Nvidia Tesla V100",
    "nvidia-tesla-p100": "Nvidia Tesla P100", "nvidia-tesla-p4": "Nvidia Tesla P4",
    "nvidia-tesla-a100": "Nvidia Tesla A100", "nvidia-a100-80gb": "Nvidia A100 80GB", "nvidia-l4": "Nvidia L4",
    "nvidia-h100-80gb": "Nvidia H100 80GB", "nvidia-h100-mega-80gb": "Nvidia H100 80GB Mega",
}
MAX_CARDS = {"nvidia-tesla-a100": 16, "nvidia-a100-80gb": 8, "nvidia-l4": 8, "nvidia-h100-80gb": 8,
             "nvidia-h100-mega-80gb": 8}
# pricing series -> the words of its core/RAM SKU descriptions, and the SKUs' resourceGroup for core, RAM
SERIES_WORDS = {"n1": ("N1 Predefined Instance", "N1Standard", "N1Standard"), "a2": ("A2 Instance", "CPU", "RAM"),
                "a3": ("A3 Instance", "CPU", "RAM"), "a3-mega": ("A3 Mega Instance", "CPU", "RAM"),
                "g2": ("G2 Instance", "CPU", "RAM")}
N1_HOSTS = {8: 30.0, 16: 60.0, 32: 120.0, 64: 240.0}  # n1-standard-<vCPUs>: GiB
DECOY_MACHINES = {"n1-standard-4": (4, 15.0), "e2-standard-8": (8, 32.0)}


def bundled_gcp_rows() -> list[dict[str, str]]:
    """The GCP rows of the bundled offers.csv, as strings."""
    text = data_bytes("offers.csv").decode("utf-8")
    return [row for row in csv.DictReader(io.StringIO(text)) if row["cloud"] == "gcp"]


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
    """Per-component unit prices that reproduce the bundled per-VM prices (see the module docstring)."""
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


@dataclass
class GcpFake(LocalServer):
    """The fake server. Use as a context manager, or call :meth:`start` / :meth:`stop`."""

    name = "gcp-fake"
    methods = ("GET",)

    page_size: int = 200
    regions: set[str] | None = None
    failing_regions: set[str] = field(default_factory=set)
    throttle: dict[str, int] = field(default_factory=dict)
    bad_shape: set[str] = field(default_factory=set)
    forbidden: set[str] = field(default_factory=set)
    project: str = PROJECT
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server = None
        self._rows = bundled_gcp_rows()
        self._rates = decompose(self._rows)
        self._zonal = {(r["region"], r["instance_type"], r["market"]) for r in self._rows
                       if r["zone"] and "+" not in r["instance_type"]}
        self._rows_of: dict[str, list[dict[str, str]]] = defaultdict(list)
        for row in self._rows:
            self._rows_of[row["region"]].append(row)
        self._machine_cache: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._zones: dict[str, list[str]] = defaultdict(list)
        for row in self._rows:
            if row["zone"] and row["zone"] not in self._zones[row["region"]]:
                self._zones[row["region"]].append(row["zone"])
        for region in {r["region"] for r in self._rows}:
            if not self._zones[region]:
                self._zones[region].append(f"{region}-a")
            self._zones[region].sort()

    # ---- what it serves -------------------------------------------------------------------------
    def served(self, region: str) -> bool:
        return self.regions is None or region in self.regions

    def served_rows(self) -> list[dict[str, str]]:
        """The bundled rows this fake serves (the referee's expectation)."""
        return [r for r in self._rows if self.served(r["region"])]

    @staticmethod
    def expected_deviation_usd(row: dict[str, str]) -> float:
        """How far a price computed from the served unit prices may be from the bundled figure, in $/h:
        N1 offers with more than one GPU carry anycloud's 5-decimal rounding of two parts, N times over
        (see the module docstring); every other offer is exact up to the nanos of the unit prices."""
        count = int(row["accelerator_count"] or 0)
        if "+" in row["instance_type"] and count > 1:
            return (count + 1) * 1e-5
        return 0.0

    @property
    def zonal_offers(self) -> frozenset[tuple[str, str, str]]:
        """(region, instance type, market) of bundled types that the bundled data writes per zone."""
        return frozenset(self._zonal)

    def zones(self) -> list[tuple[str, str]]:
        """(zone, region) served, sorted by zone."""
        return sorted((z, region) for region, zones in self._zones.items() if self.served(region) for z in zones)

    def skus(self) -> list[dict[str, Any]]:
        skus: list[dict[str, Any]] = []
        for n, rate in enumerate(self._rates):
            if not self.served(rate.region):
                continue
            spot = rate.market == "spot"
            if rate.what in ("core", "ram"):
                words, core_group, ram_group = SERIES_WORDS[rate.series]
                kind = "Core" if rate.what == "core" else "Ram"
                description = f"{'Spot Preemptible ' if spot else ''}{words} {kind} running in {rate.region}"
                group = core_group if rate.what == "core" else ram_group
                unit = "h" if rate.what == "core" else "GiBy.h"
            else:
                name = GPU_SKU_NAMES[rate.what]
                description = (f"{name} GPU attached to Spot Preemptible VMs running in {rate.region}" if spot
                               else f"{name} GPU running in {rate.region}")
                group, unit = "GPU", "h"
            usage = "Preemptible" if spot else "OnDemand"
            skus.append(self._sku(f"{n:04X}-{rate.region}", description, group, usage, rate.region, rate.usd, unit))
            if not spot and rate.series == "n1" and rate.what == "core":
                r = rate.region
                skus.append(self._sku(f"{n:04X}-C1Y", f"Commitment v1: N1 Predefined Instance Core in {r} for 1 Year",
                                      "N1Standard", "Commit1Yr", r, rate.usd * DECOY_FACTORS["commitment"], "h"))
                skus.append(self._sku(f"{n:04X}-STN", f"N1 Sole Tenancy Instance Core running in {r}", "CPU",
                                      "OnDemand", r, rate.usd * DECOY_FACTORS["sole_tenancy"], "h"))
                skus.append(self._sku(f"{n:04X}-CUS", f"Custom Instance Core running in {r}", "CPU", "OnDemand", r,
                                      rate.usd * DECOY_FACTORS["custom"], "h"))
                skus.append(self._sku(f"{n:04X}-PD", f"Storage PD Capacity in {r}", "PDStandard", "OnDemand", r,
                                      0.04 * DECOY_FACTORS["storage"], "GiBy.mo", family="Storage"))
        return skus

    def _sku(self, sku_id: str, description: str, group: str, usage: str, region: str, usd: float, unit: str, *,
             family: str = "Compute") -> dict[str, Any]:
        sku_id = re.sub(r"[^0-9A-Z]", "", sku_id.upper())[:12]
        return {
            "name": f"services/{SERVICE_ID}/skus/{sku_id}", "skuId": sku_id, "description": description,
            "category": {"serviceDisplayName": "Compute Engine", "resourceFamily": family, "resourceGroup": group,
                         "usageType": usage},
            "serviceRegions": [region],
            "pricingInfo": [{
                "summary": "", "effectiveTime": "2026-07-30T00:00:00Z", "currencyConversionRate": 1,
                "pricingExpression": {"usageUnit": unit, "displayQuantity": 1, "baseUnit": unit.replace("h", "s"),
                                      "baseUnitConversionFactor": 3600, "usageUnitDescription": unit,
                                      "tieredRates": [{"startUsageAmount": 0, "unitPrice": money(usd)}]},
                "aggregationInfo": {"aggregationLevel": "ACCOUNT", "aggregationInterval": "DAILY",
                                    "aggregationCount": 1}}],
            "serviceProviderName": "Google",
            "geoTaxonomy": {"type": 2, "regions": [region]},  # REGIONAL, as an int (enum-encoding=int)
        }

    def machine_types(self, zone: str, region: str) -> list[dict[str, Any]]:
        """Machine types listed in one zone."""
        key = (zone, region)
        if key not in self._machine_cache:
            self._machine_cache[key] = self._list_machine_types(zone, region)
        return self._machine_cache[key]

    def _list_machine_types(self, zone: str, region: str) -> list[dict[str, Any]]:
        types: dict[str, dict[str, Any]] = {}
        zonal_here = {t for (r, t, _m) in self._zonal if r == region}
        listed_here = {x["instance_type"] for x in self._rows if x["zone"] == zone}
        for vcpus, gib in N1_HOSTS.items():
            types[f"n1-standard-{vcpus}"] = self._machine(f"n1-standard-{vcpus}", zone, vcpus, gib)
        for name, (vcpus, gib) in DECOY_MACHINES.items():
            types[name] = self._machine(name, zone, vcpus, gib)
        for row in self._rows_of.get(region, []):
            if "+" in row["instance_type"] or row["instance_type"] in types:
                continue
            if row["instance_type"] in zonal_here and row["instance_type"] not in listed_here:
                continue
            types[row["instance_type"]] = self._machine(
                row["instance_type"], zone, int(float(row["vcpus"])), float(row["memory_gib"]),
                accelerators=[{"guestAcceleratorType": gpu_type_of(row),
                               "guestAcceleratorCount": int(row["accelerator_count"])}])
        return [types[name] for name in sorted(types)]

    def _machine(self, name: str, zone: str, vcpus: int, gib: float, *,
                 accelerators: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "compute#machineType", "id": str(abs(hash((name, zone))) % 10**12), "name": name,
            "description": f"{vcpus} vCPUs, {gib:g} GB RAM", "guestCpus": vcpus, "memoryMb": int(round(gib * 1024)),
            "maximumPersistentDisks": 128, "maximumPersistentDisksSizeGb": "263168", "zone": zone,
            "selfLink": f"{COMPUTE_BASE}/projects/{self.project}/zones/{zone}/machineTypes/{name}",
            "isSharedCpu": False,
        }
        if accelerators:
            body["accelerators"] = accelerators
        return body

    def accelerator_types(self, zone: str, region: str) -> list[dict[str, Any]]:
        """Accelerator types listed in one zone."""
        cards: dict[str, int] = {}
        for row in self._rows_of.get(region, []):
            if row["zone"] == zone and "+" in row["instance_type"]:
                gpu = gpu_type_of(row)
                cards[gpu] = max(cards.get(gpu, 0), int(row["accelerator_count"]))
        for machine in self.machine_types(zone, region):
            for accelerator in machine.get("accelerators", []):
                gpu = accelerator["guestAcceleratorType"]
                cards[gpu] = MAX_CARDS[gpu]
        return [{"kind": "compute#acceleratorType", "id": str(abs(hash((gpu, zone))) % 10**12), "name": gpu,
                 "description": GPU_SKU_NAMES[gpu].replace("Nvidia", "NVIDIA"), "zone": f"{COMPUTE_BASE}/projects/"
                 f"{self.project}/zones/{zone}", "maximumCardsPerInstance": cards[gpu],
                 "selfLink": f"{COMPUTE_BASE}/projects/{self.project}/zones/{zone}/acceleratorTypes/{gpu}"}
                for gpu in sorted(cards)]

    def calls(self) -> Counter[str]:
        """Requests per endpoint so far."""
        return Counter(self._route(path)[0] or "other" for _, path, _ in self.requests)

    # ---- request handling -----------------------------------------------------------------------
    @staticmethod
    def _route(path: str) -> tuple[str | None, dict[str, str]]:
        patterns = {
            "services": r"/v1/services",
            "skus": r"/v1/services/(?P<service>[^/]+)/skus",
            "zones": r"/compute/v1/projects/(?P<project>[^/]+)/zones",
            "machineTypes": r"/compute/v1/projects/(?P<project>[^/]+)/aggregated/machineTypes",
            "acceleratorTypes": r"/compute/v1/projects/(?P<project>[^/]+)/aggregated/acceleratorTypes",
        }
        for endpoint, pattern in patterns.items():
            match = re.fullmatch(pattern, path)
            if match:
                return endpoint, match.groupdict()
        return None, {}

    @staticmethod
    def _error(code: int, status: str, message: str, reason: str) -> dict[str, Any]:
        return {"error": {"code": code, "message": message, "status": status,
                          "errors": [{"message": message, "domain": "global", "reason": reason}]}}

    def _handle(self, handler: BaseHTTPRequestHandler, method: str = "GET") -> None:
        parts = urlsplit(handler.path)
        query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        with self._lock:
            self.requests.append(("GET", parts.path, query))
        endpoint, args = self._route(parts.path)
        if endpoint is None:
            return self._send(handler, 404, self._error(404, "NOT_FOUND", f"no route GET {parts.path}", "notFound"))
        if "project" in args and args["project"] != self.project:
            return self._send(handler, 404, self._error(404, "NOT_FOUND", f"The resource 'projects/{args['project']}' "
                                                        "was not found", "notFound"))
        if endpoint == "skus" and args["service"] != SERVICE_ID:
            return self._send(handler, 404, self._error(404, "NOT_FOUND", "Service not found", "notFound"))
        if endpoint in self.forbidden:
            permission = {"services": "cloudbilling.services.list", "skus": "cloudbilling.services.skus.list",
                          "zones": "compute.zones.list", "machineTypes": "compute.machineTypes.list",
                          "acceleratorTypes": "compute.acceleratorTypes.list"}[endpoint]
            return self._send(handler, 403, self._error(
                403, "PERMISSION_DENIED", f"Required '{permission}' permission for 'projects/{self.project}'",
                "forbidden"))
        with self._lock:
            if self.throttle.get(endpoint, 0) > 0:
                self.throttle[endpoint] -= 1
                return self._send(handler, 429, self._error(
                    429, "RESOURCE_EXHAUSTED", "Quota exceeded for quota metric 'Read requests' and limit "
                    "'Read requests per minute'", "rateLimitExceeded"), headers={"Retry-After": "1"})
        if endpoint in self.bad_shape:
            shapes = {"services": {"services": "not a list"},
                      "skus": {"skus": [{"skuId": "X", "pricingInfo": {"tieredRates": "an object, not a list"}}]},
                      "zones": {"items": {"zone": "an object where a list belongs"}},
                      "machineTypes": {"items": ["a list where a map of scopes belongs"]},
                      "acceleratorTypes": {"items": {"zones/x": {"acceleratorTypes": "not a list"}}}}
            return self._send(handler, 200, shapes[endpoint])
        if endpoint == "services":
            return self._send(handler, 200, {"services": [
                {"name": "services/95FF-2EF5-5EA1", "serviceId": "95FF-2EF5-5EA1", "displayName": "Cloud Storage",
                 "businessEntityName": "businessEntities/GCP"},
                {"name": f"services/{SERVICE_ID}", "serviceId": SERVICE_ID, "displayName": "Compute Engine",
                 "businessEntityName": "businessEntities/GCP"},
            ]})
        if endpoint == "skus":
            size = min(self.page_size, int(query.get("pageSize") or 5000))
            return self._page(handler, "skus", self.skus(), query.get("pageToken", ""), size)
        if endpoint == "zones":
            size = min(self.page_size, int(query.get("maxResults") or 500))
            zones = [{"kind": "compute#zone", "id": str(n), "name": zone, "description": zone, "status": "UP",
                      "region": f"{COMPUTE_BASE}/projects/{self.project}/regions/{region}",
                      "selfLink": f"{COMPUTE_BASE}/projects/{self.project}/zones/{zone}"}
                     for n, (zone, region) in enumerate(self.zones())]
            return self._page(handler, "items", zones, query.get("pageToken", ""), size, extra={"kind": "compute#zoneList"})
        size = min(self.page_size, int(query.get("maxResults") or 500))
        scopes = self.zones()
        start = int(query.get("pageToken") or 0)
        items: dict[str, Any] = {}
        for zone, region in scopes[start:start + size]:
            key = "machineTypes" if endpoint == "machineTypes" else "acceleratorTypes"
            if region in self.failing_regions:
                items[f"zones/{zone}"] = {"warning": {
                    "code": "UNREACHABLE", "message": f"503 Service Unavailable: backend error reading zone {zone}",
                    "data": [{"key": "scope", "value": f"zones/{zone}"}]}}
                continue
            listed = (self.machine_types(zone, region) if endpoint == "machineTypes"
                      else self.accelerator_types(zone, region))
            items[f"zones/{zone}"] = {key: listed} if listed else {"warning": {
                "code": "NO_RESULTS_ON_PAGE", "message": "There are no results for scope 'zones/{zone}' on this page.",
                "data": [{"key": "scope", "value": f"zones/{zone}"}]}}
        body: dict[str, Any] = {"kind": f"compute#{endpoint[:-1]}AggregatedList", "items": items,
                                "selfLink": f"{COMPUTE_BASE}/projects/{self.project}/aggregated/{endpoint}"}
        if start + size < len(scopes):
            body["nextPageToken"] = str(start + size)
        return self._send(handler, 200, body)

    def _page(self, handler: BaseHTTPRequestHandler, key: str, entries: list[Any], token: str, size: int, *,
              extra: dict[str, Any] | None = None) -> None:
        start = int(token or 0)
        body: dict[str, Any] = dict(extra or {})
        body[key] = entries[start:start + size]
        if start + size < len(entries):
            body["nextPageToken"] = str(start + size)
        return self._send(handler, 200, body)

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode("utf-8")
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json; charset=UTF-8")
        handler.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(data)


__all__ = ["ENDPOINTS", "PROJECT", "SERVICE_ID", "GcpFake", "bundled_gcp_rows", "decompose"]

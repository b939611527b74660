"""The GCP fake's server: the catalog, zones and machine/accelerator types it lists, the request routing,
pagination and error answers, and the knobs."""

from __future__ import annotations

import json
import re
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.gcp.data import (
    COMPUTE_BASE,
    DECOY_FACTORS,
    DECOY_MACHINES,
    GPU_SKUS,
    MAX_CARDS,
    N1_HOSTS,
    PROJECT,
    SERIES_GROUPS,
    SERVICE_ID,
    bundled_gcp_rows,
    decompose,
    gpu_type_of,
    location_word,
    money,
)
from geotrain.pricing.live.gcp.descriptions import gpu_description, series_description
from tests.fakes.http import LocalServer


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
        (see the package docstring); every other offer is exact up to the nanos of the unit prices."""
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
            where = location_word(rate.region)
            if rate.what in ("core", "ram"):
                core_group, ram_group = SERIES_GROUPS[rate.series]
                kind = "Core" if rate.what == "core" else "Ram"
                description = series_description(rate.series, kind, where, spot=spot)
                group = core_group if rate.what == "core" else ram_group
                unit = "h" if rate.what == "core" else "GiBy.h"
            else:
                sku = GPU_SKUS[rate.what]
                # no public source gives the Spot spelling of P100 and P4 (the bundle has such offers): the
                # fake writes the template every sourced GPU follows, with the on-demand name
                description = gpu_description(replace(sku, spot=sku.spot or sku.on_demand), where, spot=spot)
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
                 "description": GPU_SKUS[gpu].on_demand.replace("Nvidia", "NVIDIA"), "zone": f"{COMPUTE_BASE}/projects/"
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


"""A local fake of the Azure APIs geotrain's Azure price source reads, on 127.0.0.1 (threaded, port 0).

It speaks the published REST shapes, so the real clients work against it unchanged (only the endpoint
and the credential point here):

- **Retail Prices API** ``GET /api/retail/prices?$filter=...`` (unauthenticated): ``{"BillingCurrency",
  "CustomerEntityId", "CustomerEntityType", "Items": [...], "NextPageLink", "Count"}``, ``page_size``
  items a page (Azure: 100), the next page as an absolute ``NextPageLink`` carrying the same
  ``$filter`` and ``$skip``. The filter understands ``field eq 'value'`` and ``contains(field,'value')``
  joined by ``and`` (case-insensitive values, as before api-version 2023-01-01-preview); ``priceType``
  filters the items' ``type``. Any other clause answers 400, as the real API does.
- **ARM resource SKUs** ``GET /subscriptions/{s}/providers/Microsoft.Compute/skus?api-version=...``:
  ``{"value": [...], "nextLink"}``, one entry per (size, location) as ARM lists VM sizes, with
  ``capabilities`` vCPUs / MemoryGB / GPUs / LowPriorityCapable, ``locationInfo`` and ``restrictions``.
- **Resource Graph** ``POST /providers/Microsoft.ResourceGraph/resources?api-version=2021-03-01``: answers
  a ``spotresources`` eviction-rate query with ``{"totalRecords", "count", "data": [...], "facets",
  "resultTruncated", "$skipToken"?}`` (object-array format), rows projected as the query asks
  (``skuName``, ``location``, ``spotEvictionRate``), filtered by the ``location in~ (...)`` of the query.
- **Spot Placement Scores** ``POST /subscriptions/{s}/providers/Microsoft.Compute/locations/{l}/
  placementScores/spot/generate?api-version=...``: 404 by default (a subscription without the feature).

ARM endpoints require ``Authorization: Bearer <token>`` (the token of :data:`FAKE_TOKEN` unless told
otherwise) and answer 401 ``InvalidAuthenticationToken`` otherwise; a wrong subscription answers 404
``SubscriptionNotFound``.

Figures. Every served price and spec comes from the bundled Azure rows of
``geotrain/pricing/data/offers.csv`` (from ``../shared/data/prices/anycloud-catalog-azure-gcp``): per
(region, size) the on-demand row becomes a Linux ``Consumption`` item priced at its
``price_usd_per_hour``, the spot row a ``... Spot`` item at its price; vCPUs, MemoryGB and GPUs of the
resource SKU are the row's ``vcpus``, ``memory_gib`` and ``accelerator_count``. The API also lists
meters the source must leave out; the fake serves those too, priced as the Linux figure times a factor
of :data:`DECOY_FACTORS` so that picking one by mistake shows in a price comparison (they are decoys,
not prices): Windows (``productName`` ending "Windows"), ``Low Priority``, ``DevTestConsumption`` and
1-year ``Reservation`` meters, and one CPU-only size per region (``Standard_D4s_v5``, priced like the
region's first GPU on-demand figure times its factor, with a resource SKU without GPUs). No eviction rate or placement score is
public in ``../shared/data``, so none is served unless a test gives one (:attr:`AzureFake.eviction_rows`,
:attr:`AzureFake.placement_scores`), labelled as a sample there.

Knobs (attributes, settable while running): ``page_size`` / ``sku_page_size`` / ``graph_page_size``
(pagination), ``throttle`` (endpoint → number of 429 answers before success; endpoints ``prices``,
``skus``, ``graph``, ``placement``), ``failing_regions`` (Retail Prices answers 503 for them),
``bad_shape`` (endpoints answering JSON of an unexpected shape), ``regions`` (serve only these),
``forbidden`` (endpoints answering 403 ``AuthorizationFailed``), ``restrictions`` (size, region, zones:
``()`` = the whole region) and ``zones`` (zones listed per region). ``requests`` logs every request
as (method, path, query dict).
"""

from __future__ import annotations

import csv
import io
import json
import re
import threading
import uuid
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from geotrain.pricing.bundled import data_bytes
from tests.fakes.http import LocalServer

FAKE_TOKEN = "fake-token"
SUBSCRIPTION_ID = "00000000-0000-0000-0000-00000000fa4e"
DECOY_FACTORS = {"windows": 1.5, "low_priority": 0.8, "devtest": 0.9, "reservation": 5000.0, "cpu_only": 0.1}
CPU_ONLY_SIZE = "Standard_B4ms"  # a burstable size, of a series geotrain does not sell
ENDPOINTS = ("prices", "skus", "graph", "placement")


def bundled_azure_rows() -> list[dict[str, str]]:
    """The Azure rows of the bundled offers.csv, as strings."""
    text = data_bytes("offers.csv").decode("utf-8")
    return [row for row in csv.DictReader(io.StringIO(text)) if row["cloud"] == "azure"]


def _sku_words(size: str) -> str:
    """Retail skuName of an ARM size: Standard_NC4as_T4_v3 -> "NC4as T4 v3"."""
    return size.removeprefix("Standard_").replace("_", " ")


def _series(size: str) -> str:
    """A productName series in Azure's style: Standard_NC4as_T4_v3 -> "NCasT4_v3" (size digits dropped)."""
    body = size.removeprefix("Standard_")
    head, _, tail = body.partition("_")
    head = re.sub(r"(?<=[A-Z])\d+", "", head, count=1)
    parts = tail.split("_") if tail else []
    if parts and not parts[0].startswith("v"):
        head += parts.pop(0)
    return "_".join([head, *parts])


def _id(*parts: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "geotrain-fake-azure/" + "/".join(parts)))


@dataclass
class AzureFake(LocalServer):
    """The fake server. Use as a context manager, or call :meth:`start` / :meth:`stop`."""

    name = "azure-fake"
    methods = ("GET", "POST")

    page_size: int = 100
    sku_page_size: int = 500
    graph_page_size: int = 1000
    regions: set[str] | None = None
    failing_regions: set[str] = field(default_factory=set)
    throttle: dict[str, int] = field(default_factory=dict)
    bad_shape: set[str] = field(default_factory=set)
    forbidden: set[str] = field(default_factory=set)
    restrictions: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)
    zones: dict[str, list[str]] = field(default_factory=dict)
    eviction_rows: list[dict[str, str]] = field(default_factory=list)
    placement_scores: dict[tuple[str, str], str] | None = None  # (size, region) -> score; None: 404
    token: str = FAKE_TOKEN
    subscription_id: str = SUBSCRIPTION_ID
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server = None
        self._rows = bundled_azure_rows()
        self._items_cache: tuple[tuple[str, ...] | None, list[dict[str, Any]]] | None = None

    # ---- what it serves -------------------------------------------------------------------------
    def served_rows(self) -> list[dict[str, str]]:
        """The bundled rows this fake serves as Linux Consumption prices (the referee's expectation)."""
        return [r for r in self._rows if self.regions is None or r["region"] in self.regions]

    def price_items(self) -> list[dict[str, Any]]:
        """Every item the Retail Prices API lists (before its $filter), cached per served region set."""
        key = None if self.regions is None else tuple(sorted(self.regions))
        if self._items_cache is None or self._items_cache[0] != key:
            self._items_cache = (key, self._build_price_items())
        return self._items_cache[1]

    def _items_by_region(self) -> dict[str, list[dict[str, Any]]]:
        items = self.price_items()
        if getattr(self, "_by_region_of", None) is not items:
            by_region: dict[str, list[dict[str, Any]]] = {}
            for item in items:
                by_region.setdefault(item["armRegionName"].lower(), []).append(item)
            self._by_region, self._by_region_of = by_region, items
        return self._by_region

    def _build_price_items(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        first_on_demand: dict[str, float] = {}
        for row in sorted(self.served_rows(), key=lambda r: (r["region"], r["instance_type"], r["market"])):
            region, size, price = row["region"], row["instance_type"], float(row["price_usd_per_hour"])
            spot = row["market"] == "spot"
            sku = _sku_words(size) + (" Spot" if spot else "")
            start = row["observed_at"]
            items.append(self._item(region, size, sku, price, "Consumption", start))
            items.append(self._item(region, size, sku, price * DECOY_FACTORS["windows"], "Consumption", start,
                                    windows=True))
            if not spot:
                first_on_demand.setdefault(region, price)
                items.append(self._item(region, size, _sku_words(size) + " Low Priority",
                                        price * DECOY_FACTORS["low_priority"], "Consumption", start))
                items.append(self._item(region, size, _sku_words(size), price * DECOY_FACTORS["devtest"],
                                        "DevTestConsumption", start))
                reservation = self._item(region, size, _sku_words(size), price * DECOY_FACTORS["reservation"],
                                         "Reservation", start)
                reservation["reservationTerm"] = "1 Year"
                items.append(reservation)
        for region, price in sorted(first_on_demand.items()):
            items.append(self._item(region, CPU_ONLY_SIZE, _sku_words(CPU_ONLY_SIZE),
                                    price * DECOY_FACTORS["cpu_only"], "Consumption", "2026-05-20T00:00:00Z"))
        return items

    def _item(self, region: str, size: str, sku_name: str, price: float, kind: str, start: str, *,
              windows: bool = False) -> dict[str, Any]:
        product = f"Virtual Machines {_series(size)} Series" + (" Windows" if windows else "")
        return {
            "currencyCode": "USD", "tierMinimumUnits": 0.0, "retailPrice": price, "unitPrice": price,
            "armRegionName": region, "location": region, "effectiveStartDate": start,
            "meterId": _id(region, size, sku_name, product), "meterName": sku_name,
            "productId": _id(product), "skuId": _id(product, sku_name), "availabilityId": None,
            "productName": product, "skuName": sku_name, "serviceName": "Virtual Machines",
            "serviceId": "DZH313Z7MMC8", "serviceFamily": "Compute", "unitOfMeasure": "1 Hour",
            "type": kind, "isPrimaryMeterRegion": True, "armSkuName": size,
        }

    def resource_skus(self) -> list[dict[str, Any]]:
        specs: dict[tuple[str, str], dict[str, str]] = {}
        for row in self.served_rows():
            specs.setdefault((row["instance_type"], row["region"]), row)
        skus = [self._sku(size, region, row["vcpus"], row["memory_gib"], row["accelerator_count"])
                for (size, region), row in sorted(specs.items())]
        for region in sorted({region for _, region in specs}):
            skus.append(self._sku(CPU_ONLY_SIZE, region, "4", "16", None))
        skus.insert(0, {"resourceType": "disks", "name": "Premium_LRS", "tier": "Premium", "kind": "Disks",
                        "locations": ["eastus"], "locationInfo": [{"location": "eastus", "zones": []}],
                        "capabilities": [], "restrictions": []})
        return skus

    def _sku(self, size: str, region: str, vcpus: str, memory: str, gpus: str | None) -> dict[str, Any]:
        capabilities = [{"name": "vCPUs", "value": str(int(float(vcpus)))},
                        {"name": "MemoryGB", "value": f"{float(memory):g}"},
                        {"name": "LowPriorityCapable", "value": "True"}]
        if gpus is not None:
            capabilities.insert(2, {"name": "GPUs", "value": str(int(gpus))})
        zones = list(self.zones.get(region, []))
        restrictions = []
        for r_size, r_region, r_zones in self.restrictions:
            if r_size != size or r_region != region:
                continue
            if r_zones:
                restrictions.append({"type": "Zone", "values": [region],
                                     "restrictionInfo": {"locations": [region], "zones": list(r_zones)},
                                     "reasonCode": "NotAvailableForSubscription"})
            else:
                restrictions.append({"type": "Location", "values": [region],
                                     "restrictionInfo": {"locations": [region]},
                                     "reasonCode": "NotAvailableForSubscription"})
        return {"resourceType": "virtualMachines", "name": size, "tier": "Standard",
                "size": size.removeprefix("Standard_"), "family": f"standard{_series(size)}Family",
                "locations": [region], "locationInfo": [{"location": region, "zones": zones, "zoneDetails": []}],
                "capabilities": capabilities, "restrictions": restrictions}

    def calls(self) -> Counter[str]:
        """Requests per endpoint so far."""
        return Counter(self._endpoint(path) or "other" for _, path, _ in self.requests)

    # ---- request handling -----------------------------------------------------------------------
    @staticmethod
    def _endpoint(path: str) -> str | None:
        if path == "/api/retail/prices":
            return "prices"
        if re.fullmatch(r"/subscriptions/[^/]+/providers/Microsoft\.Compute/skus", path, re.I):
            return "skus"
        if re.fullmatch(r"/providers/Microsoft\.ResourceGraph/resources", path, re.I):
            return "graph"
        if re.fullmatch(r"/subscriptions/[^/]+/providers/Microsoft\.Compute/locations/[^/]+/placementScores/spot/generate",
                        path, re.I):
            return "placement"
        return None

    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(handler.path)
        query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        with self._lock:
            self.requests.append((method, parts.path, query))
        endpoint = self._endpoint(parts.path)
        if endpoint is None or (endpoint in ("prices", "skus")) != (method == "GET"):
            return self._send(handler, 404, {"error": {"code": "NotFound", "message": f"no route {method} {parts.path}"}})
        if endpoint != "prices":
            if handler.headers.get("Authorization") != f"Bearer {self.token}":
                return self._send(handler, 401, {"error": {"code": "InvalidAuthenticationToken",
                                                           "message": "The access token is invalid."}})
            if endpoint != "graph" and parts.path.split("/")[2] != self.subscription_id:
                return self._send(handler, 404, {"error": {"code": "SubscriptionNotFound",
                                                           "message": "The subscription could not be found."}})
            if endpoint in self.forbidden:
                action = {"skus": "Microsoft.Compute/skus/read", "graph": "Microsoft.ResourceGraph/resources/read",
                          "placement": "Microsoft.Compute/locations/placementScores/generate/action"}[endpoint]
                return self._send(handler, 403, {"error": {
                    "code": "AuthorizationFailed",
                    "message": f"The client does not have authorization to perform action '{action}'."}})
        with self._lock:
            if self.throttle.get(endpoint, 0) > 0:
                self.throttle[endpoint] -= 1
                return self._send(handler, 429, {"error": {"code": "TooManyRequests", "message": "Rate limit exceeded."}},
                                  headers={"Retry-After": "1"})
        if endpoint in self.bad_shape:
            shapes = {"prices": {"Items": {"unexpected": "an object where a list belongs"}, "Count": 1},
                      "skus": {"value": "not a list"}, "graph": {"data": {"rows": "not a list"}},
                      "placement": {"placementScores": "not a list"}}
            return self._send(handler, 200, shapes[endpoint])
        try:
            payload = json.loads(body) if body else {}
        except ValueError:
            return self._send(handler, 400, {"error": {"code": "InvalidRequest", "message": "body is not JSON"}})
        if endpoint == "prices":
            return self._prices(handler, query)
        if endpoint == "skus":
            return self._skus(handler, parts.path, query)
        if endpoint == "graph":
            return self._graph(handler, payload)
        return self._placement(handler, payload)

    def _prices(self, handler: BaseHTTPRequestHandler, query: dict[str, str]) -> None:
        text = query.get("$filter", "")
        clauses = [c.strip() for c in re.split(r"\s+and\s+", text, flags=re.I) if c.strip()]
        tests = []
        for clause in clauses:
            eq = re.fullmatch(r"(\w+)\s+eq\s+'([^']*)'", clause)
            has = re.fullmatch(r"contains\(\s*(\w+)\s*,\s*'([^']*)'\s*\)", clause)
            if eq is None and has is None:
                return self._send(handler, 400, {"Error": {"Code": "InvalidFilter", "Message": f"bad clause {clause!r}"}})
            name, value = (eq or has).groups()  # type: ignore[union-attr]
            name = "type" if name == "priceType" else name
            tests.append((name, value.lower(), eq is not None))
        region = next((v for n, v, exact in tests if n == "armRegionName" and exact), None)
        candidates = self._items_by_region().get(region, []) if region is not None else self.price_items()
        items = [i for i in candidates
                 if all((str(i.get(n, "")).lower() == v) if exact else (v in str(i.get(n, "")).lower())
                        for n, v, exact in tests)]
        if region is not None and region in self.failing_regions:
            return self._send(handler, 503, {"Error": {"Code": "ServiceUnavailable", "Message": "try again later"}})
        skip = int(query.get("$skip", "0") or 0)
        page = items[skip:skip + self.page_size]
        more = skip + self.page_size < len(items)
        next_link = f"{self.url}/api/retail/prices?$filter={quote(text)}&$skip={skip + self.page_size}" if more else None
        self._send(handler, 200, {"BillingCurrency": "USD", "CustomerEntityId": "Default",
                                  "CustomerEntityType": "Retail", "Items": page, "NextPageLink": next_link,
                                  "Count": len(page)})

    def _skus(self, handler: BaseHTTPRequestHandler, path: str, query: dict[str, str]) -> None:
        skus = self.resource_skus()
        start = int(query.get("$skiptoken", "0") or 0)
        page = skus[start:start + self.sku_page_size]
        answer: dict[str, Any] = {"value": page}
        if start + self.sku_page_size < len(skus):
            answer["nextLink"] = (f"{self.url}{path}?api-version={query.get('api-version', '2021-07-01')}"
                                  f"&$skiptoken={start + self.sku_page_size}")
        self._send(handler, 200, answer)

    def _graph(self, handler: BaseHTTPRequestHandler, payload: dict[str, Any]) -> None:
        query = str(payload.get("query", ""))
        rows = self.eviction_rows if "skuspotevictionrate" in query.lower() else []
        wanted = re.search(r"location\s+in~\s*\(([^)]*)\)", query, re.I)
        if wanted:
            names = {n.strip().strip("'\"").lower() for n in wanted.group(1).split(",")}
            rows = [r for r in rows if r.get("location", "").lower() in names]
        options = payload.get("options") or {}
        start = int(options.get("$skipToken") or 0)
        page = rows[start:start + self.graph_page_size]
        answer: dict[str, Any] = {"totalRecords": len(rows), "count": len(page), "data": page, "facets": [],
                                  "resultTruncated": "false"}
        if start + self.graph_page_size < len(rows):
            answer["$skipToken"] = str(start + self.graph_page_size)
        self._send(handler, 200, answer)

    def _placement(self, handler: BaseHTTPRequestHandler, payload: dict[str, Any]) -> None:
        if self.placement_scores is None:
            return self._send(handler, 404, {"error": {"code": "NotFound",
                                                       "message": "The requested resource type is not available."}})
        scores = []
        for region in payload.get("desiredLocations", []):
            for size in payload.get("desiredSizes", []):
                sku = size.get("sku", "")
                scores.append({"sku": sku, "region": region, "availabilityZone": None,
                               "score": self.placement_scores.get((sku, region), "DataNotFoundOrStale"),
                               "isQuotaAvailable": True})
        self._send(handler, 200, {"desiredLocations": payload.get("desiredLocations", []),
                                  "desiredSizes": payload.get("desiredSizes", []),
                                  "desiredCount": payload.get("desiredCount"),
                                  "availabilityZones": payload.get("availabilityZones", False),
                                  "placementScores": scores})

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode("utf-8")
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json; charset=utf-8")
        handler.send_header("Content-Length", str(len(data)))
        handler.send_header("x-ms-request-id", _id(str(status), handler.path))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(data)

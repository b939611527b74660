"""Azure Retail Prices API (unauthenticated): one region's spot and on-demand hourly prices of the wanted
sizes, page by page, and which items count (see the package docstring)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from geotrain.errors import CatalogError
from geotrain.pricing.live.azure.skus import Spec


@dataclass(frozen=True, slots=True)
class Price:
    price_usd_per_hour: float
    effective: str  # effectiveStartDate (ISO text sorts by time)


class RetailThrottled(Exception):
    """The Retail Prices API answered 429."""


class RegionFailed(Exception):
    """One region's prices could not be read (not an error of the refresh: it is skipped)."""


def retail_prices(region: str, wanted: Mapping[str, Spec], calls: Counter[str], signals: Counter[str], *,
                  prices_url: str, http: Callable[[], Any], backoff: Callable[[Callable[[], Any]], Any],
                  timeout_s: float) -> dict[tuple[str, str, str], Price]:
    """(region, size, market) -> price of the ``wanted`` sizes (lower-cased name -> spec) in ``region``,
    every page of the Retail Prices query; ``http()`` gives the requests session."""
    query = (f"serviceName eq 'Virtual Machines' and armRegionName eq '{region}' "
             f"and priceType eq 'Consumption'")
    url: str | None = f"{prices_url}/api/retail/prices"
    params: dict[str, str] | None = {"$filter": query}
    found: dict[tuple[str, str, str], Price] = {}
    while url:
        page_url, page_params = url, params
        body = backoff(lambda: _retail_page(http, page_url, page_params, region, calls, timeout_s))
        items, url = _retail_items(body, page_url)
        params = None  # NextPageLink carries the filter
        for item in items:
            _take(item, region, wanted, found, signals)
    return found


def _retail_page(http: Callable[[], Any], url: str, params: Mapping[str, str] | None, region: str,
                 calls: Counter[str], timeout_s: float) -> Any:
    import requests

    calls["retail_prices.get"] += 1
    try:
        response = http().get(url, params=params, timeout=timeout_s)
    except requests.RequestException as exc:
        raise RegionFailed(f"Retail Prices API unreachable ({type(exc).__name__}); try again later") from exc
    if response.status_code == 429:
        raise RetailThrottled(f"Retail Prices API throttled {region}")
    if response.status_code != 200:
        raise RegionFailed(f"Retail Prices API answered HTTP {response.status_code} for {region}; "
                           "try again later")
    try:
        return response.json()
    except ValueError as exc:
        raise CatalogError(f"Azure Retail Prices API ({url}): the answer is not JSON") from exc


def _retail_items(body: Any, url: str) -> tuple[list[Mapping[str, Any]], str | None]:
    where = f"Azure Retail Prices API ({url.split('?')[0]})"
    if not isinstance(body, Mapping) or not isinstance(body.get("Items"), list):
        got = type(body.get("Items")).__name__ if isinstance(body, Mapping) else type(body).__name__
        raise CatalogError(f"{where}: expected an object with an Items list, got {got}; "
                           "the API's shape may have changed")
    next_link = body.get("NextPageLink")
    if next_link is not None and not isinstance(next_link, str):
        raise CatalogError(f"{where}: NextPageLink is {type(next_link).__name__}, not a link")
    items = body["Items"]
    bad = next((i for i in items if not isinstance(i, Mapping)), None)
    if bad is not None:
        raise CatalogError(f"{where}: an item is {type(bad).__name__}, not an object")
    return items, next_link or None


def _take(item: Mapping[str, Any], region: str, wanted: Mapping[str, Spec],
          found: dict[tuple[str, str, str], Price], signals: Counter[str]) -> None:
    size = item.get("armSkuName")
    spec = wanted.get(size.lower()) if isinstance(size, str) else None
    if spec is None:
        return
    text = {k: item.get(k) for k in ("skuName", "meterName", "productName", "type", "unitOfMeasure",
                                     "armRegionName", "currencyCode")}
    if not all(isinstance(text[k], str) for k in ("skuName", "productName", "type", "unitOfMeasure")):
        raise CatalogError(f"Azure Retail Prices API: item for {size} in {region} lacks skuName, productName, "
                           "type or unitOfMeasure as text")
    sku_name, product = text["skuName"], text["productName"]
    if "low priority" in f"{sku_name} {text['meterName'] or ''}".lower():
        return
    if product.rstrip().lower().endswith("windows") or text["type"] != "Consumption":
        return
    if (text["armRegionName"] or region).lower() != region or (text["currencyCode"] or "USD") != "USD":
        return
    if text["unitOfMeasure"].strip().lower() != "1 hour":
        signals["prices_not_hourly"] += 1
        return
    price = item.get("retailPrice", item.get("unitPrice"))
    if isinstance(price, bool) or not isinstance(price, int | float) or not price >= 0:
        raise CatalogError(f"Azure Retail Prices API: {size} in {region} has retailPrice {price!r}, "
                           "not a price ≥ 0")
    if price == 0:
        signals["zero_prices"] += 1
        return
    market = "spot" if "spot" in sku_name.lower() else "on_demand"
    key = (region, spec.instance_type, market)
    effective = str(item.get("effectiveStartDate") or "")
    if key in found:
        signals["duplicate_meters"] += 1
        if effective <= found[key].effective:
            return
    found[key] = Price(float(price), effective)

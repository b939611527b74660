"""Azure's spot signals: eviction-rate bands from Resource Graph (→ interruption band and rate) and Spot
Placement Scores (→ capacity hint), with the assumptions stated in the package docstring."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from geotrain.errors import CatalogError
from geotrain.pricing.live.base import Progress

CLOUD = "azure"
GRAPH_API_VERSION = "2021-03-01"
PLACEMENT_API_VERSION = "2025-06-05"

# Resource Graph eviction-rate label -> the Spot Advisor band with the same bounds (see the docstring)
EVICTION_BANDS = {"0-5": "<5%", "5-10": "5-10%", "10-15": "10-15%", "15-20": "15-20%", "20+": ">20%"}
PLACEMENT_SCORES = ("High", "Medium", "Low", "DataNotFoundOrStale", "RestrictedSkuNotAvailable")


def status_code(exc: BaseException) -> int | None:
    """The HTTP status of an azure-core error, if it has one."""
    code = getattr(exc, "status_code", None)
    return code if isinstance(code, int) else None


def band_of_eviction_rate(label: str) -> str:
    """The interruption band of a Resource Graph eviction-rate label ("0-5" … "20+")."""
    band = EVICTION_BANDS.get(label.strip().replace(" ", "").rstrip("%"))
    if band is None:
        raise CatalogError(f"Azure Resource Graph: eviction rate {label!r} is not one of "
                           f"{', '.join(EVICTION_BANDS)}; geotrain does not know this band")
    return band


def parse_eviction_rows(rows: Iterable[Any]) -> dict[tuple[str, str], str]:
    """(region, size lower-cased) -> interruption band, from Resource Graph rows projected as
    ``skuName``, ``location``, ``spotEvictionRate``."""
    bands: dict[tuple[str, str], str] = {}
    for row in rows:
        if not isinstance(row, Mapping):
            raise CatalogError(f"Azure Resource Graph: a row is {type(row).__name__}, not an object; "
                               "expected skuName, location and spotEvictionRate")
        sku, location, rate = row.get("skuName"), row.get("location"), row.get("spotEvictionRate")
        if not all(isinstance(v, str) for v in (sku, location, rate)):
            raise CatalogError(f"Azure Resource Graph: row {dict(row)!r} lacks skuName, location or "
                               "spotEvictionRate as text")
        bands[(location.lower(), sku.lower())] = band_of_eviction_rate(rate)
    return bands


def _graph_query(client: Any, query: str, calls: Counter[str], *, arm_url: str,
                 backoff: Callable[[Callable[[], Any]], Any], call_options: Mapping[str, Any]) -> list[Any]:
    from azure.core.rest import HttpRequest

    url = f"{arm_url}/providers/Microsoft.ResourceGraph/resources?api-version={GRAPH_API_VERSION}"
    rows: list[Any] = []
    token: str | None = None
    while True:
        options: dict[str, Any] = {"resultFormat": "objectArray"}
        if token:
            options["$skipToken"] = token
        # no "subscriptions": SpotResources is answered at the tenant scope the identity can read
        body = {"query": query, "options": options}

        def post(body: dict[str, Any] = body) -> Any:
            calls["resource_graph.resources"] += 1
            response = client.send_request(HttpRequest("POST", url, json=body), **call_options)
            response.raise_for_status()
            return response

        answer = backoff(post)
        try:
            payload = answer.json()
        except ValueError as exc:
            raise CatalogError("Azure Resource Graph: the answer is not JSON") from exc
        if not isinstance(payload, Mapping) or not isinstance(payload.get("data"), list):
            raise CatalogError("Azure Resource Graph: expected an object with a data list (objectArray "
                               "format); the API's shape may have changed")
        rows.extend(payload["data"])
        token = payload.get("$skipToken")
        if not token:
            return rows


def eviction_bands(client: Any, spot: list[tuple[str, str]], calls: Counter[str], signals: Counter[str],
                   progress: Progress, *, arm_url: str, backoff: Callable[[Callable[[], Any]], Any],
                   call_options: Mapping[str, Any]) -> dict[tuple[str, str], str]:
    """(region, size lower-cased) -> interruption band of the spot offers ``spot`` (region, size), from
    Resource Graph; {} (and ``eviction_rates_unavailable`` counted) when Azure does not answer."""
    from azure.core.exceptions import AzureError

    if not spot:
        return {}
    progress(CLOUD, "", "eviction rates")
    regions = ", ".join(f"'{r}'" for r in sorted({r for r, _ in spot}))
    sizes = ", ".join(f"'{s.lower()}'" for s in sorted({s for _, s in spot}))
    query = ("spotresources\n"
             "| where type =~ 'microsoft.compute/skuspotevictionrate/location'\n"
             f"| where location in~ ({regions})\n"
             f"| where sku.name in~ ({sizes})\n"
             "| project skuName = tostring(sku.name), location = tostring(location), "
             "spotEvictionRate = tostring(properties.evictionRate)")
    try:
        rows = _graph_query(client, query, calls, arm_url=arm_url, backoff=backoff, call_options=call_options)
    except AzureError:
        signals["eviction_rates_unavailable"] += 1
        return {}
    return parse_eviction_rows(rows)


def placement_hints(client: Any, spot: list[tuple[str, str]], calls: Counter[str], signals: Counter[str],
                    progress: Progress, *, arm_url: str, subscription_id: str, placement_count: int,
                    regions_per_call: int, sizes_per_call: int, backoff: Callable[[Callable[[], Any]], Any],
                    call_options: Mapping[str, Any]) -> dict[tuple[str, str], int]:
    """(region, size lower-cased) -> capacity hint (``placement_count`` for a "High" score) of the spot
    offers ``spot``, from Spot Placement Scores; the first 401, 403 or 404 stops asking."""
    from azure.core.exceptions import AzureError
    from azure.core.rest import HttpRequest

    hints: dict[tuple[str, str], int] = {}
    if not spot:
        return hints
    by_sizes: dict[tuple[str, ...], list[str]] = {}
    sizes_of: dict[str, list[str]] = {}
    for region, size in spot:
        sizes_of.setdefault(region, []).append(size)
    for region, sizes in sorted(sizes_of.items()):
        for i in range(0, len(sizes), sizes_per_call):
            by_sizes.setdefault(tuple(sorted(sizes[i:i + sizes_per_call])), []).append(region)
    for sizes, regions in by_sizes.items():
        for i in range(0, len(regions), regions_per_call):
            chunk = regions[i:i + regions_per_call]
            progress(CLOUD, chunk[0], "spot placement scores")
            url = (f"{arm_url}/subscriptions/{subscription_id}/providers/Microsoft.Compute/"
                   f"locations/{chunk[0]}/placementScores/spot/generate?api-version={PLACEMENT_API_VERSION}")
            body = {"desiredLocations": chunk, "desiredSizes": [{"sku": s} for s in sizes],
                    "desiredCount": placement_count, "availabilityZones": False}

            def post(url: str = url, body: dict[str, Any] = body) -> Any:
                calls["spot_placement_scores.generate"] += 1
                response = client.send_request(HttpRequest("POST", url, json=body), **call_options)
                response.raise_for_status()
                return response

            try:
                answer = backoff(post)
            except AzureError as exc:
                if status_code(exc) in (401, 403, 404):
                    signals["placement_scores_unavailable"] += 1
                    return hints
                signals["placement_scores_failed"] += 1
                continue
            try:
                payload = answer.json()
            except ValueError as exc:
                raise CatalogError("Azure Spot Placement Scores: the answer is not JSON") from exc
            scores = payload.get("placementScores") if isinstance(payload, Mapping) else None
            if not isinstance(scores, list) or not all(isinstance(s, Mapping) for s in scores):
                raise CatalogError("Azure Spot Placement Scores: expected an object with a placementScores "
                                   "list; the API's shape may have changed")
            for score in scores:
                value, sku, region = score.get("score"), score.get("sku"), score.get("region")
                if value not in PLACEMENT_SCORES or not isinstance(sku, str) or not isinstance(region, str):
                    raise CatalogError(f"Azure Spot Placement Scores: entry {dict(score)!r} has no sku, region "
                                       f"and a score among {', '.join(PLACEMENT_SCORES)}")
                signals[f"placement_{value[0].lower()}{value[1:]}"] += 1
                if value == "High":
                    hints[(region.lower(), sku.lower())] = placement_count
    return hints

"""Azure prices, specs and spot signals for ``geotrain catalog refresh`` (:class:`AzureSource`).

What is read, and which offer column each answer feeds:

- **Retail Prices API** (unauthenticated), ``GET {prices_url}/api/retail/prices?$filter=serviceName eq
  'Virtual Machines' and armRegionName eq '<region>' and priceType eq 'Consumption'``, one query per
  region, following ``NextPageLink``. ``armSkuName`` → ``instance_type``, ``armRegionName`` →
  ``region``, ``retailPrice`` (``unitPrice`` when absent) → ``price_usd_per_hour`` (only items with
  ``unitOfMeasure`` "1 Hour" and ``currencyCode`` USD). ``skuName`` containing "Spot" → ``market``
  spot, otherwise on_demand; "Low Priority" meters, Windows meters (``productName`` ending in
  "Windows") and anything but ``type`` "Consumption" are left out. Retail prices are per region, so
  ``zone`` is "" (region-wide), as in the bundled Azure rows. Two items for one offer: the newest
  ``effectiveStartDate`` wins (counted as ``duplicate_meters``).
- **Resource SKUs** (azure-mgmt-compute ``resource_skus.list()``, ``resourceType`` virtualMachines):
  capabilities ``vCPUs`` → ``vcpus``, ``MemoryGB`` → ``memory_gib`` (Azure's "GB" here are GiB: the
  bundled figures, e.g. 28 for Standard_NC4as_T4_v3, are Azure's GiB), ``GPUs`` →
  ``accelerator_count``; the size's series → ``accelerator`` (:data:`ACCELERATOR_BY_SERIES`).
  ``locations`` say where the subscription can have the size. A ``Location`` restriction for the
  subscription leaves the size out of that region; ``Zone`` restrictions leave it out only when they
  cover every zone the region lists for it (a region-wide offer stays usable while one zone is open).
  Both are counted (``restricted``, ``zone_restricted``). When no region is asked for, the regions are
  those where a mapped GPU size is offered to the subscription.
- **Eviction rates** (Azure Resource Graph, ``POST {arm_url}/providers/Microsoft.ResourceGraph/resources
  ?api-version=2021-03-01`` with a KQL query over ``spotresources | where type =~
  'microsoft.compute/skuspotevictionrate/location'``, ``$skipToken`` paging) → ``interruption_band`` and
  ``interruptions_per_hour`` of spot rows. Refused (401/403), absent (404) or failing (5xx): no
  interruption signal (``eviction_rates_unavailable``), not an error.
- **Spot Placement Scores** (``POST {arm_url}/subscriptions/{s}/providers/Microsoft.Compute/locations/
  {region}/placementScores/spot/generate?api-version=2025-06-05``, regional scope, ``desiredCount`` =
  ``placement_count``), at most 8 regions and 5 sizes a request (the limits Azure documents): only
  where the subscription has it (it needs the Compute Recommendations role). The first 404, 403 or 401
  stops asking (``placement_scores_unavailable``); the rows then carry no capacity signal.

Eviction rate → interruption (assumed, stated here on purpose). Resource Graph gives a band label per
(size, region): "0-5", "5-10", "10-15", "15-20", "20+" (percent). Azure describes it as the share of
spot VMs of that size evicted over a trailing period (the portal's "eviction rate"; Azure does not
publish the window precisely; it reads as about a month, some readers take 28 days). We assume the band
means the same as the AWS Spot Advisor band with the same bounds — the share ``p`` of spot VMs
reclaimed in a trailing month — and map "0-5" → "<5%", "5-10" → "5-10%", "10-15" → "10-15%",
"15-20" → "15-20%", "20+" → ">20%". ``interruptions_per_hour`` is then
:func:`geotrain.pricing.interruption.interruptions_per_hour_for_band` of that label, exactly as for AWS:
λ = −ln(1 − p)/730 h with p the band midpoint (2.5, 7.5, 12.5, 17.5 %) and 25 % for the open band. If
Azure's window is 28 days (672 h), λ is ~8.6 % low; if the band were meant per hour (a reading some
third-party pages give), λ would be ~700× higher: we do not adopt that reading. An unknown label is
an answer of unexpected shape (:class:`CatalogError`).

Placement score → capacity (assumed). A score is Azure's likelihood that a request for
``placement_count`` spot VMs of the size succeeds in the region now. "High" → ``capacity_hint`` =
``placement_count`` (nodes believed obtainable: a lower bound, as the bundled probe counts are);
"Medium", "Low", "DataNotFoundOrStale", "RestrictedSkuNotAvailable" → no capacity hint (a score below
High does not say how many could be had). No score is turned into ``availability``: Azure publishes no
share of time behind a score. Scores are counted per value (``placement_high`` …).

Credentials: :class:`azure.identity.DefaultAzureCredential` unless one is given, subscription from
``AZURE_SUBSCRIPTION_ID``. Throttling (HTTP 429) goes through :func:`with_backoff` only: the ARM
client's own retry policy is built to leave 429 alone (and retries other transient failures
``retry_total`` times; tests pass 0). The Azure SDK is imported lazily (it is the ``azure`` extra).

``source``: :class:`AzureSource` (fetch, check) and its clients; ``skus``: resource SKUs → specs and
restrictions; ``prices``: Retail Prices paging and item selection; ``signals``: eviction bands, Resource
Graph query parsing, placement scores; ``series``: the VM-series → accelerator table.
"""

from geotrain.pricing.live.azure.series import ACCELERATOR_BY_SERIES, accelerator_of
from geotrain.pricing.live.azure.signals import (
    EVICTION_BANDS,
    PLACEMENT_SCORES,
    band_of_eviction_rate,
    parse_eviction_rows,
)
from geotrain.pricing.live.azure.source import AzureSource, observed_text

__all__ = ["ACCELERATOR_BY_SERIES", "EVICTION_BANDS", "PLACEMENT_SCORES", "AzureSource", "accelerator_of",
           "band_of_eviction_rate", "observed_text", "parse_eviction_rows"]

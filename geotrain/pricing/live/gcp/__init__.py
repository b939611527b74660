"""GCP prices for ``geotrain catalog refresh``: Compute Engine's public list prices, per zone, through the
real SDKs (``google-cloud-billing`` over REST, ``google-cloud-compute``).

What it reads:

- **Cloud Billing Catalog** (``CloudCatalogClient.list_services``, ``list_skus``, paginated): the
  Compute Engine service's SKUs. Kept: ``usageType`` "OnDemand" (→ market on_demand) and
  "Preemptible" (→ spot; GCP's Spot VMs are billed on the Preemptible SKUs; a description that
  begins "Spot Preemptible" is spot whatever its usageType, as A4's B200 slices are filed), per
  service region, the unit price of the first tiered rate (``units + nanos / 1e9``) of
  - the core ("… Instance Core", $/vCPU-hour) and RAM ("… Instance Ram", $/GiB-hour) SKUs of the
    machine series geotrain offers: N1 (hosts of attached GPUs), A2, A3, A3 Mega ("A3Plus"), A3 Ultra
    and G2 (GPU-bundled);
  - the GPU SKUs ("Nvidia Tesla T4 GPU running in …", "… GPU attached to Spot Preemptible VMs …",
    resourceGroup "GPU", $/GPU-hour) of each accelerator model, and A4's B200 slices ("A4 Nvidia B200
    (1 gpu slice) running in …": an eighth of the whole VM, no core or RAM SKU).
  Every spelling is the catalogue's own, from public sources cited in :mod:`.descriptions` (the tests'
  fake writes its SKUs from the same table). Commitments, sole tenancy, DWS, reservations, custom
  machine types and everything that is not Compute are left out.
- **Compute Engine** (``ZonesClient.list``, ``MachineTypesClient.aggregated_list``,
  ``AcceleratorTypesClient.aggregated_list``, paginated): the zones and their regions, the machine
  types of each zone (``guestCpus`` → vcpus, ``memoryMb`` / 1024 → memory_gib, ``accelerators`` of
  the GPU-bundled types → accelerator, accelerator_count) and the GPUs each zone can attach
  (``maximumCardsPerInstance``).

Offers, named as the bundled GCP rows are (``geotrain/pricing/data/PROVENANCE.md``):

- N1 with attached GPUs, per zone: for each attachable GPU of the zone (T4, V100, P100, P4) and each
  count N = 1, 2, 4, 8 up to its maximum, the host n1-standard-(8·N): ``n1-standard-8+T4``,
  ``n1-standard-16+2xT4``; price = vCPUs × N1 core + GiB × N1 RAM + N × GPU rate.
- GPU-bundled machine types (a2-*, a3-*, g2-*), region-wide (``zone`` ""), GCP pricing them per region;
  price = vCPUs × series core + GiB × series RAM + GPUs × GPU rate. The offers the bundled snapshot
  writes per zone (a3-highgpu-1g spot in the regions of the H100 probes, so that those zones carry
  their availability) are written per zone here too, so a refresh replaces them (``zonal_offers``).
- A market is offered only when every component has a price in it.

Signals: GCP publishes no capacity or interruption figure through these APIs, so ``capacity_hint``,
``interruption_band`` (of spot rows), ``interruptions_per_hour`` (of spot rows) and ``availability`` are
left empty (on-demand rows get band "none" and 0 interruptions, as the bundled data has them).

Errors: no credentials (``google.auth.default`` finds none) or no project, a 401, or a 403 on an API the
refresh needs → :class:`~geotrain.errors.CredentialsError` saying what to set or grant; no answer at all
(the transport's or google-auth's own errors) → one-line :class:`~geotrain.errors.ProviderError`; an answer the SDK
cannot parse, or a SKU without a price in the unit expected → :class:`~geotrain.errors.CatalogError`;
zones that an aggregated list reports ``UNREACHABLE`` → their region goes to ``skipped``. 429 and 503
answers are retried with :func:`~geotrain.pricing.live.base.with_backoff` (the SDKs' own retries are
turned off so that one policy applies); if they persist, :class:`~geotrain.errors.ThrottledError`.

``source``: :class:`GcpSource` and its client plumbing (SDK clients, paging, retries, errors); ``skus``: SKU
classification, unit prices, accelerator and series names, and the offers named and priced from them;
``descriptions``: the catalogue's published SKU descriptions, with their sources.
"""

from geotrain.pricing.live.gcp.source import ClientFactory, GcpClients, GcpSource, default_clients

__all__ = ["ClientFactory", "GcpClients", "GcpSource", "default_clients"]

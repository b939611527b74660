"""What ``geotrain estimate`` does: resolve the nodes, assemble the model, predict."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from geotrain.domain import SyncStrategyName
from geotrain.perf.model import Estimate, PerfModel, make_strategy
from geotrain.perf.network import NetworkModel, SitePlacement
from geotrain.perf.rates import RateTable
from geotrain.perf.workloads import WorkloadRegistry
from geotrain.pricing.inventory import Inventory, inventory_table, load_inventory
from geotrain.pricing.nodespec import parse_nodes, resolve_nodes
from geotrain.pricing.snapshot import OfferFilter, PriceSnapshot, offers_from_table


@dataclass(frozen=True, slots=True)
class EstimateRequest:
    workload: str
    nodes: str
    strategy: SyncStrategyName = SyncStrategyName.HIVEMIND
    precision: str = "fp16"
    target_batch_size: int = 32768
    local_steps: int = 32
    accumulation_steps: int = 16
    onprem_inventory: Path | None = None
    rates_file: Path | None = None
    links_file: Path | None = None
    workloads_file: Path | None = None


def site_placements(inventory: Inventory) -> dict[str, SitePlacement]:
    return {s.site: SitePlacement(s.uplink_gbps, s.near_region) for s in inventory.sites}


def build_model(request: EstimateRequest, inventory: Inventory | None) -> PerfModel:
    rates = RateTable.bundled()
    if request.rates_file:
        rates = rates.with_file(request.rates_file)
    network = NetworkModel.bundled(sites=site_placements(inventory) if inventory else None)
    if request.links_file:
        network = network.with_overrides_file(request.links_file)
    return PerfModel(rates=rates, network=network)


def estimate(request: EstimateRequest, snapshot: PriceSnapshot) -> Estimate:
    registry = WorkloadRegistry.bundled()
    if request.workloads_file:
        registry = registry.with_file(request.workloads_file)
    workload = registry.get(request.workload)
    requests = parse_nodes(request.nodes)
    inventory = load_inventory(request.onprem_inventory) if request.onprem_inventory else None
    offers = list(snapshot.offers(OfferFilter(clouds=tuple({r.cloud for r in requests}),
                                              instance_types=tuple({r.instance_type for r in requests}))))
    if inventory is not None:
        offers += offers_from_table(inventory_table(inventory))
    groups = resolve_nodes(requests, offers)
    strategy = make_strategy(request.strategy, target_batch_size=request.target_batch_size,
                             local_steps=request.local_steps, accumulation_steps=request.accumulation_steps)
    return build_model(request, inventory).predict(workload, groups, strategy, request.precision)

"""``geotrain estimate``: resolve the nodes, assemble the model, predict."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from geotrain.domain import SyncSettings
from geotrain.errors import InputError
from geotrain.perf.describe import bottleneck_words
from geotrain.perf.host import LocalHost
from geotrain.perf.model import Estimate, PerfModel
from geotrain.perf.network import NetworkModel
from geotrain.perf.memory import MemoryTable, misfit
from geotrain.perf.rates import RateTable
from geotrain.perf.workloads import WorkloadRegistry
from geotrain.planning.planner import site_placements
from geotrain.pricing.egress import EgressPrices
from geotrain.pricing.inventory import Inventory, inventory_table, load_inventory
from geotrain.pricing.nodespec import parse_nodes, resolve_nodes
from geotrain.pricing.snapshot import OfferFilter, SnapshotStore, offers_from_table
from geotrain.providers.base import LOCAL_PROVIDER


@dataclass(frozen=True, slots=True)
class EstimateRequest:
    workload: str
    nodes: str
    sync: SyncSettings = field(default_factory=SyncSettings)
    onprem_inventory: Path | None = None
    rates_file: Path | None = None
    links_file: Path | None = None
    workloads_file: Path | None = None
    snapshot_id: str | None = None
    provider: str | None = None  # "local": the nodes are processes on this machine
    egress_file: Path | None = None  # the user's egress rows (the egress table's format), over the bundled ones


@dataclass(frozen=True, slots=True)
class EstimateResult:
    estimate: Estimate
    bottleneck: str  # in words
    assumptions: tuple[str, ...] = ()  # figures no table gives (an unknown cloud's egress)


def build_model(request: EstimateRequest, inventory: Inventory | None) -> PerfModel:
    rates = RateTable.bundled()
    if request.rates_file:
        rates = rates.with_file(request.rates_file)
    network = NetworkModel.bundled(sites=site_placements(inventory) if inventory else None)
    if request.links_file:
        network = network.with_overrides_file(request.links_file)
    egress = EgressPrices.bundled()
    if request.egress_file:
        egress = egress.with_file(request.egress_file)
    model = PerfModel(rates=rates, network=network, egress=egress)
    if request.provider == LOCAL_PROVIDER:
        model = model.on_local_host(LocalHost.measured())
    elif request.provider is not None:
        raise InputError(f"--provider: {request.provider!r} is not {LOCAL_PROVIDER!r}")
    return model


def estimate(request: EstimateRequest) -> EstimateResult:
    store = SnapshotStore()
    snapshot = store.load(request.snapshot_id) if request.snapshot_id else store.current()
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
    table = MemoryTable.bundled()
    for group in groups:  # a node that cannot hold the model trains nothing: say so instead of a figure
        reason = misfit(workload, group.offer.shape.accelerator, table)
        if reason is not None:
            raise InputError(f"--nodes: {group.offer.offer_id}: {reason}; choose nodes with larger GPUs, or "
                             "give the workload's state_bytes_per_parameter if its optimizer keeps less")
    model = build_model(request, inventory)
    result = model.predict(workload, groups, request.sync)
    # an assumed egress rate matters only where traffic leaves a zone
    spread = len({g.offer.location.zone_scope for g in groups}) > 1
    assumed = model.egress.assumed_words(g.offer.location for g in groups) if spread else []
    return EstimateResult(result, bottleneck_words(result), tuple(assumed))


def estimate_record(outcome: EstimateResult) -> dict[str, Any]:
    """The estimate as ``--json`` prints it."""
    result = outcome.estimate

    def finite(x: float | None) -> float | None:
        return None if x is None or math.isinf(x) or math.isnan(x) else x

    b = result.bottleneck
    return {
        "workload": result.workload,
        "strategy": result.strategy.value,
        "precision": result.precision,
        "nodes": [
            {"offer_id": g.offer.offer_id, "count": g.count, "price_usd_per_hour": g.offer.price_usd_per_hour,
             "samples_per_s_per_node": r.samples_per_s, "rate_estimated": r.estimated, "rate_source": r.source}
            for g, r in zip(result.groups, result.rates, strict=True)
        ],
        "node_count": result.nodes,
        "samples_per_s": result.samples_per_s,
        "time_per_round_s": result.time_per_round_s,
        "samples_per_round": result.samples_per_round,
        "compute_time_per_round_s": result.compute_time_per_round_s,
        "comm_time_per_round_s": result.comm_time_per_round_s,
        "granularity": finite(result.granularity),
        "compute_usd_per_hour": result.compute_usd_per_hour,
        "egress_usd_per_hour": result.egress_usd_per_hour,
        "egress_gb_per_hour": result.egress_gb_per_hour,
        "egress_usd_per_hour_by_cloud": result.egress_usd_per_hour_by_cloud,
        "egress_usd_per_hour_by_link_class": result.egress_usd_per_hour_by_link_class,
        "usd_per_hour": result.usd_per_hour,
        "usd_per_million_samples": result.usd_per_million_samples,
        "bytes_per_peer_per_round": result.bytes_per_peer_per_round,
        "interruptions_per_hour": result.interruptions_per_hour,
        "assumptions": list(outcome.assumptions),
        "bottleneck": {
            "what": b.what if b else "compute",
            "seconds": b.seconds if b else 0.0,
            "description": outcome.bottleneck,
            "link": None if not (b and b.link) else {
                "from": result.groups[b.groups[0]].offer.offer_id, "to": result.groups[b.groups[1]].offer.offer_id,
                "link_class": b.link.link_class.value, "bandwidth_gbps": b.link.bandwidth_gbps,
                "rtt_ms": b.link.rtt_ms, "bandwidth_measured": b.link.bandwidth_measured,
                "rtt_measured": b.link.rtt_measured, "source": b.link.source,
            },
        },
    }

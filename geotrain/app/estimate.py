"""``geotrain estimate``: resolve the nodes, assemble the model, predict.

:class:`Estimator` reads the inputs once (price snapshot, on-prem inventory, the user's rate, link,
workload and egress files, the workload registry) and then estimates any number of mixes; the
single ``estimate`` command and ``estimate --batch`` (:func:`estimate_batch`, one setup per line of a
JSON Lines file) both go through it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from geotrain.config import parse_sync
from geotrain.domain import Market, NodeGroup, Offer, SyncSettings
from geotrain.errors import GeotrainError, InputError
from geotrain.perf.describe import bottleneck_words
from geotrain.perf.host import LocalHost
from geotrain.perf.memory import MemoryTable, misfit
from geotrain.perf.model import Estimate, PerfModel
from geotrain.perf.network import NetworkModel
from geotrain.perf.rates import RateTable
from geotrain.perf.workloads import Workload, WorkloadRegistry
from geotrain.planning.planner import site_placements
from geotrain.pricing.egress import EgressPrices
from geotrain.pricing.inventory import Inventory, inventory_table, load_inventory
from geotrain.pricing.outliers import as_planned
from geotrain.pricing.nodespec import parse_nodes, resolve_nodes
from geotrain.pricing.snapshot import OfferFilter, SnapshotStore, offers_from_table
from geotrain.providers.base import LOCAL_PROVIDER
from geotrain.specfile import Fields, parse_json, read_text


@dataclass(frozen=True, slots=True)
class EstimateInputs:
    """What every estimate of one session shares (the ``estimate`` flags that are not the setup)."""

    onprem_inventory: Path | None = None
    rates_file: Path | None = None
    links_file: Path | None = None
    workloads_file: Path | None = None
    snapshot_id: str | None = None
    provider: str | None = None  # "local": the nodes are processes on this machine
    egress_file: Path | None = None  # the user's egress rows (the egress table's format), over the bundled ones


@dataclass(frozen=True, slots=True)
class EstimateRequest:
    """One setup (workload, nodes, sync settings) and the inputs it is estimated with."""

    workload: str
    nodes: str
    sync: SyncSettings = field(default_factory=SyncSettings)
    inputs: EstimateInputs = field(default_factory=EstimateInputs)


@dataclass(frozen=True, slots=True)
class EstimateResult:
    estimate: Estimate
    bottleneck: str  # in words
    assumptions: tuple[str, ...] = ()  # figures no table gives (an unknown cloud's egress)


def build_model(inputs: EstimateInputs, inventory: Inventory | None) -> PerfModel:
    rates = RateTable.bundled()
    if inputs.rates_file:
        rates = rates.with_file(inputs.rates_file)
    network = NetworkModel.bundled(sites=site_placements(inventory) if inventory else None)
    if inputs.links_file:
        network = network.with_overrides_file(inputs.links_file)
    egress = EgressPrices.bundled()
    if inputs.egress_file:
        egress = egress.with_file(inputs.egress_file)
    model = PerfModel(rates=rates, network=network, egress=egress)
    if inputs.provider == LOCAL_PROVIDER:
        model = model.on_local_host(LocalHost.measured())
    elif inputs.provider is not None:
        raise InputError(f"--provider: {inputs.provider!r} is not {LOCAL_PROVIDER!r}")
    return model


_FILTERED_KEYS = 8  # distinct (cloud, instance type) pairs read one by one before the whole snapshot is indexed


class Estimator:
    """Estimates of many mixes from one set of inputs, each read once: the snapshot's offers (indexed by
    cloud and instance type), the inventory, the workload registry and the perf model.

    Usage::

        estimator = Estimator(EstimateInputs(onprem_inventory=Path("examples/sites.yaml")))
        for nodes in ("gcp/us-central1/n1-standard-8+T4=4", "onprem/munich-lab/rtx8000-ws=1,aws/eu-central-1/g4dn.xlarge=2"):
            print(estimator.estimate("convnext-large", nodes, SyncSettings(strategy="allreduce")).estimate.samples_per_s)
    """

    def __init__(self, inputs: EstimateInputs | None = None) -> None:
        self.inputs = inputs = inputs or EstimateInputs()
        store = SnapshotStore()
        snapshot = store.load(inputs.snapshot_id) if inputs.snapshot_id else store.current()
        self.snapshot_id = snapshot.snapshot_id
        registry = WorkloadRegistry.bundled()
        if inputs.workloads_file:
            registry = registry.with_file(inputs.workloads_file)
        self.registry = registry
        inventory = load_inventory(inputs.onprem_inventory) if inputs.onprem_inventory else None
        self._snapshot = snapshot
        self._inventory_offers = offers_from_table(inventory_table(inventory)) if inventory is not None else ()
        # what resolve_nodes looks at for one item: the offers of its cloud and instance type (read on first use)
        self._offers: dict[tuple[str, str], list[Offer]] = {}
        self._indexed = False  # whether _offers holds every pair
        self._resolved: dict[tuple[str, str, str, Market], Offer] = {}  # a node item's offer, once found
        self._memory = MemoryTable.bundled()
        self.model = build_model(inputs, inventory)

    def nodes(self, spec: str) -> list[NodeGroup]:
        """The node groups a ``--nodes`` text means (a region takes its cheapest zone)."""
        groups = []
        for request in parse_nodes(spec):
            key = (request.cloud, request.where, request.instance_type, request.market)
            offer = self._resolved.get(key)
            if offer is None:
                offers = self._offers_of(request.cloud, request.instance_type)
                offer = self._resolved[key] = resolve_nodes([request], offers)[0].offer
            groups.append(NodeGroup(offer, request.count))
        return groups

    def _offers_of(self, cloud: str, instance_type: str) -> list[Offer]:
        """The snapshot's offers of one cloud and instance type, then the inventory's, in catalog order.
        The first few are filtered from the snapshot one by one (a single estimate reads only those); after
        that the whole snapshot is indexed once."""
        key = (cloud, instance_type)
        if key in self._offers or self._indexed:
            return self._offers.get(key, [])
        if len(self._offers) < _FILTERED_KEYS:
            wanted = OfferFilter(clouds=(cloud,), instance_types=(instance_type,))
            mine = [o for o in self._inventory_offers if (o.location.cloud, o.shape.instance_type) == key]
            self._offers[key] = [*as_planned(self._snapshot.offers(wanted)), *mine]
            return self._offers[key]
        self._offers = {}
        for offer in (*as_planned(self._snapshot.offers()), *self._inventory_offers):
            self._offers.setdefault((offer.location.cloud, offer.shape.instance_type), []).append(offer)
        self._indexed = True
        return self._offers.get(key, [])

    def estimate(self, workload: str | Workload, nodes: str | Sequence[NodeGroup],
                 sync: SyncSettings | None = None) -> EstimateResult:
        """Samples/s, round time, egress and cost of ``nodes`` (a ``--nodes`` text or resolved groups)
        training ``workload`` (a registry name or a :class:`Workload`) with ``sync``."""
        sync = sync if sync is not None else SyncSettings()
        chosen = self.registry.get(workload) if isinstance(workload, str) else workload
        groups = self.nodes(nodes) if isinstance(nodes, str) else list(nodes)
        for group in groups:  # a node that cannot hold the model trains nothing: say so instead of a figure
            reason = misfit(chosen, group.offer.shape.accelerator, self._memory)
            if reason is not None:
                raise InputError(f"--nodes: {group.offer.offer_id}: {reason}; choose nodes with larger GPUs, or "
                                 "give the workload's state_bytes_per_parameter if its optimizer keeps less")
        result = self.model.predict(chosen, groups, sync)
        # an assumed egress rate matters only where traffic leaves a zone
        spread = len({g.offer.location.zone_scope for g in groups}) > 1
        assumed = self.model.egress.assumed_words(g.offer.location for g in groups) if spread else []
        return EstimateResult(result, bottleneck_words(result), tuple(assumed))


def estimate(request: EstimateRequest) -> EstimateResult:
    return Estimator(request.inputs).estimate(request.workload, request.nodes, request.sync)


@dataclass(frozen=True, slots=True)
class BatchAnswer:
    """The answer to one line of a batch: its estimate, or the error that line gave."""

    line: int  # 1-based, in the file
    result: EstimateResult | None = None
    error: str | None = None


def estimate_batch(path: Path, inputs: EstimateInputs | None = None) -> Iterator[BatchAnswer]:
    """One answer per non-blank line of a JSON Lines file, in order; the inputs are read once. Each line is
    a setup in the job spec's words: ``{"workload": ..., "nodes": "..." or [...], "strategy": ...,
    "sync": {"target_batch_size": ..., "group_size": ..., "local_steps": ..., "accumulation_steps": ..., "staleness": ...,
    "averaging_pushes": ..., "precision": ..., "micro_batches": ...}}`` (all but workload and nodes optional). A line that cannot be estimated
    answers with its error and the others go on; a file or input that cannot be read raises."""
    text = read_text(path, InputError)
    estimator = Estimator(inputs)
    for number, line in enumerate(text.split("\n"), start=1):  # JSON Lines: only \n ends a line
        if not line.strip():
            continue
        origin = f"{path}:{number}"
        try:
            workload, nodes, sync = batch_setup(line, origin)
            yield BatchAnswer(number, result=estimator.estimate(workload, nodes, sync))
        except GeotrainError as exc:
            message = str(exc)
            yield BatchAnswer(number, error=message if message.startswith(origin) else f"{origin}: {message}")


def batch_setup(line: str, origin: str) -> tuple[str, str, SyncSettings]:
    """A batch line's workload, nodes and sync settings."""
    data = parse_json(line, origin, InputError)
    if not isinstance(data, Mapping):
        raise InputError(f"{origin}: a line must be one JSON object of setup fields, got {type(data).__name__}")
    fields = Fields(data, origin=origin, error=InputError)
    workload = fields.text("workload")
    nodes = ",".join(fields.text_list("nodes"))  # one --nodes text, or a list of its items
    sync = parse_sync(fields)
    fields.finish()
    return workload, nodes, sync


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


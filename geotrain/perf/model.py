"""``PerfModel.predict``: samples/s, round time, egress and dollars for a mix of nodes.

Money: compute $/h = Σ nodes × price; egress $/h = Σ over directed links of bytes/h × what one GB of
that transfer costs on both sides (the injected :class:`TransferPrices`, which is
``geotrain.pricing.egress.EgressPrices``: the same rule the ledger's bill uses; GB = 10^9 bytes);
$/1M samples = (compute + egress + data $/h) / (samples/s × 3600) × 10^6.

A node trains ``sync.micro_batches`` micro-batches per step on each accelerator. On the local
provider (``PerfModel.on_local_host``) its rate is this machine's CPU rate, shared when there are more
nodes than cores, and its links are loopback (``geotrain.perf.host``).

Data locality: with a :class:`DataSource` (where the dataset lives, bytes per sample), every node
streams the samples it trains from there. A node's rate is capped by what one stream from the data
can carry (``bandwidth / bytes per sample``), and nodes outside the data's zone pay egress for what
they read, at the data cloud's price for that link class.
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from geotrain.domain import CLOUD_ONPREM, LinkClass, Location, NodeGroup, SyncSettings, SyncStrategyName
from geotrain.errors import InputError
from geotrain.perf.data import data_text
from geotrain.perf.host import LocalHost, LocalRates, LoopbackNetwork
from geotrain.perf.network import LinkEstimate, NetworkModel, SitePlacement
from geotrain.perf.nic import MachineNetworks
from geotrain.perf.rates import ComputeRate, RateTable
from geotrain.perf.hivemind_fit import HivemindFit
from geotrain.perf.strategies import Bottleneck, PeerGroup, Strategy, Topology
from geotrain.perf.workloads import Workload
from geotrain.strategies import entry, resolve

GB = 1e9


class TransferPrices(Protocol):
    """What traffic between two locations costs per GB, both sides together
    (``geotrain.pricing.egress.EgressPrices`` is the one implementation)."""

    def usd_per_gb(self, src: Location, dst: Location) -> float: ...

    def assumed_words(self, locations: Iterable[Location]) -> list[str]:
        """What the prices assume for these locations where no table gives a figure (one line each)."""
        ...


@dataclass(frozen=True, slots=True)
class LinkUse:
    """Traffic on one directed link between two node groups."""

    src: int
    dst: int
    link: LinkEstimate
    gb_per_hour: float
    usd_per_gb: float

    @property
    def usd_per_hour(self) -> float:
        return self.gb_per_hour * self.usd_per_gb


@dataclass(frozen=True, slots=True)
class DataSource:
    """Where the training data lives and how many bytes one sample is."""

    location: Location
    bytes_per_sample: float


@dataclass(frozen=True, slots=True)
class Estimate:
    workload: str
    strategy: SyncStrategyName
    precision: str
    groups: tuple[NodeGroup, ...]
    rates: tuple[ComputeRate, ...]  # per group: one node's rate
    nodes: int
    samples_per_s: float
    time_per_round_s: float
    samples_per_round: float
    compute_time_per_round_s: float
    comm_time_per_round_s: float
    granularity: float  # compute time / communication time per round (inf without communication)
    compute_usd_per_hour: float
    egress_usd_per_hour: float
    egress_gb_per_hour: float  # traffic that leaves a zone (same-zone traffic is in ``links`` only)
    egress_usd_per_hour_by_cloud: dict[str, float]
    egress_usd_per_hour_by_link_class: dict[str, float]
    bytes_per_peer_per_round: float
    links: tuple[LinkUse, ...]
    bottleneck: Bottleneck | None
    interruptions_per_hour: float | None  # expected, all nodes; None if any spot offer's rate is unknown
    data_egress_usd_per_hour: float = 0.0  # reading training data from another zone
    goodput_samples_per_s: float | None = None  # with the groups' goodput (given to ``predict``); else None

    @property
    def usd_per_hour(self) -> float:
        return self.compute_usd_per_hour + self.egress_usd_per_hour + self.data_egress_usd_per_hour

    @property
    def usd_per_million_samples(self) -> float:
        return self.usd_per_hour / (self.samples_per_s * 3600) * 1e6


@functools.cache
def bundled_fit() -> HivemindFit:
    data = json.loads(data_text("calibration.json"))["hivemind"]
    return HivemindFit(
        efficiency=dict(data["efficiency"]), unseen_step_s_per_gparam=dict(data["unseen_step_s_per_gparam"]),
        round_floor_s=data["round_floor_s"], per_peer_s=data["per_peer_s"], per_gparam_s=data["per_gparam_s"],
        step_s_per_gparam=data["step_s_per_gparam"], host_vcpus=data["host_vcpus"],
        host_exponent=data["host_exponent"], unknown_vcpus=data["unknown_vcpus"],
    )


def make_strategy(sync: SyncSettings, fit: HivemindFit | None = None) -> Strategy:
    """The perf model of ``sync.strategy`` with the settings' knobs (the class the registry,
    :mod:`geotrain.strategies`, names for it)."""
    return resolve(entry(sync.strategy).perf_class).from_settings(sync, fit or bundled_fit())


class PerfModel:
    """Compute rates, network and egress prices together; ``predict`` is pure and cached per link.

    ``host``: the nodes are the local provider's processes on this machine (``on_local_host``): every
    node trains at this machine's measured CPU rate, the nodes share its cores, and they talk over
    loopback; prices and link classes still follow the offers' locations, as the bill would.
    """

    def __init__(self, *, egress: TransferPrices, rates: RateTable | LocalRates | None = None,
                 network: NetworkModel | LoopbackNetwork | None = None, host: LocalHost | None = None,
                 fit: HivemindFit | None = None, machines: MachineNetworks | None = None) -> None:
        self.rates = rates or RateTable.bundled()
        self.network = network or NetworkModel.bundled()
        self.egress = egress
        self.host = host
        self.fit = fit  # hivemind's constants (None: the bundled calibration)
        self.machines = machines or MachineNetworks.bundled()  # each machine type's NIC (geotrain.perf.nic)

    @property
    def nccl(self) -> bool:
        """Whether the collectives run on NCCL over the machines' networks (not on the local host)."""
        return self.host is None

    def nic_gbps(self, offer) -> float | None:  # noqa: ANN001 - an Offer
        """A machine's sustained NIC figure (None: not published, or on-prem: no cap)."""
        return self.machines.nic_gbps(offer.location.cloud, offer.shape.instance_type)

    def with_sites(self, sites: dict[str, SitePlacement]) -> PerfModel:
        return PerfModel(rates=self.rates, network=self.network.with_sites(sites), egress=self.egress, host=self.host,
                         fit=self.fit, machines=self.machines)

    def on_local_host(self, host: LocalHost) -> PerfModel:
        """The same model for nodes that are processes on this machine (the local provider)."""
        base = self.rates.base if isinstance(self.rates, LocalRates) else self.rates
        return PerfModel(rates=LocalRates(base, host), network=LoopbackNetwork(host), egress=self.egress, host=host,
                         fit=self.fit, machines=self.machines)

    def host_share(self, nodes: int) -> float:
        """The share of a core each node gets: 1 on separate machines, cores/nodes when more local
        nodes than cores share this one."""
        return 1.0 if self.host is None else self.host.core_share(nodes)

    def data_capped_rate(self, rate: float, location: Location, data: DataSource | None) -> float:
        """A node's rate, capped by one stream from the data's location."""
        if data is None or data.bytes_per_sample <= 0:
            return rate
        link = self.network.link(data.location, location)
        return min(rate, link.bandwidth_gbps * 1e9 / 8 / data.bytes_per_sample)

    def data_usd_per_sample(self, location: Location, data: DataSource | None) -> float:
        if data is None:
            return 0.0
        return data.bytes_per_sample / GB * self.egress.usd_per_gb(data.location, location)

    def predict(self, workload: Workload, groups: Sequence[NodeGroup], sync: SyncSettings,
                data: DataSource | None = None, goodputs: Sequence[float] | None = None) -> Estimate:
        """``goodputs``: per group, the share of its time a node trains (1 − expected interruptions ×
        recovery time); the estimate's ``goodput_samples_per_s`` is the strategy's rate with it."""
        if goodputs is not None:
            goodputs = [gp for g, gp in zip(groups, goodputs, strict=True) if g.count > 0]
        groups = tuple(g for g in groups if g.count > 0)
        if not groups:
            raise InputError("no nodes to estimate: give at least one node")
        precision = sync.precision
        strategy = make_strategy(sync, self.fit)
        share = self.host_share(sum(g.count for g in groups))
        rates = tuple(self.rates.node_rate(workload, g.offer.shape.accelerator, g.offer.shape.accelerator_count)
                      for g in groups)
        peers = [
            PeerGroup(g.offer.location, g.count,
                      self.data_capped_rate(r.samples_per_s * share, g.offer.location, data),
                      samples_per_step(workload, sync, g.offer.shape.accelerator_count),
                      1.0 if goodputs is None else goodputs[n], g.offer.shape.vcpus, self.nic_gbps(g.offer))
            for n, (g, r) in enumerate(zip(groups, rates, strict=True))
        ]
        uplinks = {g.offer.location.region: g.offer.uplink_gbps for g in groups
                   if g.offer.location.cloud == CLOUD_ONPREM}
        topo = Topology(peers, self.network.link, lambda site: uplinks.get(site), nccl=self.nccl)
        payload = workload.wire_bytes(precision)
        cost = strategy.cost(topo, payload, workload)

        links, by_cloud, by_class = [], defaultdict(float), defaultdict(float)
        egress_usd = egress_gb = 0.0
        for (i, j), bytes_per_s in sorted(cost.bytes_per_s.items()):
            if bytes_per_s <= 0:
                continue
            src, dst = groups[i].offer.location, groups[j].offer.location
            # the rings and broadcasts run over the collective link; hivemind over one stream per pair
            link = self.network.link(src, dst) if strategy.name is SyncStrategyName.HIVEMIND else topo.collective(i, j)
            gb_per_hour = bytes_per_s * 3600 / GB
            price = self.egress.usd_per_gb(src, dst)
            use = LinkUse(i, j, link, gb_per_hour, price)
            links.append(use)
            egress_usd += use.usd_per_hour
            if link.link_class is not LinkClass.SAME_ZONE:
                egress_gb += gb_per_hour
            by_cloud[src.cloud] += use.usd_per_hour
            by_class[link.link_class.value] += use.usd_per_hour
        compute_usd = sum(g.count * g.offer.price_usd_per_hour for g in groups)
        raw = sum(p.count * p.samples_per_s for p in peers)
        data_usd = sum(3600 * cost.samples_per_s * p.count * p.samples_per_s / raw
                       * self.data_usd_per_sample(p.location, data) for p in peers)
        return Estimate(
            workload=workload.name, strategy=strategy.name, precision=precision, groups=groups, rates=rates,
            nodes=topo.nodes, samples_per_s=cost.samples_per_s, time_per_round_s=cost.time_per_round_s,
            samples_per_round=cost.samples_per_round, compute_time_per_round_s=cost.compute_s,
            comm_time_per_round_s=cost.comm_s,
            granularity=cost.compute_s / cost.comm_s if cost.comm_s > 0 else float("inf"),
            compute_usd_per_hour=compute_usd, egress_usd_per_hour=egress_usd, egress_gb_per_hour=egress_gb,
            egress_usd_per_hour_by_cloud=dict(by_cloud), egress_usd_per_hour_by_link_class=dict(by_class),
            bytes_per_peer_per_round=cost.bytes_per_peer_per_round, links=tuple(links),
            bottleneck=cost.bottleneck, interruptions_per_hour=_interruptions(groups),
            data_egress_usd_per_hour=data_usd,
            goodput_samples_per_s=None if goodputs is None else (
                cost.good_samples_per_s if cost.good_samples_per_s is not None else cost.samples_per_s),
        )


def samples_per_step(workload: Workload, sync: SyncSettings, accelerators: int) -> int:
    """One node's share of a step: ``micro_batches`` micro-batches on each of its accelerators."""
    return workload.samples_per_step * max(1, accelerators) * sync.micro_batches


def _interruptions(groups: Sequence[NodeGroup]) -> float | None:
    total = 0.0
    for g in groups:
        rate = g.offer.interruption.interruptions_per_hour
        if rate is None:
            return None
        total += g.count * rate
    return total

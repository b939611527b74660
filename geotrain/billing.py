"""The cost of a run at any moment, from the ledger: the one cost function.

``run_cost(ledger, run_id, at=…)`` is what launch's progress line, ``geotrain status``, the spend limit
(``launch --max-spend-usd``) and ``geotrain cost-report`` all show. It is a list of
:class:`CostItem`, each attributed to one node (the node that ran, sent or read) and billed by one
cloud in one region, so every breakdown — per node, cloud, region, market, kind — is a plain sum over
the same items and adds up to the total exactly; per link, the traffic items add up to the traffic
total.

- **compute**: every node is billed per second from launch to its end (or to ``at``) at the price in
  force: its launch price, changed at every later observation of its offer's price in the ledger
  (spot prices move; an on-prem machine costs its amortized rate, often 0);
- **egress**: the bytes each node sent to each other node (``link_bytes``), priced by
  :meth:`geotrain.pricing.egress.EgressPrices.charges` — the sender's cloud for the link class, and
  the receiver's too where its cloud bills incoming traffic (AWS between zones, "in each direction");
- **storage**: checkpoint bytes written by a node to the checkpoint storage and read back by every
  node of the generation that restored them, priced as traffic between the node and the storage's
  region (free inside one region, as object storage is; this machine's disk costs nothing; a storage
  whose region is unknown is counted, not priced).

Bytes reach the ledger every few progress reports; a cost taken while a run trains therefore lags
the last ``progress_every`` steps of traffic (the spend limit allows for that, see the launcher).
GB = 10^9 bytes, as in the clouds' price lists.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

from geotrain.clouds.geography import continent_of
from geotrain.domain import CLOUD_ONPREM, LinkClass, Location, link_class
from geotrain.ledger import Event, EventKind, Ledger, NodeRow, PricePoint, RunRow
from geotrain.pricing.egress import Charge, EgressPrices, Payer

GB = 1e9


class CostKind(StrEnum):
    COMPUTE = "compute"
    EGRESS = "egress"
    STORAGE = "storage"


@dataclass(frozen=True, slots=True)
class CostItem:
    """One line of the bill. ``node_id`` is the node it is attributed to (for traffic: the node that
    sent or received it); ``cloud`` and ``region`` say who bills it (``cloud/region``)."""

    kind: CostKind
    node_id: str
    cloud: str
    region: str  # cloud/region of the billing side
    market: str  # the node's market
    usd: float
    quantity: float  # node-hours (compute) or GB (traffic)
    link: tuple[str, str] | None = None  # (sender, receiver): a node id, or "storage"
    link_class: str | None = None
    payer: str | None = None  # sender | receiver (traffic)


@dataclass(frozen=True, slots=True)
class NodeUsage:
    """A node's life in the bill: how long it ran, what its compute cost, how often its price moved."""

    node_id: str
    offer_id: str
    cloud: str
    region: str
    zone: str
    market: str
    hours: float
    compute_usd: float
    end_reason: str | None
    price_changes: int  # observations of a new price while the node ran


@dataclass(frozen=True, slots=True)
class RunCost:
    run_id: str
    at: float  # the moment the cost is taken at (unix time)
    items: tuple[CostItem, ...]
    nodes: tuple[NodeUsage, ...]
    storage_gb_written: float
    storage_gb_read: float
    storage_note: str

    @property
    def total_usd(self) -> float:
        return sum(i.usd for i in self.items)

    def usd(self, kind: CostKind) -> float:
        return sum(i.usd for i in self.items if i.kind is kind)

    def by(self, key: Callable[[CostItem], str]) -> dict[str, float]:
        """The total split by ``key`` (e.g. ``lambda i: i.cloud``); the parts add up to the total."""
        out: dict[str, float] = defaultdict(float)
        for item in self.items:
            out[key(item)] += item.usd
        return dict(sorted(out.items()))

    @property
    def by_node(self) -> dict[str, float]:
        return self.by(lambda i: i.node_id)

    @property
    def by_cloud(self) -> dict[str, float]:
        return self.by(lambda i: i.cloud)

    @property
    def by_region(self) -> dict[str, float]:
        return self.by(lambda i: i.region)

    @property
    def by_market(self) -> dict[str, float]:
        return self.by(lambda i: i.market)

    @property
    def by_kind(self) -> dict[str, float]:
        return {kind.value: self.usd(kind) for kind in CostKind}

    @property
    def by_link(self) -> dict[tuple[str, str], float]:
        """Traffic (egress and storage) per (sender, receiver); adds up to the traffic total."""
        out: dict[tuple[str, str], float] = defaultdict(float)
        for item in self.items:
            if item.link is not None:
                out[item.link] += item.usd
        return dict(sorted(out.items()))


def run_cost(ledger: Ledger, run_id: str, *, at: float | None = None, egress: EgressPrices | None = None) -> RunCost:
    """What the run has cost up to ``at`` (default: now; a run that ended: its whole cost)."""
    egress = egress or EgressPrices.bundled()
    at = time.time() if at is None else at
    run = ledger.run(run_id)
    rows = ledger.nodes(run_id)
    by_id = {r.node_id: r for r in rows}
    items: list[CostItem] = []
    nodes = []
    for row in rows:
        usage = node_usage(row, ledger.prices(row.offer_id), at)
        nodes.append(usage)
        items.append(CostItem(CostKind.COMPUTE, row.node_id, row.cloud, f"{row.cloud}/{row.region}", row.market,
                              usage.compute_usd, usage.hours))
    for sent in ledger.link_bytes(run_id):
        src, dst = by_id.get(sent.src_node), by_id.get(sent.dst_node)
        if src is None or dst is None:
            continue
        items += _traffic(CostKind.EGRESS, src.location, dst.location, sent.bytes / GB, egress.charges,
                          (src.node_id, dst.node_id), sent.link_class, {Payer.SENDER: src, Payer.RECEIVER: dst})
    storage_items, written, read, note = _storage(ledger.events(run_id, kinds=_STORAGE_EVENTS), by_id, run, egress)
    items += storage_items
    return RunCost(run_id, at, tuple(items), tuple(nodes), written, read, note)


def node_usage(row: NodeRow, prices: Iterable[PricePoint], at: float) -> NodeUsage:
    """Integrate the price step function over the node's life up to ``at`` (the launch price until a
    later one)."""
    start = row.launched_at
    end = max(start, min(row.ended_at if row.ended_at is not None else at, at))
    points = sorted((p.at, p.price_usd_per_hour) for p in prices if start < p.at < end)
    usd, t, price, changes = 0.0, start, row.price_usd_per_hour, 0
    for when, new in points:
        if new == price:
            continue  # an observation of the same price
        usd += (when - t) / 3600 * price
        t, price, changes = when, new, changes + 1
    usd += (end - t) / 3600 * price
    return NodeUsage(row.node_id, row.offer_id, row.cloud, row.region, row.zone, row.market, (end - start) / 3600,
                     usd, row.end_reason, changes)


def storage_location(options: dict) -> Location | None:
    """Where the checkpoint storage is (``launch --checkpoint-region cloud/region``), if known."""
    where = options.get("checkpoint_location")
    if not where:
        return None
    cloud, _, region = where.partition("/")
    continent = continent_of(cloud, region)
    return Location(cloud, region, "", continent) if continent else None


_STORAGE_EVENTS = (EventKind.CHECKPOINT_SAVED, EventKind.CHECKPOINT_RESTORED, EventKind.GENERATION_STARTED)
STORAGE = "storage"


def storage_charges(egress: EgressPrices) -> Callable[[Location, Location], tuple[Charge, ...]]:
    """Traffic to and from object storage: free inside one region (and from on-prem), else as egress."""

    def charges(src: Location, dst: Location) -> tuple[Charge, ...]:
        if src.cloud == CLOUD_ONPREM or link_class(src, dst) in (LinkClass.SAME_ZONE, LinkClass.CROSS_ZONE):
            return ()
        return egress.charges(src, dst)

    return charges


def _traffic(kind: CostKind, src: Location, dst: Location, gb: float,
             charges: Callable[[Location, Location], tuple[Charge, ...]], link: tuple[str, str], link_cls: str,
             nodes: dict[Payer, NodeRow | None], attributed: NodeRow | None = None) -> list[CostItem]:
    """One item per side that bills the transfer; attributed to the paying node (or ``attributed``)."""
    out = []
    for charge in charges(src, dst):
        node = nodes.get(charge.payer) or attributed
        if node is None:
            continue
        loc = charge.location
        out.append(CostItem(kind, node.node_id, loc.cloud, f"{loc.cloud}/{loc.region}", node.market,
                            gb * charge.usd_per_gb, gb, link, link_cls, charge.payer.value))
    return out


def _storage(events: list[Event], by_id: dict[str, NodeRow], run: RunRow,
             egress: EgressPrices) -> tuple[list[CostItem], float, float, str]:
    where = storage_location(run.options)
    url = run.checkpoint_url
    local = url.startswith(("/", "file://")) or "://" not in url
    charges = storage_charges(egress)
    members = {e.detail.get("generation"): list(e.detail.get("nodes", []))
               for e in events if e.kind == EventKind.GENERATION_STARTED}
    sizes: dict[str, int] = {}
    items: list[CostItem] = []
    written = read = 0.0
    for e in events:
        if e.kind == EventKind.CHECKPOINT_SAVED:
            size = int(e.detail.get("size_bytes", 0))
            sizes[e.detail.get("url")] = size
            written += size
            node = by_id.get(e.node_id or "")
            if where is not None and node is not None:
                cls = link_class(node.location, where).value
                items += _traffic(CostKind.STORAGE, node.location, where, size / GB, charges, (node.node_id, STORAGE),
                                  cls, {Payer.SENDER: node}, attributed=node)
        elif e.kind == EventKind.CHECKPOINT_RESTORED:
            size = sizes.get(e.detail.get("url"), 0)
            readers = members.get(e.detail.get("generation")) or ([e.node_id] if e.node_id else [])
            read += size * len(readers)
            if where is None:
                continue
            for node_id in readers:
                node = by_id.get(node_id)
                if node is not None:
                    cls = link_class(where, node.location).value
                    items += _traffic(CostKind.STORAGE, where, node.location, size / GB, charges,
                                      (STORAGE, node.node_id), cls, {Payer.RECEIVER: node}, attributed=node)
    if where is not None:
        note = f"checkpoint storage in {where.region_scope}"
    elif local:
        note = "checkpoints on this machine's disk: no transfer cost"
    else:
        note = "checkpoint storage region unknown (launch --checkpoint-region): traffic counted, not priced"
    return items, written / GB, read / GB, note

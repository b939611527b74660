"""What a run cost, from the ledger: node-hours × the prices in force, egress, storage traffic.

- **Compute**: every node is billed per second from launch to end (or to now, for a run still going)
  at the price in force: its launch price, changed at every later observation of its offer's price
  in the ledger's ``prices`` table (spot prices move; an on-prem machine costs its amortized rate).
- **Egress**: the bytes each node sent to each other node (``link_bytes``), priced by the sender's
  cloud for that link class (``geotrain.pricing.egress``); traffic inside a zone is free.
- **Storage traffic**: bytes written to the checkpoint storage and read back, priced as egress
  between the node and the storage's region (free when the storage is this machine's disk or in the
  node's own region, as object storage is; unpriced, but counted, when the storage's region is not
  known).
- **Interruptions**: work lost (steps trained after the checkpoint a next generation restored from)
  and restart downtime (from a preemption or failure to the next generation's first progress), with
  the node cost they took.

GB = 10^9 bytes, as in the egress price table.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass, field

from geotrain.domain import CLOUD_ONPREM, Continent, LinkClass, Location, link_class
from geotrain.launcher.ledger import Ledger, NodeRow, RunRow
from geotrain.pricing.egress import EgressPrices
from geotrain.pricing.geography import continent_of

GB = 1e9


@dataclass(frozen=True, slots=True)
class NodeCost:
    node_id: str
    offer_id: str
    cloud: str
    region: str
    zone: str
    market: str
    hours: float
    usd: float
    end_reason: str | None
    price_changes: int  # observations of a new price while the node ran


@dataclass(frozen=True, slots=True)
class LinkCost:
    src_node: str
    dst_node: str
    src_cloud: str
    link_class: str
    gb: float
    usd_per_gb: float
    usd: float


@dataclass(frozen=True, slots=True)
class Interruptions:
    preemptions: int
    restarts: int
    lost_steps: int
    lost_samples: int
    lost_usd: float
    downtime_s: float
    downtime_usd: float


@dataclass(frozen=True, slots=True)
class CostReport:
    run_id: str
    status: str
    running: bool  # the run is still going: figures are "so far"
    started_at: float
    ended_at: float
    nodes: tuple[NodeCost, ...]
    links: tuple[LinkCost, ...]
    storage_gb_written: float
    storage_gb_read: float
    storage_usd: float
    storage_note: str
    samples: int
    training_s: float  # from the first generation's start to the last progress
    interruptions: Interruptions
    by_cloud: dict[str, float] = field(default_factory=dict)  # compute + egress + storage, by cloud
    by_region: dict[str, float] = field(default_factory=dict)
    by_market: dict[str, float] = field(default_factory=dict)
    by_kind: dict[str, float] = field(default_factory=dict)  # compute | egress | storage

    @property
    def compute_usd(self) -> float:
        return sum(n.usd for n in self.nodes)

    @property
    def egress_usd(self) -> float:
        return sum(link.usd for link in self.links)

    @property
    def total_usd(self) -> float:
        return self.compute_usd + self.egress_usd + self.storage_usd

    @property
    def wall_h(self) -> float:
        return max(self.ended_at - self.started_at, 1e-9) / 3600

    @property
    def usd_per_hour(self) -> float:
        return self.total_usd / self.wall_h

    @property
    def samples_per_s(self) -> float | None:
        return self.samples / self.training_s if self.training_s > 0 and self.samples else None

    @property
    def usd_per_million_samples(self) -> float | None:
        return self.total_usd / self.samples * 1e6 if self.samples else None


def location_of(row: NodeRow) -> Location:
    offer = json.loads(row.offer_json)
    return Location(row.cloud, row.region, row.zone, Continent(offer["continent"]))


def node_cost(row: NodeRow, prices: list[tuple[float, float, str]], now: float) -> NodeCost:
    """Integrate the price step function over the node's life up to ``now`` (the launch price until a
    later one)."""
    start = row.launched_at
    end = max(start, min(row.ended_at if row.ended_at is not None else now, now))
    points = sorted((at, price) for at, price, _ in prices if start < at < end)
    usd, t, price, changes = 0.0, start, row.price_usd_per_hour, 0
    for at, new in points:
        if new == price:
            continue  # an observation of the same price
        usd += (at - t) / 3600 * price
        t, price, changes = at, new, changes + 1
    usd += (end - t) / 3600 * price
    return NodeCost(row.node_id, row.offer_id, row.cloud, row.region, row.zone, row.market, (end - start) / 3600,
                    usd, row.end_reason, changes)


def storage_location(options: dict) -> Location | None:
    where = options.get("checkpoint_location")
    if not where:
        return None
    cloud, _, region = where.partition("/")
    continent = continent_of(cloud, region)
    return Location(cloud, region, "", continent) if continent else None


def build_report(ledger: Ledger, run: RunRow, *, egress: EgressPrices | None = None,
                 now: float | None = None) -> CostReport:
    egress = egress or EgressPrices.bundled()
    now = now if now is not None else time.time()
    running = run.status == "running"
    rows = ledger.nodes(run.run_id)
    by_id = {r.node_id: r for r in rows}
    nodes = tuple(node_cost(r, ledger.prices(r.offer_id), now) for r in rows)
    events = ledger.events(run.run_id)
    started = min([r.launched_at for r in rows] + [e.at for e in events[:1]] or [now])
    ended = max([(r.ended_at or now) for r in rows] + [e.at for e in events[-1:]] or [now])
    if running:
        ended = now

    links = []
    for src, dst, cls, nbytes in ledger.link_bytes(run.run_id):
        if src not in by_id or dst not in by_id:
            continue
        a, b = location_of(by_id[src]), location_of(by_id[dst])
        price = egress.usd_per_gb(a, b) if link_class(a, b) is not LinkClass.SAME_ZONE else 0.0
        links.append(LinkCost(src, dst, a.cloud, cls, nbytes / GB, price, nbytes / GB * price))

    options = json.loads(run.options_json or "{}")
    storage_gb_w, storage_gb_r, storage_usd, note = _storage(events, by_id, options, egress, run.checkpoint_url)
    progress = ledger.progress_rows(run.run_id)
    samples = progress[-1][3] if progress else 0
    gens = [e for e in events if e.kind == "generation_started"]
    training_s = (progress[-1][0] - gens[0].at) if progress and gens else 0.0
    report = CostReport(
        run_id=run.run_id, status=run.status, running=running, started_at=started, ended_at=ended, nodes=nodes,
        links=tuple(links), storage_gb_written=storage_gb_w, storage_gb_read=storage_gb_r, storage_usd=storage_usd,
        storage_note=note, samples=samples, training_s=training_s,
        interruptions=_interruptions(events, progress, nodes, now),
    )
    _breakdowns(report, by_id)
    return report


def _storage(events, by_id, options, egress, url) -> tuple[float, float, float, str]:  # noqa: ANN001
    sizes = {}
    written = read = usd = 0.0
    where = storage_location(options)
    local = url.startswith(("/", "file://")) or "://" not in url
    for e in events:
        if e.kind == "checkpoint_saved":
            size = e.detail.get("size_bytes", 0)
            sizes[e.detail.get("url")] = size
            written += size
            if where is not None and e.node_id in by_id:
                usd += size / GB * _price(egress, location_of(by_id[e.node_id]), where)
        elif e.kind == "checkpoint_restored":
            size = sizes.get(e.detail.get("url"), 0)
            world = _world_of(events, e)
            read += size * world
            if where is not None:
                for node_id in _members_of(events, e):
                    if node_id in by_id:
                        usd += size / GB * _price(egress, where, location_of(by_id[node_id]))
    if where is not None:
        note = f"checkpoint storage in {where.region_scope}"
    elif local:
        note = "checkpoints on this machine's disk: no transfer cost"
    else:
        note = "checkpoint storage region unknown (launch --checkpoint-region): traffic counted, not priced"
    return written / GB, read / GB, usd, note


def _price(egress: EgressPrices, src: Location, dst: Location) -> float:
    """Storage traffic: free inside one region (object storage to and from its own region)."""
    if src.cloud == CLOUD_ONPREM or link_class(src, dst) in (LinkClass.SAME_ZONE, LinkClass.CROSS_ZONE):
        return 0.0
    return egress.usd_per_gb(src, dst)


def _generation_of(events, event) -> dict | None:  # noqa: ANN001
    gen = event.detail.get("generation")
    for e in events:
        if e.kind == "generation_started" and e.detail.get("generation") == gen:
            return e.detail
    return None


def _world_of(events, event) -> int:  # noqa: ANN001
    detail = _generation_of(events, event)
    return int(detail.get("world_size", 1)) if detail else 1


def _members_of(events, event) -> list[str]:  # noqa: ANN001
    detail = _generation_of(events, event)
    return list(detail.get("nodes", [])) if detail else []


def _interruptions(events, progress, nodes: tuple[NodeCost, ...], now: float) -> Interruptions:  # noqa: ANN001
    preemptions = sum(1 for e in events if e.kind == "preempted")
    restarts = sum(1 for e in events if e.kind == "worker_failed")
    gens = sorted((e.detail["generation"], e.at) for e in events if e.kind == "generation_started")
    restored = {e.detail.get("generation"): e.detail.get("step", 0) for e in events if e.kind == "checkpoint_restored"}
    reached: dict[int, int] = {}
    per_step_samples = 0
    for at, gen, step, samples, *_ in progress:
        reached[gen] = max(reached.get(gen, 0), step)
        if step:
            per_step_samples = samples // step
    lost_steps = 0
    for (gen, _), (next_gen, _) in zip(gens, gens[1:], strict=False):
        lost_steps += max(0, reached.get(gen, restored.get(gen, 0)) - restored.get(next_gen, 0))
    # node cost rate over the run, to price lost work and downtime
    span = max((max((n.hours for n in nodes), default=0.0)), 1e-9)
    rate = sum(n.usd for n in nodes) / span
    # restart downtime: from each failure to the next progress report, overlapping spans counted once
    spans = []
    for at in sorted(e.at for e in events if e.kind in ("preempted", "worker_failed")):
        after = [row[0] for row in progress if row[0] > at]
        spans.append((at, after[0] if after else at))
    downtime, covered_to = 0.0, float("-inf")
    for begin, finish in spans:
        begin = max(begin, covered_to)
        if finish > begin:
            downtime += finish - begin
            covered_to = finish
    training_rows = [row for row in progress]
    step_s = 0.0
    if len(training_rows) >= 2 and training_rows[-1][2] > training_rows[0][2]:
        step_s = (training_rows[-1][0] - training_rows[0][0]) / (training_rows[-1][2] - training_rows[0][2])
    lost_usd = lost_steps * step_s / 3600 * rate
    return Interruptions(preemptions, restarts, lost_steps, lost_steps * per_step_samples, lost_usd,
                         downtime, downtime / 3600 * rate)


def _breakdowns(report: CostReport, by_id: dict[str, NodeRow]) -> None:
    cloud: dict[str, float] = defaultdict(float)
    region: dict[str, float] = defaultdict(float)
    market: dict[str, float] = defaultdict(float)
    for n in report.nodes:
        cloud[n.cloud] += n.usd
        region[f"{n.cloud}/{n.region}"] += n.usd
        market[n.market] += n.usd
    for link in report.links:
        cloud[link.src_cloud] += link.usd
        src = by_id[link.src_node]
        region[f"{src.cloud}/{src.region}"] += link.usd
    report.by_cloud.update(sorted(cloud.items()))
    report.by_region.update(sorted(region.items()))
    report.by_market.update(sorted(market.items()))
    report.by_kind.update({"compute": report.compute_usd, "egress": report.egress_usd, "storage": report.storage_usd})

"""What a run cost, read for people: the one cost function's bill, plus throughput and interruptions.

The dollars are :func:`geotrain.billing.run_cost`'s — the same figure launch prints while it runs and
``geotrain status`` shows — broken down per node, cloud, region, market, kind and link. This module
adds what the bill does not say:

- **throughput**: samples trained over the time spent training (from the first generation's start
  to the last progress report: start-ups and restart downtime included), and the steady rate while
  the generations trained (between the first and the last progress report of each generation: what
  a plan's samples/s predicts), with the workers' start-up time (interpreter, torch, rendezvous)
  counted apart;
- **interruptions**: work lost (steps trained after the checkpoint a next generation restored from)
  and restart downtime (from a preemption or failure to the next generation's first progress), with
  the node cost they took.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass

from geotrain.billing import CostKind, NodeUsage, RunCost, run_cost
from geotrain.ledger import Event, EventKind, Ledger, ProgressRow, RunRow, RunStatus
from geotrain.pricing.egress import EgressPrices


@dataclass(frozen=True, slots=True)
class LinkCost:
    """Traffic from one node to another: its GB (once) and what every side billed for it."""

    src_node: str
    dst_node: str
    src_cloud: str
    link_class: str
    gb: float
    usd: float

    @property
    def usd_per_gb(self) -> float:
        return self.usd / self.gb if self.gb else 0.0


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
    """A run's bill (``cost``: items and their breakdowns, per node, cloud, region, market, kind and
    link) with its throughput and interruptions."""

    run_id: str
    status: str
    running: bool  # the run is still going: figures are "so far"
    started_at: float
    ended_at: float
    cost: RunCost
    links: tuple[LinkCost, ...]
    samples: int
    training_s: float  # from the first generation's start to the last progress report
    steady_samples: int  # samples trained between the first and last progress report of each generation
    steady_s: float  # the time they took
    startup_s: float  # from each generation's start to its first progress report, summed
    generations: int
    interruptions: Interruptions

    @property
    def nodes(self) -> tuple[NodeUsage, ...]:
        return self.cost.nodes

    @property
    def compute_usd(self) -> float:
        return self.cost.usd(CostKind.COMPUTE)

    @property
    def egress_usd(self) -> float:
        return self.cost.usd(CostKind.EGRESS)

    @property
    def storage_usd(self) -> float:
        return self.cost.usd(CostKind.STORAGE)

    @property
    def total_usd(self) -> float:
        return self.cost.total_usd

    @property
    def wall_h(self) -> float:
        return max(self.ended_at - self.started_at, 1e-9) / 3600

    @property
    def usd_per_hour(self) -> float:
        return self.total_usd / self.wall_h

    @property
    def samples_per_s(self) -> float | None:
        """Samples over the whole training time, restart downtime included."""
        return self.samples / self.training_s if self.training_s > 0 and self.samples else None

    @property
    def training_samples_per_s(self) -> float | None:
        """The steady rate while generations trained (what the plan's samples/s predicts)."""
        return self.steady_samples / self.steady_s if self.steady_s > 0 and self.steady_samples else None

    @property
    def usd_per_million_samples(self) -> float | None:
        return self.total_usd / self.samples * 1e6 if self.samples else None


def build_report(ledger: Ledger, run: RunRow, *, egress: EgressPrices | None = None,
                 now: float | None = None) -> CostReport:
    now = now if now is not None else time.time()
    running = run.status == RunStatus.RUNNING
    cost = run_cost(ledger, run.run_id, at=now, egress=egress)
    rows = ledger.nodes(run.run_id)
    events = ledger.events(run.run_id)
    started = min([r.launched_at for r in rows] + [e.at for e in events[:1]] or [now])
    ended = now if running else max([(r.ended_at or now) for r in rows] + [e.at for e in events[-1:]] or [now])
    by_id = {r.node_id: r for r in rows}
    links = _links(cost, by_id)
    progress = ledger.progress_rows(run.run_id)
    samples = progress[-1].samples if progress else 0
    gens = [e for e in events if e.kind == EventKind.GENERATION_STARTED]
    training_s = (progress[-1].at - gens[0].at) if progress and gens else 0.0
    steady_samples, steady_s, startup_s = _steady(gens, progress)
    return CostReport(
        run_id=run.run_id, status=run.status, running=running, started_at=started, ended_at=ended, cost=cost,
        links=links, samples=samples, training_s=training_s, steady_samples=steady_samples, steady_s=steady_s,
        startup_s=startup_s, generations=len(gens), interruptions=_interruptions(events, progress, cost.nodes),
    )


def _steady(gens: list[Event], progress: list[ProgressRow]) -> tuple[int, float, float]:
    """(samples, seconds) between the first and last progress report of each generation, and the
    seconds from each generation's start to its first report."""
    samples, seconds, startup = 0, 0.0, 0.0
    started = {e.detail.get("generation"): e.at for e in gens}
    for generation in sorted({row.generation for row in progress}):
        rows = [row for row in progress if row.generation == generation]
        if generation in started:
            startup += max(0.0, rows[0].at - started[generation])
        if len(rows) >= 2 and rows[-1].at > rows[0].at:
            samples += rows[-1].samples - rows[0].samples
            seconds += rows[-1].at - rows[0].at
    return samples, seconds, startup


def _links(cost: RunCost, by_id: dict) -> tuple[LinkCost, ...]:  # noqa: ANN001
    usd: dict[tuple[str, str], float] = defaultdict(float)
    gb: dict[tuple[str, str], float] = {}
    cls: dict[tuple[str, str], str] = {}
    for item in cost.items:
        if item.kind is CostKind.EGRESS and item.link is not None:
            usd[item.link] += item.usd
            gb[item.link] = item.quantity
            cls[item.link] = item.link_class or ""
    return tuple(LinkCost(src, dst, by_id[src].cloud, cls[(src, dst)], gb[(src, dst)], usd[(src, dst)])
                 for src, dst in sorted(usd) if src in by_id)


def _interruptions(events: list[Event], progress: list[ProgressRow], nodes: tuple[NodeUsage, ...]) -> Interruptions:
    """Preemptions, restarts, work lost and restart downtime (overlapping spans counted once)."""
    preemptions = sum(1 for e in events if e.kind == EventKind.PREEMPTED)
    restarts = sum(1 for e in events if e.kind == EventKind.WORKER_FAILED)
    gens = sorted((e.detail["generation"], e.at) for e in events if e.kind == EventKind.GENERATION_STARTED)
    restored = {e.detail.get("generation"): e.detail.get("step", 0) for e in events
                if e.kind == EventKind.CHECKPOINT_RESTORED}
    reached: dict[int, int] = {}
    per_step_samples = 0
    for row in progress:
        reached[row.generation] = max(reached.get(row.generation, 0), row.step)
        if row.step:
            per_step_samples = row.samples // row.step
    lost_steps = 0
    for (gen, _), (next_gen, _) in zip(gens, gens[1:], strict=False):
        lost_steps += max(0, reached.get(gen, restored.get(gen, 0)) - restored.get(next_gen, 0))
    # node cost rate over the run, to price lost work and downtime
    span = max((max((n.hours for n in nodes), default=0.0)), 1e-9)
    rate = sum(n.compute_usd for n in nodes) / span
    # restart downtime: from each failure to the next progress report, overlapping spans counted once
    spans = []
    for at in sorted(e.at for e in events if e.kind in (EventKind.PREEMPTED, EventKind.WORKER_FAILED,
                                                          EventKind.BOOT_FAILED)):
        after = [row.at for row in progress if row.at > at]
        spans.append((at, after[0] if after else at))
    downtime, covered_to = 0.0, float("-inf")
    for begin, finish in spans:
        begin = max(begin, covered_to)
        if finish > begin:
            downtime += finish - begin
            covered_to = finish
    step_s = 0.0
    if len(progress) >= 2 and progress[-1].step > progress[0].step:
        step_s = (progress[-1].at - progress[0].at) / (progress[-1].step - progress[0].step)
    lost_usd = lost_steps * step_s / 3600 * rate
    return Interruptions(preemptions, restarts, lost_steps, lost_steps * per_step_samples, lost_usd,
                         downtime, downtime / 3600 * rate)

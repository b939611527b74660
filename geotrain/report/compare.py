"""What a run would have cost otherwise: on on-demand prices, and as its plan predicted.

- **On-demand, same mix**: every node's node-hours at the on-demand price of the same instance type
  in the same zone (else the region's); on-prem machines keep their amortized rate. Also "without
  interruptions": on-demand nodes are not preempted, so the work lost to preemptions and the restart
  downtime would not have been paid for.
- **Plan vs actual**: the plan's predicted $/h, samples/s and $/1M samples next to the run's, with
  the reasons they differ in words: price moves, preemptions (lost work, downtime), generations with
  fewer nodes than planned, re-planned nodes, egress, throughput. A run is *comparable* with its plan
  when it trained the plan's workload with the plan's sync settings on what the plan was predicted
  for (the local provider's processes for a ``--provider local`` plan); otherwise the report says
  what differs instead of a ratio.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from geotrain.domain import OfferId, Plan
from geotrain.ledger import EventKind, Ledger, RunRow
from geotrain.planning.planfile import plan_from_dict
from geotrain.pricing.snapshot import OfferFilter, PriceSnapshot
from geotrain.providers.base import LOCAL_PROVIDER
from geotrain.report.costs import CostReport



@dataclass(frozen=True, slots=True)
class OnDemand:
    usd: float  # same mix, same node-hours, on-demand prices (+ the same egress and storage traffic)
    usd_without_interruptions: float
    missing: tuple[str, ...]  # offers without an on-demand price (their own price was used)

    def saving(self, actual: float) -> float | None:
        return 1 - actual / self.usd if self.usd else None


@dataclass(frozen=True, slots=True)
class PlanComparison:
    plan_id: str
    planned_workload: str
    trained_workload: str
    planned_sync: str
    substitutions: tuple[str, ...]
    comparable: bool  # the run trained what the plan predicted, where it predicted it
    predicted_usd_per_hour: float
    actual_usd_per_hour: float
    predicted_samples_per_s: float
    actual_samples_per_s: float | None  # while generations trained (restart downtime left out)
    effective_samples_per_s: float | None  # over the whole training time, downtime included
    predicted_usd_per_million_samples: float
    actual_usd_per_million_samples: float | None
    planned_nodes: int
    launched_nodes: int
    reasons: tuple[str, ...]

    @property
    def throughput_ratio(self) -> float | None:
        """Actual training samples/s over the predicted (None when not comparable)."""
        if not self.comparable or not self.actual_samples_per_s or not self.predicted_samples_per_s:
            return None
        return self.actual_samples_per_s / self.predicted_samples_per_s


def run_plan(run: RunRow) -> Plan:
    """The plan a run was launched with, read through the plan file API."""
    return plan_from_dict(json.loads(run.plan_json), f"ledger run {run.run_id}")


def on_demand(report: CostReport, snapshot: PriceSnapshot) -> OnDemand:
    table = snapshot.select(OfferFilter(markets=("on_demand",)))
    zone_price = {(r.cloud, r.region, r.zone, r.instance_type): r.price_usd_per_hour for r in table.itertuples()}
    region_price: dict[tuple, float] = {}
    for r in table.itertuples():
        key = (r.cloud, r.region, r.instance_type)
        region_price[key] = min(region_price.get(key, float("inf")), r.price_usd_per_hour)
    usd, missing = 0.0, []
    for node in report.nodes:
        if node.market != "spot":
            usd += node.compute_usd
            continue
        instance = OfferId.parse(node.offer_id).instance_type
        price = zone_price.get((node.cloud, node.region, node.zone, instance),
                               region_price.get((node.cloud, node.region, instance)))
        if price is None:
            missing.append(node.offer_id)
            usd += node.compute_usd
        else:
            usd += node.hours * price
    traffic = report.egress_usd + report.storage_usd
    lost_share = 0.0
    if report.total_usd > 0:
        lost_share = (report.interruptions.lost_usd + report.interruptions.downtime_usd) / report.total_usd
    clean = usd * max(0.0, 1 - lost_share)
    return OnDemand(usd + traffic, clean + traffic, tuple(sorted(set(missing))))


def compare_with_plan(report: CostReport, run: RunRow, ledger: Ledger) -> PlanComparison:
    plan = run_plan(run)
    totals = plan.totals
    planned_nodes = plan.nodes
    substitutions = run.substitutions
    trained = run.workload
    reasons: list[str] = []
    mismatch = list(substitutions)
    if run.options.get("command"):
        mismatch.append(f"a user command ({trained}) trained instead of the built-in runtime")
    if not plan.job.modelled:
        mismatch.append("the task names no workload: its plan predicted the price of its nodes, not what its "
                        "script trains")
    if run.provider == LOCAL_PROVIDER and plan.provider != LOCAL_PROVIDER:
        mismatch.append("the plan predicted the offers' own hardware, but the local provider ran every node as a "
                        "process on this machine (plan with --provider local to predict that)")
    comparable = not mismatch
    prices = {i.offer.offer_id: i.offer.price_usd_per_hour for i in plan.items}
    moved = [n for n in report.nodes if n.price_changes]
    if moved:
        at_launch = sum(n.hours * prices.get(n.offer_id, n.compute_usd / n.hours if n.hours else 0.0) for n in moved)
        reasons.append(f"spot prices moved for {len(moved)} node(s): they cost "
                       f"${sum(n.compute_usd for n in moved):,.4f} instead of ${at_launch:,.4f} at the planned prices")
    i = report.interruptions
    if i.preemptions:
        reasons.append(f"{i.preemptions} preemption(s): {i.lost_steps} steps of work lost (${i.lost_usd:,.4f}) and "
                       f"{i.downtime_s:,.1f} s of restart downtime (${i.downtime_usd:,.4f})")
    if i.restarts:
        reasons.append(f"{i.restarts} worker failure(s) restarted a generation")
    failed = ledger.events(run.run_id, kinds=(EventKind.LAUNCH_FAILED, EventKind.BOOT_FAILED))
    if failed:
        scopes = sorted({e.detail.get("scope", "?") for e in failed})
        reasons.append(f"{len(failed)} launch(es) failed (capacity, quota or boot) in {', '.join(scopes)}: "
                       "those scopes were blocked and the plan solved again")
    if len(report.nodes) > planned_nodes:
        reasons.append(f"{len(report.nodes) - planned_nodes} replacement node(s) launched after re-planning")
    short = _short_generations(ledger, run.run_id, planned_nodes)
    if short:
        reasons.append(short)
    if (report.egress_usd or totals.egress_usd_per_hour) and report.samples and totals.samples_per_s:
        actual = report.egress_usd / report.samples * 1e6
        predicted = totals.egress_usd_per_hour / (totals.samples_per_s * 3600) * 1e6
        reasons.append(f"egress ${actual:,.4f} per 1M samples actual vs ${predicted:,.4f} predicted"
                       + (f" ({actual / predicted:.0%})" if predicted else ""))
    if not comparable:
        reasons.append("not comparable with the plan's throughput and $/1M samples: " + "; ".join(mismatch))
    elif report.training_samples_per_s:
        ratio = report.training_samples_per_s / totals.samples_per_s
        reasons.append(f"throughput {ratio:.0%} of the prediction while training "
                       f"({report.training_samples_per_s:,.0f} vs {totals.samples_per_s:,.0f} samples/s)")
    if comparable and plan.provider == LOCAL_PROVIDER and report.training_samples_per_s:
        reasons.append(_local_basis(plan))
    if report.startup_s and report.generations:
        reasons.append(f"workers took {report.startup_s:,.1f} s to start in {report.generations} generation(s) "
                       "(interpreter, torch, rendezvous, checkpoint restore) before their first progress report")
    if report.samples_per_s and report.training_samples_per_s:
        reasons.append(f"{report.samples_per_s:,.0f} samples/s over the whole training time "
                       f"({report.training_s:,.1f} s, start-ups and restart downtime included)")
    return PlanComparison(
        plan_id=plan.plan_id, trained_workload=trained,
        planned_workload=plan.job.workload if plan.job.modelled else f"task {plan.job.name}, not modelled",
        planned_sync=plan.sync.describe() if plan.job.modelled else "the script's own", substitutions=substitutions, comparable=comparable,
        predicted_usd_per_hour=totals.usd_per_hour, actual_usd_per_hour=report.usd_per_hour,
        predicted_samples_per_s=totals.samples_per_s, actual_samples_per_s=report.training_samples_per_s,
        effective_samples_per_s=report.samples_per_s,
        predicted_usd_per_million_samples=totals.usd_per_million_samples,
        actual_usd_per_million_samples=report.usd_per_million_samples,
        planned_nodes=planned_nodes, launched_nodes=len(report.nodes), reasons=tuple(reasons),
    )


def _local_basis(plan: Plan) -> str:
    """What a local-provider plan's throughput rests on, so that a gap can be read."""
    from geotrain.perf.host import LocalHost
    from geotrain.perf.rates import RateTable
    from geotrain.perf.workloads import WorkloadRegistry

    rate = RateTable.bundled().node_rate(WorkloadRegistry.bundled().for_job(plan.job), None, 1)
    cores = LocalHost.measured().cores
    shared = f", {plan.nodes} nodes sharing {cores} cores" if plan.nodes > cores else ""
    return (f"the prediction rests on {plan.job.workload}'s CPU rate of {rate.samples_per_s:,.0f} samples/s on one "
            f"thread ({rate.source}){shared}: other load on this machine, or another machine, trains slower or "
            "faster; bench/cpu_rates.py --write measures it again")


def _short_generations(ledger: Ledger, run_id: str, planned: int) -> str | None:
    """How long generations trained with fewer nodes than planned (in words), if they did."""
    gens = ledger.events(run_id, kinds=(EventKind.GENERATION_STARTED,))
    progress = ledger.progress_rows(run_id)
    if not gens or not progress:
        return None
    end = progress[-1].at
    spans = []
    for k, e in enumerate(gens):
        stop = gens[k + 1].at if k + 1 < len(gens) else end
        spans.append((int(e.detail.get("world_size", planned)), max(0.0, stop - e.at)))
    total = sum(s for _, s in spans)
    short = [(w, s) for w, s in spans if w < planned]
    if not short or total <= 0:
        return None
    seconds = sum(s for _, s in short)
    sizes = ", ".join(sorted({str(w) for w, _ in short}))
    return (f"generations ran with {sizes} of the {planned} planned nodes for {seconds:,.1f} s "
            f"({seconds / total:.0%} of the training time)")

"""What a run would have cost otherwise: on on-demand prices, and as its plan predicted.

- **On-demand, same mix**: every node's node-hours at the on-demand price of the same instance type
  in the same zone (else the region's); on-prem machines keep their amortized rate. Also "without
  interruptions": on-demand nodes are not preempted, so the work lost to preemptions and the restart
  downtime would not have been paid for.
- **Plan vs actual**: the plan's predicted $/h, samples/s and $/1M samples next to the run's, with
  the reasons they differ in words: price moves, preemptions (lost work, downtime), re-planned
  nodes, throughput, and a workload other than the planned one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from geotrain.launcher.ledger import RunRow
from geotrain.pricing.snapshot import OfferFilter, PriceSnapshot
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
    predicted_usd_per_hour: float
    actual_usd_per_hour: float
    predicted_samples_per_s: float
    actual_samples_per_s: float | None
    predicted_usd_per_million_samples: float
    actual_usd_per_million_samples: float | None
    planned_nodes: int
    launched_nodes: int
    reasons: tuple[str, ...]


def on_demand(report: CostReport, snapshot: PriceSnapshot) -> OnDemand:
    table = snapshot.select(OfferFilter(markets=("on_demand",)))
    zone_price = {(r.cloud, r.region, r.zone, r.instance_type): r.price_usd_per_hour for r in table.itertuples()}
    region_price: dict[tuple, float] = {}
    for r in table.itertuples():
        key = (r.cloud, r.region, r.instance_type)
        region_price[key] = min(region_price.get(key, float("inf")), r.price_usd_per_hour)
    usd, missing = 0.0, []
    for node in report.nodes:
        instance = node.offer_id.split("/")[3]
        if node.market != "spot":
            usd += node.usd
            continue
        price = zone_price.get((node.cloud, node.region, node.zone, instance),
                               region_price.get((node.cloud, node.region, instance)))
        if price is None:
            missing.append(node.offer_id)
            usd += node.usd
        else:
            usd += node.hours * price
    traffic = report.egress_usd + report.storage_usd
    wall_s = max(report.ended_at - report.started_at, 1e-9)
    lost_share = 0.0
    if report.total_usd > 0:
        lost_share = (report.interruptions.lost_usd + report.interruptions.downtime_usd) / report.total_usd
    clean = usd * max(0.0, 1 - lost_share) if wall_s else usd
    return OnDemand(usd + traffic, clean + traffic, tuple(sorted(set(missing))))


def compare_with_plan(report: CostReport, run: RunRow) -> PlanComparison:
    plan = json.loads(run.plan_json)
    totals = plan["totals"]
    planned_workload = plan["job"]["workload"]
    trained = run.workload
    planned_nodes = int(totals.get("nodes") or sum(i["count"] for i in plan["items"]))
    reasons = []
    moved = [n for n in report.nodes if n.price_changes]
    if moved:
        at_launch = sum(n.hours * _launch_price(plan, n) for n in moved)
        reasons.append(f"spot prices moved for {len(moved)} node(s): they cost ${sum(n.usd for n in moved):,.4f} "
                       f"instead of ${at_launch:,.4f} at the planned prices")
    i = report.interruptions
    if i.preemptions:
        reasons.append(f"{i.preemptions} preemption(s): {i.lost_steps} steps of work lost (${i.lost_usd:,.4f}) and "
                       f"{i.downtime_s:,.1f} s of restart downtime (${i.downtime_usd:,.4f})")
    if i.restarts:
        reasons.append(f"{i.restarts} worker failure(s) restarted a generation")
    if len(report.nodes) > planned_nodes:
        reasons.append(f"{len(report.nodes) - planned_nodes} replacement node(s) launched after re-planning")
    if report.egress_usd or totals.get("egress_usd_per_hour"):
        reasons.append(f"egress ${report.egress_usd / report.wall_h:,.4f}/h actual vs "
                       f"${totals.get('egress_usd_per_hour', 0):,.4f}/h predicted")
    if trained != planned_workload:
        reasons.append(f"the run trained {trained} while the plan predicted {planned_workload}: throughput and "
                       "$/1M samples are not comparable")
    elif report.samples_per_s:
        ratio = report.samples_per_s / totals["samples_per_s"]
        reasons.append(f"throughput {ratio:.0%} of the prediction")
    return PlanComparison(
        plan_id=run.plan_id, planned_workload=planned_workload, trained_workload=trained,
        predicted_usd_per_hour=totals["usd_per_hour"], actual_usd_per_hour=report.usd_per_hour,
        predicted_samples_per_s=totals["samples_per_s"], actual_samples_per_s=report.samples_per_s,
        predicted_usd_per_million_samples=totals["usd_per_million_samples"],
        actual_usd_per_million_samples=report.usd_per_million_samples,
        planned_nodes=planned_nodes, launched_nodes=len(report.nodes), reasons=tuple(reasons),
    )


def _launch_price(plan: dict, node) -> float:  # noqa: ANN001
    for item in plan["items"]:
        offer = item["offer"]
        zone = offer.get("zone") or "-"
        if f"{offer['cloud']}/{offer['region']}/{zone}/{offer['instance_type']}/{offer['market']}" == node.offer_id:
            return offer["price_usd_per_hour"]
    return node.usd / node.hours if node.hours else 0.0

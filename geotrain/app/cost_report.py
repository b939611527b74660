"""``geotrain cost-report``: pick runs, build their reports, export them."""

from __future__ import annotations

import csv
import io
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from geotrain.errors import InputError
from geotrain.ledger import Ledger, RunRow
from geotrain.pricing.snapshot import SnapshotStore
from geotrain.report.compare import OnDemand, PlanComparison, compare_with_plan, on_demand, run_plan
from geotrain.report.costs import CostReport, build_report


@dataclass(frozen=True, slots=True)
class RunCosts:
    run: RunRow
    report: CostReport
    on_demand: OnDemand
    plan: PlanComparison


def select_runs(ledger: Ledger, run_id: str | None, all_runs: bool, since: str | None) -> list[RunRow]:
    if run_id and (all_runs or since):
        raise InputError("give a run id, or --all, or --since, not several")
    if run_id:
        return [ledger.run(run_id)]
    runs = ledger.runs()
    if since:
        try:
            cutoff = datetime.fromisoformat(since)
        except ValueError:
            raise InputError(f"--since: {since!r} is not a date (YYYY-MM-DD or ISO 8601)") from None
        if cutoff.tzinfo is None:
            cutoff = cutoff.replace(tzinfo=timezone.utc)
        runs = [r for r in runs if datetime.fromisoformat(r.created_at) >= cutoff]
    elif not all_runs:
        runs = runs[-1:]
    if not runs:
        raise InputError("no run to report on" + (f" since {since}" if since else "") +
                         "; see `geotrain status`")
    return runs


def cost_reports(run_id: str | None = None, *, all_runs: bool = False, since: str | None = None,
                 ledger: Ledger | None = None, plot: Path | None = None) -> list[RunCosts]:
    ledger = ledger or Ledger(create=False)
    store = SnapshotStore()
    out = []
    for run in select_runs(ledger, run_id, all_runs, since):
        report = build_report(ledger, run)
        snapshot = store.load(run_plan(run).snapshot_id)
        out.append(RunCosts(run, report, on_demand(report, snapshot), compare_with_plan(report, run, ledger)))
    if plot is not None:
        if len(out) != 1:
            raise InputError("--plot draws one run: give its id")
        from geotrain.report.plot import draw

        draw(out[0].report, out[0].plan, ledger, plot)
    return out


def to_record(costs: RunCosts) -> dict:
    r = costs.report
    by_node = r.cost.by_node
    return {
        "run_id": r.run_id, "status": r.status, "running": r.running,
        "started_at": datetime.fromtimestamp(r.started_at, timezone.utc).isoformat(),
        "ended_at": datetime.fromtimestamp(r.ended_at, timezone.utc).isoformat(),
        "total_usd": r.total_usd, "compute_usd": r.compute_usd, "egress_usd": r.egress_usd,
        "storage_usd": r.storage_usd, "usd_per_hour": r.usd_per_hour, "samples": r.samples,
        "samples_per_s": r.samples_per_s, "training_samples_per_s": r.training_samples_per_s,
        "usd_per_million_samples": r.usd_per_million_samples,
        "by_node": by_node, "by_cloud": r.cost.by_cloud, "by_region": r.cost.by_region, "by_market": r.cost.by_market,
        "by_kind": r.cost.by_kind,
        "nodes": [{**asdict(n), "usd": by_node.get(n.node_id, 0.0)} for n in r.nodes],
        "links": [{**asdict(link), "usd_per_gb": link.usd_per_gb} for link in r.links],
        "items": [{**asdict(item), "kind": item.kind.value} for item in r.cost.items],
        "storage": {"gb_written": r.cost.storage_gb_written, "gb_read": r.cost.storage_gb_read, "note": r.cost.storage_note},
        "interruptions": asdict(r.interruptions),
        "on_demand": {"usd": costs.on_demand.usd, "usd_without_interruptions": costs.on_demand.usd_without_interruptions,
                      "saving": costs.on_demand.saving(r.total_usd), "offers_without_on_demand_price":
                      list(costs.on_demand.missing)},
        "plan": {**asdict(costs.plan), "throughput_ratio": costs.plan.throughput_ratio},
        "substitutions": list(costs.run.substitutions),
    }


CSV_COLUMNS = ("run_id", "kind", "item", "node", "cloud", "region", "market", "quantity", "unit", "usd")


def to_csv(all_costs: list[RunCosts]) -> str:
    """One row per item of the bill (compute in node-hours, traffic in GB), plus a total per run."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for costs in all_costs:
        r = costs.report
        for item in r.cost.items:
            what = (f"{item.link[0]}->{item.link[1]} ({item.link_class}, {item.payer} pays)" if item.link
                    else item.node_id)
            unit = "node-hours" if item.link is None else "GB"
            writer.writerow([r.run_id, item.kind.value, what, item.node_id, item.cloud, item.region, item.market,
                             f"{item.quantity:.6f}", unit, f"{item.usd:.6f}"])
        writer.writerow([r.run_id, "total", "", "", "", "", "", "", "", f"{r.total_usd:.6f}"])
    return buffer.getvalue()

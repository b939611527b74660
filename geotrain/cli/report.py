"""``geotrain cost-report``: what runs really cost, against on-demand and against their plan."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from geotrain.cli.render import console, note, percent, print_document, usd


def cost_report(
    run_id: str = typer.Argument(None, help="A run id (default: the latest run)."),
    all_runs: bool = typer.Option(False, "--all", help="Every run in the ledger."),
    since: str = typer.Option(None, "--since", help="Runs started on or after this date (YYYY-MM-DD)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    as_csv: bool = typer.Option(False, "--csv", help="Print one CSV row per cost item."),
    plot: Path = typer.Option(None, "--plot", help="Draw cost over time, samples/s and plan vs actual (PNG)."),
) -> None:
    """Per node, cloud, region, market and link; per 1M samples; against on-demand and the plan."""
    from geotrain.app.cost_report import cost_reports, to_csv, to_record
    from geotrain.errors import InputError

    if as_json and as_csv:
        raise InputError("give one of --json and --csv")
    reports = cost_reports(run_id, all_runs=all_runs, since=since, plot=plot)
    if as_json:
        if plot is not None:
            note(f"wrote {plot}")
        print_document("cost-report", {"total_usd": sum(c.report.total_usd for c in reports),
                                       "runs": [to_record(c) for c in reports]})
        return
    if as_csv:
        sys.stdout.write(to_csv(reports))
        return
    for costs in reports:
        render(costs)
    if len(reports) > 1:
        total = sum(c.report.total_usd for c in reports)
        console().print(f"[bold]{len(reports)} runs: {usd(total, 4)}[/bold]")
    if plot is not None:
        console().print(f"wrote {plot}")


def render(costs) -> None:  # noqa: ANN001
    from rich.table import Table

    r, od, plan = costs.report, costs.on_demand, costs.plan
    out = console()
    so_far = " so far (still running)" if r.running else ""
    out.print(f"[bold]{r.run_id}[/bold] {r.status}: {usd(r.total_usd, 4)}{so_far} over {r.wall_h * 60:,.1f} min "
              f"= {usd(r.usd_per_hour, 4)}/h; {r.samples:,} samples"
              + (f" at {r.samples_per_s:,.0f}/s, {usd(r.usd_per_million_samples, 4)} per 1M samples"
                 if r.samples_per_s else ""))
    table = Table(title="nodes", title_justify="left")
    for col in ("node", "offer", "market", "hours", "compute $", "traffic $", "$", "ended"):
        table.add_column(col, justify="right" if col in ("hours", "compute $", "traffic $", "$") else "left")
    by_node = r.cost.by_node
    for n in r.nodes:
        whole = by_node.get(n.node_id, 0.0)
        table.add_row(n.node_id, n.offer_id, n.market, f"{n.hours:.4f}", usd(n.compute_usd, 5),
                      usd(whole - n.compute_usd, 5), usd(whole, 5),
                      (n.end_reason or "running") + (f", {n.price_changes} price change(s)" if n.price_changes else ""))
    out.print(table)
    by = lambda d: ", ".join(f"{k} {usd(v, 4)}" for k, v in d.items() if v) or "-"  # noqa: E731
    out.print(f"by kind      {by(r.cost.by_kind)}")
    out.print(f"by cloud     {by(r.cost.by_cloud)}")
    out.print(f"by region    {by(r.cost.by_region)}")
    out.print(f"by market    {by(r.cost.by_market)}")
    if r.links:
        gb = sum(link.gb for link in r.links)
        classes: dict[str, float] = {}
        for link in r.links:
            classes[link.link_class] = classes.get(link.link_class, 0.0) + link.usd
        out.print(f"egress       {gb:,.3f} GB between nodes: {by(classes) if any(classes.values()) else '$0'}")
    out.print(f"storage      {r.cost.storage_gb_written:,.3f} GB written, {r.cost.storage_gb_read:,.3f} GB read, "
              f"{usd(r.storage_usd, 4)} ({r.cost.storage_note})")
    i = r.interruptions
    out.print(f"interruption {i.preemptions} preemption(s), {i.restarts} restart(s): {i.lost_steps} steps lost "
              f"({usd(i.lost_usd, 4)}), {i.downtime_s:,.1f} s downtime ({usd(i.downtime_usd, 4)})")
    saving = od.saving(r.total_usd)
    out.print(f"on-demand    the same mix on on-demand prices: {usd(od.usd, 4)} ({usd(od.usd_without_interruptions, 4)} "
              f"without the interruptions); this run saved {percent(saving)}")
    for line in plan.substitutions:
        out.print(f"substituted  {line}")
    ratio = plan.throughput_ratio
    out.print(f"plan         {plan.plan_id} ({plan.planned_workload}, {plan.planned_sync}): predicted "
              f"{usd(plan.predicted_usd_per_hour, 4)}/h, {plan.predicted_samples_per_s:,.0f} samples/s, "
              f"{usd(plan.predicted_usd_per_million_samples, 4)}/1M; actual {usd(plan.actual_usd_per_hour, 4)}/h"
              + (f", {plan.actual_samples_per_s:,.0f} samples/s" if plan.actual_samples_per_s else "")
              + (f" — comparable: actual/plan {ratio:.2f}" if ratio is not None
                 else " — not comparable" if not plan.comparable else ""))
    for reason in plan.reasons:
        out.print(f"  why        {reason}")

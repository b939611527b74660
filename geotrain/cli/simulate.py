"""``geotrain simulate``: replay real spot-market traces under every policy, against the oracle."""

from __future__ import annotations

from pathlib import Path

import typer

from geotrain.cli.render import console, note, print_document, usd


def simulate(
    trace: list[str] = typer.Option(..., "--trace", help="A trace file or folder (repeat it); formats: "
                                    "examples/traces/README.md."),
    job: Path = typer.Option(..., "--job", help="The replay job (YAML: workload, nodes, work, deadline_h, ...)."),
    policy: str = typer.Option("all", "--policy", help="all, or a comma-separated list of on-demand, greedy, up, "
                               "up-s, geotrain, oracle."),
    deadline: float = typer.Option(None, "--deadline", help="Hours from the start (over the job file's deadline_h)."),
    start: float = typer.Option(0.0, "--start", help="Start the job this many hours into the traces (the market "
                                "before it is the past geotrain's policy learns from)."),
    tick: float = typer.Option(None, "--tick-s", help="Replay tick in seconds (default: the traces' coarsest step)."),
    kind: str = typer.Option(None, "--kind", help="Force a trace format (see examples/traces/README.md)."),
    zone: str = typer.Option(None, "--zone", help="cloud/region/zone of a trace that does not record it."),
    instance_type: str = typer.Option(None, "--instance-type", help="The instance type of a trace that does not "
                                      "record it."),
    spot_prices: str = typer.Option("trace", "--spot-prices", help="trace (the trace's, else the catalog's) or "
                                    "catalog (always the catalog's)."),
    plot: Path = typer.Option(None, "--plot", help="Draw each policy's progress and spend over time (PNG)."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON."),
) -> None:
    """Per policy: cost, completion, deadline met, preemptions, restarts, against on-demand and the oracle."""
    from geotrain.app.simulate import simulate as run, to_record

    report = run(trace, job, policy=policy, deadline_h=deadline, start_h=start, tick_s=tick, kind=kind, zone=zone,
                 instance_type=instance_type, spot_prices=spot_prices, plot=plot)
    if as_json:
        if plot is not None:
            note(f"wrote {plot}")
        print_document("simulate", to_record(report))
        return
    render(report)
    if plot is not None:
        console().print(f"wrote {plot}")


def render(report) -> None:  # noqa: ANN001
    from rich.table import Table

    from geotrain.app.simulate import to_record

    record = to_record(report)
    j = report.job
    out = console()
    out.print(f"[bold]{j.name}[/bold]: {report.work_samples:,.0f} samples of {j.workload} on {j.nodes} node(s), "
              f"deadline {j.deadline_h:g} h; {len(report.zones)} zone(s) from {report.start} "
              f"({report.start_h:g} h into the traces), {report.tick_s:g}-s ticks")
    table = Table()
    for col in ("policy", "cost", "vs on-demand", "vs oracle", "finished (h)", "deadline", "preemptions",
                "restarts", "spot node-h", "OD node-h", "run s"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for row in record["policies"]:
        ratio = lambda v: "-" if v is None else f"{v:.3f}x"  # noqa: E731
        table.add_row(row["policy"], usd(row["usd"], 2), ratio(row["vs_on_demand"]), ratio(row["vs_oracle"]),
                      "-" if row["completion_h"] is None else f"{row['completion_h']:.2f}",
                      "met" if row["deadline_met"] else "MISSED", str(row["preemptions"]), str(row["restarts"]),
                      f"{row['spot_node_h']:.1f}", f"{row['on_demand_node_h']:.1f}", f"{row['run_s']:.2f}")
    out.print(table)
    for row in record["policies"]:
        for line in row["notes"]:
            out.print(f"[dim]{row['policy']}: {line}[/dim]")
    for line in record["notes"]:
        out.print(f"[dim]note: {line}[/dim]")

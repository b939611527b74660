"""``geotrain rehearse``."""

from __future__ import annotations

from pathlib import Path

import typer

from geotrain.cli.render import console, finite, print_document


def rehearse(
    plan_path: Path = typer.Argument(..., help="The plan file (geotrain plan ... -o plan.json)."),
    minutes: float = typer.Option(2.0, "--minutes", callback=finite(0.1, 600), help="Minutes the rehearsal may take in all."),
    strategies: str = typer.Option(None, "--strategies", help="Which strategies to measure, e.g. ma,asgd-ga "
                                                              "(default: the plan's, then the others while time is left)."),
    steps: int = typer.Option(None, "--steps", min=8, max=100_000,  # fewer: too few progress windows for a round
                              help="Steps each strategy trains (default 24; fewer: a quicker, noisier figure)."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON (geotrain.rehearse.v1)."),
) -> None:
    """Run the plan's topology on this machine over emulated links; measured vs predicted, per strategy."""
    from rich.table import Table

    from geotrain.app.rehearse import REHEARSAL_STEPS, rehearse_plan, to_record

    plan = plan_path
    out = console(err=as_json)  # beside a --json document, progress goes to stderr
    out.print(f"rehearsing {plan_path} on this machine: tiny-lm stand-in, the plan's locations over emulated links")
    wanted = [s.strip() for s in strategies.split(",")] if strategies else None
    report = rehearse_plan(plan, minutes=minutes, strategies=wanted, steps=steps or REHEARSAL_STEPS,
                           on_done=lambda r: out.print(f"  {r.strategy}: {r.samples_per_s:,.0f} samples/s, "
                                                       f"{r.round_s:.3f} s a round"))
    if as_json:
        print_document("rehearse", to_record(str(plan_path), report))
        return
    table = Table("strategy", "samples/s", "model", "round s", "model", "error", "bytes/s per link", "egress $/h", "loss")
    for r in report.rehearsals:
        links = ", ".join(f"{f.src}→{f.dst} {f.bytes_per_s / 1e3:,.0f} kB/s ({f.rtt_ms:.0f} ms, {f.rate_mbit:.0f} Mbit/s)"
                          for f in r.links if f.bytes_per_s >= 1e3)
        table.add_row(r.strategy, f"{r.samples_per_s:,.0f}", f"{r.predicted_samples_per_s:,.0f}", f"{r.round_s:.3f}",
                      f"{r.predicted_round_s:.3f}", f"{r.error:+.0%}", links,
                      f"${report.egress_usd_per_hour[r.strategy]:.4f}", f"{r.loss:.3f}" if r.loss is not None else "-")
    out.print(table)
    out.print("the model: the perf model for these nodes at their measured compute rates and the emulated links "
              "(hivemind: the runtime's own fit), with the round trips the runtime was measured to cost on gloo "
              "(perf/data/protocol.json); egress $/h at the measured bytes and the clouds' rates")
    shares = {r.cores_per_node for r in report.rehearsals}
    if shares and None not in shares:
        out.print(f"each node was held to {min(shares):.2f} of this machine's cores (its compute rate alone holds "
                  "while the others train: a CPU control group per node)")
    else:
        out.print("the nodes shared this machine's cores unheld (no CPU control group could be made here): a node "
                  "computes faster while others wait on the network than alone, and the model's rates are the "
                  "nodes' alone")
    if report.suggestion:
        out.print(f"suggestion: {report.suggestion}")

"""``geotrain estimate``: predicted throughput, egress and cost of a given mix of nodes."""

from __future__ import annotations

import math
from pathlib import Path

import typer

from geotrain.cli.render import console, print_document, sync_settings, usd
from geotrain.domain import PRECISIONS, SyncSettings, SyncStrategyName
from geotrain.errors import InputError

_STRATEGIES = tuple(s.value for s in SyncStrategyName)
_SYNC = SyncSettings()  # the defaults, for the help texts
NODES_HELP = ("Comma-separated CLOUD/ZONE-OR-REGION/INSTANCE[/MARKET]=COUNT items, e.g. "
              "'gcp/us-central1-a/n1-standard-8+T4/spot=4,aws/us-west-2/g4dn.2xlarge=4,onprem/lab/rtx8000-ws=1'. "
              "A region takes its cheapest zone; MARKET defaults to spot (owned for onprem).")


BATCH_HELP = ("A JSON Lines file, one setup per line in the job spec's words: {\"workload\": ..., \"nodes\": ..., "
              "\"strategy\": ..., \"sync\": {\"target_batch_size\": ...}}. Prints one JSON answer per line, in order "
              "(a bad line gets an answer naming its problem; exit 2 if any line failed). The other flags apply to every line.")
_SETUP_FLAGS = ("--workload", "--nodes", "--strategy", "--precision", "--tbs", "--group-size", "--local-steps",
                "--accumulation-steps", "--staleness", "--averaging-pushes", "--micro-batches")


def estimate(
    workload: str = typer.Option(None, "--workload", help="Workload name, e.g. convnext-large, roberta-xlm, tiny-cnn."),
    nodes: str = typer.Option(None, "--nodes", help=NODES_HELP),
    strategy: str = typer.Option(None, "--strategy", help=f"One of {', '.join(_STRATEGIES)} (default {_SYNC.strategy.value})."),
    onprem: Path = typer.Option(None, "--onprem", help="On-prem inventory (YAML) for onprem/... nodes."),
    precision: str = typer.Option(None, "--precision", help=f"On the wire: {', '.join(PRECISIONS)} (default {_SYNC.precision})."),
    target_batch_size: int = typer.Option(None, "--tbs", min=1, help=f"hivemind: samples per averaging round (default {_SYNC.target_batch_size})."),
    group_size: int = typer.Option(None, "--group-size", min=1, help=f"hivemind: the most peers in one averaging group (default {_SYNC.group_size})."),
    local_steps: int = typer.Option(None, "--local-steps", min=1, help=f"local-sgd: steps between averaging (default {_SYNC.local_steps})."),
    accumulation_steps: int = typer.Option(None, "--accumulation-steps", min=1, help=f"asgd-ga: steps per push (default {_SYNC.accumulation_steps})."),
    staleness: int = typer.Option(None, "--staleness", min=1, help=f"asgd-ga: pushes a region may run ahead of the home model (default {_SYNC.staleness})."),
    averaging_pushes: int = typer.Option(None, "--averaging-pushes", min=1, help=f"ma: pushes between averages of the regions' servers (default {_SYNC.averaging_pushes})."),
    micro_batches: int = typer.Option(None, "--micro-batches", min=1, help=f"Micro-batches per node and step (default {_SYNC.micro_batches})."),
    provider: str = typer.Option(None, "--provider", help="local: the nodes are processes on this machine."),
    rates: Path = typer.Option(None, "--rates", help="CSV of your own compute rates (workload,accelerator,samples_per_s)."),
    links: Path = typer.Option(None, "--links", help="CSV of your own link measurements (src,dst,bandwidth_gbps,rtt_ms)."),
    workloads: Path = typer.Option(None, "--workloads", help="CSV of your own workloads (name,parameters,kind,samples_per_step)."),
    egress: Path = typer.Option(None, "--egress", help="CSV of your own egress rates, in the egress table's format "
                                "(cloud,link_class,src_continent,dst_continent,usd_per_gb[,payer][,source])."),
    snapshot_id: str = typer.Option(None, "--snapshot", help="Price snapshot id (default: the current one)."),
    batch: Path = typer.Option(None, "--batch", help=BATCH_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the estimate as JSON."),
) -> None:
    """Predict samples/s, round time, egress and $/1M samples for a mix of nodes, and name the bottleneck."""
    from geotrain.app.estimate import EstimateInputs, EstimateRequest, estimate_record
    from geotrain.app.estimate import estimate as run_estimate

    inputs = EstimateInputs(onprem_inventory=onprem, rates_file=rates, links_file=links, workloads_file=workloads,
                            snapshot_id=snapshot_id, provider=provider, egress_file=egress)
    setup = (workload, nodes, strategy, precision, target_batch_size, group_size, local_steps, accumulation_steps,
             staleness, averaging_pushes, micro_batches)
    if batch is not None:
        given = [flag for flag, value in zip(_SETUP_FLAGS, setup, strict=True) if value is not None]
        if given:
            raise InputError(f"{given[0]}: with --batch each line gives its own setup; drop {', '.join(given)} "
                             "or put them in the lines")
        run_batch(batch, inputs)
        return
    for flag, value in ((_SETUP_FLAGS[0], workload), (_SETUP_FLAGS[1], nodes)):
        if value is None:
            raise InputError(f"{flag}: required (or give --batch FILE with one setup per line)")
    sync = sync_settings(strategy=strategy, target_batch_size=target_batch_size, group_size=group_size,
                         local_steps=local_steps,
                         accumulation_steps=accumulation_steps, staleness=staleness, averaging_pushes=averaging_pushes,
                         precision=precision, micro_batches=micro_batches)
    result = run_estimate(EstimateRequest(workload=workload, nodes=nodes, sync=sync, inputs=inputs))
    if as_json:
        print_document("estimate", estimate_record(result))
    else:
        render(result)


def run_batch(path: Path, inputs) -> None:  # noqa: ANN001 - app types are imported lazily
    """One ``estimate`` document per line (with the line it answers), or an ``estimate-error`` one."""
    from geotrain.app.estimate import estimate_batch, estimate_record

    failed = False
    for answer in estimate_batch(path, inputs):
        if answer.result is None:
            failed = True
            print_document("estimate-error", {"line": answer.line, "error": answer.error}, one_line=True)
        else:
            print_document("estimate", {"line": answer.line, **estimate_record(answer.result)}, one_line=True)
    if failed:
        raise typer.Exit(2)  # bad input, as a flag would be: the answers above say which lines


def render(outcome) -> None:  # noqa: ANN001
    from rich.table import Table

    result = outcome.estimate
    out = console()
    table = Table(title=f"{result.workload} with {result.strategy.value} on {result.nodes} nodes", title_justify="left")
    for name in ("nodes", "offer", "$/h each", "samples/s each", "rate"):
        table.add_column(name, justify="right" if name in ("nodes", "$/h each", "samples/s each") else "left")
    for g, r in zip(result.groups, result.rates, strict=True):
        table.add_row(str(g.count), g.offer.offer_id, usd(g.offer.price_usd_per_hour), f"{r.samples_per_s:,.1f}",
                      "estimated" if r.estimated else "measured")
    out.print(table)
    gran = "∞" if math.isinf(result.granularity) else f"{result.granularity:.2f}"
    out.print(f"throughput      {result.samples_per_s:,.1f} samples/s")
    out.print(f"round           {result.time_per_round_s:,.2f} s ({result.samples_per_round:,.0f} samples): "
              f"compute {result.compute_time_per_round_s:,.2f} s, communication {result.comm_time_per_round_s:,.2f} s, "
              f"granularity {gran}")
    out.print(f"cost            {usd(result.usd_per_hour, 3)}/h = compute {usd(result.compute_usd_per_hour, 3)}/h "
              f"+ egress {usd(result.egress_usd_per_hour, 3)}/h ({result.egress_gb_per_hour:,.1f} GB/h)")
    if result.egress_usd_per_hour_by_link_class:
        parts = ", ".join(f"{k.replace('_', ' ')} {usd(v, 3)}/h"
                          for k, v in sorted(result.egress_usd_per_hour_by_link_class.items()))
        clouds = ", ".join(f"{k} {usd(v, 3)}/h" for k, v in sorted(result.egress_usd_per_hour_by_cloud.items()))
        out.print(f"egress by link  {parts}; by cloud {clouds}")
    out.print(f"per 1M samples  {usd(result.usd_per_million_samples, 3)}")
    interruptions = result.interruptions_per_hour
    out.print("interruptions   " + ("unknown for some offers" if interruptions is None
                                    else f"{interruptions:.4f} expected per hour"))
    out.print(f"bottleneck      {outcome.bottleneck}")
    for line in outcome.assumptions:
        out.print(f"assumption      {line}")

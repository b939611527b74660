"""``geotrain estimate``: predicted throughput, egress and cost of a given mix of nodes."""

from __future__ import annotations

import math
from pathlib import Path

import typer

from geotrain.cli.render import checked, console, print_json, usd
from geotrain.domain import SyncStrategyName

_STRATEGIES = tuple(s.value for s in SyncStrategyName)
NODES_HELP = ("Comma-separated CLOUD/ZONE-OR-REGION/INSTANCE[/MARKET]=COUNT items, e.g. "
              "'gcp/us-central1-a/n1-standard-8+T4/spot=4,aws/us-west-2/g4dn.2xlarge=4,onprem/lab/rtx8000-ws=1'. "
              "A region takes its cheapest zone; MARKET defaults to spot (owned for onprem).")


def estimate(
    workload: str = typer.Option(..., "--workload", help="Workload name, e.g. convnext-large, roberta-xlm, tiny-cnn."),
    nodes: str = typer.Option(..., "--nodes", help=NODES_HELP),
    strategy: str = typer.Option("hivemind", "--strategy", help=f"One of {', '.join(_STRATEGIES)}."),
    onprem: Path = typer.Option(None, "--onprem", help="On-prem inventory (YAML) for onprem/... nodes."),
    precision: str = typer.Option("fp16", "--precision", help="Bytes per parameter on the wire: fp32, fp16, bf16, int8."),
    target_batch_size: int = typer.Option(32768, "--tbs", min=1, help="hivemind: samples per averaging round."),
    local_steps: int = typer.Option(32, "--local-steps", min=1, help="local-sgd: steps between averaging."),
    accumulation_steps: int = typer.Option(16, "--accumulation-steps", min=1, help="asgd-ga: steps per push."),
    rates: Path = typer.Option(None, "--rates", help="CSV of your own compute rates (workload,accelerator,samples_per_s)."),
    links: Path = typer.Option(None, "--links", help="CSV of your own link measurements (src,dst,bandwidth_gbps,rtt_ms)."),
    workloads: Path = typer.Option(None, "--workloads", help="CSV of your own workloads (name,parameters,kind,samples_per_step)."),
    snapshot_id: str = typer.Option(None, "--snapshot", help="Price snapshot id (default: the current one)."),
    as_json: bool = typer.Option(False, "--json", help="Print the estimate as JSON."),
) -> None:
    """Predict samples/s, round time, egress and $/1M samples for a mix of nodes, and name the bottleneck."""
    from geotrain.perf.service import EstimateRequest
    from geotrain.perf.service import estimate as run_estimate
    from geotrain.pricing.snapshot import SnapshotStore

    checked((strategy,), _STRATEGIES, "--strategy")
    request = EstimateRequest(
        workload=workload, nodes=nodes, strategy=SyncStrategyName(strategy), precision=precision,
        target_batch_size=target_batch_size, local_steps=local_steps, accumulation_steps=accumulation_steps,
        onprem_inventory=onprem, rates_file=rates, links_file=links, workloads_file=workloads,
    )
    store = SnapshotStore()
    snapshot = store.load(snapshot_id) if snapshot_id else store.current()
    result = run_estimate(request, snapshot)
    if as_json:
        print_json(estimate_record(result))
    else:
        render(result)


def estimate_record(result) -> dict:  # noqa: ANN001
    from geotrain.perf.describe import bottleneck_words

    def finite(x: float) -> float | None:
        return None if x is None or math.isinf(x) or math.isnan(x) else x

    b = result.bottleneck
    return {
        "workload": result.workload,
        "strategy": result.strategy.value,
        "precision": result.precision,
        "nodes": [
            {"offer_id": g.offer.offer_id, "count": g.count, "price_usd_per_hour": g.offer.price_usd_per_hour,
             "samples_per_s_per_node": r.samples_per_s, "rate_estimated": r.estimated, "rate_source": r.source}
            for g, r in zip(result.groups, result.rates, strict=True)
        ],
        "node_count": result.nodes,
        "samples_per_s": result.samples_per_s,
        "time_per_round_s": result.time_per_round_s,
        "samples_per_round": result.samples_per_round,
        "compute_time_per_round_s": result.compute_time_per_round_s,
        "comm_time_per_round_s": result.comm_time_per_round_s,
        "granularity": finite(result.granularity),
        "compute_usd_per_hour": result.compute_usd_per_hour,
        "egress_usd_per_hour": result.egress_usd_per_hour,
        "egress_gb_per_hour": result.egress_gb_per_hour,
        "egress_usd_per_hour_by_cloud": result.egress_usd_per_hour_by_cloud,
        "egress_usd_per_hour_by_link_class": result.egress_usd_per_hour_by_link_class,
        "usd_per_hour": result.usd_per_hour,
        "usd_per_million_samples": result.usd_per_million_samples,
        "bytes_per_peer_per_round": result.bytes_per_peer_per_round,
        "interruptions_per_hour": result.interruptions_per_hour,
        "bottleneck": {
            "what": b.what if b else "compute",
            "seconds": b.seconds if b else 0.0,
            "description": bottleneck_words(result),
            "link": None if not (b and b.link) else {
                "from": result.groups[b.groups[0]].offer.offer_id, "to": result.groups[b.groups[1]].offer.offer_id,
                "link_class": b.link.link_class.value, "bandwidth_gbps": b.link.bandwidth_gbps,
                "rtt_ms": b.link.rtt_ms, "bandwidth_measured": b.link.bandwidth_measured,
                "rtt_measured": b.link.rtt_measured, "source": b.link.source,
            },
        },
    }


def render(result) -> None:  # noqa: ANN001
    from rich.table import Table

    from geotrain.perf.describe import bottleneck_words

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
    out.print(f"bottleneck      {bottleneck_words(result)}")

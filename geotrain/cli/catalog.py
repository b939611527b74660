"""``geotrain catalog``: look at and manage the offers geotrain plans with."""

from __future__ import annotations

from pathlib import Path

import typer

from geotrain.cli.render import checked, console, finite, note, percent, print_document, split_values, usd
from geotrain.domain import Continent, Market

app = typer.Typer(help="Look at and manage the price catalog (offers of all clouds and your own machines).",
                  no_args_is_help=True, rich_markup_mode=None)

_CONTINENTS = tuple(c.value for c in Continent)
_MARKETS = tuple(m.value for m in Market)
DEFAULT_ROWS = 40  # app.catalog.DEFAULT_ROWS (not imported: pandas loads only when a command runs)


@app.command("list")
def list_offers(
    cloud: list[str] = typer.Option(None, "--cloud", help="aws, gcp, azure, onprem (repeat or comma-separate)."),
    region: list[str] = typer.Option(None, "--region", help="Region name, e.g. us-east-1."),
    continent: list[str] = typer.Option(None, "--continent", help=f"One of {', '.join(_CONTINENTS)}."),
    accelerator: list[str] = typer.Option(None, "--accelerator",
                                          help="Accelerator model, e.g. T4, A100 (also matches A100-80GB)."),
    market: list[str] = typer.Option(None, "--market", help="spot, on_demand or owned."),
    instance_type: list[str] = typer.Option(None, "--instance-type", help="Instance type, e.g. g4dn.xlarge."),
    max_price: float = typer.Option(None, "--max-price", callback=finite(0, 1e6), help="Highest price per node, USD/h."),
    limit: int = typer.Option(None, "--limit", min=0, max=10**9,
                              help=f"Rows to show (table default {DEFAULT_ROWS}, JSON default all; 0 = all)."),
    snapshot_id: str = typer.Option(None, "--snapshot", help="Snapshot id (default: the current one)."),
    as_json: bool = typer.Option(False, "--json", help="Print the offers as JSON (schema columns and the table's "
                                                       "on-demand price, discount, $/accelerator-hour)."),
) -> None:
    """List offers, cheapest per accelerator first, with spot discount and interruption band."""
    from geotrain.app import catalog

    listing = catalog.list_offers(
        clouds=split_values(cloud), regions=split_values(region),
        continents=checked(split_values(continent), _CONTINENTS, "--continent"),
        accelerators=split_values(accelerator), markets=checked(split_values(market), _MARKETS, "--market"),
        instance_types=split_values(instance_type), max_price=max_price, limit=limit, as_json=as_json,
        snapshot_id=snapshot_id,
    )
    stale = catalog.staleness(listing)
    if as_json:
        if stale is not None:
            note(f"{stale}.")
        print_document("offers", {"snapshot_id": listing.snapshot.snapshot_id, "total": listing.total,
                                  "stale": stale, "offers": catalog.offer_records(listing.view)})
        return
    _render_offers(listing.view, total=listing.total, snapshot=listing.snapshot)
    if stale is not None:
        console().print(f"note: {stale}.")


def _render_offers(view, *, total: int, snapshot) -> None:  # noqa: ANN001
    from rich import box
    from rich.table import Table

    out = console()
    if view.empty:
        out.print(f"No offers match (snapshot {snapshot.snapshot_id}, {len(snapshot)} offers); widen the filters.")
        return
    wide = out.width >= 130  # narrow terminals drop the derived columns (discount, $/accelerator-hour)
    table = Table(title=f"Offers in {snapshot.label} snapshot {snapshot.snapshot_id}", title_justify="left",
                  box=box.SIMPLE_HEAD, pad_edge=False)
    columns = [("cloud/region/zone", "left"), ("instance", "left"), ("accel", "left"), ("market", "left"),
               ("$/h", "right")]
    columns += [("on-demand", "right"), ("discount", "right"), ("$/accel-h", "right")] if wide else [
        ("on-dem.", "right")]
    columns += [("interruption", "left")]
    for name, justify in columns:
        folds = name in ("interruption", "cloud/region/zone", "instance")
        table.add_column(name, justify=justify, no_wrap=not folds, overflow="fold" if folds else "ellipsis")
    for row in view.itertuples(index=False):
        accel = "-" if row.accelerator_count == 0 else f"{row.accelerator_count}x{row.accelerator}"
        discount = "-" if row.market != "spot" else percent(row.discount)
        cells = [f"{row.cloud}/{row.region}/{row.zone or '*'}", row.instance_type, accel, row.market,
                 usd(row.price_usd_per_hour)]
        cells += [usd(row.on_demand_usd_per_hour), discount, usd(row.usd_per_accelerator_hour)] if wide else [
            usd(row.on_demand_usd_per_hour)]
        table.add_row(*cells, _interruption(row) + (f"; price: {row.price_flag}" if row.price_flag else ""))
    out.print(table)
    if total > len(view):
        out.print(f"Showing {len(view)} of {total} offers; --limit 0 shows all, filters narrow the list.")


def _interruption(row) -> str:  # noqa: ANN001
    """The band as users know it; measured figures where a trace gave them."""
    band = row.interruption_band if isinstance(row.interruption_band, str) else None
    parts = [band or "unknown"]
    if band == "trace" and row.interruptions_per_hour == row.interruptions_per_hour:  # not NaN
        parts.append(f"{row.interruptions_per_hour:.3g}/h")
    if row.availability == row.availability:
        parts.append(f"avail {row.availability:.0%}")
    return " ".join(parts)


@app.command("show")
def show(
    snapshot_id: str = typer.Argument(None, help="Snapshot id or 'bundled' (default: the current one)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Describe a snapshot: where its prices come from, when they were observed, what it covers."""
    from geotrain.app import catalog

    info = catalog.show(snapshot_id)
    if as_json:
        print_document("snapshot", info)
        return
    out = console()
    out.print(f"[bold]{info['snapshot_id']}[/bold]  {info['label']}"
              + (f"  (parent {info['parent_id']})" if info["parent_id"] else ""))
    out.print(f"offers: {info['offers']}  regions: {info['regions']}  clouds: {', '.join(info['clouds'])}")
    out.print(f"observed: {info['observed_from'][:10]} .. {info['observed_to'][:10]} "
              f"(newest {info['newest_age_days']:.0f} days old)")
    if info["stale"]:
        out.print(f"note: {info['stale']}.")
    out.print(f"continents: {', '.join(info['continents'])}")
    out.print(f"accelerators: {', '.join(info['accelerators'])}")
    for row in info["by_cloud_and_market"]:
        out.print(f"  {row['cloud']:<8} {row['market']:<10} {row['offers']:>6}")
    out.print(f"sources: {', '.join(info['sources'])}")


@app.command("snapshots")
def snapshots(as_json: bool = typer.Option(False, "--json", help="Print the list as JSON.")) -> None:
    """List stored snapshots and which one is current."""
    from geotrain.app import catalog

    rows = catalog.snapshots()
    if as_json:
        current = next((r["snapshot_id"] for r in rows if r["current"]), None)
        print_document("snapshots", {"current": current, "snapshots": rows})
        return
    out = console()
    for row in rows:
        mark = "*" if row["current"] else " "
        out.print(f"{mark} {row['snapshot_id']}  {row.get('offers', '?'):>6} offers  "
                  f"{str(row.get('created_at', ''))[:19]}  {row.get('label', '')}")


@app.command("import")
def import_file(
    path: Path = typer.Argument(..., help="CSV in geotrain's schema or SkyPilot's vms.csv, or a YAML inventory."),
    file_format: str = typer.Option("auto", "--format", help="auto, geotrain, skypilot or inventory."),
    cloud: str = typer.Option(None, "--cloud", help="Cloud of a SkyPilot catalog (default: from its regions)."),
    replace: bool = typer.Option(False, "--replace",
                                 help="Make a snapshot of this file alone instead of merging into the current one."),
) -> None:
    """Import offers into a new snapshot (merged into the current one) and make it current."""
    from geotrain.app import catalog

    checked((file_format,), catalog.FILE_FORMATS, "--format")
    outcome = catalog.import_file(path, file_format=file_format, cloud=cloud, replace=replace)
    out = console()
    how = "alone" if outcome.replaced_all else f"merged into {outcome.snapshot.parent_id}"
    out.print(f"Imported {len(outcome.result.table)} offers ({outcome.result.file_format.value} format) from {path}; "
              f"snapshot {outcome.snapshot.snapshot_id} ({len(outcome.snapshot)} offers, {how}) is now current.")
    for line in outcome.result.skipped:
        out.print(f"Skipped {line}.")


@app.command("use")
def use(snapshot_id: str = typer.Argument(..., help="Snapshot id, or 'bundled'.")) -> None:
    """Make a stored snapshot (or the bundled one) current."""
    from geotrain.app import catalog

    snapshot = catalog.use(snapshot_id)
    console().print(f"Current snapshot: {snapshot.snapshot_id} ({snapshot.label}, {len(snapshot)} offers).")


@app.command("refresh")
def refresh(
    cloud: list[str] = typer.Option(None, "--cloud", help="aws, gcp, azure (repeat or comma-separate; default all)."),
    region: list[str] = typer.Option(None, "--regions", "--region", help="Only these regions, e.g. us-east-1."),
    accelerator: list[str] = typer.Option(None, "--accelerators", "--accelerator",
                                          help="Only these accelerator models, e.g. T4,A100."),
    gang_nodes: int = typer.Option(None, "--gang-nodes", min=1, max=1000, metavar="N",
                                   help="Ask the placement scores (AWS, Azure) for a gang of N nodes, "
                                        "your job's (default 8)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Fetch live prices, capacity and interruption signals from the clouds into a new current snapshot."""
    import sys

    from geotrain.app import refresh as live

    def progress(cloud_name: str, region_name: str, what: str) -> None:
        print(f"  {cloud_name} {region_name}: {what}", file=sys.stderr, flush=True)

    outcome = live.refresh(live.RefreshRequest(split_values(cloud), split_values(region), split_values(accelerator),
                                               gang_nodes),
                           progress=progress)
    summary = {
        "snapshot_id": outcome.snapshot.snapshot_id, "parent_id": outcome.parent_id, "offers": outcome.offers,
        "snapshot_offers": len(outcome.snapshot), "seconds": round(outcome.seconds, 2),
        "clouds": [{"cloud": r.cloud, "offers": len(r.rows), "skipped": [{"region": s.region, "data": s.data, "why": s.why}
                                                                 for s in r.skipped],
                    "signals": dict(r.signals), "calls": dict(r.calls)} for r in outcome.results],
        "failed": [list(f) for f in outcome.failed], "unmapped_regions": [list(u) for u in outcome.unmapped],
    }
    if as_json:
        print_document("refresh", summary)
        return
    out = console()
    for r in outcome.results:
        signals = ", ".join(f"{n} {k}" for k, n in sorted(r.signals.items())) or "no capacity or interruption signals"
        out.print(f"{r.cloud}: {len(r.rows)} offers ({signals})")
        for s in r.skipped:
            out.print(f"  skipped {s.data} of {'every region' if s.region == '*' else s.region}: {s.why}")
    for cloud_name, why in outcome.failed:
        out.print(f"{cloud_name}: not refreshed: {why}")
    for cloud_name, region_name in outcome.unmapped:
        out.print(f"{cloud_name}/{region_name}: left out (not in geotrain's region map)")
    out.print(f"snapshot {outcome.snapshot.snapshot_id} ({len(outcome.snapshot)} offers, {outcome.offers} refreshed, "
              f"merged into {outcome.parent_id}) is now current; {outcome.seconds:.1f} s")


@app.command("history")
def history(
    instance_type: str = typer.Option(..., "--instance-type", help="Instance type, e.g. g4dn.xlarge."),
    zone: str = typer.Option(None, "--zone", help="Zone (AWS: AZ id such as use1-az4)."),
    region: str = typer.Option(None, "--region", help="Region, e.g. us-east-1."),
    cloud: str = typer.Option(None, "--cloud", help="aws, gcp, azure."),
    market: str = typer.Option("spot", "--market", help="spot or on_demand."),
    live_days: float = typer.Option(None, "--live", callback=finite(0.0, 90.0), metavar="DAYS",
                                    help="Also AWS's own spot price history of the last DAYS days (credentials)."),
    as_json: bool = typer.Option(False, "--json", help="Print the history as JSON."),
) -> None:
    """The price of one instance type over time, from every stored snapshot (refreshes and imports) and,
    with --live, from AWS's spot price history."""
    from geotrain.app import refresh as live

    checked((market,), ("spot", "on_demand"), "--market")
    rows = live.history(instance_type=instance_type, zone=zone, region=region, cloud=cloud, market=market,
                        live_days=live_days)
    records = [{"cloud": r.cloud, "region": r.region, "zone": r.zone, "price_usd_per_hour": float(r.price_usd_per_hour),
                "observed_at": r.observed_at.strftime("%Y-%m-%dT%H:%M:%SZ"), "source": r.source,
                "snapshot_id": r.snapshot_id or None} for r in rows.itertuples(index=False)]
    if as_json:
        print_document("price-history", {"instance_type": instance_type, "market": market, "prices": records})
        return
    out = console()
    if not records:
        out.print(f"No {market} price of {instance_type} in any stored snapshot; check the names "
                  "(`geotrain catalog list --instance-type ...`)")
        return
    for r in records:
        out.print(f"{r['observed_at']}  {r['cloud']}/{r['region']}/{r['zone'] or '*'}  {usd(r['price_usd_per_hour'])}/h"
                  f"  ({r['source']}" + (f", {r['snapshot_id']})" if r["snapshot_id"] else ")"))

"""``geotrain catalog``: list, show, import and choose price snapshots."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from geotrain.domain import Continent, Market
from geotrain.pricing.catalog import ImportOutcome, comparison_view, import_into_catalog, summary
from geotrain.pricing.importers import FileFormat
from geotrain.pricing.schema import COLUMN_NAMES, to_text
from geotrain.pricing.snapshot import (
    BUNDLED, OfferFilter, PriceSnapshot, SnapshotStore, bundled_snapshot, staleness_words,
)

DEFAULT_ROWS = 40
FILE_FORMATS = tuple(f.value for f in FileFormat)


@dataclass(frozen=True)
class OfferListing:
    view: Any  # pandas DataFrame of the comparison view (offer columns + on-demand price, discount, …)
    total: int  # offers that matched (the view may be cut to a limit)
    snapshot: PriceSnapshot


def _snapshot(snapshot_id: str | None) -> PriceSnapshot:
    store = SnapshotStore()
    return store.load(snapshot_id) if snapshot_id else store.current()


def list_offers(*, clouds: tuple[str, ...] = (), regions: tuple[str, ...] = (), continents: tuple[str, ...] = (),
                accelerators: tuple[str, ...] = (), markets: tuple[str, ...] = (), instance_types: tuple[str, ...] = (),
                max_price: float | None = None, limit: int | None = None, as_json: bool = False,
                snapshot_id: str | None = None) -> OfferListing:
    """Offers that pass the filters, cheapest per accelerator first; ``limit`` rows (table default
    :data:`DEFAULT_ROWS`, JSON default all, 0 = all)."""
    offer_filter = OfferFilter(
        clouds=clouds, regions=regions, continents=tuple(Continent(c) for c in continents),
        accelerators=accelerators, markets=tuple(Market(m) for m in markets), instance_types=instance_types,
        max_price_usd_per_hour=max_price,
    )
    snapshot = _snapshot(snapshot_id)
    view = comparison_view(snapshot, offer_filter)
    shown = view if not limit and (as_json or limit == 0) else view.head(limit or DEFAULT_ROWS)
    return OfferListing(shown, len(view), snapshot)


def staleness(listing: OfferListing) -> str | None:
    """A warning when the listed offers' prices are old (``pricing.snapshot.STALE_AFTER_DAYS``)."""
    view = listing.view
    bought = view[view["market"] != "owned"]["observed_at"] if not view.empty else view
    if len(bought) == 0:
        return None
    return staleness_words(bought.max().to_pydatetime(), bought.min().to_pydatetime())


# what the table shows beside the schema's columns (``pricing.catalog.comparison_view``), as ``--json`` prints it
DERIVED_COLUMNS: tuple[str, ...] = ("on_demand_usd_per_hour", "discount", "usd_per_accelerator_hour")


def offer_records(view: Any) -> list[dict[str, Any]]:
    """The view's offers as ``--json`` prints them: the offer schema's columns by name, then the figures the
    table adds, unrounded: the on-demand price of the same machine (None where there is none), the spot
    discount as a fraction (spot offers only, as the table shows it) and the price per accelerator-hour
    (None for machines without accelerators), and ``price_flag``: what is doubtful about the price (far
    below its type elsewhere and not seen since, far older than its cloud's others), None for nothing."""
    text = to_text(view)
    records = []
    for (_, typed), (_, raw) in zip(view.iterrows(), text.iterrows(), strict=True):
        record = {}
        for name in COLUMN_NAMES:
            value = typed[name]
            if raw[name] == "":
                record[name] = None if name not in ("zone", "source") else ""
            elif name == "observed_at":
                record[name] = raw[name]
            elif isinstance(value, str):
                record[name] = value
            else:
                record[name] = value.item() if hasattr(value, "item") else value
        for name in DERIVED_COLUMNS:
            value = float(typed[name])
            record[name] = None if math.isnan(value) or (name == "discount" and typed["market"] != "spot") else value
        record["price_flag"] = typed["price_flag"] or None  # what is doubtful about the price (pricing.outliers)
        records.append(record)
    return records


def show(snapshot_id: str | None = None) -> dict[str, Any]:
    return summary(_snapshot(snapshot_id))


def snapshots() -> list[dict[str, Any]]:
    store = SnapshotStore()
    current = store.current_id()
    bundled = bundled_snapshot()
    rows = [{"snapshot_id": bundled.snapshot_id, "label": BUNDLED, "offers": len(bundled),
             "created_at": bundled.created_at.isoformat(), "parent_id": None}] + store.listing()
    for row in rows:
        row["current"] = row["snapshot_id"] == current or (current == BUNDLED and row["label"] == BUNDLED)
    return rows


def import_file(path: Path, *, file_format: str = "auto", cloud: str | None = None,
                replace: bool = False) -> ImportOutcome:
    return import_into_catalog(path, store=SnapshotStore(), file_format=FileFormat(file_format), cloud=cloud,
                               replace=replace)


def use(snapshot_id: str) -> PriceSnapshot:
    return SnapshotStore().set_current(snapshot_id)

"""What the ``geotrain catalog`` commands do: the comparison view, imports, summaries."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from geotrain.domain import Market, OfferId
from geotrain.pricing.importers import FileFormat, ImportResult, import_offers
from geotrain.pricing.outliers import price_flags
from geotrain.pricing.schema import utc_now
from geotrain.pricing.snapshot import BUNDLED, OfferFilter, PriceSnapshot, SnapshotStore, age_days, staleness_words

_PLACE = ["cloud", "region", "zone", "instance_type"]


def comparison_view(snapshot: PriceSnapshot, offer_filter: OfferFilter) -> pd.DataFrame:
    """One row per matching offer, with the on-demand price of the same machine beside it.

    Columns: the schema's, plus ``on_demand_usd_per_hour`` (same zone, else the region-wide
    on-demand row, else the cheapest on-demand row in the region), ``discount`` (1 − price /
    on-demand), ``usd_per_accelerator_hour`` and ``price_flag`` (what ``geotrain.pricing.outliers``
    doubts about the price: far below its type elsewhere, far older than its cloud's others; "" for
    none). Sorted by price per accelerator (CPU-only machines last, by price), then price.
    """
    table = snapshot.table
    rows = table[offer_filter.mask(table)].copy()
    on_demand = table[table["market"] == "on_demand"]
    by_zone = on_demand.set_index(_PLACE)["price_usd_per_hour"]
    by_region = on_demand.groupby(["cloud", "region", "instance_type"])["price_usd_per_hour"].min()

    zone_keys = pd.MultiIndex.from_frame(rows[_PLACE])
    same_zone = by_zone.reindex(zone_keys).to_numpy()
    region_wide = by_zone.reindex(
        pd.MultiIndex.from_arrays([rows["cloud"], rows["region"], pd.Series("", index=rows.index, dtype="string"),
                                   rows["instance_type"]])
    ).to_numpy()
    any_zone = by_region.reindex(pd.MultiIndex.from_frame(rows[["cloud", "region", "instance_type"]])).to_numpy()
    od = pd.Series(same_zone, index=rows.index).fillna(pd.Series(region_wide, index=rows.index))
    od = od.fillna(pd.Series(any_zone, index=rows.index))
    rows["on_demand_usd_per_hour"] = od.astype("float64")
    rows["discount"] = 1.0 - rows["price_usd_per_hour"] / rows["on_demand_usd_per_hour"]
    rows.loc[rows["market"] == "on_demand", "discount"] = 0.0
    count = rows["accelerator_count"].where(rows["accelerator_count"] > 0)
    rows["usd_per_accelerator_hour"] = rows["price_usd_per_hour"] / count
    flags = price_flags(snapshot.offers(), utc_now())
    ids = (str(OfferId(c, r, z if isinstance(z, str) else "", t, Market(m)))
           for c, r, z, t, m in zip(rows["cloud"], rows["region"], rows["zone"], rows["instance_type"], rows["market"],
                                    strict=True))
    rows["price_flag"] = [flags[i].words() if i in flags else "" for i in ids]
    rows["_cpu"] = rows["usd_per_accelerator_hour"].isna()
    rows = rows.sort_values(["_cpu", "usd_per_accelerator_hour", "price_usd_per_hour", "cloud", "region", "zone"],
                            kind="stable")
    return rows.drop(columns="_cpu").reset_index(drop=True)


@dataclass(frozen=True, slots=True)
class ImportOutcome:
    snapshot: PriceSnapshot
    result: ImportResult
    replaced_all: bool


def import_into_catalog(path: str | Path, *, store: SnapshotStore, file_format: FileFormat = FileFormat.AUTO,
                        cloud: str | None = None, replace: bool = False) -> ImportOutcome:
    """Import a file, store the new snapshot and make it current.

    By default the imported offers are merged into the current snapshot (same-key rows replaced);
    with ``replace`` the new snapshot holds the imported offers only.
    """
    result = import_offers(path, file_format, cloud=cloud)
    label = f"import of {Path(path).name}"
    if replace:
        snapshot = PriceSnapshot.from_table(result.table, label=label)
    else:
        snapshot = store.current().merged(result.table, label=label)
    store.save(snapshot)
    store.set_current(snapshot.snapshot_id)
    return ImportOutcome(snapshot, result, replace)


def summary(snapshot: PriceSnapshot) -> dict:
    """Counts and dates that describe a snapshot."""
    table = snapshot.table
    first, last = snapshot.observed_range
    counts = (table.groupby(["cloud", "market"]).size().rename("offers").reset_index()
              .to_dict(orient="records"))
    return {
        "snapshot_id": snapshot.snapshot_id,
        "label": snapshot.label,
        "bundled": snapshot.label == BUNDLED,
        "created_at": snapshot.created_at.isoformat(),
        "parent_id": snapshot.parent_id,
        "offers": len(table),
        "observed_from": first.isoformat(),
        "observed_to": last.isoformat(),
        "newest_age_days": round(age_days(last), 1),
        "stale": staleness_words(last, first),
        "clouds": sorted(table["cloud"].unique().tolist()),
        "regions": int(table[["cloud", "region"]].drop_duplicates().shape[0]),
        "continents": sorted(table["continent"].unique().tolist()),
        "accelerators": sorted(table["accelerator"].dropna().unique().tolist()),
        "by_cloud_and_market": [{k: (int(v) if k == "offers" else v) for k, v in r.items()} for r in counts],
        "sources": sorted(table["source"].unique().tolist()),
    }


def price_history(store: SnapshotStore, *, instance_type: str, zone: str | None = None, region: str | None = None,
                  cloud: str | None = None, market: str = "spot") -> pd.DataFrame:
    """Prices of one instance type (in a zone or region) in every stored snapshot and the bundled one:
    one row per distinct observation (observed_at, price), oldest first, with the first snapshot that
    holds it."""
    from geotrain.pricing.snapshot import bundled_snapshot

    frames = []
    listing = [(bundled_snapshot().snapshot_id, None)] + [(m["snapshot_id"], m) for m in store.listing()]
    for snapshot_id, _ in reversed(listing):  # oldest stored first
        table = store.load(snapshot_id).table
        mask = (table["instance_type"] == instance_type) & (table["market"] == market)
        if zone is not None:
            mask &= table["zone"] == zone
        if region is not None:
            mask &= table["region"] == region
        if cloud is not None:
            mask &= table["cloud"] == cloud
        rows = table[mask][["cloud", "region", "zone", "instance_type", "market", "price_usd_per_hour", "observed_at",
                            "source"]].copy()
        rows["snapshot_id"] = snapshot_id
        frames.append(rows)
    if not frames:
        return pd.DataFrame()
    out = pd.concat(frames, ignore_index=True)
    out = out.drop_duplicates(subset=["cloud", "region", "zone", "observed_at", "price_usd_per_hour"], keep="first")
    return out.sort_values(["observed_at", "cloud", "region", "zone"], kind="stable").reset_index(drop=True)

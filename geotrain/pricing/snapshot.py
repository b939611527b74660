"""PriceSnapshot: an immutable, content-hashed price table, and the store that keeps snapshots.

A snapshot's id is ``snap-`` + the first 16 hex digits of the SHA-256 of its canonical CSV form
(:func:`geotrain.pricing.schema.to_csv_bytes`), so the same offers always get the same id,
whatever order they were read in. Plans record the id; launch and cost-report load the same prices
back by it.

The store keeps snapshots under ``GEOTRAIN_HOME/snapshots/`` as ``<id>.csv`` plus ``<id>.json``
(label, creation time, parent) and a ``CURRENT`` file naming the snapshot commands use by default.
Without one, the bundled snapshot is current. Every file is written atomically; a stored snapshot
whose content no longer matches its id is reported as corrupt, never used.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pandas as pd

from geotrain.clouds.geography import continent_of
from geotrain.domain import Continent, InstanceShape, InterruptionSignal, Location, Market, Offer
from geotrain.errors import CatalogError, NotFoundError
from geotrain.files import atomic_write_bytes, atomic_write_text, geotrain_home
from geotrain.pricing.bundled import data_bytes
from geotrain.pricing.csvfile import parse_csv_text
from geotrain.pricing.schema import KEY_COLUMNS, canonical, parse_offers, to_csv_bytes, utc_now

BUNDLED = "bundled"


def content_id(csv_bytes: bytes) -> str:
    return "snap-" + hashlib.sha256(csv_bytes).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class OfferFilter:
    """Which offers to keep. Empty tuples mean "any"; matching is case-insensitive.

    An accelerator name matches itself and its variants: ``A100`` matches ``A100`` and
    ``A100-80GB``.
    """

    clouds: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    continents: tuple[Continent, ...] = ()
    accelerators: tuple[str, ...] = ()
    markets: tuple[Market, ...] = ()
    instance_types: tuple[str, ...] = ()
    max_price_usd_per_hour: float | None = None

    def mask(self, table: pd.DataFrame) -> pd.Series:
        keep = pd.Series(True, index=table.index)
        if self.clouds:
            keep &= table["cloud"].str.lower().isin([c.lower() for c in self.clouds])
        if self.regions:
            keep &= table["region"].str.lower().isin([r.lower() for r in self.regions])
        if self.continents:
            keep &= table["continent"].isin([str(c) for c in self.continents])
        if self.markets:
            keep &= table["market"].isin([str(m) for m in self.markets])
        if self.instance_types:
            keep &= table["instance_type"].str.lower().isin([t.lower() for t in self.instance_types])
        if self.accelerators:
            names = table["accelerator"].fillna("").str.lower()
            hit = pd.Series(False, index=table.index)
            for wanted in self.accelerators:
                w = wanted.lower()
                hit |= (names == w) | names.str.startswith(w + "-")
            keep &= hit
        if self.max_price_usd_per_hour is not None:
            keep &= table["price_usd_per_hour"] <= self.max_price_usd_per_hour
        return keep.astype(bool)


@dataclass(frozen=True, slots=True, eq=False)
class PriceSnapshot:
    """An immutable set of offers. Build with :meth:`from_table` or load from a store."""

    snapshot_id: str
    label: str
    created_at: datetime
    parent_id: str | None
    _table: pd.DataFrame = field(repr=False)
    _csv: bytes = field(repr=False)

    @classmethod
    def from_table(cls, table: pd.DataFrame, *, label: str, created_at: datetime | None = None,
                   parent_id: str | None = None) -> PriceSnapshot:
        """A snapshot of a validated table (as :func:`parse_offers` returns)."""
        table = canonical(table)
        data = to_csv_bytes(table)
        return cls(content_id(data), label, created_at or utc_now(), parent_id, table, data)

    @classmethod
    def from_csv_bytes(cls, data: bytes, *, origin: str, label: str, created_at: datetime,
                       parent_id: str | None = None) -> PriceSnapshot:
        return cls(content_id(data), label, created_at, parent_id, _parse(data, origin), data)

    def __len__(self) -> int:
        return len(self._table)

    @property
    def table(self) -> pd.DataFrame:
        """A copy of the price table (changing it does not change the snapshot)."""
        return self._table.copy()

    @property
    def csv_bytes(self) -> bytes:
        return self._csv

    def select(self, offer_filter: OfferFilter | None = None) -> pd.DataFrame:
        """The rows that pass the filter, as a new frame."""
        if offer_filter is None:
            return self.table
        return self._table[offer_filter.mask(self._table)].reset_index(drop=True)

    def offers(self, offer_filter: OfferFilter | None = None) -> tuple[Offer, ...]:
        """The matching offers as domain objects (the one pandas → dataclass boundary)."""
        return offers_from_table(self.select(offer_filter))

    def merged(self, table: pd.DataFrame, *, label: str) -> PriceSnapshot:
        """A new snapshot: this one's offers, with rows of ``table`` added or replacing same-key rows."""
        key = list(KEY_COLUMNS)
        incoming = canonical(table)
        keys = pd.MultiIndex.from_frame(incoming[key])
        kept = self._table[~pd.MultiIndex.from_frame(self._table[key]).isin(keys)]
        combined = pd.concat([kept, incoming], ignore_index=True)
        return PriceSnapshot.from_table(combined, label=label, parent_id=self.snapshot_id)

    @property
    def observed_range(self) -> tuple[datetime, datetime]:
        times = self._table["observed_at"]
        return times.min().to_pydatetime(), times.max().to_pydatetime()


STALE_AFTER_DAYS = 7.0  # spot prices move within days: older prices are flagged, with how to refresh them
REFRESH_HINT = "spot prices move within days: `geotrain catalog refresh` fetches live ones"


def age_days(observed_at: datetime, now: datetime | None = None) -> float:
    return ((now or utc_now()) - observed_at).total_seconds() / 86400


def staleness_words(newest: datetime, oldest: datetime | None = None, now: datetime | None = None) -> str | None:
    """A warning when prices are older than :data:`STALE_AFTER_DAYS`, else None."""
    days = age_days(newest, now)
    if days <= STALE_AFTER_DAYS:
        return None
    span = (f"{oldest:%Y-%m-%d} to {newest:%Y-%m-%d}" if oldest is not None and oldest.date() != newest.date()
            else f"{newest:%Y-%m-%d}")
    return f"prices observed {span}, the newest {days:.0f} days ago; {REFRESH_HINT}"


def offers_from_table(table: pd.DataFrame) -> tuple[Offer, ...]:
    out = []
    for row in table.itertuples(index=False):
        out.append(Offer(
            location=Location(row.cloud, row.region, row.zone, Continent(row.continent)),
            shape=InstanceShape(
                instance_type=row.instance_type, vcpus=float(row.vcpus), memory_gib=float(row.memory_gib),
                accelerator=None if pd.isna(row.accelerator) else row.accelerator,
                accelerator_count=int(row.accelerator_count),
            ),
            market=Market(row.market),
            price_usd_per_hour=float(row.price_usd_per_hour),
            capacity_hint=None if pd.isna(row.capacity_hint) else int(row.capacity_hint),
            interruption=InterruptionSignal(
                band=None if pd.isna(row.interruption_band) else row.interruption_band,
                interruptions_per_hour=_optional(row.interruptions_per_hour),
                availability=_optional(row.availability),
            ),
            observed_at=row.observed_at.to_pydatetime(),
            source=row.source,
            uplink_gbps=_optional(row.uplink_gbps),
        ))
    return tuple(out)


def _parse(data: bytes, origin: str) -> pd.DataFrame:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CatalogError(f"{origin}: not UTF-8 text; the snapshot file is damaged") from exc
    return parse_offers(parse_csv_text(text, origin), origin, continent_of=continent_of)


def _optional(value: object) -> float | None:
    return None if pd.isna(value) else float(value)


@functools.cache
def bundled_snapshot() -> PriceSnapshot:
    """The snapshot shipped in the package (built by ``scripts/build_bundled_data.py``)."""
    data = data_bytes("offers.csv")
    table = _parse(data, "bundled offers.csv")
    newest = table["observed_at"].max().to_pydatetime()
    return PriceSnapshot(content_id(data), BUNDLED, newest, None, table, data)


SNAPSHOT_ID = re.compile(r"snap-[0-9a-f]{16}")


class SnapshotStore:
    """Snapshots kept under a directory (``GEOTRAIN_HOME/snapshots`` by default)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else geotrain_home() / "snapshots"

    def _paths(self, snapshot_id: str) -> tuple[Path, Path]:
        if not SNAPSHOT_ID.fullmatch(snapshot_id):  # checked before any path is built from it
            raise NotFoundError(f"{snapshot_id!r} is not a snapshot id (snap- and 16 hex digits, or {BUNDLED!r}); "
                                "see `geotrain catalog snapshots`")
        return self.root / f"{snapshot_id}.csv", self.root / f"{snapshot_id}.json"

    def save(self, snapshot: PriceSnapshot) -> Path:
        """Store a snapshot (idempotent: the same content has the same id and file)."""
        csv_path, meta_path = self._paths(snapshot.snapshot_id)
        atomic_write_bytes(csv_path, snapshot.csv_bytes)
        meta = {
            "snapshot_id": snapshot.snapshot_id,
            "label": snapshot.label,
            "created_at": snapshot.created_at.isoformat(),
            "parent_id": snapshot.parent_id,
            "offers": len(snapshot),
        }
        atomic_write_text(meta_path, json.dumps(meta, indent=2) + "\n")
        return csv_path

    def load(self, snapshot_id: str) -> PriceSnapshot:
        """A stored snapshot, or the bundled one (by its id or the name ``bundled``)."""
        bundled = bundled_snapshot()
        if snapshot_id in (BUNDLED, bundled.snapshot_id):
            return bundled
        csv_path, meta_path = self._paths(snapshot_id)
        if not csv_path.exists():
            known = ", ".join(s for s in self.ids()) or "none stored"
            raise NotFoundError(
                f"no snapshot {snapshot_id!r} in {self.root} (stored: {known}); "
                "see `geotrain catalog snapshots`"
            )
        data = csv_path.read_bytes()
        if content_id(data) != snapshot_id:
            raise CatalogError(
                f"{csv_path}: snapshot {snapshot_id} is corrupt (its content no longer matches its id); "
                "import the offers again or run `geotrain catalog use bundled`"
            )
        meta = self._meta(meta_path)
        created = datetime.fromisoformat(meta.get("created_at") or utc_now().isoformat())
        return PriceSnapshot.from_csv_bytes(
            data, origin=str(csv_path), label=str(meta.get("label", snapshot_id)),
            created_at=created, parent_id=meta.get("parent_id"),
        )

    def _meta(self, meta_path: Path) -> dict:
        try:
            return json.loads(meta_path.read_text("utf-8"))
        except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
            return {}

    def ids(self) -> list[str]:
        if not self.root.exists():
            return []
        return sorted(p.stem for p in self.root.glob("snap-*.csv"))

    def listing(self) -> list[dict]:
        """Metadata of every stored snapshot, newest first."""
        rows = [self._meta(self._paths(sid)[1]) | {"snapshot_id": sid} for sid in self.ids()]
        return sorted(rows, key=lambda m: m.get("created_at", ""), reverse=True)

    @property
    def _current_path(self) -> Path:
        return self.root / "CURRENT"

    def current_id(self) -> str:
        try:
            value = self._current_path.read_text("utf-8").strip()
        except FileNotFoundError:
            return BUNDLED
        return value or BUNDLED

    def set_current(self, snapshot_id: str) -> PriceSnapshot:
        snapshot = self.load(snapshot_id)
        value = BUNDLED if snapshot.label == BUNDLED and snapshot.parent_id is None else snapshot.snapshot_id
        atomic_write_text(self._current_path, value + "\n")
        return snapshot

    def current(self) -> PriceSnapshot:
        return self.load(self.current_id())


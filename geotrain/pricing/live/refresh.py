"""``geotrain catalog refresh``: ask each cloud's :class:`~geotrain.pricing.live.base.PriceSource`,
validate what it answers against the offer schema, merge it into the current snapshot and store the
result as a new snapshot, made current.

- A cloud whose credentials are missing or rejected, or that does not answer (a
  :class:`~geotrain.errors.ProviderError`), is reported and left out; the others go on.
- A region a source could not read is reported by the source (``skipped``) and left out.
- An answer of a shape the offer schema refuses stops the refresh: nothing is stored, the current
  snapshot stays as it was. So does a refresh where no cloud answered.
- Merging keeps what the user imported (on-prem sites, their own CSVs): a refreshed offer replaces the
  offer of the same cloud, region, zone, instance type and market, and nothing else is dropped.
- The new snapshot is written atomically before it is made current, so a refresh killed half-way
  leaves the current snapshot as it was (at worst an extra stored snapshot that is not current).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone

import pandas as pd

from geotrain.clouds.geography import continent_of
from geotrain.errors import CatalogError, ProviderError
from geotrain.pricing.live.base import FetchRequest, PriceSource, Progress, SourceResult, no_progress
from geotrain.pricing.schema import COLUMN_NAMES, parse_offers
from geotrain.pricing.snapshot import PriceSnapshot, SnapshotStore


@dataclass(frozen=True, slots=True)
class RefreshOutcome:
    snapshot: PriceSnapshot
    parent_id: str
    results: tuple[SourceResult, ...]
    failed: tuple[tuple[str, str], ...]  # (cloud, why) for clouds that did not answer
    unmapped: tuple[tuple[str, str], ...]  # (cloud, region) left out: not in geotrain's region map
    seconds: float

    offers: int  # offers refreshed (validated and merged)


def refresh_catalog(sources: Sequence[PriceSource], *, store: SnapshotStore, request: FetchRequest = FetchRequest(),
                    progress: Progress = no_progress) -> RefreshOutcome:
    started = time.perf_counter()
    now = request.observed_at or datetime.now(timezone.utc).replace(microsecond=0)
    request = replace(request, observed_at=now)
    results, failed = [], []
    for source in sources:
        try:
            results.append(source.fetch(request, progress))
        except ProviderError as exc:  # credentials, throttling that persists, a cloud that does not answer
            failed.append((source.cloud, str(exc)))
    if not any(r.rows for r in results):
        why = "; ".join(f"{cloud}: {reason}" for cloud, reason in failed) or "no offer matched the filters"
        raise ProviderError(f"catalog refresh got no offers ({why}); nothing was stored and the current snapshot "
                            "is unchanged")
    table, unmapped = _table(results, now)
    parent = store.current()
    clouds = ", ".join(r.cloud for r in results if r.rows)
    snapshot = parent.merged(table, label=f"refresh of {clouds} at {now.strftime('%Y-%m-%dT%H:%M:%SZ')}")
    store.save(snapshot)
    store.set_current(snapshot.snapshot_id)
    return RefreshOutcome(snapshot, parent.snapshot_id, tuple(results), tuple(failed), tuple(sorted(unmapped)),
                          time.perf_counter() - started, len(table))


def _table(results: Sequence[SourceResult], now: datetime) -> tuple[pd.DataFrame, set[tuple[str, str]]]:
    """The sources' rows as one validated price table; rows of regions geotrain cannot place on a
    continent are left out (and named)."""
    records, index, unmapped = [], [], set()
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    for result in results:
        for n, row in enumerate(result.rows):
            unknown = set(row) - set(COLUMN_NAMES)
            if unknown:
                raise CatalogError(f"refresh of {result.cloud}: offer {n}: unknown field {', '.join(sorted(unknown))}")
            text = {k: _text(row.get(k)) for k in COLUMN_NAMES}
            text["cloud"] = text["cloud"] or result.cloud
            if not text["continent"]:
                continent = continent_of(text["cloud"], text["region"])
                if continent is None:
                    unmapped.add((text["cloud"], text["region"]))
                    continue
                text["continent"] = continent.value
            text["observed_at"] = text["observed_at"] or stamp
            records.append(text)
            index.append(f"{result.cloud} offer {n}")
    if not records:
        raise ProviderError("catalog refresh: every offer the clouds returned is in a region geotrain cannot place "
                            f"({', '.join(f'{c}/{r}' for c, r in sorted(unmapped))}); nothing was stored")
    raw = pd.DataFrame(records, index=index, dtype="string")
    try:
        table = parse_offers(raw, "catalog refresh")
    except CatalogError as exc:
        raise CatalogError(f"{exc} (an answer of a shape geotrain does not expect; nothing was stored and the "
                           "current snapshot is unchanged)") from exc
    return table, unmapped


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)

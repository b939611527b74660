"""The seam between ``geotrain catalog refresh`` and each cloud: a :class:`PriceSource`.

A source reads one cloud through its real SDK (boto3, google-cloud-*, azure-*) and returns offers as
rows of the offer schema (``geotrain.pricing.schema``: column name → value), one per (region, zone,
instance type, market), with the capacity and interruption signals the cloud gives. It never writes
anything; :mod:`geotrain.pricing.live.refresh` validates the rows, merges them into the current
snapshot and stores the result atomically.

A source is built with its clients (or client factories) injected, so that tests point the real SDKs
at local fakes (moto, small HTTP servers speaking the clouds' REST shapes on 127.0.0.1). What a source
may raise: :class:`~geotrain.errors.CredentialsError` (no or rejected credentials: the message names
what to set; the refresh goes on with the other clouds), :class:`~geotrain.errors.CatalogError` (an
answer of a shape it does not understand: the refresh stops and saves nothing). A region, or one kind
of data of a region (its on-demand prices, its placement scores), that fails is not an error: it goes
to ``SourceResult.skipped`` (:class:`Skipped`) with the reason, and the rest is kept. Every exception
class of the cloud's SDK is caught at the source and becomes that one line. Throttling is retried with
:func:`~geotrain.clouds.retry.with_backoff`. Nothing credential-like goes into a row, a message or a log.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from geotrain.pricing.schema import COLUMN_NAMES

# progress(cloud, region, what): called as a source moves through its regions (what: e.g. "spot prices")
Progress = Callable[[str, str, str], None]


def no_progress(cloud: str, region: str, what: str) -> None:
    return None


@dataclass(frozen=True, slots=True)
class FetchRequest:
    regions: frozenset[str] | None = None  # region names (us-east-1, europe-west4, eastus); None: all
    accelerators: frozenset[str] | None = None  # canonical names (T4, A100-80GB); None: every GPU offer
    observed_at: datetime | None = None  # when the refresh ran (rows without a cloud time get it)
    gang_nodes: int | None = None  # the nodes a job's gang needs: what placement scores are asked for (None: the source's)


# what a source could not read (``Skipped.data``): each kind of data fails on its own, and the rest is kept
EVERY_OFFER = "every offer"  # the region could not be read at all
REGION_LIST = "the region list"
SPOT_PRICES = "spot prices"
ON_DEMAND_PRICES = "on-demand prices"
PLACEMENT_SCORES = "placement scores"
INTERRUPTION_BANDS = "interruption bands"


@dataclass(frozen=True, slots=True)
class Skipped:
    """Data a source could not read, and why, in one line: the refresh goes on without it (what the
    current snapshot holds for it stays, with its own ``source`` and ``observed_at``)."""

    region: str  # a region name, or "*" (every region)
    data: str  # one of the kinds above
    why: str


@dataclass(frozen=True, slots=True)
class SourceResult:
    cloud: str
    rows: tuple[Mapping[str, Any], ...]  # offer-schema rows
    skipped: tuple[Skipped, ...] = ()  # what could not be read, per region and kind of data
    signals: Mapping[str, int] = field(default_factory=dict)  # e.g. {"capacity_hint": 120, "interruption_band": 300}
    calls: Mapping[str, int] = field(default_factory=dict)  # API operation -> calls made (for the summary)


@dataclass(frozen=True, slots=True)
class CheckReport:
    """What ``geotrain check`` prints for one cloud."""

    cloud: str
    ok: bool
    identity: str  # account / project / subscription the credentials reach ("" when none)
    message: str  # one line: what works, or what to set
    missing: tuple[str, ...] = ()  # permissions (API operations) that were refused


class PriceSource(Protocol):
    cloud: str

    def fetch(self, request: FetchRequest, progress: Progress = no_progress) -> SourceResult: ...

    def check(self) -> CheckReport: ...


def offer_row(**fields: Any) -> dict[str, Any]:
    """A row of the offer schema; unknown column names are a programming error."""
    row: dict[str, Any] = dict.fromkeys(COLUMN_NAMES, "")
    for name, value in fields.items():
        if name not in row:
            raise KeyError(f"{name} is not a column of the offer schema")
        row[name] = "" if value is None else value
    return row

"""The offer schema: every column of a price table, with its dtype and unit, and the one parser.

A price table is a pandas DataFrame with exactly the columns of :data:`OFFER_COLUMNS`, in that
order, one row per offer, sorted by :data:`KEY_COLUMNS`. Column names appear as literals only in
this module and in the importers that map foreign formats onto it.

``parse_offers`` turns a frame of raw strings (as read from a file, indexed by file line number)
into a typed, validated, canonically ordered table. Each problem raises :class:`CatalogError`
naming the file, the line and the column. ``to_text`` is its inverse, and the text it produces is
what a snapshot's content hash is computed on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

import pandas as pd

from geotrain.domain import Continent, Market
from geotrain.errors import CatalogError

INTERRUPTION_BANDS = ("<5%", "5-10%", "10-15%", "15-20%", ">20%", "trace", "none")


@dataclass(frozen=True, slots=True)
class Column:
    """One column of the offer schema."""

    name: str
    kind: str  # "str" | "int" | "float" | "enum" | "datetime"
    unit: str
    description: str
    required: bool = True  # must appear in a file in geotrain's own schema
    nullable: bool = False  # may be empty
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    default: str | None = None  # value used when an optional column is absent
    empty_is_na: bool = True  # False: an empty string is a value of its own (zone "" = region-wide)


OFFER_COLUMNS: tuple[Column, ...] = (
    Column("cloud", "str", "", "aws, gcp, azure, onprem or another provider name (lower case)"),
    Column("region", "str", "", "provider region, e.g. us-east-1; an on-prem site name"),
    Column("zone", "str", "", "zone (AWS: AZ id such as use1-az4); empty = region-wide price",
           required=False, nullable=True, default="", empty_is_na=False),
    Column("continent", "enum", "", "continent of the region; filled from the region map if empty",
           required=False, nullable=True, choices=tuple(c.value for c in Continent), default=""),
    Column("instance_type", "str", "", "provider instance type, e.g. g4dn.xlarge"),
    Column("accelerator", "str", "", "accelerator model, e.g. T4, A100-80GB; empty = CPU only",
           required=False, nullable=True, default=""),
    Column("accelerator_count", "int", "count", "accelerators per node",
           required=False, minimum=0, maximum=1024, default="0"),
    Column("vcpus", "float", "count", "virtual CPUs per node", minimum=0, maximum=100_000),
    Column("memory_gib", "float", "GiB", "memory per node", minimum=0, maximum=1_000_000),
    Column("market", "enum", "", "spot, on_demand or owned (on-prem)",
           choices=tuple(m.value for m in Market)),
    Column("price_usd_per_hour", "float", "USD/h", "price of one node for one hour", minimum=0, maximum=1e6),
    Column("capacity_hint", "int", "count", "nodes believed obtainable; empty = unknown",
           required=False, nullable=True, minimum=0, maximum=1_000_000, default=""),
    Column("interruption_band", "enum", "", "AWS Spot Advisor band, 'trace', 'none'; empty = unknown",
           required=False, nullable=True, choices=INTERRUPTION_BANDS, default=""),
    Column("interruptions_per_hour", "float", "1/h", "expected interruptions per node-hour",
           required=False, nullable=True, minimum=0, maximum=3600, default=""),
    Column("availability", "float", "share", "share of time a spot request succeeded (trace)",
           required=False, nullable=True, minimum=0, maximum=1, default=""),
    Column("uplink_gbps", "float", "Gbit/s", "on-prem site uplink; empty for cloud offers",
           required=False, nullable=True, minimum=0, maximum=100_000, default=""),
    Column("observed_at", "datetime", "UTC", "when the price was observed (ISO 8601)"),
    Column("source", "str", "", "where the figure comes from", required=False, default=""),
)

COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in OFFER_COLUMNS)
COLUMNS: Mapping[str, Column] = {c.name: c for c in OFFER_COLUMNS}
KEY_COLUMNS: tuple[str, ...] = ("cloud", "region", "zone", "instance_type", "market")

_DTYPES = {"str": "string", "enum": "string", "int": "Int64", "float": "float64"}


def dtype_of(column: Column) -> str:
    if column.kind == "datetime":
        return "datetime64[us, UTC]"
    if column.kind == "int" and not column.nullable:
        return "int64"
    return _DTYPES[column.kind]


def parse_offers(
    raw: pd.DataFrame,
    origin: str,
    *,
    continent_of: Callable[[str, str], str | None] | None = None,
    defaults: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """Validate a frame of raw strings and return the typed, canonical price table.

    ``raw`` holds strings (empty string = missing) and is indexed by the file line each row came
    from (a file line number, or a label such as "offer 3" for records). ``continent_of(cloud, region)`` fills an empty continent. ``defaults`` gives values for
    absent optional columns (e.g. ``observed_at`` = import time) on top of the schema's own.
    """
    if raw.empty:
        raise CatalogError(f"{origin}: the file has no offers; add at least one row")
    defaults = dict(defaults or {})
    missing = [c.name for c in OFFER_COLUMNS
               if c.name not in raw.columns and c.required and c.name not in defaults]
    if missing:
        raise CatalogError(
            f"{origin}: missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)}; "
            f"geotrain's offer schema has {', '.join(COLUMN_NAMES)}"
        )
    unknown = [name for name in raw.columns if name not in COLUMNS]
    if unknown:
        raise CatalogError(
            f"{origin}: unknown column{'s' if len(unknown) > 1 else ''} {', '.join(map(str, unknown))}; "
            f"geotrain's offer schema has {', '.join(COLUMN_NAMES)}"
        )

    text = {}
    for col in OFFER_COLUMNS:
        if col.name in raw.columns:
            values = raw[col.name].astype("string").fillna("").str.strip()
        else:
            fill = defaults.get(col.name, col.default or "")
            values = pd.Series(fill, index=raw.index, dtype="string")
        text[col.name] = values

    if continent_of is not None:
        empty = text["continent"] == ""
        if empty.any():
            filled = [
                continent_of(cloud, region) or ""
                for cloud, region in zip(text["cloud"][empty], text["region"][empty], strict=True)
            ]
            text["continent"] = text["continent"].copy()
            text["continent"][empty] = filled
    text["cloud"] = text["cloud"].str.lower()

    typed = {col.name: _parse_column(col, text[col.name], origin) for col in OFFER_COLUMNS}
    table = pd.DataFrame(typed, index=raw.index)
    _check_rules(table, origin)
    _check_unique(table, origin)
    return canonical(table)


def canonical(table: pd.DataFrame) -> pd.DataFrame:
    """Columns in schema order, rows sorted by key, a fresh 0..n-1 index."""
    return table.loc[:, list(COLUMN_NAMES)].sort_values(list(KEY_COLUMNS), kind="stable").reset_index(drop=True)


def to_text(table: pd.DataFrame) -> pd.DataFrame:
    """The table as strings, the way it is written to disk (and hashed)."""
    out = {}
    for col in OFFER_COLUMNS:
        series = table[col.name]
        if col.kind == "datetime":
            out[col.name] = [_format_time(v) for v in series]
        elif col.kind == "float":
            out[col.name] = ["" if pd.isna(v) else repr(float(v)) for v in series]
        elif col.kind == "int":
            out[col.name] = ["" if pd.isna(v) else str(int(v)) for v in series]
        else:
            out[col.name] = ["" if pd.isna(v) else str(v) for v in series]
    return pd.DataFrame(out, columns=list(COLUMN_NAMES))


def to_csv_bytes(table: pd.DataFrame) -> bytes:
    """The canonical file form of a price table: UTF-8 CSV, "\\n" line ends, schema column order."""
    return to_text(canonical(table)).to_csv(index=False, lineterminator="\n").encode("utf-8")


def _format_time(value: pd.Timestamp) -> str:
    return value.tz_convert("UTC").strftime("%Y-%m-%dT%H:%M:%SZ")


def _where(origin: str, line: object, column: str) -> str:
    where = line if isinstance(line, str) else f"line {line}"
    return f"{origin}: {where}, column {column}"


def _first_bad(mask: pd.Series) -> tuple[object, int, int]:
    """(file line, position, how many rows) of the first row where ``mask`` holds."""
    positions = mask.to_numpy().nonzero()[0]
    return mask.index[positions[0]], int(positions[0]), len(positions)


def _more(count: int) -> str:
    return f" (and {count - 1} more row{'s' if count > 2 else ''})" if count > 1 else ""


def _parse_column(col: Column, values: pd.Series, origin: str) -> pd.Series:
    empty = values == ""
    if not col.nullable and empty.any():
        line, pos, count = _first_bad(empty)
        raise CatalogError(f"{_where(origin, line, col.name)}: empty, but a value is required{_more(count)}")

    if col.kind in ("str", "enum"):
        if col.choices:
            bad = ~empty & ~values.isin(col.choices)
            if bad.any():
                line, pos, count = _first_bad(bad)
                raise CatalogError(
                    f"{_where(origin, line, col.name)}: {values.iloc[pos]!r} is not one of "
                    f"{', '.join(col.choices)}{_more(count)}"
                )
        if col.nullable and col.empty_is_na:
            return values.where(~empty, pd.NA).astype("string")
        return values.astype("string")

    if col.kind == "datetime":
        parsed = pd.to_datetime(values.where(~empty, None), utc=True, errors="coerce", format="ISO8601")
        # a price observed before 1970 or after 2200 is a typo (and year 0 is not a Python date at all)
        parsed = parsed.where(parsed.isna() | ((parsed.dt.year >= 1970) & (parsed.dt.year <= 2200)))
        bad = ~empty & parsed.isna()
        if bad.any():
            line, pos, count = _first_bad(bad)
            raise CatalogError(
                f"{_where(origin, line, col.name)}: {values.iloc[pos]!r} is not an ISO 8601 date-time from 1970 to 2200 "
                f"(e.g. 2026-05-20T00:00:00Z){_more(count)}"
            )
        return parsed.astype(dtype_of(col))

    numbers = pd.to_numeric(values.where(~empty, None), errors="coerce")
    bad = ~empty & (numbers.isna() | ~numbers.map(lambda v: pd.isna(v) or math.isfinite(v)))
    if bad.any():
        line, pos, count = _first_bad(bad)
        noun = "a whole number" if col.kind == "int" else "a number"
        raise CatalogError(f"{_where(origin, line, col.name)}: {values.iloc[pos]!r} is not {noun}{_more(count)}")
    if col.kind == "int":
        fractional = ~empty & (numbers != numbers.round())
        if fractional.any():
            line, pos, count = _first_bad(fractional)
            raise CatalogError(
                f"{_where(origin, line, col.name)}: {values.iloc[pos]!r} is not a whole number{_more(count)}"
            )
    if col.minimum is not None:
        low = ~empty & (numbers < col.minimum)
        if low.any():
            line, pos, count = _first_bad(low)
            raise CatalogError(
                f"{_where(origin, line, col.name)}: {values.iloc[pos]} is below the minimum {col.minimum:g}"
                f"{f' {col.unit}' if col.unit not in ('', 'count', 'share') else ''}{_more(count)}"
            )
    if col.maximum is not None:
        high = ~empty & (numbers > col.maximum)
        if high.any():
            line, pos, count = _first_bad(high)
            raise CatalogError(
                f"{_where(origin, line, col.name)}: {values.iloc[pos]} is above the maximum {col.maximum:g}{_more(count)}"
            )
    return numbers.round().astype(dtype_of(col)) if col.kind == "int" else numbers.astype("float64")


def _check_rules(table: pd.DataFrame, origin: str) -> None:
    """Rules that span columns."""
    no_continent = table["continent"].isna()
    if no_continent.any():
        line, pos, count = _first_bad(no_continent)
        raise CatalogError(
            f"{_where(origin, line, 'continent')}: region {table['region'].iloc[pos]!r} of cloud "
            f"{table['cloud'].iloc[pos]!r} is not in geotrain's region map; fill in the continent "
            f"({', '.join(c.value for c in Continent)}){_more(count)}"
        )
    has_accelerator = table["accelerator"].notna()
    mismatch = has_accelerator != (table["accelerator_count"] > 0)
    if mismatch.any():
        line, pos, count = _first_bad(mismatch)
        raise CatalogError(
            f"{_where(origin, line, 'accelerator_count')}: accelerator "
            f"{table['accelerator'].iloc[pos]!r} with count {table['accelerator_count'].iloc[pos]}; "
            f"give both a model and a count above 0, or neither{_more(count)}"
        )


def _check_unique(table: pd.DataFrame, origin: str) -> None:
    key = list(KEY_COLUMNS)
    dup = table.duplicated(subset=key, keep=False)
    if dup.any():
        rows = table[dup]
        first = rows.iloc[0]
        same = rows[(rows[key] == first[key]).all(axis=1)].index.tolist()
        value = "/".join("-" if pd.isna(first[k]) else str(first[k]) for k in key)
        raise CatalogError(
            f"{origin}: {'lines ' if not isinstance(same[0], str) else ''}{', '.join(map(str, same))} have the same key "
            f"({', '.join(key)}) = {value}; keep one row per offer"
        )


def utc_now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)

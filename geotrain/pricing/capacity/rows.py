"""The capacity model's rows: one observed (cloud, region, zone, family, node size, source), and
their CSV form (``data/capacity.csv``, built by ``scripts/build_capacity.py``). See
``geotrain.pricing.capacity.model`` for what the rows mean and how answers are made from them."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass

from geotrain.errors import CatalogError

BASES = ("probed", "pool-trace", "prior", "inventory")
SCOPES = ("zone", "zone-name", "region", "cloud")
KINDS = ("probe", "availability", "pool")

COLUMNS = (
    "cloud", "region", "zone", "zone_name", "scope", "accelerator", "instance_type",
    "accelerators_per_node", "market", "kind", "availability", "curve", "max_units",
    "requested_units", "samples", "observed_h", "start", "end", "source", "note",
)


def _num(value: float) -> str:
    return f"{value:.6g}"


@dataclass(frozen=True, slots=True)
class CapacityRow:
    """One measurement (see the module docstring). ``curve``: breakpoints ``(n, A(n))``, ``n`` rising
    and ``A`` non-increasing; ``availability`` is ``A`` at the first breakpoint (None for pools)."""

    cloud: str
    region: str  # "" when the source does not record it
    zone: str  # as offers spell it (AWS AZ ID, GCP zone); "" when unknown or region-wide
    zone_name: str  # as the source spells it ("us-east-2a"); "" when none
    scope: str  # zone | zone-name | region | cloud
    accelerator: str  # the family
    instance_type: str  # as measured; "" when the source names the GPU only
    accelerators_per_node: int
    market: str  # spot
    kind: str  # probe | availability | pool
    availability: float | None
    curve: tuple[tuple[int, float], ...]
    max_units: int
    requested_units: int | None
    samples: int
    observed_h: float
    start: str
    end: str
    source: str
    note: str

    def __post_init__(self) -> None:
        where = f"capacity row {self.cloud}/{self.region}/{self.zone or self.zone_name or '-'}/{self.accelerator}"
        if self.scope not in SCOPES or self.kind not in KINDS:
            raise CatalogError(f"{where}: scope {self.scope!r} or kind {self.kind!r} is not known")
        if not self.curve or self.accelerators_per_node < 1:
            raise CatalogError(f"{where}: an empty curve or a node of no units")
        last_n, last_a = 0, 1.0
        for n, a in self.curve:
            if n <= last_n or not 0.0 <= a <= last_a:
                raise CatalogError(f"{where}: the curve must have rising units and non-increasing shares in [0, 1]")
            last_n, last_a = n, a
        if self.max_units != self.curve[-1][0]:
            raise CatalogError(f"{where}: max_units {self.max_units} is not the curve's last breakpoint")
        if (self.kind == "pool") != (self.availability is None):
            raise CatalogError(f"{where}: pools carry no availability; other rows must")
        if self.availability is not None and self.availability != self.curve[0][1]:
            raise CatalogError(f"{where}: availability {self.availability} is not the curve's first share")

    def dense(self) -> tuple[float, ...]:
        """``A(n)`` for ``n = 0 … max_units`` (``A(0) = 1``)."""
        values = [1.0]
        for n, a in self.curve:
            values.extend([a] * (n - len(values) + 1))
        return tuple(values)

    def shape(self) -> tuple[float, ...] | None:
        """``S(n) = A(n) / A(1)``, or None when nothing was ever had."""
        first = self.curve[0][1]
        if first <= 0:
            return None
        return tuple(min(1.0, a / first) for a in self.dense())

    def label(self) -> str:
        where = self.zone or self.zone_name or self.region or "region not recorded"
        return f"{self.source} ({where}, {self.start[:10] or '?'}..{self.end[:10] or '?'})"


def rows_to_csv(rows: Iterable[CapacityRow]) -> bytes:
    """The canonical CSV form of ``rows`` (what capacity.csv holds)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for r in rows:
        writer.writerow([
            r.cloud, r.region, r.zone, r.zone_name, r.scope, r.accelerator, r.instance_type,
            r.accelerators_per_node, r.market, r.kind, "" if r.availability is None else _num(r.availability),
            ";".join(f"{n}:{_num(a)}" for n, a in r.curve), r.max_units,
            "" if r.requested_units is None else r.requested_units, r.samples, _num(r.observed_h),
            r.start, r.end, r.source, r.note,
        ])
    return buffer.getvalue().encode("utf-8")


def rows_from_csv(data: bytes, origin: str = "capacity.csv") -> tuple[CapacityRow, ...]:
    """Parse :func:`rows_to_csv`'s form; CatalogError names the line of a bad row."""
    reader = csv.DictReader(io.StringIO(data.decode("utf-8"), newline=""))
    if tuple(reader.fieldnames or ()) != COLUMNS:
        raise CatalogError(f"{origin}: line 1: expected the columns {', '.join(COLUMNS)}")
    rows = []
    for record in reader:
        line = reader.line_num
        try:
            curve = tuple((int(n), float(a)) for n, a in (p.split(":") for p in record["curve"].split(";")))
            rows.append(CapacityRow(
                cloud=record["cloud"], region=record["region"], zone=record["zone"],
                zone_name=record["zone_name"], scope=record["scope"], accelerator=record["accelerator"],
                instance_type=record["instance_type"],
                accelerators_per_node=int(record["accelerators_per_node"]), market=record["market"],
                kind=record["kind"],
                availability=float(record["availability"]) if record["availability"] else None,
                curve=curve, max_units=int(record["max_units"]),
                requested_units=int(record["requested_units"]) if record["requested_units"] else None,
                samples=int(record["samples"]), observed_h=float(record["observed_h"]),
                start=record["start"], end=record["end"], source=record["source"], note=record["note"],
            ))
        except (ValueError, TypeError, AttributeError) as exc:
            raise CatalogError(f"{origin}: line {line}: {exc}") from exc
        except CatalogError as exc:
            raise CatalogError(f"{origin}: line {line}: {exc}") from exc
    return tuple(rows)

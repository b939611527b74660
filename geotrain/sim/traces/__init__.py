"""Trace loaders for ``geotrain simulate``: files of spot markets over time → :class:`ZoneTrace`.

:func:`load_traces` takes files and folders (a folder expands to the trace files in it, sorted; files
in it of no known format are skipped), detects each file's format from its name and first line
(``kind=`` forces one, see :data:`FORMATS`) and returns one ZoneTrace per zone and instance type,
``source`` = ``"<path> (<kind>)"``. Figures are kept exactly; only conventions change (see each
module: :mod:`.skynomad`, :mod:`.events`, :mod:`.prices`, :mod:`.generic`). Times are UTC.

``zone`` (``cloud/region/zone``) names the location of a trace whose file does not record it
(Bamboo/Parcae pools; it overrides a name-derived one elsewhere) and selects traces in files of many
zones; ``instance_type`` overrides the instance type of a one-type file and selects in the others.
A trace with no recorded location and no ``zone=`` is refused: no location is invented. A trace with
no recorded start begins 2000-01-01T00:00Z and aligns only with traces of the same kind.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from geotrain.errors import InputError
from geotrain.sim.market import ZoneTrace
from geotrain.sim.traces import events, generic, prices, skynomad
from geotrain.sim.traces._common import fail, read_text

FORMATS: dict[str, str] = {
    "cbl-json": "Can't-Be-Late JSON ticks {metadata: {gap_seconds}, data}; one node: 1 = unavailable",
    "skynomad-csv": "SkyNomad date,availability CSV (.csv or .csv.gz); 1 = available",
    "skynomad-prices": "SkyNomad {\"<zone>_v100_1\": [price per tick]} JSON, attached to its CSVs",
    "gcp-probes": "SkyNomad GCP H100 probes: scheduled_at,zone,instances_requested,instances_created,...",
    "bamboo-events": "Bamboo <time_ms>,<add|remove>,<node> pool events (needs zone=)",
    "parcae-counts": "Parcae <time_ms>,<nodes alive> (needs zone=)",
    "gcloud-counts": "Bamboo gcloud <date>, <time>, <count> of preemptible GPU VMs",
    "aws-spot-history": "AWS spot price history region,availability_zone,instance_type,...,timestamp",
    "coroot-prices": "coroot regional price changes effective_from_snapshot,snapshot_commit,cloud,...",
    "gcp-price-changes": "GCP VM price changes effective_from_snapshot,instance_type,region,...",
    "generic": "time,zone,instance_type,available,spot_usd_per_hour,on_demand_usd_per_hour (examples/traces)",
}

_LOADERS = {
    "cbl-json": skynomad.load_cbl_json, "skynomad-csv": skynomad.load_skynomad_csv,
    "gcp-probes": skynomad.load_gcp_probes, "bamboo-events": events.load_bamboo,
    "parcae-counts": events.load_parcae, "gcloud-counts": events.load_gcloud,
    "aws-spot-history": prices.load_aws_spot_history, "coroot-prices": prices.load_coroot,
    "gcp-price-changes": prices.load_gcp_price_changes, "generic": generic.load_generic,
}
_HEADERS = [
    ("date,availability", "skynomad-csv"),
    ("scheduled_at,zone,instances_requested,instances_created", "gcp-probes"),
    ("region,availability_zone,instance_type,product_description", "aws-spot-history"),
    ("effective_from_snapshot,snapshot_commit,cloud,region,instance_type", "coroot-prices"),
    ("effective_from_snapshot,instance_type,region", "gcp-price-changes"),
]
_SUFFIXES = (".json", ".csv", ".csv.gz", ".txt", ".json.gz")


def _first_line(path: Path) -> str:
    text = read_text(path) if path.name.endswith(".gz") else path.open("rb").read(4096).decode("utf-8", "replace")
    return next((line.strip().lstrip("\ufeff") for line in text.splitlines() if line.strip()), "")


def detect(path: Path) -> str | None:
    """The format of a file from its name and first line, or None."""
    if path.name.endswith((".json", ".json.gz")):
        head = read_text(path)[:4000]
        if '"metadata"' in head or '"data"' in head:
            return "cbl-json"
        return "skynomad-prices" if head.lstrip().startswith("{") else None
    line = _first_line(path)
    header = line.replace(" ", "").lower()
    for start, kind in _HEADERS:
        if header.startswith(start):
            return kind
    columns = header.split(",")
    if all(c in columns for c in generic.REQUIRED):
        return "generic"
    if re.fullmatch(r"\d+,(add|remove),\S+", header):
        return "bamboo-events"
    if re.fullmatch(r"\d+,\d+", header):
        return "parcae-counts"
    if re.fullmatch(r"\d{4}-\d{2}-\d{2},\d{1,2}:\d{2}:\d{2},\d+", header):
        return "gcloud-counts"
    return None


def _unknown(path: Path) -> InputError:
    return fail(path, "unknown trace format; give kind= (--format) one of " + ", ".join(FORMATS))


def _expand(paths: Iterable[str | Path], kind: str | None) -> list[tuple[Path, str]]:
    files: list[tuple[Path, str]] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = []
            for f in sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(_SUFFIXES)):
                k = kind or detect(f)
                if k:
                    found.append((f, k))
            if not found:
                raise fail(path, "a folder with no trace file of a known format (" + ", ".join(FORMATS) + ")")
            files += found
        elif not path.exists():
            raise fail(path, "no such file or folder; give an existing trace file or folder")
        else:
            k = kind or detect(path)
            if k is None:
                raise _unknown(path)
            files.append((path, k))
    return files


def load_traces(paths: Iterable[str | Path], *, kind: str | None = None, zone: str | None = None,
                instance_type: str | None = None) -> list[ZoneTrace]:
    """Zone traces from trace files and folders (see the module docstring)."""
    if kind is not None and kind not in FORMATS:
        raise InputError(f"unknown trace format {kind!r}; give one of {', '.join(FORMATS)}")
    files = _expand(paths, kind)
    if not files:
        raise InputError("no trace file given")
    out: list[ZoneTrace] = []
    csvs: dict[int, Path] = {}
    price_files = [p for p, k in files if k == "skynomad-prices"]
    for path, k in files:
        if k == "skynomad-prices":
            continue
        loaded = _LOADERS[k](path, zone, instance_type)
        if k == "skynomad-csv":
            csvs[len(out)] = path
        out += loaded
    for p in price_files:
        out = skynomad.attach_prices(out, csvs, skynomad.read_prices(p), p, explicit=True)
    given = {p.resolve() for p in price_files}
    for folder in sorted({p.parent for p in csvs.values()}):
        auto = folder.parent / skynomad.PRICES_FILE
        if auto.is_file() and auto.resolve() not in given:
            mine = {i: p for i, p in csvs.items() if p.parent == folder}
            out = skynomad.attach_prices(out, mine, skynomad.read_prices(auto), auto, explicit=False)
    return out


__all__ = ["FORMATS", "detect", "load_traces"]

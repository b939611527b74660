"""Can't-Be-Late JSON tick series, SkyNomad availability CSVs and per-tick prices, GCP H100 probes.

- ``cbl-json``: ``{"metadata": {"gap_seconds": G, "zone"?, "start_time"?, "price_info"?}, "data": [...],
  "prices"?: [...]}``, one value per tick of G s. A trace of one node (values all 0/1, no node count
  known from an upstream ``N-node`` folder with N > 1) is in Can't Be Late's *preempted* convention:
  **1 = unavailable, 0 = available** (``TraceEnv.spot_available()`` is ``not trace[tick]``); it becomes
  a flag trace (0 → :data:`UNLIMITED`, 1 → 0). Values above 1, or a folder ``N-node`` with N > 1, are
  counts of obtainable instances and kept. The ``_1`` of ``us-east-1a_v100_1.json`` is the GPUs per
  instance (upstream has ``16-node/aws-08-27-2023/us-east-2b_v100_1.json``), not the node count.
  Start: ``metadata.start_time``; else the date of the upstream set (``aws-02-15-2023`` → 2023-02-15
  00:00Z, the README's "Start date: 02/15/2023", no time of day given) from the folder name or, for a
  renamed folder, its README; else 2000-01-01T00:00Z, and such traces align only with each other.
- ``skynomad-csv``: ``date,availability`` (gzip or plain), **1 = available**; naive times taken as UTC
  (upstream gives no time zone). Prices from ``v100_spot_prices.json`` (kind ``skynomad-prices``) are
  attached per row when that file is among the paths, or automatically when it lies at
  ``../v100_spot_prices.json`` relative to the CSV's folder (its layout upstream).
- ``gcp-probes``: one row per probe round and zone; available = ``instances_created`` of 16 requested,
  so 16 means "at least 16". The price is the GPU SKU component per GPU-hour as recorded (the README:
  "GPU SKU component only"); the VM's full spot price is higher — the simulator takes full prices from
  the catalog when told. Empty cells are NaN (filled forward only by alignment).

The two AWS V100 sets of ``../shared/data`` (``spot-traces-json/aws-02-15-2023`` and SkyNomad's
``real_availability_2023-02-15``) hold the *same* values tick for tick, so read by each format's
documented convention they say opposite things. The loaders keep each format's convention (a file
of the format elsewhere follows it); for these two sets the CSV reading is the one that fits the
market (the zones at AWS's floor price, $0.918/h, are the ones mostly available, as scarcity pricing
predicts), and it carries timestamps and prices: replay the CSVs.
"""

from __future__ import annotations

import io
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from geotrain.sim.market import UNLIMITED, ZoneTrace
from geotrain.sim.traces._common import (DEFAULT_START, fail, need_instance, parse_time, read_text,
                                         scope_location, trace, zone_location)

_NAME = re.compile(r"^(?P<zone>[a-z0-9-]+?)_(?P<device>[a-z0-9]+)_(?P<gpus>\d+)$")
_SET = re.compile(r"\b(aws|gcp|azure)-(\d{2})-(\d{2})-(\d{4})\b")
_NODES = re.compile(r"^(\d+)-node$")
# Can't Be Late / SkyNomad device names → AWS instance (spot-traces README: p3.2xlarge 1 V100,
# p3.16xlarge 8 V100). K80 names are muddled upstream (p2.2xlarge does not exist): pass instance_type=.
DEVICES = {("v100", 1): "p3.2xlarge", ("v100", 8): "p3.16xlarge"}
PRICES_FILE = "v100_spot_prices.json"


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".json", ".csv"):
        name = name.removesuffix(suffix)
    return name


def _name_parts(path: Path) -> tuple[str | None, str | None, int | None]:
    m = _NAME.match(_stem(path))
    return (m["zone"], m["device"], int(m["gpus"])) if m else (None, None, None)


def _where(path: Path, zone_in_file: str | None, zone: str | None, kind: str):
    if zone:
        return scope_location(zone, path)
    name_zone = zone_in_file or _name_parts(path)[0]
    if not name_zone:
        raise fail(path, f"a {kind} trace whose metadata and file name give no zone; pass zone='cloud/region/zone'")
    return zone_location(name_zone, path)


def _instance(path: Path, device: str | None, gpus: int | None, given: str | None, kind: str) -> str:
    if given:
        return given
    if device and (device, gpus) in DEVICES:
        return DEVICES[(device, gpus)]
    raise need_instance(path, kind, f"device {device}_{gpus}" if device else "no device")


def _set_start(path: Path) -> datetime | None:
    """The start date of the upstream set, from the folder name or the folder's README."""
    for text in [path.parent.name] + [read_text(p) for p in sorted(path.parent.glob("README*")) if p.is_file()]:
        found = {m.groups() for m in _SET.finditer(text)}
        if len(found) == 1:
            _, month, day, year = found.pop()
            return datetime(int(year), int(month), int(day), tzinfo=UTC)
    return None


def load_cbl_json(path: Path, zone: str | None, instance_type: str | None) -> list[ZoneTrace]:
    kind = "cbl-json"
    try:
        doc = json.loads(read_text(path))
        meta, data = doc["metadata"], doc["data"]
        gap = float(meta["gap_seconds"])
        values = np.asarray(data, dtype=np.float64)
    except (ValueError, KeyError, TypeError) as e:
        raise fail(path, f"not a Can't-Be-Late trace ({e!r}); expected {{\"metadata\": {{\"gap_seconds\": G}}, "
                         "\"data\": [v, ...]}") from None
    if values.ndim != 1 or len(values) == 0 or not np.all(np.isfinite(values)) or np.any(values < 0) \
            or np.any(values != np.round(values)) or gap <= 0:
        raise fail(path, "data must be a non-empty list of whole numbers >= 0 and gap_seconds > 0")
    _, device, gpus = _name_parts(path)
    price_info = meta.get("price_info") or {}
    inst = instance_type or meta.get("instance_type") or price_info.get("instance_type")
    inst = _instance(path, device, gpus, inst, kind)
    nodes = next((int(m[1]) for p in path.parents if (m := _NODES.match(p.name))), None)
    if (nodes is None or nodes == 1) and np.all(values <= 1):
        available = np.where(values == 0, UNLIMITED, 0)  # preempted convention: 1 = unavailable
    else:
        available = values.astype(np.int64)
    if meta.get("start_time"):
        start = parse_time(str(meta["start_time"]) if re.search(r"(Z|[+-]\d\d:\d\d)$", str(meta["start_time"]))
                           else str(meta["start_time"]) + "+00:00", path)
    else:
        start = _set_start(path) or DEFAULT_START
    spot = None
    if "prices" in doc:
        spot = np.asarray(doc["prices"], dtype=np.float64)
        if len(spot) != len(values):
            raise fail(path, f"{len(spot)} prices for {len(values)} ticks; give one price per tick")
    elif price_info.get("price") is not None:
        spot = np.full(len(values), float(price_info["price"]))
    acc = (device.upper(), gpus) if device and not instance_type else (None, None)
    return [trace(_where(path, meta.get("zone"), zone, kind), inst, start, np.arange(len(values)) * gap,
                  available, spot, price_info.get("on_demand_price"), path, kind, *acc)]


def load_skynomad_csv(path: Path, zone: str | None, instance_type: str | None) -> list[ZoneTrace]:
    kind = "skynomad-csv"
    text = read_text(path)
    try:
        df = pd.read_csv(io.StringIO(text), dtype={"availability": "Int64"})
        times = pd.to_datetime(df["date"], format="%Y-%m-%d %H:%M:%S", utc=True)
    except (ValueError, KeyError, pd.errors.ParserError) as e:
        raise fail(path, f"expected columns date (YYYY-MM-DD HH:MM:SS),availability (0/1): {e}") from None
    bad = df.index[df["availability"].isna() | ~df["availability"].isin([0, 1])]
    if len(bad):
        raise fail(path, "availability must be 0 or 1", int(bad[0]) + 2)
    if times.empty:
        raise fail(path, "no rows")
    t0 = times.iloc[0].to_pydatetime()
    secs = (times - times.iloc[0]).dt.total_seconds().to_numpy()
    avail = np.where(df["availability"].to_numpy(dtype=np.int64) == 1, UNLIMITED, 0)  # 1 = available
    _, device, gpus = _name_parts(path)
    inst = _instance(path, device, gpus, instance_type, kind)
    acc = (device.upper(), gpus) if device and not instance_type else (None, None)
    return [trace(_where(path, None, zone, kind), inst, t0, secs, avail, None, None, path, kind, *acc)]


def read_prices(path: Path) -> dict[str, np.ndarray]:
    try:
        doc = json.loads(read_text(path))
        out = {str(k): np.asarray(v, dtype=np.float64) for k, v in doc.items()}
    except (ValueError, TypeError, AttributeError) as e:
        raise fail(path, f"expected {{\"<zone>_v100_1\": [price per tick, ...]}} ({e})") from None
    if not out or any(v.ndim != 1 for v in out.values()):
        raise fail(path, "expected {\"<zone>_v100_1\": [price per tick, ...]}")
    return out


def attach_prices(traces: list[ZoneTrace], csv_paths: dict[int, Path], prices: dict[str, np.ndarray],
                  prices_path: Path, explicit: bool) -> list[ZoneTrace]:
    """Prices per row for the SkyNomad CSV traces (by index in ``traces``) of the same key."""
    used = set()
    out = list(traces)
    for i, csv_path in csv_paths.items():
        key = _stem(csv_path)
        if key not in prices:
            continue
        z, series = out[i], prices[key]
        if len(series) != len(z.times_s):
            raise fail(prices_path, f"{key}: {len(series)} prices for the {len(z.times_s)} rows of {csv_path}; "
                                    "give one price per row")
        used.add(key)
        out[i] = ZoneTrace(z.location, z.instance_type, z.start, z.times_s, z.available, series,
                           z.on_demand_usd_per_hour, z.source, z.accelerator, z.accelerator_count)
    if explicit and not used:
        raise fail(prices_path, f"its zones ({', '.join(sorted(prices)[:3])}, …) match no SkyNomad CSV given; "
                                "give the date,availability CSVs of the same zones with it")
    return out


def load_gcp_probes(path: Path, zone: str | None, instance_type: str | None) -> list[ZoneTrace]:
    kind = "gcp-probes"
    try:
        df = pd.read_csv(io.StringIO(read_text(path)),
                         usecols=["scheduled_at", "zone", "instances_created", "gpu_spot_price_usd_per_gpu_hour"])
        df["t"] = pd.to_datetime(df["scheduled_at"], utc=True, format="ISO8601")
        created = pd.to_numeric(df["instances_created"], errors="coerce")
        price = pd.to_numeric(df["gpu_spot_price_usd_per_gpu_hour"], errors="coerce")
    except (ValueError, KeyError, pd.errors.ParserError) as e:
        raise fail(path, f"expected columns scheduled_at (ISO with offset),zone,instances_requested,"
                         f"instances_created,...,gpu_spot_price_usd_per_gpu_hour: {e}") from None
    bad = df.index[created.isna() | (created < 0) | (created != created.round())
                   | (price.isna() & df["gpu_spot_price_usd_per_gpu_hour"].notna())]
    if len(bad):
        raise fail(path, "instances_created must be a count >= 0 and the price a number or empty", int(bad[0]) + 2)
    df["created"], df["price"] = created.astype(np.int64), price
    out = []
    for name, g in df.groupby("zone", sort=True):
        loc = zone_location(str(name), path)
        if zone and scope_location(zone, path).zone_scope != loc.zone_scope:
            continue
        g = g.sort_values("t", kind="stable")
        secs = (g["t"] - g["t"].iloc[0]).dt.total_seconds().to_numpy()
        out.append(trace(loc, instance_type or "a3-highgpu-1g", g["t"].iloc[0].to_pydatetime(), secs,
                         g["created"].to_numpy(), g["price"].to_numpy(), None, path, kind,
                         None if instance_type else "H100", None if instance_type else 1))
    if not out:
        raise fail(path, f"no probe of zone {zone}")
    return out

"""Spot price histories: no capacity is recorded, so every observation is available with
:data:`UNLIMITED` (a price-only trace replays prices, not capacity).

- ``aws-spot-history`` (training-on-a-dime): ``region,availability_zone,instance_type,
  product_description,spot_price_usd_per_hour,timestamp`` → one trace per (zone, instance type),
  Linux/UNIX rows only.
- ``coroot-prices``: ``effective_from_snapshot,snapshot_commit,cloud,region,instance_type,
  ondemand_usd_per_hour,spot_usd_per_hour`` → one region-wide trace (zone "") per (cloud, region,
  type); a snapshot date is 00:00Z of that day. An empty spot cell is the type vanishing (its README:
  "empty = type vanished"): available 0 and price NaN from then. On-demand: the last value given (it
  flips between snapshots upstream, where the README calls it unreliable).
- ``gcp-price-changes``: ``effective_from_snapshot,instance_type,region,ondemand_usd_per_hour,
  spot_usd_per_hour`` → likewise, cloud gcp.
Here ``zone=`` (a scope) and ``instance_type=`` select traces instead of naming them. Keys in a
region geotrain does not know are left out (a selection naming one is refused).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd

from geotrain.clouds.geography import continent_of
from geotrain.sim.market import UNLIMITED, ZoneTrace
from geotrain.sim.traces._common import fail, location, read_text, scope_location, trace, zone_location


def _read(path: Path, columns: list[str]) -> pd.DataFrame:
    try:
        df = pd.read_csv(io.StringIO(read_text(path)), dtype=str, keep_default_na=False)
    except (ValueError, pd.errors.ParserError) as e:
        raise fail(path, f"not a CSV ({e})") from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise fail(path, f"missing column(s) {', '.join(missing)}; expected {','.join(columns)}")
    return df


def _number(df: pd.DataFrame, column: str, path: Path, empty_ok: bool) -> np.ndarray:
    values = pd.to_numeric(df[column].replace("", np.nan), errors="coerce")
    bad = df.index[(values.isna() & (df[column] != "")) | (values < 0) | (values.isna() & (not empty_ok))]
    if len(bad):
        raise fail(path, f"{column} {df[column].iloc[df.index.get_loc(bad[0])]!r} is not a price >= 0",
                   int(bad[0]) + 2)
    return values.to_numpy(dtype=np.float64)


def _times(df: pd.DataFrame, column: str, path: Path, fmt: str) -> pd.Series:
    t = pd.to_datetime(df[column], utc=True, format=fmt, errors="coerce")
    bad = df.index[t.isna()]
    if len(bad):
        raise fail(path, f"{column} {df.loc[bad[0], column]!r} is not a date ({fmt})", int(bad[0]) + 2)
    return t


def _series(groups, path: Path, kind: str, make_loc, zone: str | None) -> list[ZoneTrace]:
    wanted = scope_location(zone, path).zone_scope if zone else None
    out = []
    for key, g in groups:
        loc = make_loc(key)
        if loc is None or (wanted and loc.zone_scope != wanted and loc.region_scope != wanted):
            continue
        g = g.sort_values("t", kind="stable")
        t = g["t"].to_numpy()
        last = np.r_[t[1:] != t[:-1], True]
        g = g[last]
        secs = ((g["t"] - g["t"].iloc[0]).dt.total_seconds()).to_numpy()
        spot = g["spot"].to_numpy()
        avail = np.where(np.isnan(spot), 0, UNLIMITED)
        od = g["od"].dropna() if "od" in g else pd.Series(dtype=float)
        out.append(trace(loc, key[-1], g["t"].iloc[0].to_pydatetime(), secs, avail, spot,
                         None if od.empty else od.iloc[-1], path, kind))
    if not out:
        raise fail(path, f"no trace matches zone={zone!r}" if zone else "no trace in a region geotrain knows")
    return out


def _known(cloud: str, region: str, path: Path, zone: str | None):
    if continent_of(cloud, region) is None:
        if zone and zone.split("/")[:2] == [cloud, region]:
            location(cloud, region, "", path)  # raises with the message
        return None
    return location(cloud, region, "", path)


def load_aws_spot_history(path: Path, zone: str | None, instance_type: str | None) -> list[ZoneTrace]:
    kind = "aws-spot-history"
    df = _read(path, ["region", "availability_zone", "instance_type", "product_description",
                      "spot_price_usd_per_hour", "timestamp"])
    df = df[df["product_description"] == "Linux/UNIX"]
    if instance_type:
        df = df[df["instance_type"] == instance_type]
    df = df.assign(t=_times(df, "timestamp", path, "ISO8601"),
                   spot=_number(df, "spot_price_usd_per_hour", path, False))
    return _series(df.groupby(["availability_zone", "instance_type"], sort=True), path, kind,
                   lambda key: zone_location(key[0], path), zone)


def load_coroot(path: Path, zone: str | None, instance_type: str | None) -> list[ZoneTrace]:
    kind = "coroot-prices"
    df = _read(path, ["effective_from_snapshot", "cloud", "region", "instance_type",
                      "ondemand_usd_per_hour", "spot_usd_per_hour"])
    if instance_type:
        df = df[df["instance_type"] == instance_type]
    if zone:
        parts = zone.split("/")
        df = df[(df["cloud"] == parts[0]) & (df["region"] == (parts[1] if len(parts) > 1 else ""))]
    df = df.assign(t=_times(df, "effective_from_snapshot", path, "%Y-%m-%d"),
                   spot=_number(df, "spot_usd_per_hour", path, True),
                   od=_number(df, "ondemand_usd_per_hour", path, True))
    return _series(df.groupby(["cloud", "region", "instance_type"], sort=True), path, kind,
                   lambda key: _known(key[0], key[1], path, zone), zone)


def load_gcp_price_changes(path: Path, zone: str | None, instance_type: str | None) -> list[ZoneTrace]:
    kind = "gcp-price-changes"
    df = _read(path, ["effective_from_snapshot", "instance_type", "region", "ondemand_usd_per_hour",
                      "spot_usd_per_hour"])
    if instance_type:
        df = df[df["instance_type"] == instance_type]
    df = df.assign(t=_times(df, "effective_from_snapshot", path, "%Y-%m-%d"),
                   spot=_number(df, "spot_usd_per_hour", path, True),
                   od=_number(df, "ondemand_usd_per_hour", path, True))
    return _series(df.groupby(["region", "instance_type"], sort=True), path, kind,
                   lambda key: _known("gcp", key[0], path, zone), zone)

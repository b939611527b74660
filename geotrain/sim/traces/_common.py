"""Helpers shared by the trace loaders: errors that name the file, locations, time, building traces."""

from __future__ import annotations

import gzip
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from geotrain.clouds.geography import continent_of
from geotrain.domain import Location
from geotrain.errors import InputError
from geotrain.sim.market import UNLIMITED, ZoneTrace

# Where a source records no start time and no documented date: such traces align only with each other.
DEFAULT_START = datetime(2000, 1, 1, tzinfo=UTC)

_AWS_ZONE = re.compile(r"^([a-z]{2}(?:-[a-z]+)+-\d+)([a-z])$")  # us-east-1a -> us-east-1
_GCP_ZONE = re.compile(r"^([a-z]+-[a-z]+\d+)-([a-z])$")  # us-central1-a -> us-central1

# Instance types whose accelerators the loaders know (AWS names; GCP names spell them out).
ACCELERATORS = {
    "p3.2xlarge": ("V100", 1), "p3.8xlarge": ("V100", 4), "p3.16xlarge": ("V100", 8),
    "p2.xlarge": ("K80", 1), "p2.8xlarge": ("K80", 8), "p2.16xlarge": ("K80", 16),
    "a3-highgpu-1g": ("H100", 1), "a3-highgpu-8g": ("H100", 8), "a2-highgpu-1g": ("A100", 1),
    "n1-standard-8+V100": ("V100", 1),
}


def fail(path: Path | str, what: str, line: int | None = None) -> InputError:
    where = f"{path}:{line}" if line is not None else f"{path}"
    return InputError(f"{where}: {what}")


def read_text(path: Path) -> str:
    """The file's text (gunzipped where it ends in .gz); a missing or unreadable file is an InputError."""
    try:
        data = path.read_bytes()
        if path.name.endswith(".gz"):
            data = gzip.decompress(data)
        return data.decode("utf-8-sig")
    except FileNotFoundError:
        raise fail(path, "no such file; give an existing trace file or folder") from None
    except (OSError, UnicodeDecodeError, EOFError) as e:
        raise fail(path, f"cannot read it as text ({e})") from e


def location(cloud: str, region: str, zone: str, path: Path | str) -> Location:
    continent = continent_of(cloud, region)
    if continent is None:
        raise fail(path, f"geotrain does not know the region {cloud}/{region}; give a known region "
                         "(see geotrain/pricing/data/regions.csv) or a generic trace with a continent column")
    return Location(cloud, region, zone, continent)


def zone_location(zone: str, path: Path | str) -> Location:
    """A cloud zone name (``us-east-1a`` is AWS, ``us-central1-a`` is GCP) as a location."""
    if m := _GCP_ZONE.match(zone):
        return location("gcp", m.group(1), zone, path)
    if m := _AWS_ZONE.match(zone):
        return location("aws", m.group(1), zone, path)
    raise fail(path, f"{zone!r} is not an AWS (us-east-1a) or GCP (us-central1-a) zone name; pass "
                     "zone='cloud/region/zone'")


def scope_location(scope: str, path: Path | str, line: int | None = None) -> Location:
    """``cloud/region/zone`` or ``cloud/region`` (region-wide) as a location."""
    parts = scope.strip().split("/")
    if len(parts) not in (2, 3) or not all(parts[:2]):
        raise fail(path, f"zone {scope!r} is not cloud/region/zone or cloud/region "
                         "(e.g. aws/us-east-1/us-east-1a)", line)
    try:
        return location(parts[0].lower(), parts[1], parts[2] if len(parts) == 3 else "", path)
    except InputError as e:
        raise fail(path, e.message.split(": ", 1)[1], line) from None


def need_zone(path: Path | str, kind: str) -> InputError:
    return fail(path, f"a {kind} trace does not record where it was measured; pass zone='cloud/region/zone' "
                      "(--zone on the command line), e.g. zone='aws/us-east-1/us-east-1a'")


def need_instance(path: Path | str, kind: str, what: str) -> InputError:
    return fail(path, f"a {kind} trace names {what} but not the instance type; pass instance_type= "
                      "(--instance-type)")


def parse_time(text: str, path: Path | str, line: int | None = None) -> datetime:
    """ISO 8601 with an offset or Z, as a UTC datetime."""
    try:
        t = datetime.fromisoformat(text.strip())
    except ValueError:
        raise fail(path, f"time {text!r} is not ISO 8601 (2023-02-15T22:08:16Z)", line) from None
    if t.tzinfo is None:
        raise fail(path, f"time {text!r} has no offset; write Z or +HH:MM", line)
    return t.astimezone(UTC)


def keep_last(times_s: np.ndarray, *series: np.ndarray) -> tuple[np.ndarray, ...]:
    """Sort by time (stable) and keep the last value of each repeated time."""
    order = np.argsort(times_s, kind="stable")
    t = times_s[order]
    last = np.r_[t[1:] != t[:-1], True]
    return (t[last], *(s[order][last] for s in series))


def trace(loc: Location, instance_type: str, start: datetime, times_s, available, spot, on_demand,
          path: Path | str, kind: str, accelerator: str | None = None,
          accelerator_count: int | None = None) -> ZoneTrace:
    """A ZoneTrace whose first observation is at ``start`` (times shifted so the first is 0)."""
    times = np.asarray(times_s, dtype=np.float64)
    if len(times) == 0:
        raise fail(path, f"{loc.zone_scope}: no observation")
    first = float(times[0])
    if first:
        start = start + timedelta(seconds=first)
        times = times - first
    if accelerator is None and instance_type in ACCELERATORS:
        accelerator, accelerator_count = ACCELERATORS[instance_type]
    return ZoneTrace(
        location=loc, instance_type=instance_type, start=start, times_s=times,
        available=np.asarray(available, dtype=np.int64),
        spot_usd_per_hour=None if spot is None else np.asarray(spot, dtype=np.float64),
        on_demand_usd_per_hour=None if on_demand is None else float(on_demand),
        source=f"{path} ({kind})", accelerator=accelerator, accelerator_count=accelerator_count)


__all__ = ["ACCELERATORS", "DEFAULT_START", "UNLIMITED", "fail", "keep_last", "location", "need_instance",
           "need_zone", "parse_time", "read_text", "scope_location", "trace", "zone_location"]

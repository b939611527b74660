"""Node-pool traces of Bamboo and Parcae (AWS), and GCP preemptible counts (Bamboo's gcloud folder).

- ``bamboo-events``: ``<time_ms>,<add|remove>,<nodeN>``; available = nodes alive after each event.
- ``parcae-counts``: ``<time_ms>,<num_nodes_alive>``.
  Neither records its zone (pass ``zone=``) nor its start (2000-01-01T00:00Z: such traces align only
  with each other). Instance: ``p3`` → p3.2xlarge (data README: "p3 (p3.2xlarge)"; Parcae's p3.csv is
  the same p3 trace); ``g4dn`` names only the family, so pass ``instance_type=``.
- ``gcloud-counts``: ``<date>, <time>, <count>`` of preemptible 1-GPU instances, times taken as UTC
  (upstream gives no zone). The files repeat and overlap timestamps (``v100x1-east1c.txt`` restarts at
  13:08:45 after 13:09:45): rows are sorted by time and the last value of each timestamp is kept.
  ``a100x1-east1b`` → gcp us-east1-b, a2-highgpu-1g (A100 x1); ``v100x1-east1c`` → gcp us-east1-c,
  n1-standard-8+V100 (V100 x1, the catalog's name). "east1" is read as us-east1 (asia-east1 would
  also fit the name); ``zone=`` and ``instance_type=`` override.
Several rows at one time keep the last (the state after all of them).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from geotrain.sim.market import ZoneTrace
from geotrain.sim.traces._common import (DEFAULT_START, fail, keep_last, location, need_instance, need_zone,
                                         read_text, scope_location, trace)

_GCLOUD_NAME = re.compile(r"^(?P<acc>[a-z]\d+)x(?P<n>\d+)-(?P<area>[a-z]+\d+)(?P<z>[a-z])$")
_GCLOUD_INSTANCES = {("a100", 1): "a2-highgpu-1g", ("v100", 1): "n1-standard-8+V100"}
_GCLOUD_ROW = re.compile(r"^\s*(\d{4}-\d{2}-\d{2}),\s*(\d{1,2}:\d{2}:\d{2}),\s*(\d+)\s*$")


def _aws_pool(path: Path, kind: str, zone: str | None, instance_type: str | None):
    if not zone:
        raise need_zone(path, kind)
    if instance_type:
        return scope_location(zone, path), instance_type
    if path.name.startswith("p3"):
        return scope_location(zone, path), "p3.2xlarge"
    raise need_instance(path, kind, f"the family {path.name.split('-')[0]!r} at most")


def _lines(path: Path):
    for n, line in enumerate(read_text(path).splitlines(), 1):
        if line.strip():
            yield n, line


def load_bamboo(path: Path, zone: str | None, instance_type: str | None) -> list[ZoneTrace]:
    kind = "bamboo-events"
    loc, inst = _aws_pool(path, kind, zone, instance_type)
    alive: set[str] = set()
    times, counts = [], []
    for n, line in _lines(path):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3 or not parts[0].isdigit() or parts[1] not in ("add", "remove") or not parts[2]:
            raise fail(path, f"expected <time_ms>,<add|remove>,<node>, got {line.strip()!r}", n)
        if parts[1] == "add":
            alive.add(parts[2])
        elif parts[2] in alive:
            alive.remove(parts[2])
        else:
            raise fail(path, f"{parts[2]} removed while not alive", n)
        times.append(int(parts[0]) / 1000.0)
        counts.append(len(alive))
    if not times:
        raise fail(path, "no event")
    t, c = keep_last(np.array(times), np.array(counts))
    return [trace(loc, inst, DEFAULT_START, t, c, None, None, path, kind)]


def load_parcae(path: Path, zone: str | None, instance_type: str | None) -> list[ZoneTrace]:
    kind = "parcae-counts"
    loc, inst = _aws_pool(path, kind, zone, instance_type)
    times, counts = [], []
    for n, line in _lines(path):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 2 or not parts[0].isdigit() or not parts[1].isdigit():
            raise fail(path, f"expected <time_ms>,<nodes alive>, got {line.strip()!r}", n)
        times.append(int(parts[0]) / 1000.0)
        counts.append(int(parts[1]))
    if not times:
        raise fail(path, "no row")
    t, c = keep_last(np.array(times), np.array(counts))
    return [trace(loc, inst, DEFAULT_START, t, c, None, None, path, kind)]


def load_gcloud(path: Path, zone: str | None, instance_type: str | None) -> list[ZoneTrace]:
    kind = "gcloud-counts"
    m = _GCLOUD_NAME.match(path.stem)
    if zone:
        loc = scope_location(zone, path)
    elif m:
        region = f"us-{m['area']}"
        loc = location("gcp", region, f"{region}-{m['z']}", path)
    else:
        raise need_zone(path, kind)
    inst = instance_type or (m and _GCLOUD_INSTANCES.get((m["acc"], int(m["n"]))))
    if not inst:
        raise need_instance(path, kind, "no known accelerator")
    stamps, counts = [], []
    for n, line in _lines(path):
        row = _GCLOUD_ROW.match(line)
        if not row:
            raise fail(path, f"expected <YYYY-MM-DD>, <HH:MM:SS>, <count>, got {line.strip()!r}", n)
        try:
            when = datetime.fromisoformat(f"{row[1]}T{int(row[2].split(':')[0]):02d}:{row[2].split(':', 1)[1]}")
        except ValueError:
            raise fail(path, f"no such date or time {row[1]} {row[2]}", n) from None
        stamps.append(when.replace(tzinfo=UTC).timestamp())
        counts.append(int(row[3]))
    if not stamps:
        raise fail(path, "no row")
    t, c = keep_last(np.array(stamps), np.array(counts))
    start = datetime.fromtimestamp(t[0], UTC)
    acc = (m["acc"].upper(), int(m["n"])) if m and not instance_type else (None, None)
    return [trace(loc, inst, start, t - t[0], c, None, None, path, kind, *acc)]

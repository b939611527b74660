"""The generic trace CSV (see ``examples/traces/README.md``)::

    time,zone,instance_type,available,spot_usd_per_hour,on_demand_usd_per_hour[,accelerator,accelerator_count]

- ``time``: ISO 8601 with an offset or Z, or seconds since the epoch (UTC);
- ``zone``: ``cloud/region/zone``, or ``cloud/region`` for a region-wide trace;
- ``available``: a count of obtainable nodes (0, 1, 2, …; **1 is one node, never "unavailable"**) or
  a flag (``yes``/``no``, ``true``/``false``: yes → UNLIMITED, no → 0);
- ``spot_usd_per_hour``, ``on_demand_usd_per_hour``: per node-hour, may be empty; on-demand is one
  value per zone and instance type (differing values are refused).
Rows of many zones in any order; each (zone, instance type) is one trace, sorted by time; one time
given twice for a trace is refused. ``zone=`` and ``instance_type=`` select traces.
"""

from __future__ import annotations

import csv
import io
import math
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from geotrain.sim.market import UNLIMITED, ZoneTrace
from geotrain.sim.traces._common import fail, parse_time, read_text, scope_location, trace

REQUIRED = ("time", "zone", "instance_type", "available")
FLAGS = {"yes": UNLIMITED, "true": UNLIMITED, "no": 0, "false": 0}


def _float(text: str, what: str, path: Path, n: int) -> float | None:
    if not text.strip():
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise fail(path, f"{what} {text!r} is not a number >= 0 (or empty)", n)
    return value


def load_generic(path: Path, zone: str | None, instance_type: str | None) -> list[ZoneTrace]:
    kind = "generic"
    rows = csv.DictReader(io.StringIO(read_text(path)))
    header = [h.strip() for h in rows.fieldnames or []]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise fail(path, f"missing column(s) {', '.join(missing)}; the header is "
                         "time,zone,instance_type,available,spot_usd_per_hour,on_demand_usd_per_hour", 1)
    rows.fieldnames = header
    wanted = scope_location(zone, path).zone_scope if zone else None
    groups: dict[tuple[str, str], dict] = {}
    for n, row in enumerate(rows, 2):
        if None in row or any(row.get(c) is None for c in REQUIRED):
            raise fail(path, f"expected {len(header)} fields", n)
        loc = scope_location(row["zone"], path, n)
        inst = row["instance_type"].strip()
        if not inst:
            raise fail(path, "empty instance_type", n)
        if (wanted and loc.zone_scope != wanted) or (instance_type and inst != instance_type):
            continue
        text = row["time"].strip()
        try:
            when = float(text)
            if not math.isfinite(when):
                raise ValueError
        except ValueError:
            when = parse_time(text, path, n).timestamp()
        flag = row["available"].strip().lower()
        if flag in FLAGS:
            avail = FLAGS[flag]
        elif flag.isdigit():
            avail = int(flag)
        else:
            raise fail(path, f"available {row['available']!r} is not a count (0, 1, 2 …) or yes/no", n)
        spot = _float(row.get("spot_usd_per_hour") or "", "spot_usd_per_hour", path, n)
        od = _float(row.get("on_demand_usd_per_hour") or "", "on_demand_usd_per_hour", path, n)
        acc = (row.get("accelerator") or "").strip() or None
        count_text = (row.get("accelerator_count") or "").strip()
        if count_text and not count_text.isdigit():
            raise fail(path, f"accelerator_count {count_text!r} is not a whole number", n)
        g = groups.setdefault((loc.zone_scope, inst), {"loc": loc, "rows": [], "od": od, "od_line": n,
                                                       "acc": acc, "count": int(count_text) if count_text else None})
        if od is not None:
            if g["od"] is not None and g["od"] != od:
                raise fail(path, f"{loc.zone_scope} {inst}: on_demand_usd_per_hour {od} differs from "
                                 f"{g['od']} on line {g['od_line']}; give one on-demand price per zone", n)
            g["od"], g["od_line"] = od, n
        g["rows"].append((when, avail, math.nan if spot is None else spot, n))
    if not groups:
        raise fail(path, "no row" + (" matches the selection" if zone or instance_type else ""))
    out = []
    for (scope, inst), g in sorted(groups.items()):
        rows_ = sorted(g["rows"], key=lambda r: r[0])
        for a, b in zip(rows_, rows_[1:]):
            if a[0] == b[0]:
                raise fail(path, f"{scope} {inst}: two rows for one time (lines {a[3]} and {b[3]})", b[3])
        t = np.array([r[0] for r in rows_])
        spot = np.array([r[2] for r in rows_])
        out.append(trace(g["loc"], inst, datetime.fromtimestamp(t[0], UTC), t - t[0], [r[1] for r in rows_],
                         None if np.all(np.isnan(spot)) else spot, g["od"], path, kind, g["acc"], g["count"]))
    return out

#!/usr/bin/env python3
"""Build geotrain's capacity data, ``geotrain/pricing/data/capacity.csv``, from the shared data folder.

    .venv/bin/python scripts/build_capacity.py [--data-dir ../shared/data] [--out-dir DIR] [--check]

Writes ``capacity.csv`` (the form of :func:`geotrain.pricing.capacity.rows_to_csv`), the section of
``PROVENANCE.md`` between its capacity markers (appended when absent; the rest of that file belongs to
``scripts/build_bundled_data.py``, which rewrites it without this section: rerun this script after
it), and ``LICENSES/bamboo-LICENSE``. ``--check`` writes nothing and exits 1 when a file differs.
Every number comes from a file under ``--data-dir``; the output is deterministic.

One function per source; the rule each applies is in its docstring and in PROVENANCE.md:

- ``h100_probe_rows``  SkyNomad GCP 16×a3-highgpu-1g launch probes → probe rows (zone, region)
- ``v100_rows``        SkyNomad AWS p3.2xlarge availability ticks → availability rows
- ``dime_rows``        Training-on-a-Dime GCP preemptible slots → availability rows
- ``bamboo_aws_rows``  Bamboo AWS p3 / g4dn pool add/remove events → pool rows (region not recorded)
- ``bamboo_gcp_rows``  Bamboo GCP A100 / V100 preemptible counts → pool rows
- ``advisor_check``    AWS Spot Advisor band/savings against availability (reported, not used)
"""

from __future__ import annotations

import argparse
import csv
import gzip
import itertools
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
REPO_ROOT = SCRIPTS.parent
for entry in (str(REPO_ROOT), str(SCRIPTS)):
    if entry not in sys.path:  # run as a plain script from a checkout
        sys.path.insert(0, entry)

import build_bundled_data as bbd  # noqa: E402  (zone mapping, Dime log patterns, helpers)

from geotrain.files import atomic_write_bytes  # noqa: E402
from geotrain.pricing import interruption  # noqa: E402
from geotrain.pricing.capacity import CapacityRow, rows_to_csv  # noqa: E402

DEFAULT_DATA_DIR = REPO_ROOT.parent / "shared" / "data"
DEFAULT_OUT_DIR = REPO_ROOT / "geotrain" / "pricing" / "data"
BEGIN = "<!-- capacity.csv: begin (written by scripts/build_capacity.py; do not edit by hand) -->"
END = "<!-- capacity.csv: end -->"

SRC_H100 = "skynomad-gcp-h100-probes"
SRC_V100 = "skynomad-aws-v100-availability"
SRC_DIME = "training-on-a-dime-gcp"
SRC_BAMBOO_AWS = "bamboo-aws-pool"
SRC_BAMBOO_GCP = "bamboo-gcp-pool"

P = {
    "h100_probes": "skynomad/gcp_h100_16x_probe_counts.csv",
    "v100_traces": "skynomad/data/real_availability_2023-02-15",
    "v100_json": "spot-traces-json",
    "v100_prices": "skynomad/data/v100_spot_prices.json",
    "skypilot_aws": "prices/skypilot-catalog-aws-gpu/aws_gpu_vms_skypilot_v8.csv",
    "dime_gcp_logs": "training-on-a-dime-2020/logs/gcp/availability",
    "bamboo_p3": "bamboo-parcae-traces/bamboo_traces/p3-trace.csv",
    "bamboo_g4dn": "bamboo-parcae-traces/bamboo_traces/g4dn-trace.csv",
    "parcae_p3": "bamboo-parcae-traces/parcae_traces/aws/traces/p3.csv",
    "parcae_liveput_p3": "bamboo-parcae-traces/parcae_traces/liveput/traces/p3trace.csv",
    "bamboo_gcloud": "bamboo-parcae-traces/bamboo_traces/gcloud",
    "spot_advisor": "aws-spot-advisor/spot-advisor-data.min.json",
}
LICENSE_COPIES = {"bamboo-LICENSE": "bamboo-parcae-traces/LICENSE.bamboo"}

BuildError = bbd.BuildError


@dataclass
class Build:
    rows: list[CapacityRow]
    notes: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    advisor: list[str] = field(default_factory=list)
    json_twins: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    v100_price: dict[str, tuple[float, float]] = field(default_factory=dict)  # zone name → (p, mean $/h)


# --------------------------------------------------------------------------------------------------
# Helpers: a step function of counts over time → the survival curve A(n)
# --------------------------------------------------------------------------------------------------


def hours_held(times: Sequence[datetime | float]) -> list[float]:
    """Hours each sample holds (until the next one; the last holds 0), as interruption.py rules."""
    out = []
    for a, b in itertools.pairwise(times):
        step = (b - a).total_seconds() / 3600 if isinstance(a, datetime) else (b - a) / 3.6e6
        if step < 0:
            raise BuildError("samples are not sorted by time")
        out.append(step)
    return [*out, 0.0]


def survival(counts: Sequence[int], held: Sequence[float]) -> tuple[tuple[int, float], ...]:
    """Breakpoints of A(n) = share of time with count ≥ n, n = 1 … max(counts)."""
    total = sum(held)
    top = max(counts)
    if total <= 0 or top < 1:
        raise BuildError("a trace with no time observed or nothing ever obtained")
    by_count: dict[int, float] = defaultdict(float)
    for c, d in zip(counts, held, strict=True):
        by_count[c] += d
    at_least, values = 0.0, {}
    for n in range(top, 0, -1):
        at_least += by_count.get(n, 0.0)
        values[n] = float(bbd.sig(at_least / total))
    return tuple((n, values[n]) for n in range(1, top + 1) if n == top or values[n + 1] != values[n])


def row(**fields) -> CapacityRow:
    defaults = dict(zone="", zone_name="", instance_type="", market="spot", availability=None,
                    requested_units=None, start="", end="", note="")
    return CapacityRow(**{**defaults, **fields})


def read_csv(data: Path, key: str) -> list[dict[str, str]]:
    return bbd.read_csv(data / P[key])


# --------------------------------------------------------------------------------------------------
# Sources
# --------------------------------------------------------------------------------------------------


def h100_probe_rows(data: Path, b: Build) -> list[CapacityRow]:
    """GCP H100: SkyNomad's probe rounds (every 10 min, 16 a3-highgpu-1g requested per zone).

    Per zone, A(n) = time-weighted share of rounds in which ≥ n VMs launched (each round holds until
    the next, as :func:`interruption.stats_from_probes`), so A(1) equals the offers' availability.
    Per region, the same over the best zone of each round (rounds share ``scheduled_at``).
    """
    path = data / P["h100_probes"]
    records = bbd.read_csv(path)
    bbd.need_columns(records, ["scheduled_at", "zone", "instances_requested", "instances_created"], path)
    by_zone: dict[str, dict[datetime, int]] = defaultdict(dict)
    requested = set()
    for i, r in enumerate(records, start=2):
        created = bbd.whole(r["instances_created"], f"{path}: line {i}")
        asked = bbd.whole(r["instances_requested"], f"{path}: line {i}")
        if created is None or asked is None or created > asked:
            raise BuildError(f"{path}: line {i}: instance counts must be whole and created ≤ requested")
        requested.add(asked)
        by_zone[r["zone"]][datetime.fromisoformat(r["scheduled_at"])] = created
    if len(requested) != 1:
        raise BuildError(f"{path}: probes asked for different counts {sorted(requested)}; rule needed")
    (asked,) = requested
    out = []

    def probe_row(region: str, zone: str, scope: str, series: dict[datetime, int], note: str) -> CapacityRow:
        times = sorted(series)
        counts = [series[t] for t in times]
        held = hours_held(times)
        stats = interruption.stats_from_probes(times, [c >= 1 for c in counts])
        curve = survival(counts, held)
        if abs(curve[0][1] - stats.availability) > 1e-5:
            raise BuildError(f"{path}: {zone or region}: A(1) {curve[0][1]} ≠ probe availability")
        return row(cloud="gcp", region=region, zone=zone, zone_name=zone, scope=scope, accelerator="H100",
                   instance_type="a3-highgpu-1g", accelerators_per_node=1, kind="probe",
                   availability=curve[0][1], curve=curve, max_units=curve[-1][0], requested_units=asked,
                   samples=len(times), observed_h=stats.observed_h, start=bbd.utc_iso(times[0]),
                   end=bbd.utc_iso(times[-1]), source=SRC_H100, note=note)

    regions: dict[str, list[str]] = defaultdict(list)
    for zone in sorted(by_zone):
        regions[bbd.gcp_region_of_zone(zone)].append(zone)
        out.append(probe_row(bbd.gcp_region_of_zone(zone), zone, "zone", by_zone[zone],
                             f"{asked} requested per 10-min round; share of rounds with >= n launched"))
    for region, zones in sorted(regions.items()):
        rounds = sorted(set().union(*(by_zone[z] for z in zones)))
        best = {t: max(by_zone[z].get(t, 0) for z in zones) for t in rounds}
        out.append(probe_row(region, "", "region", best,
                             f"per round the best of {len(zones)} probed zone(s) {' '.join(zones)}"))
    b.notes["h100"].append(f"{len(by_zone)} zones in {len(regions)} regions, {len(records)} probe results, "
                           f"{asked} VMs requested per zone and round")
    return out


def v100_rows(data: Path, b: Build) -> list[CapacityRow]:
    """AWS V100: SkyNomad's p3.2xlarge availability ticks (Can't-Be-Late 2023-02-15 trace).

    p = time-weighted share of ticks marked available (``availability`` 1 = available in these
    CSVs); zone names are tied to AZ IDs only where build_bundled_data's price rule proves it, else
    the row keeps the name (scope ``zone-name``). Cross-checked tick by tick against the JSON copy in
    spot-traces-json (where 1 = unavailable).
    """
    skypilot = read_csv(data, "skypilot_aws")
    mapping = bbd.v100_zone_mapping(data, {r["AvailabilityZone"]: r["Region"] for r in skypilot})
    prices = json.loads((data / P["v100_prices"]).read_text(encoding="utf-8"))
    files = _files(data / P["v100_traces"], "*_v100_1.csv.gz")
    out = []
    for path in files:
        name = path.name.split("_")[0]
        with gzip.open(path, "rt", encoding="utf-8", newline="") as handle:
            records = list(csv.DictReader(handle))
        bbd.need_columns(records, ["date", "availability"], path)
        times = [datetime.fromisoformat(r["date"]).replace(tzinfo=timezone.utc) for r in records]
        up = [r["availability"].strip() == "1" for r in records]
        stats = interruption.stats_from_probes(times, up)
        twin = data / P["v100_json"] / f"{name}_v100_1.json"
        if twin.is_file():
            ticks = json.loads(twin.read_text(encoding="utf-8"))["data"]
            raw = [1 if u else 0 for u in up]
            if ticks == raw:
                b.json_twins["equal"].append(name)
            elif ticks == [1 - v for v in raw]:
                b.json_twins["inverted"].append(name)
            else:
                raise BuildError(f"{twin}: neither equal to nor the inverse of {path}, tick by tick")
        mean_price = statistics.fmean(prices[f"{name}_v100_1"]) if f"{name}_v100_1" in prices else None
        if mean_price is not None:
            b.v100_price[name] = (stats.availability, mean_price)
        az = mapping.mapped.get(name, "")
        p = float(bbd.sig(stats.availability))
        out.append(row(cloud="aws", region=name[:-1], zone=az, zone_name=name,
                       scope="zone" if az else "zone-name", accelerator="V100", instance_type="p3.2xlarge",
                       accelerators_per_node=1, kind="availability", availability=p, curve=((1, p),),
                       max_units=1, requested_units=1, samples=stats.probes, observed_h=stats.observed_h,
                       start=bbd.utc_iso(times[0]), end=bbd.utc_iso(times[-1]), source=SRC_V100,
                       note=("share of ticks a spot p3.2xlarge could be launched; times naive, read as UTC"
                             + ("" if az else f"; zone name not tied to an AZ ID ({mapping.unproven.get(name, '')})"))))
    return out


def _files(folder: Path, pattern: str) -> list[Path]:
    files = sorted(folder.glob(pattern))
    if not files:
        raise BuildError(f"{folder}: no {pattern} files")
    return files


def dime_rows(data: Path, b: Build) -> list[CapacityRow]:
    """GCP P100/V100/K80: Training-on-a-Dime's preemptible slots (March 2020).

    A slot keeps one preemptible VM of N GPUs running and relaunches it when lost; p = time-weighted
    share of its samples in which the VM was running (created/running = up; not running/creation
    failed = down), parsed with build_bundled_data's patterns. The log names GPU, count and zone, not
    the N1 host.
    """
    files = _files(data / P["dime_gcp_logs"], "persistent_*.out")
    out = []
    for path in files:
        kind: dict[str, tuple[str, str, int]] = {}
        samples: dict[str, list[tuple[datetime, bool]]] = defaultdict(list)
        for line in path.read_text(encoding="utf-8").splitlines():
            event = bbd.DIME_EVENT.match(line.strip())
            if not event:
                continue
            moment = datetime.fromisoformat(event["time"].replace("Z", "+00:00"))
            created = bbd.DIME_CREATED.match(event["msg"])
            if created:
                kind.setdefault(created["name"], (created["zone"], bbd.DIME_GPU.get(created["gpu"], created["gpu"]),
                                                  int(created["count"])))
                samples[created["name"]].append((moment, True))
                continue
            state = bbd.DIME_STATE.match(event["msg"])
            if state:
                samples[state["name"]].append((moment, state["state"] == "running"))
        for name, (zone, gpu, count) in sorted(kind.items()):
            series = samples[name]
            stats = interruption.stats_from_availability([s[0] for s in series], [s[1] for s in series])
            p = float(bbd.sig(stats.availability))
            out.append(row(cloud="gcp", region=bbd.gcp_region_of_zone(zone), zone=zone, zone_name=zone,
                           scope="zone", accelerator=gpu, accelerators_per_node=count, kind="availability",
                           availability=p, curve=((count, p),), max_units=count, requested_units=count,
                           samples=len(series), observed_h=stats.observed_h, start=bbd.utc_iso(series[0][0]),
                           end=bbd.utc_iso(series[-1][0]), source=SRC_DIME,
                           note=f"one preemptible {count}x{gpu} VM kept running and relaunched ({path.name}, "
                                f"{name}); share of time it ran; N1 host not recorded"))
    out.sort(key=lambda r: (r.zone, r.accelerator, r.accelerators_per_node, r.start))
    return out


def pool_curve_from_events(path: Path) -> tuple[list[float], list[int]]:
    """``<ms>,add|remove,<node>`` events → (times, alive after each event); fails on a bad event."""
    alive: set[str] = set()
    times, counts = [], []
    with path.open(newline="", encoding="utf-8") as handle:
        for n, (ms, op, node) in enumerate(csv.reader(handle), start=1):
            if op == "add" and node not in alive:
                alive.add(node)
            elif op == "remove" and node in alive:
                alive.remove(node)
            else:
                raise BuildError(f"{path}: line {n}: {op} {node} does not fit the pool")
            times.append(float(ms))
            counts.append(len(alive))
    return times, counts


def bamboo_aws_rows(data: Path, b: Build) -> list[CapacityRow]:
    """AWS V100 / T4 pools: Bamboo's spot pool add/remove events (p3 / g4dn).

    A(n) = share of the window (first to last event) in which ≥ n nodes were alive. The region is
    not recorded; the shared README names p3.2xlarge (1 V100); the g4dn size is not recorded and is
    read as 1 T4 per node (the smallest g4dn), so its units are a lower bound. Times are relative.
    Cross-checked against Parcae's copies of the p3 trace.
    """
    out = []
    specs = (("bamboo_p3", "V100", "p3.2xlarge", "pool of p3.2xlarge spot nodes (shared README); region not recorded"),
             ("bamboo_g4dn", "T4", "", "pool of g4dn spot nodes, size not recorded (read as 1 T4 each: a lower "
                                       "bound of units); region not recorded"))
    for key, gpu, itype, note in specs:
        path = data / P[key]
        if not path.is_file():
            raise BuildError(f"{path}: file not found")
        times, counts = pool_curve_from_events(path)
        curve = survival(counts, hours_held(times))
        out.append(row(cloud="aws", region="", scope="cloud", accelerator=gpu, instance_type=itype,
                       accelerators_per_node=1, kind="pool", curve=curve, max_units=curve[-1][0],
                       samples=len(times), observed_h=(times[-1] - times[0]) / 3.6e6,
                       source=SRC_BAMBOO_AWS, note=f"{note}; times relative, date not recorded"))
        if key == "bamboo_p3":
            with (data / P["parcae_p3"]).open(encoding="utf-8") as handle:
                parcae = [(float(t), int(c)) for t, c in csv.reader(handle)]
            same = parcae == list(zip(times, counts, strict=True))
            liveput = pool_curve_from_events(data / P["parcae_liveput_p3"]) == (times, counts)
            b.notes["bamboo"].append(f"Parcae aws/traces/p3.csv {'equals' if same else 'DIFFERS from'} the alive "
                                     f"count of Bamboo p3-trace.csv event by event; Parcae liveput/traces/p3trace.csv "
                                     f"{'has the same events' if liveput else 'has DIFFERENT events'}")
        b.notes["bamboo"].append(f"{path.name}: {len(times)} events, {len(set(counts))} distinct pool sizes, "
                                 f"≥ {curve[0][0]} nodes alive all the time and {max(counts)} at most, "
                                 f"{(times[-1] - times[0]) / 3.6e6:.1f} h")
    return out


def gcloud_runs(path: Path) -> tuple[list[datetime], list[int], int]:
    """``<date>, <time>, <count>`` lines → (start of each run of equal counts, its count, lines).

    The files repeat each level on 2-120 lines, and the repeats of one level may run past the first
    line of the next; the first lines of runs are always in time order. So a level holds from the
    first line of its run to the first line of the next run (the last run: to the last line).
    """
    starts: list[datetime] = []
    levels: list[int] = []
    last, lines = None, 0
    for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not text.strip():
            continue
        try:
            day, clock, count = (part.strip() for part in text.split(","))
            moment, value = datetime.fromisoformat(f"{day} {clock}"), int(count)
        except ValueError as exc:
            raise BuildError(f"{path}: line {n}: {exc}") from exc
        lines += 1
        last = moment if last is None else max(last, moment)
        if not levels or levels[-1] != value:
            if starts and moment < starts[-1]:
                raise BuildError(f"{path}: line {n}: a run starts before the previous one")
            starts.append(moment)
            levels.append(value)
    return [*starts, last], [*levels, levels[-1]], lines


def bamboo_gcp_rows(data: Path, b: Build) -> list[CapacityRow]:
    """GCP A100 / V100 pools: Bamboo's counts of preemptible 1-GPU instances (Dec 2021).

    The semantics are not documented upstream; read here as instances alive in a pool (the maxima,
    64 and 80, look like the pool targets; counts fall and come back). A(n) = share of the window in
    which ≥ n were alive, over the runs of :func:`gcloud_runs`. Times have no time zone.
    """
    out = []
    for name, gpu in (("a100x1-east1b.txt", "A100"), ("v100x1-east1c.txt", "V100")):
        path = data / P["bamboo_gcloud"] / name
        if not path.is_file():
            raise BuildError(f"{path}: file not found")
        times, counts, lines = gcloud_runs(path)
        held = hours_held(times)
        curve = survival(counts, held)
        zone = {"east1b": "us-east1-b", "east1c": "us-east1-c"}[name.split("-")[1].split(".")[0]]
        out.append(row(cloud="gcp", region="us-east1", zone=zone, zone_name=zone, scope="zone", accelerator=gpu,
                       accelerators_per_node=1, kind="pool", curve=curve, max_units=curve[-1][0],
                       samples=lines, observed_h=sum(held), start=times[0].strftime("%Y-%m-%dT%H:%M:%S"),
                       end=times[-1].strftime("%Y-%m-%dT%H:%M:%S"), source=SRC_BAMBOO_GCP,
                       note=f"count of preemptible 1x{gpu} instances over time (semantics not documented "
                            f"upstream; read as alive in a pool); times without time zone"))
        b.notes["gcloud"].append(f"{name}: {lines} lines, {len(counts) - 1} runs of equal counts, "
                                 f"{min(counts)}..{max(counts)} instances, {sum(held):.1f} h")
    return out


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's rank correlation (no ties expected; ties get the order they come in)."""
    def ranks(values: Sequence[float]) -> list[int]:
        order = sorted(range(len(values)), key=lambda i: values[i])
        out = [0] * len(values)
        for rank, i in enumerate(order):
            out[i] = rank
        return out
    n = len(xs)
    d2 = sum((a - b) ** 2 for a, b in zip(ranks(xs), ranks(ys), strict=True))
    return 1 - 6 * d2 / (n * (n * n - 1))


def v100_convention_check(b: Build) -> None:
    """The JSON copy of the V100 trace against the CSVs, and which reading the prices support."""
    equal, inverted = b.json_twins.get("equal", []), b.json_twins.get("inverted", [])
    b.notes["v100-json"].append(
        f"spot-traces-json against the SkyNomad CSVs, tick by tick: {len(equal)} zones identical, "
        f"{len(inverted)} inverted. data/README.md reads JSON 1 as *unavailable* and CSV 1 as "
        f"*available*; identical files cannot be both, so one of the two stated conventions does not "
        f"hold for these files")
    if b.v100_price:
        zones = sorted(b.v100_price)
        rho = spearman([b.v100_price[z][0] for z in zones], [b.v100_price[z][1] for z in zones])
        b.notes["v100-json"].append(
            f"this build follows the CSV convention (1 = available), as SkyNomad's data/README.md and "
            f"create_aligned_traces.py state and as the bundled offers do. Support from the data: across "
            f"the {len(zones)} zones the share of 1-ticks and the mean per-tick spot price "
            f"(v100_spot_prices.json) have Spearman {rho:.2f} — the zones that are 1 least often are the "
            f"dearest, as scarcity would make them; and the upstream spot-traces README describes each "
            f"value as \"the number of available instances at a specific tick\". Under the JSON reading "
            f"every p would be 1 − p")


def advisor_check(data: Path, rows: Sequence[CapacityRow], b: Build) -> None:
    """Does the Spot Advisor band (or savings) of p3.2xlarge track the measured availability?"""
    feed = json.loads((data / P["spot_advisor"]).read_text(encoding="utf-8"))
    by_region: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r.source == SRC_V100:
            by_region[r.region].append(r.availability)
    points = []
    for region, ps in sorted(by_region.items()):
        entry = feed["spot_advisor"][region]["Linux"]["p3.2xlarge"]
        band = interruption.band_label(int(entry["r"]))
        points.append((region, band, int(entry["s"]), statistics.fmean(ps), min(ps), max(ps), len(ps)))
        b.advisor.append(f"| {region} | {band} | {entry['s']} | {len(ps)} | {min(ps):.4g}..{max(ps):.4g} | "
                         f"{statistics.fmean(ps):.4g} |")
    bands = {pt[1] for pt in points}
    savings_rank = [pt[0] for pt in sorted(points, key=lambda pt: pt[2])]
    avail_rank = [pt[0] for pt in sorted(points, key=lambda pt: pt[3])]
    n = len(points)
    perms = list(itertools.permutations(range(n)))
    b.notes["advisor"].append(
        f"bands of p3.2xlarge in the {n} traced regions: {', '.join(sorted(bands))} — "
        + ("one band for all, so the band cannot explain availability, which ranges "
           f"{min(pt[4] for pt in points):.4g}..{max(pt[5] for pt in points):.4g} across the zones"
           if len(bands) == 1 else "bands differ (check the table)"))
    b.notes["advisor"].append(
        f"savings order the regions' mean availability {'identically' if savings_rank == avail_rank else 'differently'} "
        f"({' < '.join(avail_rank)}); with {n} points an exact permutation test gives p = "
        f"1/{len(perms)} for a perfect rank order: no evidence; not used")


# --------------------------------------------------------------------------------------------------
# Build, provenance, files
# --------------------------------------------------------------------------------------------------


def build(data: Path) -> Build:
    b = Build(rows=[])
    for source in (h100_probe_rows, v100_rows, dime_rows, bamboo_aws_rows, bamboo_gcp_rows):
        b.rows.extend(source(data, b))
    v100_convention_check(b)
    advisor_check(data, b.rows, b)
    return b


def source_table(rows: Sequence[CapacityRow]) -> str:
    lines = ["| source | kind | rows | zones/scopes | families | availability p | largest count seen (units) |",
             "|---|---|---:|---|---|---|---|"]
    groups: dict[tuple[str, str], list[CapacityRow]] = defaultdict(list)
    for r in rows:
        groups[(r.source, r.kind if r.scope != "region" else "probe, per region")].append(r)
    for (source, kind), rs in groups.items():
        places = sorted({r.zone or r.zone_name or r.region or "(region not recorded)" for r in rs})
        ps = [r.availability for r in rs if r.availability is not None]
        p_text = f"{min(ps):.4g}..{max(ps):.4g}" if ps else "— (shape only)"
        sizes = sorted({r.max_units for r in rs})
        lines.append(f"| `{source}` | {kind} | {len(rs)} | {len(places)}: {', '.join(places)} | "
                     f"{', '.join(sorted({r.accelerator for r in rs}))} | {p_text} | "
                     f"{', '.join(map(str, sizes))} |")
    return "\n".join(lines)


def provenance_section(b: Build) -> str:
    def bullets(topic: str) -> str:
        return "\n".join(f"  - {line}" for line in b.notes.get(topic, [])) or "  - (none)"

    return f"""{BEGIN}
## capacity.csv: capacity model data

Generated by `scripts/build_capacity.py` (not by `build_bundled_data.py`, which rewrites this file
without this section: rerun `build_capacity.py` after it). Read by `geotrain/pricing/capacity/`,
whose docstring gives the model: P(k nodes) = p · S(k · units per node). {len(b.rows)} rows, all
market `spot`; one per observed (cloud, region, zone, accelerator family, node size, source).

Columns: `cloud, region, zone` (zone as offers spell it: AWS AZ ID, GCP zone; "" when unknown or
for a region row), `zone_name` (as the source spells it), `scope` (zone | zone-name: an AWS zone name
the data cannot tie to an AZ ID | region: per sample the best probed zone of the region | cloud:
region not recorded), `accelerator` (the family), `instance_type` (as measured; "" when the source
names the GPU only), `accelerators_per_node`, `market`, `kind` (probe | availability | pool),
`availability` (p: time-weighted share of the window in which one node could be had; empty for
pools, which give a shape only), `curve` (`n:a;…`: A(m) = a_i for n_(i-1) < m ≤ n_i, the share of
time in which ≥ m accelerators were obtainable or held at once; 0 beyond the last), `max_units`
(largest simultaneous count seen, in accelerators), `requested_units` (what each probe asked for;
empty when unknown), `samples`, `observed_h`, `start`, `end` (UTC `Z` where the source has a time
zone or is read as UTC; no `Z` where it states none; empty where it has relative times only),
`source`, `note`.

### Sources

| id (`source`) | shared-data file(s) | upstream | dates | licence |
|---|---|---|---|---|
| `{SRC_H100}` | `{P["h100_probes"]}` (derived there from `data/h100_runs/*.json`) | andylizf/skynomad-artifact @ 62b9aaa1942e30c40cb9f6f5d7d03d6823d1d1f7 | 2025-10-03 .. 2025-10-18 | Apache-2.0 (`LICENSES/skynomad-LICENSE`, `skynomad-NOTICE`) |
| `{SRC_V100}` | `{P["v100_traces"]}/*.csv.gz`; zone → AZ ID by the rule of `build_bundled_data.py` (`v100_spot_prices.json`, `v100_spot_price_archive_summary.csv`, SkyPilot AZ list); cross-checked with `{P["v100_json"]}/*.json` (skypilot-org/spot-traces @ 221da1ab9bdfe7966da296265d7694d52dc0c5a6, no licence file; not shipped) | same SkyNomad artifact (Can't-Be-Late trace) | 2023-02-15 .. 2023-04-02 | Apache-2.0 |
| `{SRC_DIME}` | `{P["dime_gcp_logs"]}/persistent_*.out` | stanford-futuredata/training_on_a_dime @ 85f659572ff9da2701e5f309fbad7e828e6be46b | 2020-03-01 .. 2020-03-07 | MIT (`LICENSES/training-on-a-dime-LICENSE`) |
| `{SRC_BAMBOO_AWS}` | `{P["bamboo_p3"]}`, `{P["bamboo_g4dn"]}`; cross-checked with Parcae's `aws/traces/p3.csv`, `liveput/traces/p3trace.csv` (JF-D/Parcae @ efedee7e069d795cbfd6b7667312bdc12f31eb8f; not shipped) | uclasystem/bamboo @ 80809293289419d40a870b4a9ccb8df0082ce3fb, `traces/` | not recorded (relative times; ~11 h each) | MIT (`LICENSES/bamboo-LICENSE`) |
| `{SRC_BAMBOO_GCP}` | `{P["bamboo_gcloud"]}/a100x1-east1b.txt`, `v100x1-east1c.txt` | same Bamboo commit, `traces/gcloud/` | 2021-12-10 .. 2021-12-12 | MIT (`LICENSES/bamboo-LICENSE`) |
| (check only) | `{P["spot_advisor"]}` | AWS Spot Advisor feed, snapshot in ETOgaosion/bamboo @ 0faa479fbca26f06d74fa8e356ca06d88ab1f862 | ≤ 2024-02-28 | AWS public feed (`LICENSES/aws-spot-advisor-NOTE.txt`) |

{source_table(b.rows)}

### Rules

- **GCP H100 probes.** Every 10 min SkyNomad asked each of 13 zones for 16 spot a3-highgpu-1g
  (1×H100) VMs and recorded how many were created. A(n) = time-weighted share of rounds (each holds
  until the next) in which ≥ n were created, so A(1) equals the availability of the bundled offers.
  Censored at 16: nothing is known about more than 16 at once. Region rows: per round the best zone
  of the region (what a region-wide offer gets from a launcher that tries each zone).
{bullets("h100")}
- **AWS V100 availability.** p = time-weighted share of ticks (~195 s) in which a spot p3.2xlarge
  could be launched (`availability` 1 = available in these CSVs). Zone names are account-specific;
  only those tied to an AZ ID by the price rule (see "Traced zones" above) get a `zone`.
{bullets("v100-json")}
- **GCP preemptible slots (Training-on-a-Dime).** One VM of N GPUs kept running and relaunched when
  lost; p = share of time it ran (a held VM, ~15-min pings; GCP's 24-h preemptible cap then in
  force). Node sizes 1 and 8; the capacity model takes p from the smallest node size of a zone and
  family (a bigger node never gets a higher chance), so the 8-GPU rows are recorded, not used.
- **AWS pools (Bamboo).** A(n) = share of the window with ≥ n nodes alive; region not recorded, so
  they serve as the V100 (p3) and T4 (g4dn) pool shapes of every AWS zone. The pools were held at a
  target (32 p3, 24 g4dn at most), so sizes are lower bounds of what AWS could give.
{bullets("bamboo")}
- **GCP pools (Bamboo gcloud).** Counts of preemptible 1-GPU instances (semantics not documented
  upstream; read as instances alive in a pool, its target most likely the maximum). Each level is
  repeated on several lines whose times may overlap the next level's; a level holds from the first
  line of its run to the first line of the next run.
{bullets("gcloud")}

### AWS Spot Advisor as a market-pressure signal: checked, not used

| region | p3.2xlarge band | savings % | traced zones | availability range | mean |
|---|---|---:|---:|---|---:|
{chr(10).join(b.advisor)}

{chr(10).join(f"- {line}" for line in b.notes["advisor"])}

### Where no data exists

Spot offers without a row of their own zone get a prior from the nearest data, in this order, and
are labelled `prior` (or `pool-trace` when the shape is a pool trace of their own family): mean p of
the same family's other zones in the region; median p of the family in the cloud; median p of the
cloud; median p of all zones (Azure has no capacity data at all). The pool shape falls back from the
family's pool trace or probe curves to an equal-weight mixture of the cloud's, then of all
families' shapes. No answer exceeds the largest count seen at once in the data behind it.
On-demand: no data; certain up to 64 nodes (the planner's default node limit). Owned: the
inventory count.

Not used: Bamboo/Parcae `gpt-1.5b` segments and `liveput_res` (replays of the same p3 trace),
Training-on-a-Dime AWS logs (2020 zone names, no AZ IDs), the Spot Advisor band (above).
{END}
"""


def outputs(data: Path, out_dir: Path) -> dict[str, bytes]:
    """Every file this script writes, by name under ``out_dir``, with its new content."""
    b = build(data)
    files = {"capacity.csv": rows_to_csv(b.rows)}
    section = provenance_section(b)
    prov_path = out_dir / "PROVENANCE.md"
    current = prov_path.read_text(encoding="utf-8") if prov_path.is_file() else ""
    if BEGIN in current and END in current:
        head, rest = current.split(BEGIN, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        text = head + section + (("\n" + tail) if tail else "")
    else:
        text = current.rstrip("\n") + ("\n\n" if current else "") + section
    files["PROVENANCE.md"] = text.encode("utf-8")
    for name, rel in LICENSE_COPIES.items():
        src = data / rel
        if not src.is_file():
            raise BuildError(f"{src}: licence file not found")
        files[f"LICENSES/{name}"] = src.read_bytes()
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT_DIR)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file differs")
    args = parser.parse_args(argv)
    data = args.data_dir.resolve()
    if not (data / "skynomad").is_dir() or not (data / "bamboo-parcae-traces").is_dir():
        print(f"error: {data} is not the shared data folder; pass --data-dir PATH", file=sys.stderr)
        return 2
    try:
        files = outputs(data, args.out_dir)
    except (BuildError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    stale = [name for name, content in sorted(files.items())
             if not (args.out_dir / name).is_file() or (args.out_dir / name).read_bytes() != content]
    if args.check:
        for name in stale:
            print(f"differs: {args.out_dir / name}", file=sys.stderr)
        return 1 if stale else 0
    for name in stale:
        path = args.out_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, files[name])
    print(f"wrote {len(stale)} of {len(files)} files to {args.out_dir} (the others were unchanged)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

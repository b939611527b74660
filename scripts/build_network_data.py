"""Build geotrain's network data (geotrain/perf/data/{links.csv, measured_links.csv, network.json}).

Sources (in ../shared/data, see geotrain/perf/data/PROVENANCE.md):

- Skyplane (Apache-2.0): ping RTT between ~70 regions of AWS, GCP and Azure (latency.csv) and the
  64-stream aggregate throughput grids between large VMs. -> links.csv, one row per region pair:
  median RTT over all entries of the pair (both directions), median aggregate throughput.
- hivemind-multi-cloud (MIT; Erben et al., VLDB 2024): iperf (single TCP stream) and ping between
  the T4/A10/on-prem machines that trained. -> measured_links.csv (pairs whose regions the data
  pins down, with the most that the multi-stream runs of experiment set 3 carried between the same
  regions as their measured aggregate) and network.json (the single-stream model's parameters):
    * ``nic_cap_gbps`` per cloud: single-stream throughput inside one zone;
    * ``window_mb`` per link kind: median of bandwidth x RTT over the measured pairs of that kind,
      i.e. the effective TCP window that bounds one stream at bandwidth = window / RTT.

Region identification (checked by this script against Skyplane's RTT matrix, 15 % tolerance):
experiment set 1 (GC US/EU/ASIA/AUS) RTTs 103/157/176/253/272/131 ms match us-central1,
europe-west3, asia-east1 and australia-southeast1; experiment set 2's AWS<->GC 14-15 ms matches
aws us-west-2 <-> gcp us-west1. Azure's US-west region and the on-prem sites are not pinned down:
their pairs feed the window fit only.

    python scripts/build_network_data.py [--data-dir ../shared/data] [--out-dir geotrain/perf/data]
"""

from __future__ import annotations

import argparse
import csv
import glob
import re
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
UNITS = {"Gbits/sec": 1e3, "Mbits/sec": 1.0, "Kbits/sec": 1e-3}

# Experiment set 1: GC T4 VMs in four regions. Measured RTT band (ms) -> region pair.
SET1_REGIONS = {
    (95, 110): ("us-central1", "europe-west3"),
    (150, 165): ("us-central1", "asia-east1"),
    (170, 185): ("us-central1", "australia-southeast1"),
    (245, 262): ("europe-west3", "asia-east1"),
    (265, 280): ("europe-west3", "australia-southeast1"),
    (125, 140): ("asia-east1", "australia-southeast1"),
}
SET2_AWS_GCP = (("aws", "us-west-2"), ("gcp", "us-west1"))


def gcp_region(name: str) -> str:
    """Skyplane names GCP by zone (us-central1-a); geotrain's links are per region."""
    cloud, _, where = name.partition(":")
    if cloud == "gcp" and where.count("-") >= 2:
        where = where.rsplit("-", 1)[0]
    return f"{cloud}:{where}"


def pair_key(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)


def skyplane_links(data: Path) -> tuple[list[dict], dict[tuple[str, str], float]]:
    rtts: dict[tuple[str, str], list[float]] = defaultdict(list)
    with open(data / "skyplane/latency.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            a, b = gcp_region(row["src_region"]), gcp_region(row["dst_region"])
            if a != b and row["avg_rtt"]:
                rtts[pair_key(a, b)].append(float(row["avg_rtt"]))
    aggregate: dict[tuple[str, str], list[float]] = defaultdict(list)
    for name in ("throughput_grid_2022-01.csv", "throughput_grid_2022-11-28.csv"):
        with open(data / "skyplane" / name, newline="") as handle:
            for row in csv.DictReader(handle):
                a, b = gcp_region(row["src_region"]), gcp_region(row["dst_region"])
                received = row.get("throughput_received") or row.get("throughput_recieved")  # spelt both ways
                if a != b and row["success"] == "True" and received:
                    aggregate[pair_key(a, b)].append(float(received) / 1e9)
    rows = []
    rtt_median = {}
    for key in sorted(set(rtts) | set(aggregate)):
        (ca, ra), (cb, rb) = (k.split(":", 1) for k in key)
        rtt = statistics.median(rtts[key]) if rtts.get(key) else None
        agg = statistics.median(aggregate[key]) if aggregate.get(key) else None
        if rtt is not None:
            rtt_median[key] = rtt
        rows.append({
            "cloud_a": ca, "region_a": ra, "cloud_b": cb, "region_b": rb,
            "rtt_ms": "" if rtt is None else f"{rtt:.2f}",
            "aggregate_gbps": "" if agg is None else f"{agg:.3f}",
            "source": "skyplane",
        })
    return rows, rtt_median


def hivemind_samples(data: Path, *, streams: str = "single") -> list[dict]:
    """Every iperf sample: (experiment, local, target, Mbit/s, RTT ms, streams). ``streams``: "single"
    (one TCP stream: what the window and the measured pairs are fitted on) or "multi" (the
    multi-threaded runs of experiment set 3, 5 to 160 parallel streams)."""
    root = data / "hivemind-multi-cloud/artifacts/networking/logs"
    out = []
    for path in sorted(glob.glob(str(root / "**/*.csv"), recursive=True)):
        rel = Path(path).relative_to(root).as_posix()
        threads = re.search(r"-(\d+)thread\.csv$", rel)
        multi = "multi-threaded" in rel and threads is not None and threads.group(1) != "1"
        if multi != (streams == "multi"):
            continue
        with open(path, newline="") as handle:
            for row in csv.DictReader(handle):
                unit = UNITS.get(row["bandwidth_metric"])
                if unit is None or not row["avg_ping_ms"]:
                    continue
                out.append({
                    "experiment": rel.split("/")[0] + "/" + rel.split("/")[1],
                    "local": re.sub(r"-\d+thread$", "", row["local_hostname"]),
                    "target": row["target_hostname"],
                    "mbps": float(row["bandwidth"]) * unit,
                    "rtt_ms": float(row["avg_ping_ms"]),
                    "streams": int(threads.group(1)) if threads else 1,
                })
    return out


def classify(sample: dict) -> str:
    """The link kind of a hivemind sample, from its host names and RTT."""
    local, target, rtt = sample["local"], sample["target"], sample["rtt_ms"]
    onprem = ("rtx8000", "8xv100", "vm-gpu-2")
    if local.startswith(onprem) or target.startswith(onprem):
        return "onprem"
    cloud_a, cloud_b = local.split("-")[0], target.split("-")[0]
    if rtt < 2.5:
        return f"same_zone:{cloud_a}" if cloud_a == cloud_b else "unknown"
    if cloud_a != cloud_b:
        return "internet"
    return "cross_continent"  # every same-cloud WAN pair in the logs crosses a continent


def set1_region_pair(rtt: float) -> tuple[str, str] | None:
    for (low, high), pair in SET1_REGIONS.items():
        if low <= rtt <= high:
            return pair
    return None


def build(data: Path, out: Path) -> None:
    links, rtt_median = skyplane_links(data)
    samples = hivemind_samples(data)
    by_kind: dict[str, list[dict]] = defaultdict(list)
    for sample in samples:
        by_kind[classify(sample)].append(sample)

    caps = {}
    for kind, rows in sorted(by_kind.items()):
        if kind.startswith("same_zone:"):
            cloud = {"gc": "gcp", "aws": "aws", "azure": "azure", "lambda": "lambda", "t4": "gcp"}[kind.split(":")[1]]
            caps.setdefault(cloud, []).extend(rows)
    nic_cap = {
        cloud: {
            "gbps": round(statistics.median(r["mbps"] for r in rows) / 1e3, 3),
            "rtt_ms": round(statistics.median(r["rtt_ms"] for r in rows), 3),
            "samples": len(rows),
        }
        for cloud, rows in sorted(caps.items())
    }

    windows = {}
    for kind in ("cross_continent", "internet", "onprem"):
        rows = by_kind[kind]
        products = [r["mbps"] * 1e6 / 8 * r["rtt_ms"] / 1e3 / 1e6 for r in rows]  # MB in flight
        windows[kind] = {
            "window_mb": round(statistics.median(products), 3),
            "min_mb": round(min(products), 3), "max_mb": round(max(products), 3), "samples": len(rows),
        }

    multi: dict[str, list[dict]] = defaultdict(list)
    for sample in hivemind_samples(data, streams="multi"):
        multi[classify(sample)].append(sample)
    measured = measured_pairs(by_kind, rtt_median, multi)

    network = {
        "continent_rtt_ms": continent_rtt(rtt_median),
        "nic_cap": nic_cap,
        "window": windows,
        "notes": {
            "nic_cap": "median single-stream iperf throughput and ping RTT between two VMs of one zone",
            "window": "median of bandwidth x RTT (MB) over single-stream pairs of each kind; "
                      "a stream's bandwidth is modelled as min(NIC caps, window / RTT)",
            "cross_zone_rtt": "no measurement in the sources: the same-zone RTT is used (estimated)",
            "cross_region": "no single-stream pair inside one continent in the sources: the "
                            "cross_continent window is used for cross-region links (estimated)",
        },
    }
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "links.csv", links)
    write_csv(out / "measured_links.csv", measured)
    (out / "network.json").write_text(json.dumps(network, indent=2, sort_keys=True) + "\n")
    print(f"links.csv: {len(links)} region pairs; measured_links.csv: {len(measured)} pairs")
    print(json.dumps(network["nic_cap"], indent=1))
    print(json.dumps(network["window"], indent=1))


def continent_rtt(rtt_median: dict) -> dict[str, float]:
    """Median RTT per continent pair, the fallback for regions without a Skyplane measurement."""
    sys.path.insert(0, str(REPO))
    from geotrain.perf.network import continent_medians

    continent_of = region_continent_names()
    rtt = {tuple(k.replace(":", "/", 1) for k in key): value for key, value in rtt_median.items()}
    missing = sorted({r for key in rtt for r in key if r not in continent_of})
    if missing:
        sys.exit(f"regions without a continent in geotrain/pricing/data/regions.csv: {', '.join(missing)}")
    return continent_medians(rtt, continent_of)


def multi_stream_aggregate(samples: list[dict]) -> tuple[float, int] | None:
    """The most that several parallel streams carried between a pair (Gbit/s, streams): the median
    per stream count, the best count."""
    by_streams: dict[int, list[float]] = defaultdict(list)
    for s in samples:
        by_streams[s["streams"]].append(s["mbps"])
    medians = {n: statistics.median(v) / 1e3 for n, v in by_streams.items() if statistics.median(v) > 0}
    if not medians:
        return None
    best = max(medians, key=lambda n: (medians[n], -n))
    return medians[best], best


def measured_pairs(by_kind: dict[str, list[dict]], rtt_median: dict,
                   multi: dict[str, list[dict]] | None = None) -> list[dict]:
    continents = region_continent_names()
    parallel: dict[tuple, list[dict]] = defaultdict(list)
    for sample in (multi or {}).get("cross_continent", []):
        if sample["local"].startswith("gc") and (pair := set1_region_pair(sample["rtt_ms"])):
            parallel[(("gcp", pair[0]), ("gcp", pair[1]))].append(sample)
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for sample in by_kind["cross_continent"]:
        if sample["experiment"].startswith("experiment-set-1/1-") and sample["local"].startswith("gc"):
            pair = set1_region_pair(sample["rtt_ms"])
            if pair:
                groups[(("gcp", pair[0]), ("gcp", pair[1]), "hivemind set 1 (GC US/EU/ASIA/AUS)")].append(sample)
    for sample in by_kind["internet"]:
        if {sample["local"].split("-")[0], sample["target"].split("-")[0]} == {"aws", "gc"}:
            groups[(*SET2_AWS_GCP, "hivemind set 2 (AWS+GC US)")].append(sample)
    rows = []
    for (a, b, experiment), samples in sorted(groups.items()):
        rtt = statistics.median(s["rtt_ms"] for s in samples)
        reference = rtt_median.get(pair_key(f"{a[0]}:{a[1]}", f"{b[0]}:{b[1]}"))
        if reference is None or abs(rtt - reference) > 0.15 * reference:
            sys.exit(f"region identification failed for {a}-{b}: measured {rtt:.1f} ms, Skyplane {reference} ms")
        aggregate = multi_stream_aggregate(parallel.get((a, b), []))
        rows.append({
            "cloud_a": a[0], "region_a": a[1], "cloud_b": b[0], "region_b": b[1],
            "continent_a": continents[f"{a[0]}/{a[1]}"], "continent_b": continents[f"{b[0]}/{b[1]}"],
            "bandwidth_gbps": f"{statistics.median(s['mbps'] for s in samples) / 1e3:.4f}",
            "rtt_ms": f"{rtt:.2f}", "samples": len(samples), "skyplane_rtt_ms": f"{reference:.2f}",
            "aggregate_gbps": "" if aggregate is None else f"{aggregate[0]:.3f}",
            "aggregate_streams": "" if aggregate is None else str(aggregate[1]),
            "source": experiment + ("; aggregate: multi-stream iperf set 3 (GC EU->US), best of 5-80 streams"
                                    if aggregate else ""),
        })
    return rows


def region_continent_names() -> dict[str, str]:
    """``cloud/region`` -> its continent, from geotrain's region map."""
    sys.path.insert(0, str(REPO))
    from geotrain.clouds.geography import region_continents

    return {f"{cloud}/{region}": str(c) for (cloud, region), c in region_continents().items()}


def write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--out-dir", type=Path, default=REPO / "geotrain" / "perf" / "data")
    args = parser.parse_args()
    if not (args.data_dir / "skyplane").is_dir():
        sys.exit(f"{args.data_dir}: no shared data folder (expected skyplane/ and hivemind-multi-cloud/ in it)")
    build(args.data_dir, args.out_dir)


if __name__ == "__main__":
    main()

"""Build ``geotrain/perf/data/instance_network.csv``: each GPU machine's network as its cloud sells it.

    python scripts/build_instance_network.py [--out FILE]

Columns: ``cloud, instance_type, nic_gbps, burst_gbps, fabric, fabric_gbps, source, note``.

- ``nic_gbps``: what the VM's primary network interface sustains (Gbit/s): the figure NCCL's socket
  transport and any TCP traffic of one interface can use.
- ``burst_gbps``: the "up to" figure, where the cloud sells a burst above the sustained one.
- ``fabric`` / ``fabric_gbps``: the GPU fabric the machine has besides (EFA, InfiniBand,
  GPUDirect-TCPX/TCPXO) and its total over all its interfaces; geotrain's launch does not set one
  up, so the perf model lists it and does not use it (``geotrain.perf.nic``).

Sources, none of them written by this project:

- **AWS**: ``DescribeInstanceTypes``' ``NetworkInfo`` as moto ships it (``moto/ec2/resources/
  instance_types.json.gz``, a copy of the EC2 API's answers; moto is Apache-2.0): the primary network
  card's ``BaselineBandwidthInGbps`` (sustained) and ``PeakBandwidthInGbps`` (burst), and
  ``EfaSupported`` with every card's baseline summed as the EFA fabric's total.
- **GCP and Azure**: the figures the clouds' documentation publishes per machine type, collected
  with their sources in ``scripts/data/gcp_azure_network.csv`` (each row names its page and quotes
  the figure); rows without a published figure are left out, and ``geotrain.perf.nic`` then caps
  nothing.

Only the GPU machines of the bundled price snapshot are written (the ones a plan can pick).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "geotrain" / "perf" / "data" / "instance_network.csv"
HAND = ROOT / "scripts" / "data" / "gcp_azure_network.csv"
COLUMNS = ["cloud", "instance_type", "nic_gbps", "burst_gbps", "fabric", "fabric_gbps", "source", "note"]


def _gpu_types() -> dict[str, set[str]]:
    sys.path.insert(0, str(ROOT))
    from geotrain.pricing.snapshot import bundled_snapshot

    out: dict[str, set[str]] = {}
    for offer in bundled_snapshot().offers():
        if offer.shape.accelerator_count:
            out.setdefault(offer.location.cloud, set()).add(offer.shape.instance_type)
    return out


def _number(value: float) -> str:
    return f"{value:g}"


def aws_rows(types: set[str]) -> list[dict[str, str]]:
    import moto

    path = Path(moto.__file__).parent / "ec2" / "resources" / "instance_types.json.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        table = json.load(f)
    source = f"DescribeInstanceTypes NetworkInfo, as shipped by moto {moto.__version__} (ec2/resources/instance_types.json.gz)"
    rows = []
    for name in sorted(types):
        info = (table.get(name) or {}).get("NetworkInfo")
        if not info or not info.get("NetworkCards"):
            continue
        cards = info["NetworkCards"]
        primary = cards[info.get("DefaultNetworkCardIndex", 0)]
        baseline, peak = primary["BaselineBandwidthInGbps"], primary["PeakBandwidthInGbps"]
        efa = bool(info.get("EfaSupported"))
        total = sum(card["BaselineBandwidthInGbps"] for card in cards)
        rows.append({
            "cloud": "aws", "instance_type": name, "nic_gbps": _number(baseline),
            "burst_gbps": _number(peak) if peak > baseline else "",
            "fabric": "efa" if efa else "none", "fabric_gbps": _number(total) if efa else "",
            "source": source,
            "note": f"NetworkPerformance: {info.get('NetworkPerformance', '')}; {len(cards)} network card(s)",
        })
    return rows


def hand_rows(types: dict[str, set[str]]) -> list[dict[str, str]]:
    rows = []
    with HAND.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row["instance_type"] not in types.get(row["cloud"], set()) or not row["nic_gbps"]:
                continue
            fabric = row["fabric"] or "none"
            rows.append({
                "cloud": row["cloud"], "instance_type": row["instance_type"], "nic_gbps": row["nic_gbps"],
                "burst_gbps": "", "fabric": fabric, "fabric_gbps": row["fabric_gbps"] if fabric != "none" else "",
                "source": row["source"], "note": row["notes"],
            })
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    types = _gpu_types()
    rows = aws_rows(types.get("aws", set())) + hand_rows(types)
    rows.sort(key=lambda r: (r["cloud"], r["instance_type"]))
    tmp = args.out.with_suffix(".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(args.out)
    missing = {cloud: sorted(names - {r["instance_type"] for r in rows if r["cloud"] == cloud})
               for cloud, names in types.items()}
    print(f"{args.out}: {len(rows)} machine types; without a published figure: "
          + "; ".join(f"{cloud} {len(m)} ({', '.join(m[:6])}{', …' if len(m) > 6 else ''})"
                      for cloud, m in sorted(missing.items()) if m))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

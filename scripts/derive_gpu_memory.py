"""Derive each accelerator's memory (MiB per GPU) from the price catalogs geotrain already bundles.

Writes ``geotrain/perf/data/gpu_memory.csv`` (read by ``geotrain.perf.memory``) from the
``GpuMemoryMiBPerGpu`` column of ``prices/skypilot-catalog-aws-gpu/aws_gpu_vms_skypilot_v8.csv``
(AWS's ``GpuInfo.MemoryInfo.SizeInMiB``) and the ``GpuInfo`` column of
``prices/anycloud-catalog-azure-gcp/gcp_n1_gpu_vms_2026-05-20.csv`` (GCP's figures in the same
form), both under ``../shared/data``:

    python scripts/derive_gpu_memory.py [--data-dir ../shared/data] [--out FILE]

One row per accelerator name as geotrain spells it. Where the two clouds disagree the smaller figure
is kept (the memory a job can count on), and both are named in ``source``. Accelerators neither file
gives (Azure's A10, RTX8000, K80, M60, AMD parts, ...) get no row: the fit check leaves them
unchecked and says so. Only standard library: the test re-derives the file and compares it.
"""

from __future__ import annotations

import argparse
import ast
import csv
import io
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "geotrain" / "perf" / "data" / "gpu_memory.csv"
AWS = "prices/skypilot-catalog-aws-gpu/aws_gpu_vms_skypilot_v8.csv"
GCP = "prices/anycloud-catalog-azure-gcp/gcp_n1_gpu_vms_2026-05-20.csv"


def aws_memory(path: Path) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for row in csv.DictReader(path.open(encoding="utf-8")):
        if row["AcceleratorName"] and row["GpuMemoryMiBPerGpu"]:
            out.setdefault(row["AcceleratorName"], set()).add(int(row["GpuMemoryMiBPerGpu"]))
    return out


def gcp_memory(path: Path) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for row in csv.DictReader(path.open(encoding="utf-8")):
        if not (row["AcceleratorName"] and row["GpuInfo"]):
            continue
        for gpu in ast.literal_eval(row["GpuInfo"]).get("Gpus", []):
            out.setdefault(row["AcceleratorName"], set()).add(int(gpu["MemoryInfo"]["SizeInMiB"]))
    return out


def derive(data_dir: Path) -> str:
    sources = [("AWS GpuInfo via skypilot-catalog v8", aws_memory(data_dir / AWS)),
               ("GCP GpuInfo via anycloud-sh/catalog", gcp_memory(data_dir / GCP))]
    names = sorted({name for _, table in sources for name in table})
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["accelerator", "memory_mib", "source"])
    for name in names:
        seen = [(label, min(table[name])) for label, table in sources if name in table]
        writer.writerow([name, min(mib for _, mib in seen), "; ".join(f"{label}: {mib}" for label, mib in seen)])
    return buf.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=HERE.parent.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    args.out.write_text(derive(args.data_dir), encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

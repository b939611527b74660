"""Derive cross-accelerator ratios and multi-GPU scaling from Lambda's measured benchmarks.

Writes ``geotrain/perf/data/gpu_scaling.csv`` (read by ``geotrain.perf.rates``) from
``../shared/data/lambda-gpu-benchmarks`` (github.com/lambdal/deeplearning-benchmark @
aa5addb6a53675a649a80036dad548f1c27cbcc4, folder pytorch/):

    python scripts/derive_gpu_ratios.py [--data-dir ../shared/data] [--out FILE]

What it computes, per accelerator as geotrain spells it and per workload kind:

- ``ratio_vs_a10`` (rows with ``accelerator_count`` 1): the geometric mean over the kind's models
  of throughput(accelerator, 1 GPU) / throughput(A10, 1 GPU);
- ``scaling_efficiency`` (rows with 2, 4, 8): the geometric mean over the kind's models of
  throughput(n GPUs) / (n x throughput(1 GPU)) on the same kind of machine (1.0 on the 1-GPU rows),
  each model's value capped at 1 first. The per-GPU batch is the same at every count (the bs files),
  so a reading above 1 is not data-parallel speed-up: bert_base_squad at 8 GPUs reads 1.21 (A100
  SXM4), 1.36 (H100 SXM5), 2.45 (H200), and it would otherwise hide bert_large_squad's losses on
  the same machines (0.61, 0.94, 0.96). ``per_model`` keeps every model's uncapped figure.

Models: cv = resnet50, ssd (the image models); nlp = bert_base_squad, bert_large_squad (encoders,
like geotrain's RoBERTa workloads). transformerxl{base,large} are left out: they are missing from
the v2 and v1_v2 files (so H100 SXM5 and H200 would be averaged over other models than the rest)
and are 0 in five of the v1 H100 SXM5 rows.

Precision: the fp16 files (NVIDIA AMP mixed precision). GPU training of these model families runs
in mixed precision, as geotrain's rates assume; the fp32 files measure the FP32/TF32 path, whose
ratios differ (e.g. A100/V100 is larger under TF32).

Files: ``v1_v2/pytorch-train-throughput-fp16.csv`` (Lambda's merged layout, one row per machine)
for every accelerator except H200, which is only in ``pytorch-train-throughput-v2-fp16.csv``
(rows LambdaBM_ENG04_{1,8}xH200: one host, hyper-threading on). The Lambda rows per accelerator are
in ``MACHINES`` below and in each output row's ``source``. Nothing is written where Lambda did not
measure: no T4, L4, L40S, A10G, P100; A10, RTX8000 at 1 GPU only; H200 at 1 and 8 only.
Only standard library: the test re-derives the file and compares it byte for byte.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "geotrain" / "perf" / "data" / "gpu_scaling.csv"
ANCHOR = "A10"
MERGED = "v1_v2/pytorch-train-throughput-fp16.csv"
V2 = "pytorch-train-throughput-v2-fp16.csv"
MODELS = {"cv": ("resnet50", "ssd"), "nlp": ("bert_base_squad", "bert_large_squad")}
COUNTS = (1, 2, 4, 8)
COLUMNS = ["accelerator", "kind", "accelerator_count", "ratio_vs_a10", "scaling_efficiency", "per_model",
           "source", "note"]


@dataclass(frozen=True)
class Machine:
    """Where one geotrain accelerator's figures come from: a Lambda row for the ratio, rows for scaling."""

    ratio_file: str
    ratio_row: str
    scaling_file: str
    scaling_rows: dict[int, str]  # GPU count -> Lambda row (the 1-GPU row is the base of the efficiency)
    note: str = ""


V100_ROWS = {1: "LambdaCloud 1x V100 16GB", 2: "LambdaCloud 2x V100 16GB", 4: "LambdaCloud 4x V100 16GB",
             8: "LambdaCloud 8x V100 16GB"}
A100_SXM4_ROWS = {1: "A100 80GB SXM4", 2: "2x A100 80GB SXM4", 4: "4x A100 80GB SXM4", 8: "8x A100 80GB SXM4"}
H100_SXM5_ROWS = {1: "LambdaCloud 1x H100 80GB SXM5", 2: "LambdaCloud 2x H100 80GB SXM5",
                  4: "LambdaCloud 4x H100 80GB SXM5", 8: "LambdaCloud 8x H100 80GB SXM5"}

MACHINES: dict[str, Machine] = {
    "A10": Machine(MERGED, "LambdaCloud 1x A10", MERGED, {1: "LambdaCloud 1x A10"},
                   "the anchor; Lambda measured it at 1 GPU only"),
    "RTX8000": Machine(MERGED, "Quadro RTX 8000", MERGED, {1: "Quadro RTX 8000"},
                       "1 GPU only"),
    "V100": Machine(MERGED, "LambdaCloud 1x V100 16GB", MERGED, V100_ROWS,
                    "V100 16GB (the data does not say SXM2 or PCIe)"),
    "V100-32GB": Machine(MERGED, "LambdaCloud 1x V100 16GB", MERGED, V100_ROWS,
                         "same GV100 chip and clocks as V100; Lambda measured only the 16 GB card, "
                         "whose rows are used"),
    "A100": Machine(MERGED, "LambdaCloud 1x A100 40GB PCIe", MERGED, A100_SXM4_ROWS,
                    "ratio: the 40 GB PCIe card (250 W), the only 40 GB row (cloud A100-40GB are SXM4 at 400 W, "
                    "so the ratio errs low); scaling: the 80 GB SXM4 machines, the only A100 rows at 4 and 8 GPUs"),
    "A100-80GB": Machine(MERGED, "A100 80GB SXM4", MERGED, A100_SXM4_ROWS,
                         "the SXM4 card, as in cloud A100-80GB machines"),
    "H100": Machine(MERGED, "LambdaCloud 1x H100 80GB SXM5", MERGED, H100_SXM5_ROWS,
                    "the SXM5 card (geotrain's H100 is the SXM part)"),
    "H200": Machine(V2, "LambdaBM_ENG04_1xH200_140GB_SXM_h200_v2", V2,
                    {1: "LambdaBM_ENG04_1xH200_140GB_SXM_h200_v2", 8: "LambdaBM_ENG04_8xH200_140GB_SXM_h200_v2"},
                    "H200 SXM, v2 run on one host; measured at 1 and 8 GPUs only"),
}


def load(path: Path) -> dict[str, dict[str, float]]:
    """Rows of one Lambda throughput file by machine name (the first column); 0 means not measured."""
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        rows = {}
        for cells in reader:
            if not cells:
                continue
            rows[cells[0].strip()] = {name: float(value) for name, value in zip(header[1:], cells[1:], strict=True)
                                      if name and value != ""}
    return rows


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def figure(rows: dict[str, dict[str, float]], row: str, model: str, origin: str) -> float:
    try:
        value = rows[row][model]
    except KeyError:
        sys.exit(f"{origin}: no row {row!r} or no column {model!r}")
    if not value > 0:
        sys.exit(f"{origin}: row {row!r} has no measurement for {model!r}")
    return value


def derive(lambda_dir: Path) -> list[list[str]]:
    files = {name: load(lambda_dir / name) for name in (MERGED, V2)}
    anchor = MACHINES[ANCHOR]
    out = []
    for accelerator in sorted(MACHINES):
        machine = MACHINES[accelerator]
        for kind, models in MODELS.items():
            ratios = {m: figure(files[machine.ratio_file], machine.ratio_row, m, machine.ratio_file)
                      / figure(files[anchor.ratio_file], anchor.ratio_row, m, anchor.ratio_file) for m in models}
            source = f"{machine.ratio_file}: '{machine.ratio_row}' / '{anchor.ratio_row}'"
            out.append([accelerator, kind, "1", f"{geomean(list(ratios.values())):.4f}", "1.0000",
                        per_model(ratios), source, machine.note])
            scaling = files[machine.scaling_file]
            one = machine.scaling_rows[1]
            for n in COUNTS[1:]:
                row = machine.scaling_rows.get(n)
                if row is None:
                    continue
                eff = {m: figure(scaling, row, m, machine.scaling_file)
                       / (n * figure(scaling, one, m, machine.scaling_file)) for m in models}
                source = f"{machine.scaling_file}: '{row}' / ({n} x '{one}')"
                capped = [min(1.0, e) for e in eff.values()]
                out.append([accelerator, kind, str(n), "", f"{geomean(capped):.4f}", per_model(eff),
                            source, machine.note])
    return out


def per_model(values: dict[str, float]) -> str:
    return " ".join(f"{m}={v:.4f}" for m, v in values.items())


def render(rows: list[list[str]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows(rows)
    return buffer.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    lambda_dir = args.data_dir / "lambda-gpu-benchmarks"
    if not lambda_dir.is_dir():
        sys.exit(f"{lambda_dir}: not found; pass --data-dir pointing at the shared data folder")
    text = render(derive(lambda_dir))
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(args.out)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()

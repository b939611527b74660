"""Compute rates: measured rows as they are; Lambda's measured ratios and in-node scaling before guesses."""

from __future__ import annotations

import csv
import io
import math
import subprocess
import sys

import pytest

from geotrain.errors import NotFoundError
from geotrain.perf.data import data_text
from geotrain.perf.rates import BASES, ComputeRate, GpuScaling, RateTable
from geotrain.perf.workloads import WorkloadRegistry
from tests.conftest import REPO

REGISTRY = WorkloadRegistry.bundled()
RATES = RateTable.bundled()
SCALING = GpuScaling.parse(data_text("gpu_scaling.csv"), "bundled gpu_scaling.csv")
ACCELERATORS = [row["accelerator"] for row in csv.DictReader(io.StringIO(data_text("accelerators.csv")))]
COUNTS = (1, 2, 4, 8)


def rate(workload: str, accelerator: str | None, count: int, table: RateTable = RATES) -> ComputeRate:
    return table.node_rate(REGISTRY.get(workload), accelerator, count)


def test_four_v100_are_below_the_measured_eight_v100():
    eight = rate("convnext-large", "V100", 8)
    assert eight.basis == "measured" and not eight.estimated and eight.samples_per_s == 413.1
    four = rate("convnext-large", "V100", 4)
    assert four.basis == "derived" and four.samples_per_s < eight.samples_per_s
    # the DGX-2 row anchors the single V100: 8 x single x efficiency(8) gives the measured figure back
    single = rate("convnext-large", "V100", 1)
    assert single.samples_per_s * 8 * SCALING.efficiency("V100", "cv", 8).value == pytest.approx(413.1)
    assert four.samples_per_s == pytest.approx(single.samples_per_s * 4 * SCALING.efficiency("V100", "cv", 4).value)
    assert rate("convnext-large", "V100", 2).samples_per_s < four.samples_per_s


def test_eight_a100_are_below_eight_single_a100_by_the_measured_efficiency():
    one, eight = rate("resnet50", "A100", 1), rate("resnet50", "A100", 8)
    efficiency = SCALING.efficiency("A100", "cv", 8)
    assert efficiency.basis == "derived" and 0.8 < efficiency.value < 1
    assert eight.samples_per_s == pytest.approx(8 * one.samples_per_s * efficiency.value)
    assert eight.samples_per_s < 8 * one.samples_per_s
    assert one.basis == eight.basis == "derived" and eight.estimated
    nlp = rate("roberta-xlm", "A100", 8).samples_per_s / (8 * rate("roberta-xlm", "A100", 1).samples_per_s)
    assert nlp == pytest.approx(SCALING.efficiency("A100", "nlp", 8).value) and nlp < efficiency.value


@pytest.mark.parametrize("workload", REGISTRY.names())
def test_v100_and_v100_32gb_agree(workload):
    for n in COUNTS:
        try:
            v100 = rate(workload, "V100", n)
        except NotFoundError:
            with pytest.raises(NotFoundError):
                rate(workload, "V100-32GB", n)
            continue
        assert rate(workload, "V100-32GB", n).samples_per_s == pytest.approx(v100.samples_per_s)


def test_every_bundled_rate_has_a_basis_and_a_positive_finite_rate():
    found = set()
    for workload in REGISTRY.names():
        for accelerator in [*ACCELERATORS, None]:
            for n in COUNTS:
                try:
                    r = rate(workload, accelerator, n)
                except NotFoundError as error:
                    assert "--rates" in str(error)
                    continue
                assert r.basis in BASES and r.estimated == (r.basis != "measured"), r
                assert math.isfinite(r.samples_per_s) and r.samples_per_s > 0, r
                assert r.source and r.accelerator == (accelerator or "CPU")
                found.add(r.basis)
    assert found == set(BASES)


def test_rule_order_measured_kind_ratio_lambda_datasheet():
    assert rate("convnext-large", "T4", 1).basis == "measured"
    t4 = rate("resnet50", "T4", 1)  # Erben's T4/A10 ratio on ConvNextLarge: ahead of any other rule
    assert t4.basis == "estimated" and t4.samples_per_s == pytest.approx(779 * 80.8 / 186)
    h100 = rate("resnet50", "H100", 1)  # Lambda measured H100 and A10: derived, below the datasheet ratio
    assert h100.basis == "derived" and h100.samples_per_s == pytest.approx(779 * SCALING.ratio("H100", "cv"))
    assert h100.samples_per_s < 779 * 989 / 125
    l4 = rate("resnet50", "L4", 1)  # not in Lambda's data: the datasheet rule
    assert l4.basis == "estimated" and "TFLOPS" in l4.source and "memory bandwidth" in l4.source
    x, y = referee_exponents("cv")
    assert l4.samples_per_s == pytest.approx(779 * (121 / 125) ** x * (300 / 600) ** y)
    assert l4.samples_per_s < 779 * 121 / 125  # 300 GB/s against the A10's 600: below the TFLOPS ratio


def referee_exponents(kind: str) -> tuple[float, float]:
    """The datasheet rule's exponents by numpy's least squares on the shipped files, one point per
    accelerator with a datasheet and a Lambda ratio (V100-32GB is the V100's chip: left out)."""
    import numpy as np

    sheet = {row["accelerator"]: (float(row["fp16_tensor_tflops"]), float(row["memory_bandwidth_gbs"]))
             for row in csv.DictReader(io.StringIO(data_text("accelerators.csv")))}
    points = [(acc, ratio) for (acc, k), ratio in SCALING.ratios.items()
              if k == kind and acc in sheet and acc not in ("A10", "V100-32GB")]
    a = np.array([[math.log(sheet[acc][0] / sheet["A10"][0]), math.log(sheet[acc][1] / sheet["A10"][1])]
                  for acc, _ in points])
    x, y = np.linalg.lstsq(a, np.array([math.log(r) for _, r in points]), rcond=None)[0]
    return float(x), float(y)


def test_the_datasheet_exponents_are_refitted_without_a_held_out_accelerator():
    from geotrain.perf.rates import Datasheet, fit_hardware_exponents

    sheets = {"A10": Datasheet(100, 100), "P": Datasheet(200, 150), "Q": Datasheet(400, 500), "R": Datasheet(90, 300),
              "V100": Datasheet(300, 300), "V100-32GB": Datasheet(300, 300)}
    truth = {acc: (s.fp16_tensor_tflops / 100) ** 0.3 * (s.memory_bandwidth_gbs / 100) ** 0.6
             for acc, s in sheets.items()}
    ratios = {(acc, "cv"): r for acc, r in truth.items()}
    ratios[("V100-32GB", "cv")] = 99.0  # a same-chip name counts once (the sorted first: V100)
    x, y = fit_hardware_exponents(ratios, sheets)["cv"]
    assert (x, y) == (pytest.approx(0.3), pytest.approx(0.6))
    ratios[("Q", "cv")] = 50.0  # a point that breaks the law moves the fit, unless it is held out
    assert fit_hardware_exponents(ratios, sheets)["cv"] != (pytest.approx(0.3), pytest.approx(0.6))
    assert fit_hardware_exponents(ratios, sheets, leave_out=frozenset({"Q"}))["cv"] == (
        pytest.approx(0.3), pytest.approx(0.6))
    assert "nlp" not in fit_hardware_exponents(ratios, sheets)  # nothing measured for it: no exponents


def test_unmeasured_scaling_is_the_median_and_estimated():
    a10 = rate("resnet50", "A10", 4)
    assert a10.basis == "estimated" and "median" in a10.source
    assert a10.samples_per_s < 4 * 779
    h200 = rate("resnet50", "H200", 2)  # Lambda measured H200 at 1 and 8 GPUs only
    assert h200.basis == "estimated" and rate("resnet50", "H200", 8).basis == "derived"
    sixteen = rate("resnet50", "A100", 16)  # no machine of 16 measured: the 8-GPU efficiency, estimated
    assert sixteen.basis == "estimated"
    assert sixteen.samples_per_s == pytest.approx(2 * rate("resnet50", "A100", 8).samples_per_s)


def test_scaling_efficiency_is_never_above_one():
    for (acc, kind, n), (value, _) in SCALING.efficiencies.items():
        assert 0 < value <= 1, (acc, kind, n)
    for workload in ("resnet50", "roberta-xlm"):
        for acc in ("H100", "H200"):
            assert rate(workload, acc, 8).samples_per_s <= 8 * rate(workload, acc, 1).samples_per_s


def test_user_rows_are_measured_and_win(tmp_path):
    path = tmp_path / "rates.csv"
    path.write_text("workload,accelerator,samples_per_s,accelerator_count,source\n"
                    "resnet50,T4,400,1,my bench\n"
                    "convnext-large,V100,300,4,my dgx\n"
                    "roberta-xlm,H100,2500,1,my h100\n")
    table = RATES.with_file(path)
    t4 = rate("resnet50", "T4", 1, table)
    assert t4.samples_per_s == 400 and t4.basis == "measured" and not t4.estimated and t4.source == "my bench"
    v100 = rate("convnext-large", "V100", 4, table)
    assert v100.samples_per_s == 300 and v100.basis == "measured"
    assert rate("convnext-large", "V100", 8, table).samples_per_s == 413.1  # the bundled row still stands
    h100x8 = rate("roberta-xlm", "H100", 8, table)  # the user's single H100 scaled by Lambda's measured scaling
    assert h100x8.basis == "derived"
    assert h100x8.samples_per_s == pytest.approx(2500 * 8 * SCALING.efficiency("H100", "nlp", 8).value)
    assert rate("resnet50", "T4", 1).samples_per_s != 400  # the bundled table is unchanged


def test_a_workload_measured_only_off_the_anchor_transfers_by_lambda_ratio(tmp_path):
    workloads = tmp_path / "workloads.csv"
    workloads.write_text("name,parameters,kind,samples_per_step\nmy-vit,86000000,cv,64\n")
    rates = tmp_path / "rates.csv"
    rates.write_text("workload,accelerator,samples_per_s\nmy-vit,A100,1000\n")
    table = RATES.with_file(rates)
    vit = WorkloadRegistry.bundled().with_file(workloads).get("my-vit")
    h100 = table.node_rate(vit, "H100", 1)
    assert h100.basis == "derived"
    assert h100.samples_per_s == pytest.approx(1000 * SCALING.ratio("H100", "cv") / SCALING.ratio("A100", "cv"))
    with pytest.raises(NotFoundError, match="--rates"):
        table.node_rate(vit, "T4", 1)  # no anchor rate, no Lambda ratio for T4: nothing to go on


def test_a_rate_without_basis_follows_estimated():
    assert ComputeRate("w", "T4", 1, 1.0, False, "s").basis == "measured"
    assert ComputeRate("w", "T4", 1, 1.0, True, "s").basis == "estimated"
    with pytest.raises(ValueError, match="contradicts"):
        ComputeRate("w", "T4", 1, 1.0, False, "s", basis="derived")


def test_shipped_scaling_is_what_the_script_derives(shared_data, tmp_path):
    if not (shared_data / "lambda-gpu-benchmarks").is_dir():
        pytest.skip("lambda-gpu-benchmarks is not in the shared data")
    out = tmp_path / "gpu_scaling.csv"
    subprocess.run([sys.executable, str(REPO / "scripts" / "derive_gpu_ratios.py"), "--data-dir", str(shared_data),
                    "--out", str(out)], check=True, capture_output=True, timeout=60)
    assert out.read_text("utf-8") == data_text("gpu_scaling.csv")

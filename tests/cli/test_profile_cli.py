"""``geotrain profile`` runs a real training script in its own process, times it, and writes a rates
file that ``estimate --rates`` reads. The referee: the script's own clock, written by the script."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from geotrain.cli import app
from geotrain.train.profiling import accelerator_of_device, probed

runner = CliRunner()
SCRIPT = """
import sys, time, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
stamps = open(sys.argv[1], "a", buffering=1)
for step in range(int(sys.argv[2]) if len(sys.argv) > 2 else 10**9):
    x = torch.randn(32, 64)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    stamps.write(f"{time.time()}\\n")
"""
REPORTING = """
import time
from geotrain.train import api
for step in range(10**9):
    time.sleep(0.01)
    api.report_progress(samples=8)
"""


def _profile(tmp_path, *args: str):
    return runner.invoke(app, ["profile", "--output", str(tmp_path / "rates.csv"), *args])


def test_a_script_is_timed_by_its_optimizer_steps_and_the_rate_is_what_its_own_clock_says(tmp_path):
    script, stamps = tmp_path / "train.py", tmp_path / "stamps.txt"
    script.write_text(SCRIPT)
    result = _profile(tmp_path, "--workload", "my-net", "--samples-per-step", "32", "--steps", "30", "--warmup", "5",
                      "--min-seconds", "1", "--accelerator", "CPU", "--json", "--", sys.executable, str(script),
                      str(stamps))
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["counted_by"] == "optimizer steps" and out["steps_timed"] >= 30 and out["seconds"] >= 1
    times = [float(line) for line in stamps.read_text().split()]
    own = out["steps_timed"] * 32 / (times[5 + out["steps_timed"] - 1] - times[4])
    assert out["samples_per_s"] == pytest.approx(own, rel=0.02)
    rows = list(csv.DictReader((tmp_path / "rates.csv").open()))
    assert [(r["workload"], r["accelerator"], r["accelerator_count"], r["estimated"]) for r in rows] == [
        ("my-net", "CPU", "1", "false")]
    assert float(rows[0]["samples_per_s"]) == pytest.approx(out["samples_per_s"], rel=1e-5)
    assert "geotrain profile" in rows[0]["source"]

    # the file is what --rates reads: a two-node local estimate runs on the measured rate
    workloads = tmp_path / "workloads.csv"
    workloads.write_text("name,parameters,kind,samples_per_step\nmy-net,19146,cv,32\n")
    est = runner.invoke(app, ["estimate", "--workload", "my-net", "--provider", "local", "--workloads", str(workloads),
                              "--rates", str(tmp_path / "rates.csv"), "--strategy", "allreduce", "--json", "--nodes",
                              "aws/usw2-az1/g4dn.xlarge,aws/usw2-az2/g4dn.xlarge"])
    assert est.exit_code == 0, est.output
    node = json.loads(est.stdout)["nodes"][0]
    assert node["samples_per_s_per_node"] == pytest.approx(out["samples_per_s"], rel=1e-3)
    assert not node["rate_estimated"] and "geotrain profile" in node["rate_source"]


def test_reported_samples_need_no_samples_per_step_and_a_second_profile_replaces_its_row(tmp_path):
    script = tmp_path / "report.py"
    script.write_text(REPORTING)
    (tmp_path / "rates.csv").write_text("workload,accelerator,samples_per_s\nother,T4,10\nslow-loop,CPU,1\n")
    result = _profile(tmp_path, "--workload", "slow-loop", "--steps", "20", "--warmup", "2", "--min-seconds", "0",
                      "--accelerator", "CPU", "--json", "--", sys.executable, str(script))
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["counted_by"] == "reported samples"
    assert 200 < out["samples_per_s"] <= 8 / 0.01  # 8 samples per ≥ 10 ms
    rows = {r["workload"]: r for r in csv.DictReader((tmp_path / "rates.csv").open())}
    assert set(rows) == {"other", "slow-loop"} and rows["other"]["samples_per_s"] == "10"
    assert float(rows["slow-loop"]["samples_per_s"]) == pytest.approx(out["samples_per_s"], rel=1e-5)


@pytest.mark.parametrize("body, words", [
    ("raise SystemExit('no data found at /data/train')", ["exited with code 1", "no data found", "after 0 of"]),
    ("import torch\nm = torch.nn.Linear(2, 2)\no = torch.optim.SGD(m.parameters(), 0.1)\n"
     "for _ in range(3):\n    m(torch.ones(1, 2)).sum().backward(); o.step()\n", ["after 3 of 25 steps"]),
])
def test_a_script_that_fails_or_ends_early_is_a_run_error_with_its_output(tmp_path, body, words):
    script = tmp_path / "bad.py"
    script.write_text(body)
    result = _profile(tmp_path, "--workload", "w", "--samples-per-step", "4", "--accelerator", "CPU", "--",
                      sys.executable, str(script))
    assert result.exit_code == 5, result.output
    assert all(w in result.output for w in words), result.output
    assert "Traceback" not in result.output.split("last output")[0]
    assert not (tmp_path / "rates.csv").exists()


def test_bad_input_is_refused_before_anything_runs(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    cases = [
        (["--workload", "w"], "'w' is not a built-in workload, so give its training command after `--`"),
        (["--workload", "a,b", "--", sys.executable, str(script)], "--workload"),
        (["--workload", "w", "--accelerator", "TPUv9", "--", sys.executable, str(script)], "not one the catalog knows"),
        (["--workload", "w", "--kind", "audio", "--", sys.executable, str(script)], "--kind"),
        (["--workload", "w", "--accelerator", "CPU", "--steps", "3", "--warmup", "1", "--min-seconds", "0", "--",
          sys.executable, str(script), str(tmp_path / "s.txt")], "--samples-per-step"),
        (["--workload", "w", "--accelerator", "CPU", "--", str(tmp_path / "missing-binary")], "cannot run"),
    ]
    for args, words in cases:
        result = _profile(tmp_path, *args)
        assert result.exit_code == 2, (args, result.output)
        assert words in result.output, (args, result.output)
    (tmp_path / "rates.csv").write_text("not,a,rates,file\n1,2,3,4\n")
    result = _profile(tmp_path, "--workload", "w", "--accelerator", "CPU", "--samples-per-step", "32", "--steps", "2",
                      "--warmup", "0", "--min-seconds", "0", "--", sys.executable, str(script), str(tmp_path / "s.txt"))
    assert result.exit_code == 2 and "missing column" in result.output, result.output
    assert (tmp_path / "rates.csv").read_text() == "not,a,rates,file\n1,2,3,4\n"


@pytest.mark.parametrize("workload", ["tiny-cnn", pytest.param("resnet50", marks=pytest.mark.slow)])
def test_a_built_in_workload_is_profiled_without_a_command_as_a_launch_trains_it(tmp_path, workload):
    result = _profile(tmp_path, "--workload", workload, "--steps", "3", "--warmup", "1", "--min-seconds", "0",
                      "--accelerator", "CPU", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["counted_by"] == "reported samples" and out["steps_timed"] >= 3
    # the referee: the workload's own reports (each step's time and its micro-batch, which is the runtime's)
    from geotrain.train.workloads import workload_named

    events = [json.loads(line) for line in (Path(out["log"]).parent / "progress.jsonl").read_text().splitlines()]
    reports = [e for e in events if "samples" in e]
    assert {e["samples"] for e in reports} == {workload_named(workload).samples_per_step}
    timed = reports[1:1 + out["steps_timed"]]
    own = sum(e["samples"] for e in timed) / (timed[-1]["t"] - reports[0]["t"])
    assert out["samples_per_s"] == pytest.approx(own, rel=1e-6)
    rows = list(csv.DictReader((tmp_path / "rates.csv").open()))
    assert [(r["workload"], r["accelerator"], r["kind"]) for r in rows] == [(workload, "CPU", "")]
    assert f"the built-in {workload}" in rows[0]["source"], rows[0]["source"]


def test_device_names_and_probed_commands():
    assert accelerator_of_device("NVIDIA A100-SXM4-80GB") == "A100-80GB"
    assert accelerator_of_device("NVIDIA A100-SXM4-40GB") == "A100"
    assert accelerator_of_device("Tesla T4") == "T4"
    assert accelerator_of_device("NVIDIA A10G") == "A10G"
    assert accelerator_of_device("NVIDIA A10") == "A10"
    assert accelerator_of_device("Tesla V100-SXM2-32GB") == "V100-32GB"
    assert accelerator_of_device("NVIDIA H200") == "H200"
    assert accelerator_of_device("Quadro RTX 8000") == "RTX8000"
    assert accelerator_of_device("NVIDIA L4") == "L4" and accelerator_of_device("NVIDIA L40S") == "L40S"
    assert accelerator_of_device("NVIDIA GeForce RTX 4090") is None
    assert probed(["python3", "train.py", "--lr", "1"])[:3] == ["python3", "-m", "geotrain.train.probe"]
    assert probed(["/opt/venv/bin/python3.12", "-m", "pkg.train"])[1:4] == ["-m", "geotrain.train.probe", "-m"]
    assert probed(["bash", "run.sh"]) == ["bash", "run.sh"]
    assert probed(["python", "-c", "print(1)"]) == ["python", "-c", "print(1)"]

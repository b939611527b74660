from __future__ import annotations

import json

from typer.testing import CliRunner

from geotrain.cli import app

runner = CliRunner()
NODES = "aws/us-west-2/g4dn.xlarge/spot=2"
NEAR = ("--regions", "aws/us-west-2")  # the pinned mix's region: its baselines are searched there only (quick)


def plan_json(*extra: str) -> dict:
    result = runner.invoke(app, ["plan", "--workload", "convnext-large", "--nodes", NODES, "--json", *NEAR, *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_rates_file_replaces_the_bundled_rate_and_is_measured(tmp_path):
    bundled = plan_json()
    rates = tmp_path / "rates.csv"
    rates.write_text("workload,accelerator,samples_per_s\nconvnext-large,T4,161.6\n")
    mine = plan_json("--rates", str(rates))
    per_node = {json.dumps(i["offer"]["instance_type"]): i["samples_per_s"] / i["count"] for i in mine["items"]}
    assert all(rate > 0 for rate in per_node.values())
    # the user's T4 rate is twice Erben et al.'s 80.8: the mix trains faster, and no estimate is assumed for it
    assert mine["totals"]["samples_per_s"] > bundled["totals"]["samples_per_s"] * 1.5
    assert not any("T4x1" in a for a in mine["assumptions"] if "estimated" in a or "derived" in a)


def test_a_missing_rates_file_is_an_input_error():
    result = runner.invoke(app, ["plan", "--workload", "convnext-large", "--nodes", NODES, "--rates", "/nonexistent.csv"])
    assert result.exit_code == 2 and "no such file" in result.output


def test_the_plan_file_carries_the_rates_and_the_capacity_confidence_so_a_re_plan_uses_them(tmp_path):
    from geotrain.planning.planfile import load_plan
    from geotrain.planning.planner import build_context
    from geotrain.pricing.snapshot import bundled_snapshot

    rates = tmp_path / "rates.csv"
    rates.write_text("workload,accelerator,samples_per_s\nconvnext-large,T4,161.6\n")
    out = tmp_path / "plan.json"
    result = runner.invoke(app, ["plan", "--workload", "convnext-large", "--nodes", NODES, *NEAR, "--rates", str(rates),
                                 "--capacity-confidence", "0.5", "-o", str(out)])
    assert result.exit_code == 0, result.output
    job = load_plan(out).job  # what the launcher re-plans with
    assert job.rates_file == str(rates.resolve()) and job.constraints.capacity_confidence == 0.5
    ctx = build_context(job, bundled_snapshot())
    t4 = [c for c in ctx.problem.candidates if ctx.candidates.offers[c.key].shape.accelerator == "T4"
          and ctx.candidates.offers[c.key].shape.accelerator_count == 1]
    assert t4 and all(c.rate == 161.6 for c in t4 if ctx.candidates.offers[c.key].location.cloud != "onprem")
    assert ctx.problem.limits.pool_caps  # the capacity model's caps are back


def test_a_capacity_confidence_out_of_range_is_an_input_error():
    result = runner.invoke(app, ["plan", "--workload", "convnext-large", "--nodes", NODES,
                                 "--capacity-confidence", "1.5"])
    assert result.exit_code == 2 and "capacity" in result.output, result.output


def test_a_dstack_configuration_is_named_as_such(tmp_path, geotrain_home) -> None:
    # dstack's own "Tasks" example (docs: concepts/tasks), as its users write it
    spec = tmp_path / ".dstack.yml"
    spec.write_text("type: task\nname: train\npython: \"3.11\"\ncommands:\n  - pip install -r requirements.txt\n"
                    "  - python train.py\nresources:\n  gpu: 24GB\n")
    result = runner.invoke(app, ["plan", str(spec)])
    assert result.exit_code == 2, result.output
    assert "a dstack configuration (type: task)" in result.output and "workload" not in result.output
    assert "Traceback" not in result.output

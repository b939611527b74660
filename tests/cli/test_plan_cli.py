from __future__ import annotations

import json

from typer.testing import CliRunner

from geotrain.cli import app

runner = CliRunner()
NODES = "aws/us-west-2/g4dn.xlarge/spot=2"


def plan_json(*extra: str) -> dict:
    result = runner.invoke(app, ["plan", "--workload", "convnext-large", "--nodes", NODES, "--json", *extra])
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

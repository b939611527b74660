"""`geotrain plan` answers the question asked: finish time and total dollars of a deadline plan, what
is left of a budget and what limited it, a pinned mix that misses its goal, unknown names, any cloud."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from typer.testing import CliRunner

from geotrain.cli import app

runner = CliRunner()
NODES = "aws/us-west-2/g4dn.xlarge/spot=2"
SMALL = ["--clouds", "aws", "--accelerators", "T4", "--regions", "us-west-2"]  # a few candidates: quick solves


def run(*args: str):
    return runner.invoke(app, list(args))


def document(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # the whole of stdout is one document


def test_a_pinned_mix_below_the_target_exits_3_naming_what_it_trains_and_what_was_asked():
    result = run("plan", "--workload", "convnext-large", "--nodes", NODES, "--target-sps", "500", *SMALL)
    assert result.exit_code == 3, result.output
    assert "below the target 500.0 samples/s" in result.stderr and "--allow-below-target" in result.stderr
    assert "Traceback" not in result.output


def test_allowed_below_target_it_warns_on_stderr_writes_the_plan_and_compares_with_no_baseline(tmp_path):
    out = tmp_path / "plan.json"
    result = run("plan", "--workload", "convnext-large", "--nodes", NODES, "--target-sps", "500", *SMALL,
                 "--allow-below-target", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("warning: the given mix misses the job's goal: it trains")
    assert "goal missed" in result.stdout and "no comparable baseline" in result.stdout
    assert "saves -" not in result.stdout and "%" not in result.stdout.split("baseline", 1)[1].split("\n")[0]
    data = json.loads(out.read_text())
    assert data["schema"] == "geotrain.plan.v1" and data["misses"] and data["savings_vs_baseline"] is None
    assert data["baselines"] and all(b["savings"] is None for b in data["baselines"])
    assert all(b["comparison"].startswith("no comparable baseline") for b in data["baselines"])


def test_plan_json_is_one_document_with_its_schema_and_old_files_without_it_still_load(tmp_path):
    from geotrain.errors import InputError
    from geotrain.planning.planfile import load_plan, plan_from_dict

    out = tmp_path / "plan.json"
    result = run("plan", "--workload", "convnext-large", "--nodes", NODES, *SMALL, "--json", "-o", str(out))
    data = document(result)
    assert data["schema"] == "geotrain.plan.v1" and data["plan_id"] and data["items"]
    assert json.loads(out.read_text())["schema"] == "geotrain.plan.v1"
    assert load_plan(out).plan_id == data["plan_id"]
    old = {k: v for k, v in data.items() if k not in ("schema", "completion", "budget", "misses")}
    assert plan_from_dict(old, "old.json").plan_id == data["plan_id"]
    with pytest.raises(InputError, match="schema"):
        plan_from_dict({**data, "schema": "geotrain.offers.v1"}, "wrong.json")


def test_a_deadline_plan_says_when_it_finishes_and_what_it_costs_in_all(tmp_path):
    out = tmp_path / "plan.json"
    result = run("plan", "--workload", "convnext-large", "--samples", "1e7", "--deadline", "48", "--max-nodes", "4",
                 *SMALL, "-o", str(out))
    assert result.exit_code == 0, result.output
    assert result.stderr == ""  # no progress display off a terminal
    line = next(x for x in result.stdout.splitlines() if x.startswith("finish"))
    assert "10,000,000 samples in" in line and "UTC" in line and "(deadline 48 h)" in line
    data = json.loads(out.read_text())
    done, totals = data["completion"], data["totals"]
    assert done["samples"] == 10_000_000
    assert done["hours"] == pytest.approx(1e7 / (3600 * totals["goodput_samples_per_s"]))
    assert done["raw_hours"] == pytest.approx(1e7 / (3600 * totals["samples_per_s"]))
    assert done["raw_hours"] <= done["hours"] <= 48
    assert done["usd"] == pytest.approx(done["hours"] * totals["usd_per_hour"])
    assert done["raw_usd"] == pytest.approx(done["raw_hours"] * totals["usd_per_hour"])
    created = datetime.fromisoformat(data["created_at"])
    assert datetime.fromisoformat(done["finishes_at"]) - created == pytest.approx(timedelta(hours=done["hours"]),
                                                                                 abs=timedelta(seconds=1))
    assert data["budget"] is None


def test_a_budget_plan_says_what_is_left_and_what_limited_it(tmp_path):
    out = tmp_path / "plan.json"
    result = run("plan", "--workload", "convnext-large", "--budget", "2", "--max-nodes", "3", *SMALL, "-o", str(out))
    assert result.exit_code == 0, result.output
    line = next(x for x in result.stdout.splitlines() if x.startswith("budget"))
    assert "unused; limited by" in line
    data = json.loads(out.read_text())
    use = data["budget"]
    assert use["unused_usd_per_hour"] == pytest.approx(2 - data["totals"]["usd_per_hour"])
    assert use["unused_share"] == pytest.approx(use["unused_usd_per_hour"] / 2)
    limits = {x["limit"]: x["candidates"] for x in use["limits"]}
    assert sum(limits.values()) == data["solver"]["candidates"]
    nodes = data["totals"]["nodes"]
    # the node limit is named exactly when the plan holds that many nodes
    assert ("max nodes" in limits) == (nodes == 3)
    assert data["completion"] is None


def test_an_unknown_cloud_exits_2_and_lists_the_known_ones_imported_included(tmp_path):
    result = run("plan", "--workload", "convnext-large", "--clouds", "foo")
    assert result.exit_code == 2, result.output
    assert "unknown cloud 'foo'; known: aws, azure, gcp, onprem" in result.stderr
    spec = tmp_path / "job.yaml"
    spec.write_text("name: j\nworkload: convnext-large\nconstraints:\n  clouds: [aws, foo]\n")
    assert run("plan", str(spec)).exit_code == 2
    result = run("plan", "--workload", "convnext-large", "--accelerators", "H100X")
    assert result.exit_code == 2 and "unknown accelerator 'H100X'" in result.stderr
    _import_lambda(tmp_path)
    result = run("plan", "--workload", "convnext-large", "--clouds", "foo")
    assert "known: aws, azure, gcp, lambda, onprem" in result.stderr


LAMBDA_NODES = "lambda/us-west-1/gpu_1x_a10/on_demand=1,aws/us-west-2/g4dn.xlarge/spot=1"


def _import_lambda(tmp_path) -> None:
    csv = tmp_path / "lambda.csv"
    csv.write_text("cloud,region,zone,continent,instance_type,vcpus,memory_gib,accelerator,accelerator_count,market,"
                   "price_usd_per_hour,observed_at\n"
                   "lambda,us-west-1,,north_america,gpu_1x_a10,30,200,A10,1,on_demand,0.75,2026-01-01T00:00:00Z\n")
    result = run("catalog", "import", str(csv))
    assert result.exit_code == 0, result.output


def test_an_imported_cloud_without_egress_rows_gets_an_assumed_rate_and_egress_file_gives_real_ones(tmp_path):
    _import_lambda(tmp_path)
    estimate = run("estimate", "--workload", "convnext-large", "--nodes", LAMBDA_NODES)
    assert estimate.exit_code == 0, estimate.output
    assert "egress of cloud 'lambda' assumed" in estimate.stdout
    figures = document(run("estimate", "--workload", "convnext-large", "--nodes", LAMBDA_NODES, "--json"))
    assert figures["egress_usd_per_hour_by_cloud"]["lambda"] > 0
    assert any("'lambda' assumed" in a for a in figures["assumptions"])

    plan = document(run("plan", "--workload", "convnext-large", "--nodes", LAMBDA_NODES, "--max-nodes", "2",
                        "--clouds", "aws,lambda", "--accelerators", "A10,T4", "--json"))
    assert any("'lambda' assumed" in a for a in plan["assumptions"])

    rows = tmp_path / "egress.csv"
    rows.write_text("cloud,link_class,src_continent,dst_continent,usd_per_gb,source\n"
                    "lambda,internet,*,*,0,lambda-pricing\n")
    mine = document(run("estimate", "--workload", "convnext-large", "--nodes", LAMBDA_NODES, "--egress", str(rows),
                        "--json"))
    assert mine["egress_usd_per_hour_by_cloud"].get("lambda", 0) == 0 and mine["assumptions"] == []
    out = tmp_path / "plan.json"
    result = run("plan", "--workload", "convnext-large", "--nodes", LAMBDA_NODES, "--max-nodes", "2",
                 "--clouds", "aws,lambda", "--accelerators", "A10,T4", "--egress", str(rows), "-o", str(out))
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["job"]["egress"] == str(rows.resolve())  # a re-plan uses them too
    assert not any("assumed" in a for a in data["assumptions"] if "egress" in a)
    assert data["totals"]["egress_usd_per_hour"] < plan["totals"]["egress_usd_per_hour"]
    assert run("plan", "--workload", "convnext-large", "--nodes", LAMBDA_NODES, "--egress", "/nonexistent.csv",
               "--max-nodes", "2").exit_code == 2

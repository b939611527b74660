"""Every ``--json`` of every command prints one JSON document on stdout and nothing else: one
``json.loads`` of the whole of stdout gives an object whose ``schema`` is ``geotrain.<kind>.v1`` and
which has the keys its kind promises (``geotrain.cli.render.DOCUMENTS``). Progress and notes go to
stderr. ``launch --json`` runs as the console script, so what its workers or agents might write to the
process's stdout is caught too."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from geotrain.app.catalog import DERIVED_COLUMNS
from geotrain.cli import app
from geotrain.cli.render import DOCUMENTS, percent, print_document, schema_name, usd
from geotrain.pricing.schema import COLUMN_NAMES
from tests.cli.test_refresh_cli import aws_env, aws_fake, no_clouds  # noqa: F401 - fixtures
from tests.unit.test_cost_report import RUN, ledger  # noqa: F401 - a hand-built ledger of one run

runner = CliRunner()
LOCAL_NODE = "aws/usw2-az1/g4dn.xlarge"
REPORTING = """
import time
from geotrain.train import api
for step in range(10**9):
    time.sleep(0.01)
    api.report_progress(samples=8)
"""


CORPUS = Path(__file__).resolve().parents[1] / "data" / "skypilot_tasks"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def one_document(kind: str, stdout: str) -> dict:
    """The whole of stdout is one JSON object of the kind, with the keys the kind promises."""
    document = json.loads(stdout)
    assert isinstance(document, dict), stdout[:200]
    assert document["schema"] == schema_name(kind) == f"geotrain.{kind}.v1"
    missing = [key for key in DOCUMENTS[kind].keys if key not in document]
    assert not missing, f"{kind} lacks {missing}"
    return document


def local_plan(tmp_path: Path) -> Path:
    out = tmp_path / "mix.json"
    result = runner.invoke(app, ["plan", "--workload", "tiny-cnn", "--strategy", "allreduce", "--provider", "local",
                                 "--target-sps", "1", "--nodes", LOCAL_NODE, "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


@dataclass(frozen=True)
class Case:
    args: Callable[[pytest.FixtureRequest], list[str]]  # the command line, once what it needs is set up
    check: Callable[[dict, object], object]  # asserts (or is true of) the document and the command's result
    exit_code: int = 0
    console_script: bool = False  # run as a process of its own: its whole stdout is checked


def _offers(doc: dict, result) -> None:  # noqa: ANN001
    offers = doc["offers"]
    assert offers and doc["total"] >= len(offers) and doc["snapshot_id"].startswith("snap-")
    assert all(list(o) == [*COLUMN_NAMES, *DERIVED_COLUMNS, "price_flag"] for o in offers)
    assert all(o["market"] == "spot" and o["discount"] is not None and 0 < o["discount"] < 1 for o in offers)
    if doc["stale"]:  # the bundled prices are old: the note goes to stderr, the document says it too
        assert doc["stale"] in result.stderr


def _snapshots(doc: dict, result) -> None:  # noqa: ANN001
    assert [s["snapshot_id"] for s in doc["snapshots"] if s["current"]] == [doc["current"]]


def _refresh(doc: dict, result) -> None:  # noqa: ANN001
    assert doc["offers"] > 0 and [c["cloud"] for c in doc["clouds"]] == ["aws"]
    assert "us-east-1" in result.stderr  # progress, on stderr


def _check(doc: dict, result) -> None:  # noqa: ANN001
    (aws,) = doc["clouds"]
    assert aws["cloud"] == "aws" and not aws["ok"] and "AWS_PROFILE" in aws["message"]


def _status(doc: dict, result) -> None:  # noqa: ANN001
    (run,) = doc["runs"]
    assert run["run_id"] == RUN and run["status"] == "completed" and run["samples"] == 3_600_000


def _cost_report(doc: dict, result) -> None:  # noqa: ANN001
    (run,) = doc["runs"]
    assert run["run_id"] == RUN and doc["total_usd"] == run["total_usd"] > 0


def _launch(doc: dict, result) -> None:  # noqa: ANN001
    assert doc["status"] == "completed" and doc["steps"] == 10 and doc["usd"] > 0
    # the progress display goes to stderr (it prints at most once a second, so not every step)
    assert f"run {doc['run_id']} started" in result.stderr and "gen 1 step " in result.stderr


def _profile(doc: dict, result) -> None:  # noqa: ANN001
    assert doc["workload"] == "loop" and doc["samples_per_s"] > 0 and Path(doc["output"]).is_file()
    assert f"wrote {doc['output']}" in result.stderr


def _with(fixture: str, *args: str) -> Callable[[pytest.FixtureRequest], list[str]]:
    def build(request: pytest.FixtureRequest) -> list[str]:
        request.getfixturevalue(fixture)
        return list(args)
    return build


def _estimate_args(request: pytest.FixtureRequest) -> list[str]:
    return ["estimate", "--workload", "tiny-cnn", "--provider", "local", "--strategy", "allreduce",
            "--nodes", f"{LOCAL_NODE}=2", "--json"]


def _batch_error_args(request: pytest.FixtureRequest) -> list[str]:
    batch = request.getfixturevalue("tmp_path") / "batch.jsonl"
    batch.write_text('{"workload": "nope", "nodes": "gcp/us-central1-a/n1-standard-8+T4=1"}\n')
    return ["estimate", "--batch", str(batch)]


def _launch_args(request: pytest.FixtureRequest) -> list[str]:
    pytest.importorskip("torch")
    return ["launch", str(local_plan(request.getfixturevalue("tmp_path"))), "--steps", "10", "--json"]


def _dry_run_args(request: pytest.FixtureRequest) -> list[str]:
    return ["launch", str(local_plan(request.getfixturevalue("tmp_path"))), "--dry-run", "--json"]


def _profile_args(request: pytest.FixtureRequest) -> list[str]:
    tmp_path = request.getfixturevalue("tmp_path")
    script = tmp_path / "loop.py"
    script.write_text(REPORTING)
    return ["profile", "--workload", "loop", "--steps", "5", "--warmup", "0", "--min-seconds", "0",
            "--accelerator", "CPU", "--output", str(tmp_path / "rates.csv"), "--json", "--", sys.executable,
            str(script)]


def _rehearse_args(request: pytest.FixtureRequest) -> list[str]:
    from geotrain.wan import privileges

    pytest.importorskip("torch")
    reason = privileges()
    if reason is not None:
        pytest.skip(f"no emulated WAN here: {reason}")
    plan = request.getfixturevalue("tmp_path") / "two-regions.json"
    made = runner.invoke(app, ["plan", "--workload", "convnext-large", "--strategy", "allreduce", "--nodes",
                               "aws/use1-az1/g4dn.xlarge=1,aws/euw1-az1/g4dn.xlarge=1", "-o", str(plan)])
    assert made.exit_code == 0, made.stdout
    return ["rehearse", str(plan), "--strategies", "allreduce", "--minutes", "0.1", "--steps", "8", "--json"]


def _rehearse(doc: dict, result) -> None:  # noqa: ANN001
    (one,) = doc["rehearsals"]
    assert doc["plan_strategy"] == one["strategy"] == "allreduce" and one["rounds"] > 0
    assert one["round_s"] > 0 and one["predicted_round_s"] > 0
    assert one["error"] == pytest.approx(one["round_s"] / one["predicted_round_s"] - 1)
    assert [n["region"] for n in one["nodes"]] == ["us-east-1", "eu-west-1"]
    from geotrain.wan.cpu import cores_per_node

    assert one["cores_per_node"] == pytest.approx(cores_per_node(2))  # each node held to its share of the cores
    assert any(link["link_class"] == "cross_continent" and link["bytes_per_s"] > 0 for link in one["links"])
    assert "rehearsing" in result.stderr  # progress beside the document goes to stderr


CASES: dict[str, Case] = {
    "offers": Case(lambda r: ["catalog", "list", "--accelerator", "T4", "--market", "spot", "--limit", "5", "--json"],
                   _offers),
    "snapshot": Case(lambda r: ["catalog", "show", "--json"],
                     lambda doc, _: doc["bundled"] and {"aws", "gcp", "azure"} <= set(doc["clouds"])),
    "snapshots": Case(lambda r: ["catalog", "snapshots", "--json"], _snapshots),
    "refresh": Case(_with("aws_env", "catalog", "refresh", "--cloud", "aws", "--regions", "us-east-1", "--json"),
                    _refresh),
    "price-history": Case(lambda r: ["catalog", "history", "--instance-type", "g4dn.xlarge", "--zone", "use1-az1",
                                     "--json"],
                          lambda doc, _: doc["prices"] and all(p["zone"] == "use1-az1" for p in doc["prices"])),
    "check": Case(_with("no_clouds", "check", "--cloud", "aws", "--json"), _check, exit_code=4),
    "estimate": Case(_estimate_args, lambda doc, _: doc["node_count"] == 2 and doc["samples_per_s"] > 0),
    "estimate-error": Case(_batch_error_args, lambda doc, _: doc["line"] == 1 and "unknown workload" in doc["error"],
                           exit_code=2),
    "plan": Case(lambda r: ["plan", "--workload", "tiny-cnn", "--strategy", "allreduce", "--provider", "local",
                            "--target-sps", "1", "--nodes", f"{LOCAL_NODE}=2", "--json"],
                 lambda doc, _: sum(i["count"] for i in doc["items"]) == 2),
    "pipeline": Case(lambda r: ["plan", str(CORPUS / "docs_managed_jobs_pipeline.yaml"), "--json"],
                     lambda doc, _: [p["job"]["name"] for p in doc["plans"]] == ["train", "eval"]),
    "launch": Case(_launch_args, _launch, console_script=True),
    "launch-dry-run": Case(_dry_run_args, lambda doc, _: [n["provider"] for n in doc["nodes"]] == ["local"]),
    "status": Case(_with("ledger", "status", "--json"), _status),
    "cost-report": Case(_with("ledger", "cost-report", RUN, "--json"), _cost_report),
    "profile": Case(_profile_args, _profile),
    "simulate": Case(lambda r: ["simulate", "--trace", str(EXAMPLES / "traces" / "spot_two_zones.csv"),
                                "--job", str(EXAMPLES / "sim" / "tiny-job.yaml"), "--json"],
                     lambda doc, _: [p["policy"] for p in doc["policies"]][-1] == "oracle"
                     and all(p["deadline_met"] for p in doc["policies"])),
    "rehearse": Case(_rehearse_args, _rehearse, console_script=True),
}


SLOW_KINDS = {"rehearse"}  # a real rehearsal over emulated links (about 40 s): in make test-all


@pytest.mark.parametrize("kind", [pytest.param(k, marks=pytest.mark.slow) if k in SLOW_KINDS else k
                                  for k in sorted(DOCUMENTS)])
def test_every_json_output_is_one_document_of_its_kind(kind: str, request: pytest.FixtureRequest) -> None:
    case = CASES[kind]  # a kind without a case here fails: every document is tested
    args = case.args(request)
    if case.console_script:
        result = subprocess.run([sys.executable, "-m", "geotrain", *args], capture_output=True, text=True,
                                env={**os.environ, "COLUMNS": "200"}, timeout=300)
        code = result.returncode
    else:
        result = runner.invoke(app, args)
        code = result.exit_code
    assert code == case.exit_code, (result.stdout, result.stderr)
    verdict = case.check(one_document(kind, result.stdout), result)
    assert verdict is None or verdict, f"{kind}: the document does not say what it should"


def test_cost_report_has_one_shape_for_one_run_and_for_several(ledger) -> None:  # noqa: F811
    row = ledger.run(RUN)
    second = "run-second"
    node = ledger.nodes(RUN)[0]
    ledger.create_run(run_id=second, plan_id=row.plan_id, plan_json=row.plan_json, workload="tiny-cnn",
                      provider="local", checkpoint_url="/tmp/ckpt", launcher_pid=1, target_steps=10, options={})
    ledger.add_node(run_id=second, node_id="ln-second", request_id=f"{second}/{node.offer_id}/0",
                    offer_id=node.offer_id, offer_json=node.offer_json, cloud=node.cloud, region=node.region,
                    zone=node.zone, market=node.market, price_usd_per_hour=2.0, launched_at=1_700_000_000.0)
    ledger.end_node("ln-second", "completed", at=1_700_000_000.0 + 1800)
    ledger.finish_run(second, "completed", "trained 10 steps")
    both = one_document("cost-report", runner.invoke(app, ["cost-report", "--all", "--json"]).stdout)
    assert [r["run_id"] for r in both["runs"]] == [RUN, second]
    assert both["total_usd"] == pytest.approx(sum(r["total_usd"] for r in both["runs"]))
    assert both["runs"][1]["compute_usd"] == pytest.approx(1.0)  # half an hour at $2/h
    one = one_document("cost-report", runner.invoke(app, ["cost-report", second, "--json"]).stdout)
    assert list(one) == list(both) and one["runs"] == both["runs"][1:]
    latest = one_document("cost-report", runner.invoke(app, ["cost-report", "--json"]).stdout)  # the latest run
    assert latest["runs"] == one["runs"]
    runs = one_document("status", runner.invoke(app, ["status", "--json"]).stdout)["runs"]
    assert [r["run_id"] for r in runs] == [RUN, second]


def test_no_runs_is_an_empty_list_not_another_shape() -> None:
    result = runner.invoke(app, ["status", "--json"])
    assert result.exit_code == 0 and one_document("status", result.stdout)["runs"] == []


def test_offers_carry_the_figures_the_table_shows() -> None:
    args = ["catalog", "list", "--instance-type", "g4dn.xlarge", "--region", "us-east-1", "--limit", "8"]
    table = runner.invoke(app, args, env={"COLUMNS": "200"}).stdout
    offers = one_document("offers", runner.invoke(app, [*args, "--json"]).stdout)["offers"]
    assert {o["market"] for o in offers} == {"spot", "on_demand"}
    rows = [line for line in table.splitlines() if line.strip().startswith("aws/us-east-1/")]
    assert len(rows) == len(offers)
    for offer, row in zip(offers, rows, strict=True):
        cells = row.split()
        assert cells[0] == f"aws/us-east-1/{offer['zone'] or '*'}" and cells[3] == offer["market"]
        discount = "-" if offer["discount"] is None else percent(offer["discount"])
        assert cells[4:8] == [usd(offer["price_usd_per_hour"]), usd(offer["on_demand_usd_per_hour"]), discount,
                              usd(offer["usd_per_accelerator_hour"])]
        if offer["market"] == "spot":  # unrounded: the discount is the prices' own ratio
            assert offer["discount"] == 1 - offer["price_usd_per_hour"] / offer["on_demand_usd_per_hour"]
        else:
            assert offer["discount"] is None and offer["on_demand_usd_per_hour"] == offer["price_usd_per_hour"]
        assert math.isclose(offer["usd_per_accelerator_hour"], offer["price_usd_per_hour"] / offer["accelerator_count"])


def test_a_document_is_refused_for_an_unknown_kind_or_a_missing_key(capsys) -> None:
    with pytest.raises(ValueError, match="not a document kind"):
        print_document("offer", {"offers": []})
    with pytest.raises(ValueError, match="lacks runs"):
        print_document("status", {})
    with pytest.raises(ValueError, match="own schema"):
        print_document("status", {"schema": "x", "runs": []})
    assert capsys.readouterr().out == ""
    print_document("status", {"runs": []})
    assert json.loads(capsys.readouterr().out) == {"schema": "geotrain.status.v1", "runs": []}

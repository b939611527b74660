"""Plan → launch → ledger → cost-report through the commands a user types: the run trains what was
planned (workload, strategy and every sync knob), its bytes on the wire are the plan's precision, and
launch, status and cost-report print the same dollars; the spend limit stops a run in time."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from geotrain.domain import WAN_STREAMS
from geotrain.ledger import EventKind, Ledger
from geotrain.perf.workloads import WorkloadRegistry
from geotrain.train.sync.streams import HEADER
from tests.integration.test_launch import assert_no_orphans

NODES = "aws/usw2-az1/g4dn.xlarge,aws/use1-az1/g4dn.xlarge"  # two regions, one node each


def geotrain(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "geotrain", *args], capture_output=True, text=True,
                            env={**os.environ, "COLUMNS": "200"}, timeout=600)
    if check and result.returncode != 0:
        raise AssertionError(f"geotrain {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def last_dollars(text: str) -> str:
    return re.findall(r"\$([0-9][0-9,]*\.[0-9]{4})", text)[-1]


# not slow: the one end-to-end launch `make test` runs (plan, launch, status, cost-report as a user types them)
def test_the_run_trains_what_the_plan_says_and_three_commands_print_one_cost(tmp_path):
    plan = tmp_path / "plan.json"
    geotrain("plan", "--workload", "tiny-cnn", "--strategy", "local-sgd", "--local-steps", "4", "--precision", "fp16",
             "--micro-batches", "2", "--provider", "local", "--target-sps", "10", "--nodes", NODES, "-o", str(plan))
    steps = 24
    launched = geotrain("launch", str(plan), "--steps", str(steps), "--checkpoint-every", "8")
    assert "trains tiny-cnn with local-sgd (averaging every 4 steps, fp16 on the wire, 2 micro-batch" in launched.stdout
    ledger = Ledger()
    run_id = ledger.latest_run_id()
    run = ledger.run(run_id)
    assert run.workload == "tiny-cnn" and run.substitutions == ()
    # the plan's settings reached the ledger and every worker's generation config
    started = ledger.events(run_id, kinds=(EventKind.RUN_STARTED,))[0].detail
    expected = {"strategy": "local-sgd", "local_steps": 4, "precision": "fp16", "micro_batches": 2,
                "target_batch_size": 32768, "group_size": 16, "accumulation_steps": 16, "staleness": 1,
                "averaging_pushes": 16}
    assert started["sync"] == expected
    configs = sorted((Path(os.environ["GEOTRAIN_HOME"]) / "runs" / run_id).glob("generation-*.json"))
    config = json.loads(configs[0].read_text())
    assert config["sync"] == expected and config["workload"] == "tiny-cnn" and config["micro_batches"] == 4
    # the wire: one node per region, so only the model averaging every 4 steps crosses links, in fp16:
    # each of the two ranks sends 2(2-1)/2 = 1 copy of the parameters per averaging round, as two
    # pieces (the butterfly's two exchanges), each cut over the WAN transport's streams with a header each
    parameters = WorkloadRegistry.bundled().get("tiny-cnn").parameters
    sent = sum(b.bytes for b in ledger.link_bytes(run_id))
    piece = -(-parameters // 2) * 2
    assert sent == 2 * (steps // 4) * 2 * (piece + WAN_STREAMS * HEADER.size)
    # the same dollars from launch, status and cost-report
    (report,) = json.loads(geotrain("cost-report", run_id, "--json").stdout)["runs"]
    status = geotrain("status", run_id).stdout
    total = f"{report['total_usd']:,.4f}"
    assert re.search(r"restart\(s\), \$([0-9.,]+) in", launched.stdout).group(1) == total
    assert last_dollars(status) == total
    assert report["plan"]["comparable"] and report["plan"]["throughput_ratio"] > 0
    assert report["plan"]["planned_sync"].startswith("local-sgd (averaging every 4 steps, fp16 on the wire, 2 micro")
    assert report["plan"]["trained_workload"] == report["plan"]["planned_workload"] == "tiny-cnn"
    text = geotrain("cost-report", run_id).stdout
    assert f"${total}" in text.splitlines()[0] and "comparable: actual/plan" in text
    assert_no_orphans(run_id)


@pytest.mark.slow
def test_a_substitution_is_recorded_and_shown_everywhere(tmp_path):
    plan, job = tmp_path / "plan.json", tmp_path / "job.yaml"
    job.write_text("name: mine\nworkload: my-gpt\nstrategy: hivemind\nrates: rates.csv\n"
                   "model: {parameters: 350M, kind: nlp, samples_per_step: 8}\n")  # a model of the user's own
    (tmp_path / "rates.csv").write_text("workload,accelerator,samples_per_s\nmy-gpt,T4,40\n")
    geotrain("plan", str(job), "--target-sps", "20", "--nodes", NODES, "-o", str(plan))
    refused = geotrain("launch", str(plan), "--steps", "4", check=False)
    assert refused.returncode == 2 and "--train-workload" in refused.stderr and "Traceback" not in refused.stderr
    assert Ledger().latest_run_id() is None  # refused before anything started
    launched = geotrain("launch", str(plan), "--steps", "8", "--train-workload", "tiny-lm", "--sync", "allreduce")
    assert "substituted: trains tiny-lm instead of the planned my-gpt" in launched.stdout
    run_id = Ledger().latest_run_id()
    assert [e.detail["what"] for e in Ledger().events(run_id, kinds=(EventKind.SUBSTITUTED,))] == [
        "trains tiny-lm instead of the planned my-gpt", "syncs with allreduce instead of the planned hivemind"]
    assert "syncs with allreduce instead of the planned hivemind" in geotrain("status", run_id).stdout
    text = geotrain("cost-report", run_id).stdout
    assert "substituted  trains tiny-lm instead of the planned my-gpt" in text and "not comparable" in text
    assert_no_orphans(run_id)


@pytest.mark.slow
def test_the_spend_limit_stops_the_run_before_it_overshoots(tmp_path):
    plan = tmp_path / "plan.json"
    geotrain("plan", "--workload", "tiny-cnn", "--strategy", "allreduce", "--provider", "local", "--target-sps", "10",
             "--nodes", "aws/usw2-az1/g4dn.xlarge,aws/usw2-az2/g4dn.xlarge,aws/use1-az1/g4dn.xlarge",
             "-o", str(plan))
    limit = 0.004
    launched = geotrain("launch", str(plan), "--steps", "100000", "--max-spend-usd", str(limit), check=False)
    assert launched.returncode == 5, launched.stdout + launched.stderr
    assert "spend limit of $0.0040 is reached" in launched.stderr
    ledger = Ledger()
    run_id = ledger.latest_run_id()
    assert ledger.run(run_id).status == "stopped"
    total = json.loads(geotrain("cost-report", run_id, "--json").stdout)["runs"][0]["total_usd"]
    # one progress interval's spend: the run's $/s while it trained × the time between two progress reports
    rows = ledger.progress_rows(run_id)
    assert len(rows) >= 3, "the run trained a while before the limit"
    interval_s = (rows[-1].at - rows[0].at) / (len(rows) - 1)
    rate = total / (max(n.ended_at for n in ledger.nodes(run_id)) - min(n.launched_at for n in ledger.nodes(run_id)))
    assert total <= limit + rate * interval_s, (total, limit, rate * interval_s)
    assert total >= limit * 0.5  # it did not stop long before the limit either
    assert_no_orphans(run_id)

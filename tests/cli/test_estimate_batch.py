"""``geotrain estimate --batch``: one answer per line, each the document a single ``estimate --json`` gives."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from geotrain.app.estimate import EstimateInputs, Estimator
from geotrain.cli import app
from geotrain.domain import SyncSettings

runner = CliRunner()
SITES = Path(__file__).resolve().parents[2] / "examples" / "sites.yaml"
GEO = "gcp/us-central1-a/n1-standard-8+T4/spot=4,aws/us-west-2/g4dn.2xlarge/spot=4,gcp/europe-west3/n1-standard-8+T4=2"
HYBRID = "onprem/munich-lab/rtx8000-ws=1,onprem/munich-lab/dgx-2=1,gcp/europe-west4/n1-standard-8+T4=4"
# (batch line, the same setup as flags)
SETUPS = [
    ({"workload": "convnext-large", "nodes": GEO},
     ["--workload", "convnext-large", "--nodes", GEO]),
    ({"workload": "roberta-xlm", "nodes": HYBRID.split(","), "strategy": "hivemind", "sync": {"target_batch_size": 8192}},
     ["--workload", "roberta-xlm", "--nodes", HYBRID, "--strategy", "hivemind", "--tbs", "8192"]),
    ({"workload": "roberta-xlm", "nodes": "gcp/us-central1-a/n1-standard-8+T4=2,gcp/australia-southeast1/n1-standard-8+T4=2",
      "strategy": "allreduce", "sync": {"precision": "fp32", "micro_batches": 2}},
     ["--workload", "roberta-xlm", "--nodes", "gcp/us-central1-a/n1-standard-8+T4=2,gcp/australia-southeast1/"
      "n1-standard-8+T4=2", "--strategy", "allreduce", "--precision", "fp32", "--micro-batches", "2"]),
    ({"workload": "resnet50", "nodes": GEO, "strategy": "local-sgd", "sync": {"local_steps": 8}},
     ["--workload", "resnet50", "--nodes", GEO, "--strategy", "local-sgd", "--local-steps", "8"]),
    ({"workload": "convnext-large", "nodes": HYBRID, "sync": {"strategy": "asgd-ga", "accumulation_steps": 4}},
     ["--workload", "convnext-large", "--nodes", HYBRID, "--strategy", "asgd-ga", "--accumulation-steps", "4"]),
]


def answers(stdout: str) -> list[dict]:
    """stdout is JSON Lines: every line one JSON object with its schema."""
    lines = stdout.splitlines()
    out = [json.loads(line) for line in lines]
    assert all(isinstance(a, dict) and a["schema"].startswith("geotrain.estimate") for a in out), stdout[:300]
    return out


def write(path: Path, lines: list) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def test_batch_answers_equal_single_answers_for_every_strategy_and_onprem(tmp_path):
    batch = write(tmp_path / "setups.jsonl", [line for line, _ in SETUPS])
    result = runner.invoke(app, ["estimate", "--batch", str(batch), "--onprem", str(SITES)])
    assert result.exit_code == 0, result.output
    got = answers(result.stdout)
    assert [a.pop("line") for a in got] == [1, 2, 3, 4, 5]
    assert {a["strategy"] for a in got} == {"hivemind", "allreduce", "local-sgd", "asgd-ga"}
    for answer, (_, flags) in zip(got, SETUPS, strict=True):
        single = runner.invoke(app, ["estimate", *flags, "--onprem", str(SITES), "--json"])
        assert single.exit_code == 0, single.output
        assert answer == json.loads(single.stdout)
    assert any(n["offer_id"].startswith("onprem/") for n in got[1]["nodes"])


def test_a_bad_line_answers_with_its_error_and_the_others_go_on(tmp_path):
    good = SETUPS[0][0]
    batch = write(tmp_path / "setups.jsonl", [
        good, "", "not json", {"workload": "nope", "nodes": GEO}, {"workload": "convnext-large", "nodes": GEO, "tbs": 8},
        {"workload": "convnext-large", "nodes": "gcp/mars-1/n1-standard-8+T4=4"}, [1, 2], good,
    ])
    result = runner.invoke(app, ["estimate", "--batch", str(batch)])
    assert result.exit_code == 2
    got = answers(result.stdout)
    assert [a["line"] for a in got] == [1, 3, 4, 5, 6, 7, 8]  # the blank line 2 has no answer
    assert got[0]["schema"] == got[-1]["schema"] == "geotrain.estimate.v1" and got[0] == {**got[-1], "line": 1}
    errors = {a["line"]: a["error"] for a in got if a["schema"] == "geotrain.estimate-error.v1"}
    assert set(errors) == {3, 4, 5, 6, 7} and all(set(a) == {"schema", "line", "error"} for a in got[1:-1])
    assert all(message.startswith(f"{batch}:{line}: ") for line, message in errors.items())
    assert "not valid JSON" in errors[3] and "unknown workload 'nope'" in errors[4]
    assert "tbs: unknown field" in errors[5] and "sync" in errors[5] and "it is offered in" in errors[6]
    assert "one JSON object" in errors[7]


def test_file_and_flag_errors_exit_2_with_one_line(tmp_path):
    result = runner.invoke(app, ["estimate", "--batch", str(tmp_path / "missing.jsonl")])
    assert result.exit_code == 2 and result.stdout == "" and "no such file" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    batch = write(tmp_path / "setups.jsonl", [SETUPS[0][0]])
    result = runner.invoke(app, ["estimate", "--batch", str(batch), "--workload", "convnext-large", "--tbs", "8"])
    assert result.exit_code == 2 and "--workload" in result.stderr and "--tbs" in result.stderr
    result = runner.invoke(app, ["estimate", "--nodes", GEO])
    assert result.exit_code == 2 and "--workload: required" in result.stderr


def test_the_estimator_takes_resolved_nodes_and_gives_the_same_figures():
    estimator = Estimator(EstimateInputs(onprem_inventory=SITES))
    sync = SyncSettings(strategy="allreduce")
    by_text = estimator.estimate("roberta-xlm", HYBRID, sync).estimate
    by_groups = estimator.estimate("roberta-xlm", estimator.nodes(HYBRID), sync).estimate
    assert by_text == by_groups and by_text.nodes == 6 and by_text.samples_per_s > 0

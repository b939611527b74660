"""``geotrain simulate`` as a user runs it: the example traces and job, every policy, the oracle below
them all, the plot, and bad input as one line with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from geotrain.cli import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TRACE = EXAMPLES / "traces" / "spot_two_zones.csv"
JOB = EXAMPLES / "sim" / "tiny-job.yaml"


def run(*args: str):  # noqa: ANN201
    return CliRunner().invoke(app, list(args))


def test_every_policy_is_replayed_and_none_beats_the_oracle(tmp_path: Path) -> None:
    plot = tmp_path / "replay.png"
    result = run("simulate", "--trace", str(TRACE), "--job", str(JOB), "--plot", str(plot), "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    rows = {p["policy"]: p for p in doc["policies"]}
    assert list(rows) == ["on-demand", "greedy", "up", "up-s", "geotrain", "oracle"]
    oracle = rows["oracle"]["usd"]
    for name, row in rows.items():
        assert row["deadline_met"], name
        assert row["usd"] >= oracle * (1 - 1e-9), f"{name} ${row['usd']} beat the oracle ${oracle}"
    assert rows["on-demand"]["vs_on_demand"] == 1.0 and rows["on-demand"]["spot_node_h"] == 0
    assert rows["geotrain"]["usd"] < rows["on-demand"]["usd"]  # spot was there: it was used
    assert plot.stat().st_size > 1000 and plot.read_bytes()[:4] == b"\x89PNG"


def test_the_table_names_each_policy_and_a_policy_list_is_kept(tmp_path: Path) -> None:
    result = run("simulate", "--trace", str(TRACE), "--job", str(JOB), "--policy", "up-s,oracle")
    assert result.exit_code == 0, result.output
    assert "up-s" in result.stdout and "oracle" in result.stdout and "greedy" not in result.stdout


def test_bad_input_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    cases = [
        (["--trace", str(TRACE), "--job", str(JOB), "--policy", "cheapest"], "unknown cheapest"),
        (["--trace", str(tmp_path / "missing.csv"), "--job", str(JOB)], "missing.csv"),
        (["--trace", str(TRACE), "--job", str(JOB), "--deadline", "-1"], "--deadline"),
        (["--trace", str(TRACE), "--job", str(JOB), "--start", "99"], "past the traces' end"),
    ]
    pool = tmp_path / "pool.csv"
    pool.write_text("0,add,node1\n60000,add,node2\n120000,remove,node1\n")
    cases.append((["--trace", str(pool), "--kind", "bamboo-events", "--job", str(JOB)], "zone"))
    job = tmp_path / "job.yaml"
    job.write_text("workload: resnet50\ndeadline_h: 2\n")
    cases.append((["--trace", str(TRACE), "--job", str(job)], "work"))
    for args, words in cases:
        result = run("simulate", *args)
        assert result.exit_code == 2, (args, result.output)
        assert result.stderr.startswith("error: ") and words in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) == 1

from __future__ import annotations

import json

from typer.testing import CliRunner

from geotrain import __version__
from geotrain.cli import app
from geotrain.app.catalog import DERIVED_COLUMNS
from geotrain.pricing.schema import COLUMN_NAMES

runner = CliRunner()


def run(*args):
    return runner.invoke(app, list(args))


def test_version():
    result = run("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"geotrain {__version__}"


def test_list_t4_spot_covers_three_clouds():
    result = run("catalog", "list", "--accelerator", "T4", "--market", "spot", "--json")
    assert result.exit_code == 0, result.output
    offers = json.loads(result.stdout)["offers"]
    assert {o["cloud"] for o in offers} >= {"aws", "gcp", "azure"}
    assert all(o["market"] == "spot" and o["accelerator"] == "T4" for o in offers)
    per_accel = [o["price_usd_per_hour"] / o["accelerator_count"] for o in offers]
    assert per_accel == sorted(per_accel)


def test_json_offers_are_keyed_by_schema_columns():
    result = run("catalog", "list", "--continent", "europe", "--accelerator", "A100", "--json")
    assert result.exit_code == 0, result.output
    offers = json.loads(result.stdout)["offers"]
    assert offers
    assert all(list(o) == [*COLUMN_NAMES, *DERIVED_COLUMNS, "price_flag"] for o in offers)
    assert all(o["continent"] == "europe" and o["accelerator"].startswith("A100") for o in offers)


def test_table_output_and_filters():
    result = run("catalog", "list", "--cloud", "aws,gcp", "--max-price", "1", "--limit", "5")
    assert result.exit_code == 0, result.output
    assert "Offers in bundled snapshot" in result.stdout
    assert "Showing 5 of" in result.stdout


def test_bad_filter_value_exits_2_with_one_line():
    result = run("catalog", "list", "--market", "preemptible")
    assert result.exit_code == 2
    assert result.stderr.strip().count("\n") == 0
    assert "--market: 'preemptible' is not one of spot, on_demand, owned" in result.stderr


def test_import_of_broken_file_exits_2_with_one_line(tmp_path):
    path = tmp_path / "offers.csv"
    path.write_text("cloud,region,instance_type,vcpus,memory_gib,market,price_usd_per_hour,observed_at\n"
                    "aws,us-east-1,g4dn.xlarge,4,16,spot,-1,2026-01-01T00:00:00Z\n")
    result = run("catalog", "import", str(path))
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "line 2, column price_usd_per_hour" in lines[0]
    assert "Traceback" not in result.output


def test_import_merges_and_becomes_current_then_use_bundled(tmp_path):
    path = tmp_path / "sites.yaml"
    path.write_text(
        "sites:\n  - site: lab\n    continent: europe\n    uplink_gbps: 1\n    machines:\n"
        "      - {instance_type: rtx8000-ws, accelerator: RTX8000, count: 1, vcpus: 16, memory_gib: 64}\n"
    )
    result = run("catalog", "import", str(path))
    assert result.exit_code == 0, result.output
    assert "is now current" in result.stdout
    owned = json.loads(run("catalog", "list", "--market", "owned", "--json").stdout)["offers"]
    assert [o["instance_type"] for o in owned] == ["rtx8000-ws"]
    assert json.loads(run("catalog", "list", "--accelerator", "T4", "--json").stdout)["offers"]  # cloud offers kept
    listing = json.loads(run("catalog", "snapshots", "--json").stdout)
    rows = listing["snapshots"]
    assert [s["current"] for s in rows].count(True) == 1 and not rows[0]["current"]
    assert listing["current"] == next(s["snapshot_id"] for s in rows if s["current"]) != rows[0]["snapshot_id"]
    assert run("catalog", "use", "bundled").exit_code == 0
    assert json.loads(run("catalog", "list", "--market", "owned", "--json").stdout)["offers"] == []


def test_show_summary_json():
    result = run("catalog", "show", "--json")
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["bundled"] and {"aws", "gcp", "azure"} <= set(info["clouds"])
    assert len(info["continents"]) >= 3


def test_unknown_snapshot_exits_2():
    result = run("catalog", "show", "snap-0123456789abcdef")
    assert result.exit_code == 2 and "no snapshot 'snap-0123456789abcdef'" in result.stderr
    result = run("catalog", "show", "../../outside")  # never joined into a path
    assert result.exit_code == 2 and "is not a snapshot id" in result.stderr


def test_every_command_has_help_that_exits_0():
    commands = [["plan"], ["estimate"], ["launch"], ["status"], ["stop"], ["cost-report"], ["catalog", "list"],
                ["catalog", "show"], ["catalog", "import"], ["catalog", "use"]]
    for command in commands:
        result = run(*command, "--help")
        assert result.exit_code == 0, (command, result.output)
        assert "Usage" in result.output and "error" not in result.output, command


def test_a_narrow_terminal_still_shows_the_on_demand_price():
    result = runner.invoke(app, ["catalog", "list", "--accelerator", "T4", "--market", "spot", "--limit", "3"],
                           env={"COLUMNS": "80"})
    assert result.exit_code == 0
    assert "on-dem." in result.stdout and "$0.5260" in result.stdout  # g4dn.xlarge on demand
    assert max(len(line) for line in result.stdout.splitlines()) <= 80

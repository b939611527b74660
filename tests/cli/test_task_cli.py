"""``geotrain plan`` on SkyPilot task files: the shape is what the task pins, the offers match its
resources, the choice is checked against the snapshot (price) and the perf model (a modelled task)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from typer.testing import CliRunner

from geotrain.cli import app
from geotrain.domain import Market
from geotrain.pricing.outliers import as_planned
from geotrain.pricing.snapshot import bundled_snapshot

runner = CliRunner()

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"
HELLO = (EXAMPLES / "hello.yaml").read_text()  # the README's examples, as shipped
DDP = (EXAMPLES / "ddp.yaml").read_text()


def plan_of(tmp_path, text: str, *extra: str) -> dict:
    path = tmp_path / "task.yaml"
    path.write_text(textwrap.dedent(text))
    result = runner.invoke(app, ["plan", str(path), "--json", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def cheapest(pred) -> float:  # noqa: ANN001
    """The referee: the lowest $/h of the bundled offers that ``pred`` accepts, read from the snapshot at the
    prices plans use (a listing far below its type elsewhere, not seen since, at the type's price)."""
    offers = list(bundled_snapshot().offers())
    return min(o.price_usd_per_hour for o in as_planned(offers) if pred(o))


def test_hello_plans_one_node_the_cheapest_v100_on_aws(tmp_path):
    plan = plan_of(tmp_path, HELLO)
    [item] = plan["items"]
    o = item["offer"]
    assert item["count"] == 1 and o["cloud"] == "aws" and o["accelerator"] == "V100" and o["accelerator_count"] == 1
    assert o["price_usd_per_hour"] == cheapest(lambda x: x.location.cloud == "aws" and x.shape.accelerator == "V100"
                                                and x.shape.accelerator_count == 1 and x.market == "on_demand")
    assert o["market"] == "on_demand"  # use_spot absent: on-demand, as SkyPilot; the plan says what spot would save
    assert any("on spot would cost" in line for line in plan["assumptions"])
    assert plan["job"]["task"]["run"].strip() == 'echo "Hello, SkyPilot!"'
    assert plan["totals"]["usd_per_million_samples"] is None  # nothing modelled, nothing claimed


def test_the_ddp_task_plans_two_spot_nodes_of_eight_a100_in_one_zone(tmp_path):
    plan = plan_of(tmp_path, DDP)
    [item] = plan["items"]  # a gang in one zone, the cheapest that holds both
    o = item["offer"]
    assert item["count"] == 2 and (o["accelerator"], o["accelerator_count"], o["market"]) == ("A100", 8, "spot")
    assert o["price_usd_per_hour"] == cheapest(lambda x: x.shape.accelerator == "A100" and x.shape.accelerator_count == 8
                                                and x.market == Market.SPOT
                                                and (x.capacity_hint is None or x.capacity_hint >= 2))
    assert plan["job"]["constraints"]["node_count"] == 2


def test_a_modelled_task_with_num_nodes_plans_exactly_that_many_and_no_homogeneous_choice_beats_it(tmp_path):
    text = """\
        workload: convnext-large
        strategy: hivemind
        num_nodes: 3
        resources:
          accelerators: T4
          use_spot: true
          any_of: [{infra: aws/us-west-2}, {infra: gcp/us-west1}]
        run: python train.py
        """
    plan = plan_of(tmp_path, text, "--time-limit", "20")
    assert sum(i["count"] for i in plan["items"]) == 3
    assert all(i["offer"]["accelerator"] == "T4" and i["offer"]["accelerator_count"] == 1
               and i["offer"]["market"] == "spot" and i["offer"]["region"] in ("us-west-2", "us-west1")
               for i in plan["items"])
    # referee: the perf model on three nodes of each of the cheapest matching offers (estimate's path)
    offers = sorted((o for o in bundled_snapshot().offers() if o.shape.accelerator == "T4"
                     and o.shape.accelerator_count == 1 and o.market == Market.SPOT
                     and o.location.region in ("us-west-2", "us-west1")), key=lambda o: o.price_usd_per_hour)[:4]
    mine = plan["totals"]["usd_per_million_samples"]
    for o in offers:
        where = o.location.zone or o.location.region
        result = runner.invoke(app, ["estimate", "--workload", "convnext-large", "--strategy", "hivemind", "--json",
                                     "--nodes", f"{o.location.cloud}/{where}/{o.shape.instance_type}/spot=3"])
        assert result.exit_code == 0, result.output
        other = json.loads(result.stdout)
        assert mine <= other["usd_per_million_samples"] * 1.001, (o.offer_id, mine, other)


def test_a_task_no_offer_matches_says_so_and_exits_3(tmp_path):
    path = tmp_path / "task.yaml"
    path.write_text("resources: {infra: gcp, accelerators: H200:8}\nrun: x\n")
    result = runner.invoke(app, ["plan", str(path)])
    assert result.exit_code == 3 and "no offer in the snapshot matches" in result.output, result.output


def test_an_unsupported_field_exits_2_naming_it(tmp_path):
    path = tmp_path / "task.yaml"
    path.write_text("resources: {accelerators: T4, accelerator_args: {runtime_version: x}}\nrun: jupyter lab\n")
    result = runner.invoke(app, ["plan", str(path)])
    assert result.exit_code == 2 and "resources.accelerator_args: not supported" in result.output, result.output


def test_a_cloud_or_accelerator_no_offer_has_is_an_unknown_name_exit_2(tmp_path):
    path = tmp_path / "task.yaml"
    for resources, named in (("{infra: lambda, accelerators: A100:8}", "unknown cloud 'lambda'"),
                             ("{accelerators: A100-40GB:8}", "unknown accelerator 'A100-40GB'")):
        path.write_text(f"resources: {resources}\nrun: x\n")
        result = runner.invoke(app, ["plan", str(path)])
        assert result.exit_code == 2 and named in result.output, result.output

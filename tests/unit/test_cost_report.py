"""A hand-built ledger (prices changing mid-run, a preemption, an on-prem node, egress across
continents, checkpoint traffic) gives exactly the totals worked out here by hand."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from geotrain.app.cost_report import cost_reports
from geotrain.billing import run_cost
from geotrain.cli import app
from geotrain.domain import JobSpec, Objective, SyncSettings, SyncStrategyName
from geotrain.ledger import Ledger
from geotrain.planning.planfile import plan_to_dict
from geotrain.planning.planner import PlanOptions, plan_for_nodes
from geotrain.pricing.inventory import load_inventory
from geotrain.pricing.records import offer_record
from geotrain.pricing.snapshot import bundled_snapshot

SITES = Path(__file__).resolve().parents[2] / "examples" / "sites.yaml"
T0 = 1_700_000_000.0
RUN = "run-fixture"
A, B, B2, C = "ln-a", "ln-b", "ln-b2", "ln-c"
AWS_ID = "aws/us-east-1/use1-az1/g4dn.xlarge/spot"
GCP_ID = "gcp/europe-west1/europe-west1-b/n1-standard-8+T4/spot"
GCP2_ID = "gcp/europe-west1/europe-west1-c/n1-standard-8+T4/spot"
OWNED_ID = "onprem/munich-lab/-/rtx8000-ws/owned"


@pytest.fixture
def ledger(geotrain_home):
    snapshot = bundled_snapshot()
    inventory = load_inventory(SITES)
    job = JobSpec("fixture", "convnext-large", Objective.MIN_COST, sync=SyncSettings(SyncStrategyName.ALLREDUCE),
                  target_samples_per_s=100, onprem_inventory=str(SITES))
    plan = plan_for_nodes(job, snapshot, "aws/use1-az1/g4dn.xlarge,gcp/europe-west1-b/n1-standard-8+T4,"
                                         "onprem/munich-lab/rtx8000-ws", inventory=inventory,
                          options=PlanOptions(frontier_points=0, allow_below_target=True))  # a fixture, not a goal
    offers = {i.offer.offer_id: i.offer for i in plan.items}
    gcp2 = next(o for o in snapshot.offers() if o.offer_id == GCP2_ID)
    offers[GCP2_ID] = gcp2
    led = Ledger()
    led.create_run(run_id=RUN, plan_id=plan.plan_id, plan_json=json.dumps(plan_to_dict(plan)), workload="tiny-cnn",
                   provider="local", checkpoint_url="s3://bucket/ckpt", launcher_pid=1, target_steps=360,
                   options={"checkpoint_location": "aws/us-east-1", "train_workload": "tiny-cnn"},
                   substitutions=("trains tiny-cnn instead of the planned convnext-large",))
    rows = [  # node, offer, launch price, launched, ended, why
        (A, AWS_ID, 1.00, T0, T0 + 3600, "completed"),
        (B, GCP_ID, 0.50, T0, T0 + 1200, "preempted"),
        (B2, GCP2_ID, 0.40, T0 + 1500, T0 + 3600, "completed"),
        (C, OWNED_ID, 0.10, T0, T0 + 3600, "completed"),
    ]
    for node, offer_id, price, start, end, why in rows:
        o = offers[offer_id]
        led.add_node(run_id=RUN, node_id=node, request_id=f"{RUN}/{offer_id}/0", offer_id=offer_id,
                     offer_json=json.dumps(offer_record(o)), cloud=o.location.cloud, region=o.location.region,
                     zone=o.location.zone, market=o.market.value, price_usd_per_hour=price, launched_at=start)
        led.end_node(node, why, at=end)
    led.add_price(AWS_ID, 1.50, "spot price history", at=T0 + 1800)  # the spot price moves mid-run
    led.add_price(AWS_ID, 1.50, "spot price history", at=T0 + 2700)  # an observation, not a change
    led.event(RUN, "generation_started", at=T0 + 10, generation=1, world_size=3, nodes=[A, B, C])
    led.event(RUN, "checkpoint_saved", node_id=A, at=T0 + 900, step=80, url="s3://bucket/ckpt/80", size_bytes=2e9)
    led.event(RUN, "checkpoint_saved", node_id=B, at=T0 + 1000, step=90, url="s3://bucket/ckpt/90", size_bytes=1e9)
    led.event(RUN, "preempted", node_id=B, at=T0 + 1200, generation=1)
    led.event(RUN, "generation_started", at=T0 + 1500, generation=2, world_size=3, nodes=[A, B2, C])
    led.event(RUN, "checkpoint_restored", node_id=A, at=T0 + 1540, generation=2, step=80, url="s3://bucket/ckpt/80")
    for at, gen, step, samples in ((T0 + 600, 1, 50, 500_000), (T0 + 1190, 1, 100, 1_000_000),
                                   (T0 + 1560, 2, 90, 900_000), (T0 + 3590, 2, 360, 3_600_000)):
        led._conn.execute("INSERT INTO progress (run_id, at, generation, step, samples, loss, samples_per_s,"
                          " world_size) VALUES (?,?,?,?,?,?,?,?)", (RUN, at, gen, step, samples, 1.0, 1000.0, 3))
    led.add_link_bytes(RUN, 1, [(A, B, "internet", int(10e9)), (B, A, "internet", int(5e9)),
                                (A, C, "internet", int(2e9)), (C, A, "internet", int(3e9))])
    led.finish_run(RUN, "completed", "trained 360 steps")
    return led


def test_totals_are_exactly_the_hand_computed_ones(ledger):
    costs = cost_reports(RUN, ledger=ledger)[0]
    r = costs.report
    nodes = {n.node_id: n for n in r.nodes}
    # compute: A half an hour at $1.00 then half an hour at $1.50; B 20 min at $0.50 (preempted);
    # B2 35 min at $0.40; the on-prem machine an hour at its amortized $0.10
    assert nodes[A].compute_usd == pytest.approx(0.5 * 1.00 + 0.5 * 1.50) and nodes[A].price_changes == 1
    assert nodes[B].compute_usd == pytest.approx(1200 / 3600 * 0.50)
    assert nodes[B2].compute_usd == pytest.approx(2100 / 3600 * 0.40)
    assert nodes[C].compute_usd == pytest.approx(0.10)
    compute = 1.25 + 1 / 6 + 0.4 * 2100 / 3600 + 0.10
    assert r.compute_usd == pytest.approx(compute)
    # egress, priced by the sender's cloud (bundled table: AWS → another cloud or on-prem $0.09/GB,
    # GCP Europe → another cloud $0.12/GB, on-prem uplinks are not billed per GB)
    assert r.egress_usd == pytest.approx(10 * 0.09 + 5 * 0.12 + 2 * 0.09 + 3 * 0.0)
    # checkpoints in aws/us-east-1: A writes 2 GB in its own region (free), B writes 1 GB from GCP
    # Europe ($0.12/GB); restoring 2 GB: A in-region free, B2 reads from AWS ($0.09/GB), C on-prem
    # reads from AWS ($0.09/GB)
    assert r.cost.storage_gb_written == pytest.approx(3.0) and r.cost.storage_gb_read == pytest.approx(6.0)
    assert r.storage_usd == pytest.approx(1 * 0.12 + 2 * 0.09 + 2 * 0.09)
    total = compute + 1.68 + 0.48
    assert r.total_usd == pytest.approx(total)
    assert r.samples == 3_600_000
    assert r.usd_per_million_samples == pytest.approx(total / 3.6)
    # every part is billed by someone: AWS bills A's egress and the two reads from its storage, GCP
    # bills B's egress and B's write to AWS; a read is attributed to the node that read it
    assert r.cost.by_cloud == pytest.approx({"aws": 1.25 + 0.9 + 0.18 + 0.18 + 0.18,
                                        "gcp": 1 / 6 + 0.4 * 2100 / 3600 + 0.6 + 0.12, "onprem": 0.10})
    assert r.cost.by_market == pytest.approx({"owned": 0.10 + 0.18, "spot": total - 0.28})
    assert r.cost.by_kind == pytest.approx({"compute": compute, "egress": 1.68, "storage": 0.48})
    assert r.cost.by_node == pytest.approx({A: 1.25 + 0.9 + 0.18, B: 1 / 6 + 0.6 + 0.12, B2: 0.4 * 2100 / 3600 + 0.18,
                                       C: 0.10 + 0.18})
    for parts in (r.cost.by_node, r.cost.by_cloud, r.cost.by_region, r.cost.by_market, r.cost.by_kind):
        assert sum(parts.values()) == pytest.approx(total)
    # the one cost function: what launch and status print is exactly this total
    assert run_cost(ledger, RUN).total_usd == r.total_usd
    # interruptions: generation 1 reached step 100, generation 2 restored step 80: 20 steps lost;
    # the restart took from the preemption (T0+1200) to the next progress report (T0+1560)
    i = r.interruptions
    assert (i.preemptions, i.restarts, i.lost_steps, i.lost_samples) == (1, 0, 20, 200_000)
    assert i.downtime_s == pytest.approx(360)
    rate = compute / 1.0  # the run's node cost per hour (nodes up to an hour)
    step_s = (3590 - 600) / (360 - 50)
    assert i.downtime_usd == pytest.approx(360 / 3600 * rate)
    assert i.lost_usd == pytest.approx(20 * step_s / 3600 * rate)


def test_counterfactuals(ledger):
    costs = cost_reports(RUN, ledger=ledger)[0]
    snapshot = bundled_snapshot()
    od = {o.offer_id: o.price_usd_per_hour for o in snapshot.offers() if o.market.value == "on_demand"}
    aws_od = od["aws/us-east-1/use1-az1/g4dn.xlarge/on_demand"]
    gcp_od = od["gcp/europe-west1/europe-west1-b/n1-standard-8+T4/on_demand"]
    gcp2_od = od["gcp/europe-west1/europe-west1-c/n1-standard-8+T4/on_demand"]
    traffic = 1.68 + 0.48
    expected = 1.0 * aws_od + 1200 / 3600 * gcp_od + 2100 / 3600 * gcp2_od + 0.10 + traffic
    assert costs.on_demand.usd == pytest.approx(expected)
    assert costs.on_demand.saving(costs.report.total_usd) == pytest.approx(1 - costs.report.total_usd / expected)
    reasons = " ".join(costs.plan.reasons)
    assert "spot prices moved for 1 node" in reasons and "1 preemption(s): 20 steps" in reasons
    assert "not comparable" in reasons and "trains tiny-cnn instead of the planned convnext-large" in reasons
    assert not costs.plan.comparable and costs.plan.throughput_ratio is None
    assert "1 replacement node" in reasons


def test_cli_json_csv_and_a_plot(ledger, tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["cost-report", RUN, "--json"])
    assert result.exit_code == 0, result.output
    (data,) = json.loads(result.stdout)["runs"]
    assert data["total_usd"] == pytest.approx(cost_reports(RUN, ledger=ledger)[0].report.total_usd)
    assert data["interruptions"]["preemptions"] == 1 and data["on_demand"]["saving"] is not None
    result = runner.invoke(app, ["cost-report", "--all", "--csv"])
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "run_id,kind,item,node,cloud,region,market,quantity,unit,usd"
    assert sum(1 for line in lines if ",compute," in line) == 4 and lines[-1].startswith(f"{RUN},total,")
    items = [line.split(",") for line in lines[1:-1]]
    assert sum(float(row[-1]) for row in items) == pytest.approx(float(lines[-1].split(",")[-1]))
    png = tmp_path / "costs.png"
    result = runner.invoke(app, ["cost-report", RUN, "--plot", str(png)])
    assert result.exit_code == 0, result.output
    assert "why" in result.stdout and "on-demand" in result.stdout
    raw = png.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", raw[16:24])
    assert width >= 600 and height >= 600 and len(raw) > 20_000
    idat, i = b"", 8
    while i < len(raw):
        length = struct.unpack(">I", raw[i:i + 4])[0]
        if raw[i + 4:i + 8] == b"IDAT":
            idat += raw[i + 8:i + 8 + length]
        i += 12 + length
    pixels = zlib.decompress(idat)
    assert len(set(pixels[::101])) > 10  # not a blank image


def test_a_running_run_reports_its_cost_so_far(ledger):
    ledger._conn.execute("UPDATE runs SET status = 'running' WHERE run_id = ?", (RUN,))
    ledger._conn.execute("UPDATE nodes SET ended_at = NULL WHERE node_id = ?", (A,))
    report = cost_reports(RUN, ledger=ledger)[0].report
    assert report.running and report.ended_at > T0 + 3600
    assert {n.node_id: n for n in report.nodes}[A].compute_usd > 1.25  # still accruing at $1.50/h


def test_since_and_bad_input(ledger):
    runner = CliRunner()
    assert runner.invoke(app, ["cost-report", "--since", "2020-01-01", "--json"]).exit_code == 0
    result = runner.invoke(app, ["cost-report", "--since", "yesterday"])
    assert result.exit_code == 2 and "--since" in result.stderr
    assert runner.invoke(app, ["cost-report", "run-nope"]).exit_code == 2

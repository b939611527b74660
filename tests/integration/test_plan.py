"""geotrain plan on the bundled snapshot: every objective, on-prem machines, limits, files, errors."""

from __future__ import annotations

import json
import struct
import zlib
import time
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from geotrain.cli import app
from geotrain.domain import Constraints, Continent, JobSpec, Market, Objective, SyncSettings, SyncStrategyName
from geotrain.errors import InfeasibleError, InputError, SearchCutShortError
from geotrain.planning.planfile import load_plan, plan_to_dict, save_plan
from geotrain.planning.planner import PlanOptions, build_context, make_plan
from geotrain.pricing.inventory import load_inventory
from geotrain.pricing.snapshot import bundled_snapshot

pytestmark = pytest.mark.slow  # `make test-all` runs the integration suite

SITES = Path(__file__).resolve().parents[2] / "examples" / "sites.yaml"
FAST = PlanOptions(frontier_points=0, time_limit_s=60)
runner = CliRunner()


def plan_for(**kw):
    constraints = kw.pop("constraints", Constraints())
    options = kw.pop("options", FAST)
    inventory = kw.pop("inventory", None)
    job = JobSpec(name="test", workload=kw.pop("workload", "convnext-large"), constraints=constraints, **kw)
    return make_plan(job, bundled_snapshot(), inventory=inventory, options=options)


@pytest.mark.parametrize(
    ("objective", "given"),
    [
        (Objective.MIN_COST, dict(target_samples_per_s=600)),
        (Objective.MAX_THROUGHPUT, dict(budget_usd_per_hour=3)),
        (Objective.MIN_COST_PER_SAMPLE, {}),
        (Objective.MIN_COST_BY_DEADLINE, dict(total_samples=20_000_000, deadline_h=12)),
    ],
)
def test_every_objective_gives_an_optimal_plan_that_meets_its_goal(objective, given):
    limits = Constraints(clouds=frozenset({"aws", "gcp"}), max_regions=2)
    plan = plan_for(objective=objective, constraints=limits, **given)
    assert plan.solver.status == "optimal"
    assert plan.items and all(i.offer.location.cloud in {"aws", "gcp"} for i in plan.items)
    assert len({i.offer.location.region_scope for i in plan.items}) <= 2
    t = plan.totals
    if objective is Objective.MIN_COST:
        assert t.samples_per_s >= 600 * 0.98  # the perf model's figure; the solver's is ≥ 600 exactly
    if objective is Objective.MAX_THROUGHPUT:
        assert t.compute_usd_per_hour <= 3 + 1e-6
    if objective is Objective.MIN_COST_BY_DEADLINE:
        assert t.samples_per_s >= 20_000_000 / (12 * 3600) * 0.98
    assert plan.baseline is not None
    # the mix is never worse than the single-region homogeneous choice by the solver's own measure
    if objective is Objective.MIN_COST_PER_SAMPLE:
        assert t.usd_per_million_samples <= plan.baseline.usd_per_million_samples * 1.001


def test_spot_only_and_blocked_offers_never_appear():
    first = plan_for(objective=Objective.MIN_COST, target_samples_per_s=800,
                     constraints=Constraints(spot_only=True, continents=frozenset({Continent.EUROPE})))
    assert all(i.offer.market is Market.SPOT for i in first.items)
    assert all(i.offer.location.continent is Continent.EUROPE for i in first.items)
    used = {i.offer.location.zone_scope for i in first.items}
    second = plan_for(objective=Objective.MIN_COST, target_samples_per_s=800,
                      constraints=Constraints(spot_only=True, continents=frozenset({Continent.EUROPE})),
                      options=replace(FAST, blocked=frozenset(used)))
    assert not {i.offer.location.zone_scope for i in second.items} & used
    assert second.totals.usd_per_hour >= first.totals.usd_per_hour * (1 - 1e-9) or \
        second.solver.status != "optimal"


def test_onprem_machines_join_when_required():
    inventory = load_inventory(SITES)
    # all 14 owned machines on three continents: every site's share of a round crosses its paths to the
    # other two, which carry one stream's figure each (no multi-stream measurement): about 116 samples/s
    plan = plan_for(objective=Objective.MIN_COST, target_samples_per_s=100, inventory=inventory,
                    constraints=Constraints(onprem_required=True, max_regions=4, clouds=frozenset({"gcp"})))
    owned = {i.offer.offer_id: i.count for i in plan.items if i.offer.market is Market.OWNED}
    assert owned == {"onprem/munich-lab/-/rtx8000-ws/owned": 1, "onprem/munich-lab/-/dgx-2/owned": 1,
                     "onprem/boston-lab/-/a10-box/owned": 4, "onprem/tokyo-lab/-/t4-box/owned": 8}
    assert plan.totals.samples_per_s >= 100 * 0.95


def test_infeasible_target_names_the_limit():
    with pytest.raises(InfeasibleError) as info:
        plan_for(objective=Objective.MIN_COST, target_samples_per_s=1200,
                 constraints=Constraints(accelerators=frozenset({"T4"}), max_regions=1, max_nodes=2))
    message = str(info.value)
    # two g4dn.metal (8 T4 each) train 939 samples/s inside Hivemind
    assert "1,200 samples/s is out of reach: at most" in message
    assert "≤ 2 nodes" in message and "≤ 1 region" in message
    # the advice names a limit only where a mix under the raised limit is found in the explainer's time
    # (here the cheapest 8-node mix takes the exact model about 45 s on 2 cores: not in time)
    assert ("raise --max-nodes" in message or "widen the offer filters" in message) and info.value.exit_code == 3
    with pytest.raises(InfeasibleError) as info:
        plan_for(objective=Objective.MIN_COST, target_samples_per_s=1000, budget_usd_per_hour=0.5)
    assert "under $0.50/h" in str(info.value) and "raise --budget" in str(info.value)
    with pytest.raises(InfeasibleError) as info:
        plan_for(objective=Objective.MIN_COST, target_samples_per_s=5000,
                 constraints=Constraints(accelerators=frozenset({"T4"}), max_nodes=8))
    assert "lower the target" in str(info.value)


def test_plan_file_round_trip(tmp_path):
    plan = plan_for(objective=Objective.MIN_COST, target_samples_per_s=400,
                    constraints=Constraints(clouds=frozenset({"gcp"})))
    path = tmp_path / "plan.json"
    save_plan(plan, path)
    again = load_plan(path)
    assert plan_to_dict(again) == plan_to_dict(plan)
    assert again.items == plan.items and again.job == plan.job


def test_broken_plan_file_is_refused(tmp_path):
    plan = plan_for(objective=Objective.MIN_COST, target_samples_per_s=400,
                    constraints=Constraints(clouds=frozenset({"gcp"})))
    data = plan_to_dict(plan)
    data["items"][0]["offer"]["price_usd_per_hour"] = -1
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as info:
        load_plan(path)
    assert "items" in str(info.value) and "price_usd_per_hour" in str(info.value)


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_cli_plan_writes_json_and_a_plot(tmp_path):
    out, png = tmp_path / "plan.json", tmp_path / "frontier.png"
    result = runner.invoke(app, ["plan", "--workload", "roberta-xlm", "--target-sps", "500", "--clouds", "aws,azure",
                                 "-o", str(out), "--plot", str(png)])
    assert result.exit_code == 0, result.output
    assert "baseline" in result.stdout and "frontier" in result.stdout and "solver" in result.stdout
    data = json.loads(out.read_text())
    assert data["format"] == "geotrain-plan/2" and data["items"] and data["snapshot_id"].startswith("snap-")
    raw = png.read_bytes()
    width, height = png_size(raw)
    assert width >= 400 and height >= 300 and len(raw) > 10_000
    # not blank: the image data varies
    idat = b"".join(raw[i + 8: i + 8 + struct.unpack(">I", raw[i:i + 4])[0]]
                    for i in range(8, len(raw)) if raw[i + 4:i + 8] == b"IDAT")
    pixels = zlib.decompress(idat)
    assert len(set(pixels[::97])) > 5


def test_cli_plan_json_and_infeasible_exit_code(tmp_path):
    result = runner.invoke(app, ["plan", "--workload", "convnext-large", "--budget", "2", "--clouds", "gcp", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["solver"]["objective"] == "max_throughput" and data["totals"]["samples_per_s"] > 0
    result = runner.invoke(app, ["plan", "--workload", "convnext-large", "--target-sps", "100000", "--max-nodes", "4"])
    assert result.exit_code == 3
    assert "out of reach" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_cli_plan_from_spec_file(tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text("name: spec-job\nworkload: resnet50\ntarget_samples_per_s: 2000\n"
                    "constraints:\n  clouds: [azure]\n  max_regions: 1\n")
    result = runner.invoke(app, ["plan", str(spec), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["job"]["name"] == "spec-job" and all(i["offer"]["cloud"] == "azure" for i in data["items"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nworkload: resnet50\nconstraints:\n  max_region: 2\n")
    result = runner.invoke(app, ["plan", str(bad)])
    assert result.exit_code == 2 and "did you mean 'max_regions'" in result.stderr


def test_a_remote_dataset_costs_egress_and_the_plan_shows_it():
    from geotrain.domain import DatasetSpec

    imagenet = dict(cloud="gcp", region="europe-west3", size_gib=150, samples=1_281_167)
    base = dict(objective=Objective.MIN_COST, target_samples_per_s=300,
                constraints=Constraints(accelerators=frozenset({"T4"}), continents=frozenset({Continent.NORTH_AMERICA})))
    without = plan_for(**base)
    streamed = plan_for(**base, dataset=DatasetSpec(**imagenet))
    cached = plan_for(**base, dataset=DatasetSpec(**imagenet, reads_per_sample=0.1))
    local = plan_for(**base, dataset=DatasetSpec(**imagenet, reads_per_sample=0))
    assert without.totals.data_egress_usd_per_hour == 0 and local.totals.data_egress_usd_per_hour == 0
    assert local.totals.usd_per_hour == pytest.approx(without.totals.usd_per_hour, rel=1e-9)
    # every node is across the Atlantic from the data: each trained sample crosses it once (or a tenth)
    per_sample_gb = 150 * 2**30 / 1_281_167 / 1e9
    for plan, reads in ((streamed, 1.0), (cached, 0.1)):
        t = plan.totals
        assert t.data_egress_usd_per_hour > 0
        usd_per_gb = t.data_egress_usd_per_hour / (3600 * t.samples_per_s * per_sample_gb * reads)
        assert 0.02 <= usd_per_gb <= 0.2  # an internet/inter-continent egress price, $/GB
        assert t.usd_per_hour >= without.totals.usd_per_hour * (1 - 1e-9)
    assert streamed.totals.data_egress_usd_per_hour > cached.totals.data_egress_usd_per_hour
    # with the data in Europe and no continent limit, streaming pulls the nodes to the data
    near = plan_for(objective=Objective.MIN_COST, target_samples_per_s=300, dataset=DatasetSpec(**imagenet),
                    constraints=Constraints(accelerators=frozenset({"T4"})))
    assert near.totals.usd_per_hour <= streamed.totals.usd_per_hour
    assert near.totals.data_egress_usd_per_hour < streamed.totals.data_egress_usd_per_hour


def test_a_plan_is_never_worse_than_its_baseline_by_the_perf_model():
    """convnext-large on T4 at ≤ 8 per zone: the MIP's mix spreads over three zones and pays $8.5/h of
    cross-zone egress that its model does not see; the plan falls back to the baseline and says so."""

    plan = plan_for(objective=Objective.MIN_COST, target_samples_per_s=500,
                    constraints=Constraints(accelerators=frozenset({"T4"}), max_nodes_per_zone=8))
    # min_cost: never dearer per hour than a baseline that meets the target
    assert plan.baselines and all(plan.totals.usd_per_hour <= b.usd_per_hour * (1 + 1e-9) for b in plan.baselines)
    assert plan.totals.goodput_samples_per_s >= 500 * (1 - 1e-9)
    if min(b.usd_per_hour for b in plan.baselines) <= plan.totals.usd_per_hour * (1 + 1e-9):  # the fallback: said
        assert plan.solver.status == "feasible"
        assert any("did worse than the" in a and "which is planned instead" in a for a in plan.assumptions)


def test_every_baseline_kind_is_there_or_says_why_and_the_plan_file_keeps_them(tmp_path):
    from geotrain.domain import BaselineKind
    from geotrain.planning.planfile import load_plan, save_plan

    plan = plan_for(objective=Objective.MIN_COST, target_samples_per_s=300,
                    constraints=Constraints(accelerators=frozenset({"T4"}), max_nodes_per_zone=4))
    kinds = [b.kind for b in plan.baselines] + [k for k, _ in plan.missing_baselines]
    assert sorted(kinds) == sorted(BaselineKind)
    for b in plan.baselines:
        assert b.samples_per_s > 0 and b.usd_per_million_samples > 0
        assert all(g.count <= 4 for g in b.groups)  # the same limits as the plan
        if b.kind is not BaselineKind.SINGLE_REGION:
            assert len(b.groups) == 1
        assert len({g.offer.location.region_scope for g in b.groups}) == 1
        assert len({(g.offer.shape.instance_type, g.offer.market) for g in b.groups}) == 1
    for _, why in plan.missing_baselines:
        assert "within the limits" in why
    save_plan(plan, tmp_path / "plan.json")
    again = load_plan(tmp_path / "plan.json")
    assert again.baselines == plan.baselines and again.missing_baselines == plan.missing_baselines


def test_capacity_confidence_caps_each_zone_pool_and_the_plan_says_the_whole_mix_chance():
    from geotrain.pricing.capacity import CapacityModel

    model = CapacityModel.bundled()
    plan = plan_for(objective=Objective.MIN_COST, target_samples_per_s=300, options=FAST,
                    constraints=Constraints(accelerators=frozenset({"T4"}), capacity_confidence=0.5))
    units: dict[str, int] = {}
    for item in plan.items:
        pool = model.pool_of(item.offer)
        if pool is not None:
            units[pool] = units.get(pool, 0) + item.count * max(1, item.offer.shape.accelerator_count)
            assert units[pool] <= model.pool_cap_units(item.offer, 0.5)
    chance = model.launch_probability((i.offer, i.count) for i in plan.items)
    assert any(a.startswith(f"capacity: the whole mix can be had at once with a chance of {chance:.0%}")
               for a in plan.assumptions)
    assert plan.totals.samples_per_s >= 300 * 0.999


def test_when_the_hivemind_ceiling_binds_the_error_says_so_and_how_large_a_batch_would_do():
    sync = SyncSettings(target_batch_size=4096)
    with pytest.raises(InfeasibleError) as info:
        plan_for(objective=Objective.MIN_COST, target_samples_per_s=3000, sync=sync,
                 constraints=Constraints(accelerators=frozenset({"T4"})))
    message = str(info.value)
    assert "the hivemind ceiling binds" in message and "raise --tbs to at least" in message
    needed = int(message.rsplit("raise --tbs to at least ", 1)[1].replace(",", ""))
    ceiling = int(message.split("= at most ", 1)[1].split(" samples/s", 1)[0].replace(",", ""))
    assert ceiling < 3000
    # the advised batch lifts the ceiling (it grows with the batch) to twice the target
    assert needed == pytest.approx(2 * 3000 * 4096 / ceiling, rel=0.01)


def test_a_mix_the_perf_model_says_misses_the_target_is_not_planned():
    """asgd-ga on RoBERTa-XLM: the solver's model used to leave out each region's per-step
    all-reduce and believed its mix trained 3,000 samples/s where the perf model says 68. The plan
    reaches the target by the perf model; where nothing does, no plan (exit 3)."""
    sync = SyncSettings(strategy=SyncStrategyName.ASGD_GA)
    quick = replace(FAST, time_limit_s=5)  # the baselines seed the search: a cut-short search is still sound
    plan = plan_for(objective=Objective.MIN_COST, target_samples_per_s=3000, workload="roberta-xlm", sync=sync,
                    constraints=Constraints(max_nodes_per_zone=4), options=quick)
    assert plan.totals.goodput_samples_per_s >= 3000 * (1 - 1e-6)
    assert not any("which is planned instead" in a for a in plan.assumptions)  # the solver's own mix
    t4 = plan_for(objective=Objective.MIN_COST, target_samples_per_s=1000, workload="roberta-xlm", sync=sync,
                  constraints=Constraints(accelerators=frozenset({"T4"}), max_nodes_per_zone=5), options=quick)
    assert t4.totals.goodput_samples_per_s >= 1000 * (1 - 1e-6)
    # 5,000 was once called out of reach ("at most 4,423"); the perf model trains it on 5 g4dn.metal in each of
    # 12-13 regions, which the search's region fill finds
    many = plan_for(objective=Objective.MIN_COST, target_samples_per_s=5000, workload="roberta-xlm", sync=sync,
                    constraints=Constraints(accelerators=frozenset({"T4"}), max_nodes_per_zone=5), options=quick)
    assert many.totals.goodput_samples_per_s >= 5000 * (1 - 1e-6)
    t4_only = Constraints(accelerators=frozenset({"T4"}), max_nodes_per_zone=5)
    with pytest.raises(SearchCutShortError) as cut:  # neither found nor ruled out in 5 s: no bound is claimed
        plan_for(objective=Objective.MIN_COST, target_samples_per_s=50000, workload="roberta-xlm", sync=sync,
                 constraints=t4_only, options=quick)
    assert "no mix found within 5 s" in str(cut.value) and "out of reach" not in str(cut.value)
    assert "the fastest mix it found" in str(cut.value) and cut.value.exit_code == 6
    job = JobSpec(name="test", workload="roberta-xlm", constraints=t4_only, sync=sync, objective=Objective.MIN_COST,
                  target_samples_per_s=1.0)
    top = build_context(job, bundled_snapshot(), options=quick).searcher().upper_rate()
    with pytest.raises(InfeasibleError) as info:  # above every node at full speed: proven at once
        plan_for(objective=Objective.MIN_COST, target_samples_per_s=round(top * 1.5), workload="roberta-xlm",
                 sync=sync, constraints=t4_only, options=quick)
    assert "samples/s is out of reach" in str(info.value) and info.value.exit_code == 3


def test_a_budget_is_kept_by_the_perf_model():
    plan = plan_for(objective=Objective.MAX_THROUGHPUT, budget_usd_per_hour=5,
                    constraints=Constraints(accelerators=frozenset({"T4"}), max_nodes_per_zone=10))
    assert plan.totals.usd_per_hour <= 5 * (1 + 1e-6)
    # max_throughput: no baseline trains faster within the same budget
    assert all(plan.totals.goodput_samples_per_s >= b.samples_per_s * (1 - 2e-3) for b in plan.baselines)


def test_the_plan_reports_all_the_time_planning_took(tmp_path):
    plan = plan_for(objective=Objective.MIN_COST, target_samples_per_s=300,
                    options=replace(FAST, frontier_points=3, frontier_time_limit_s=5),
                    constraints=Constraints(accelerators=frozenset({"T4"})))
    s = plan.solver
    assert s.total_s >= s.wall_s + s.frontier_s + s.baselines_s > 0 and s.frontier_s > 0
    save_plan(plan, tmp_path / "plan.json")
    assert load_plan(tmp_path / "plan.json").solver == s


def test_max_gpus_per_zone_counts_accelerators_whatever_the_node_sizes():
    plan = plan_for(objective=Objective.MIN_COST, target_samples_per_s=500, options=replace(FAST, time_limit_s=15),
                    constraints=Constraints(accelerators=frozenset({"T4"}), max_gpus_per_zone=8))
    gpus: dict[str, int] = {}
    for item in plan.items:
        zone = item.offer.location.zone_scope
        gpus[zone] = gpus.get(zone, 0) + item.count * max(1, item.offer.shape.accelerator_count)
    assert max(gpus.values()) <= 8 and plan.totals.goodput_samples_per_s >= 500 * (1 - 1e-6)
    for b in plan.baselines:
        assert sum(g.count * max(1, g.offer.shape.accelerator_count) for g in b.groups
                   if g.offer.location.zone_scope == b.groups[0].offer.location.zone_scope) <= 8


@pytest.mark.parametrize("target, accelerators, per_zone, clouds, most_usd, regions", [
    (25000, {"T4", "A10G", "L4"}, 8, None, 75.0, 1),
    (12000, {"L4", "A10G"}, 4, None, 35.0, 1),
    (25000, {"L4"}, 8, {"gcp"}, 75.0, 2),
])
def test_multi_region_local_sgd_finds_the_many_region_mix(target, accelerators, per_zone, clouds, most_usd, regions):
    """Once planned at $211/h and $43.89/h: a hill-climb from the plan found 19 GCP L4 nodes in three
    regions for $71/h, and $34.27/h. With NCCL's 16 streams per ring hop on AWS, one zone of
    g5.48xlarge now does either job; on GCP (one stream per hop) only many regions reach 25,000
    samples/s: the search's region fills and group moves find them within the time."""
    options = replace(FAST, time_limit_s=20)
    clock = time.perf_counter()
    plan = plan_for(objective=Objective.MIN_COST, target_samples_per_s=target, workload="resnet50",
                    sync=SyncSettings(strategy=SyncStrategyName.LOCAL_SGD),
                    constraints=Constraints(max_nodes=400, max_nodes_per_zone=per_zone,
                                            accelerators=frozenset(accelerators),
                                            clouds=frozenset(clouds) if clouds else None), options=options)
    assert time.perf_counter() - clock <= 20 * 1.1
    assert plan.totals.goodput_samples_per_s >= target * (1 - 1e-6)
    assert plan.totals.usd_per_hour <= most_usd, [(i.offer.offer_id, i.count) for i in plan.items]
    assert len({i.offer.location.region for i in plan.items}) >= regions


def test_cli_a_search_cut_short_exits_6_with_the_fastest_mix_it_found():
    """asgd-ga on T4s at 50,000 samples/s with 5 s to search: neither found nor ruled out. One line on
    stderr, exit 6, no "out of reach" and no bound; the time limit holds (the plan's whole wall time)."""
    clock = time.perf_counter()
    result = runner.invoke(app, ["plan", "--workload", "roberta-xlm", "--strategy", "asgd-ga", "--accelerators", "T4",
                                 "--max-per-zone", "5", "--target-sps", "50000", "--time-limit", "5"])
    assert result.exit_code == 6, result.output
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and line.startswith("error: no mix found within 5 s"), line
    assert "out of reach" not in line and "at most" not in line and "the fastest mix it found:" in line
    assert time.perf_counter() - clock < 5 * 3  # the search's 5 s, the baselines and the imports

"""A mix with an on-prem site whose inventory gives measured links (a single-stream cap, a multi-stream
aggregate, an uplink): the solver's model stays a relaxation of the perf model (it never promises more
samples/s nor a lower cost for the same mix), also where the site's aggregate is what limits the round,
and the plan it certifies is the perf model's figure."""

from __future__ import annotations

import itertools

import pytest

from geotrain.domain import Constraints, JobSpec, NodeGroup, Objective, SyncSettings, SyncStrategyName
from geotrain.planning.planner import PlanOptions, build_context, make_plan, predict_groups
from geotrain.pricing.inventory import load_inventory
from geotrain.pricing.snapshot import PriceSnapshot, bundled_snapshot
from geotrain.solver import semantics

SITES = """
sites:
  - site: munich-lab
    continent: europe
    near_region: gcp/europe-west3
    uplink_gbps: 2.2
    single_stream_gbps: 0.5
    links:
      - {to: gcp/europe-west4, single_stream_gbps: 0.5, aggregate_gbps: 0.8, rtt_ms: 17}
      - {to: gcp/us-central1, single_stream_gbps: 0.06, rtt_ms: 151US_AGGREGATE}
    machines:
      - {instance_type: rtx8000-ws, accelerator: RTX8000, count: 2, vcpus: 16, memory_gib: 128}
"""


def snapshot() -> PriceSnapshot:
    table = bundled_snapshot().table
    keep = ((table.accelerator == "T4") & (table.cloud == "gcp") & (table.market == "spot")
            & table.region.isin(["europe-west4", "us-central1"]))
    rows = table[keep].sort_values(["region", "price_usd_per_hour", "zone"]).groupby("region").head(1)
    return PriceSnapshot.from_table(rows.reset_index(drop=True), label="test")


@pytest.mark.parametrize(("strategy", "us_aggregate"), [("hivemind", None), ("hivemind", 0.3), ("allreduce", None)])
def test_the_solver_model_stays_a_relaxation_with_a_sites_measured_links(tmp_path, strategy, us_aggregate):
    path = tmp_path / "sites.yaml"
    path.write_text(SITES.replace("US_AGGREGATE", f", aggregate_gbps: {us_aggregate}" if us_aggregate else ""))
    inventory = load_inventory(path)
    job = JobSpec("case", "roberta-xlm", Objective.MIN_COST, target_samples_per_s=1.0,
                  sync=SyncSettings(strategy=SyncStrategyName(strategy), target_batch_size=32768),
                  constraints=Constraints(max_nodes=6))
    ctx = build_context(job, snapshot(), inventory=inventory, options=PlanOptions(frontier_points=0))
    problem = ctx.problem
    assert {c.zone.split("/")[0] for c in problem.candidates} == {"gcp", "onprem"}
    bounds = set()
    for x in itertools.product(*[range(min(c.capacity, 3) + 1) for c in problem.candidates]):
        if not semantics.structurally_feasible(problem, x):
            continue
        truth = problem.referee.evaluate(x)
        assert semantics.throughput(problem, x) >= truth.samples_per_s * (1 - 1e-9), x
        assert semantics.hourly_cost(problem, x, truth.samples_per_s) <= truth.usd_per_hour * (1 + 1e-9) + 1e-12, x
        bottleneck = problem.referee.estimate(x).bottleneck
        bounds.add(bottleneck.what if bottleneck else None)
    if strategy == "hivemind":
        assert "link aggregate" in bounds  # the site's 0.8 Gbit/s path to europe-west4 limits some mixes
        # the site's traffic leaves at most at the sum of its paths (0.8 Gbit/s to europe-west4, and to
        # us-central1 its aggregate 0.3, else what one stream carries there, 0.06), below its 2.2 uplink
        site = next(c.zone for c in problem.candidates if c.zone.startswith("onprem/")).split("/")[1]
        assert problem.oracle.site_cap_gbps(site) == pytest.approx(0.8 + (us_aggregate or 0.06))
    # the plan the solver certifies meets its target by the perf model
    target = 0.9 * max(problem.referee.evaluate(x).samples_per_s for x in [tuple(min(c.capacity, 2)
                                                                                   for c in problem.candidates)])
    plan = make_plan(JobSpec("case", "roberta-xlm", Objective.MIN_COST, target_samples_per_s=target, sync=job.sync,
                             constraints=job.constraints), snapshot(), inventory=inventory,
                     options=PlanOptions(frontier_points=0))
    estimate = predict_groups(ctx, [NodeGroup(i.offer, i.count) for i in plan.items])
    assert estimate.goodput_samples_per_s >= target * (1 - 1e-6)
    assert plan.totals.goodput_samples_per_s == pytest.approx(estimate.goodput_samples_per_s, rel=1e-9)

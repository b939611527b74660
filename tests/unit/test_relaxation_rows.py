"""Every row of the MIP is an upper bound of the perf model, row by row, as the solver builds it.

For random mixes of random offers (up to six, over up to five regions on two continents, up to six
nodes of each), every strategy (multi-region local-sgd and ma included): the MIP with the mix's
counts fixed must be feasible at the target rate the perf model gives that mix, and its $/h at most
the perf model's. Checked with no lazy row yet (the model's first solve: its under-estimates), and
with the mix's own lazy rows added (where the search converges). A row that over-states a mix's time
or cost would make the MIP infeasible here: that is a false "out of reach" on the user's screen.
The search's own bound on the rate (``Searcher.upper_rate``, which answers "out of reach" without a
solve) is checked on the same mixes.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ortools.linear_solver import pywraplp

from geotrain.domain import Constraints, JobSpec, Objective, SyncSettings, SyncStrategyName
from geotrain.planning.planner import PlanOptions, build_context
from geotrain.pricing.snapshot import PriceSnapshot
from geotrain.solver import semantics, units
from geotrain.solver.model import TargetModel
from geotrain.solver.model.rows import Builder, Lazy
from tests.helpers import examples
from tests.unit.test_planner_referee import POOL, STRATEGIES


@st.composite
def instances(draw, strategy: str):
    rows = draw(st.lists(st.integers(0, len(POOL) - 1), min_size=2, max_size=6, unique=True))
    snapshot = PriceSnapshot.from_table(POOL.iloc[rows], label="test")
    workload = draw(st.sampled_from(["convnext-large", "roberta-xlm", "resnet50"]))
    sync = SyncSettings(strategy=SyncStrategyName(strategy), target_batch_size=draw(st.sampled_from([4096, 32768])),
                        local_steps=draw(st.sampled_from([1, 4, 32])),
                        accumulation_steps=draw(st.sampled_from([2, 16])),
                        averaging_pushes=draw(st.sampled_from([1, 8])))
    job = JobSpec("rows", workload, Objective.MIN_COST, target_samples_per_s=1.0, sync=sync,
                  constraints=Constraints(max_nodes=24))
    ctx = build_context(job, snapshot, options=PlanOptions(frontier_points=0))
    counts = tuple(draw(st.integers(0, min(c.capacity, 6))) for c in ctx.problem.candidates)
    return ctx, counts


def mip_at(problem, counts, target, lazy):  # noqa: ANN001, ANN201
    """The MIP with x fixed to ``counts``: (feasible, its $/h)."""
    solver = pywraplp.Solver.CreateSolver("CBC")
    solver.SetTimeLimit(20_000)
    model = TargetModel(problem)
    b = Builder(model.tables, solver, target, lazy)
    b.build()
    for var, n in zip(b.x, counts, strict=True):
        var.SetBounds(n, n)
    status = solver.Solve()
    if status not in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        return False, None
    return True, units.from_model_usd(solver.Objective().Value())


def converged_lazy(problem, counts) -> Lazy:  # noqa: ANN001
    model = TargetModel(problem)
    while model._refine(counts):
        pass
    return model.lazy


def check(ctx, counts) -> None:  # noqa: ANN001
    problem = ctx.problem
    if not any(counts) or not semantics.structurally_feasible(problem, counts):
        return
    truth = problem.referee.evaluate(counts)
    if truth.samples_per_s <= 0:
        return
    target = truth.samples_per_s * (1 - 1e-6)
    top = ctx.searcher().upper_rate()  # "out of reach" is said at once above it: no mix may train faster
    assert top >= target, f"{problem.oracle.strategy}: upper_rate {top:,.1f} below a mix's {truth.samples_per_s:,.1f}"
    for lazy in (Lazy(), converged_lazy(problem, counts)):
        feasible, usd = mip_at(problem, counts, target, lazy)
        where = (f"{problem.oracle.strategy}, {len(problem.regions)} regions, "
                 f"{'no lazy rows' if not lazy.pairs and not lazy.hops else 'the mix’s lazy rows'}: "
                 f"{[(c.key, n) for c, n in zip(problem.candidates, counts, strict=True) if n]}")
        assert feasible, f"the MIP cuts off a mix the perf model trains at {truth.samples_per_s:,.1f} samples/s ({where})"
        assert usd <= truth.usd_per_hour * (1 + 1e-6) + 1e-9, (
            f"the MIP prices the mix at ${usd:.4f}/h, the perf model at ${truth.usd_per_hour:.4f}/h ({where})")


SETTINGS = settings(max_examples=examples(10, 40), deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def _test(strategy: str):  # noqa: ANN202
    @SETTINGS
    @given(data=st.data())
    def test(data) -> None:  # noqa: ANN001
        check(*data.draw(instances(strategy)))
    return test


test_hivemind_rows_are_a_relaxation = _test("hivemind")
test_allreduce_rows_are_a_relaxation = _test("allreduce")
test_local_sgd_rows_are_a_relaxation = _test("local-sgd")
test_ma_rows_are_a_relaxation = _test("ma")
test_asgd_ga_rows_are_a_relaxation = _test("asgd-ga")


def test_a_multi_region_local_sgd_mix_of_many_nodes_is_kept() -> None:
    """The issue's case, small: eight nodes in each of three regions (two continents) by local-sgd."""
    regions = ("aws/us-east-1", "aws/us-west-2", "aws/eu-west-1")
    table = POOL[(POOL.cloud + "/" + POOL.region).isin(regions) & (POOL.accelerator == "A10G")]
    rows = table.sort_values("price_usd_per_hour").groupby(table.cloud + "/" + table.region).head(1)
    snapshot = PriceSnapshot.from_table(rows, label="test")
    for strategy in ("local-sgd", "ma"):
        job = JobSpec("rows", "resnet50", Objective.MIN_COST, target_samples_per_s=1.0,
                      sync=replace(SyncSettings(), strategy=SyncStrategyName(strategy)),
                      constraints=Constraints(max_nodes=24))
        ctx = build_context(job, snapshot, options=PlanOptions(frontier_points=0))
        assert len(ctx.problem.regions) == 3
        check(ctx, tuple(8 for _ in ctx.problem.candidates))

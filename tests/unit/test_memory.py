"""The GPU-memory fit check: nodes that cannot hold a replica's training state are left out, with why."""

from __future__ import annotations

import subprocess
import sys

import pytest

from geotrain.config import job_to_mapping, load_job_spec, parse_job_spec
from geotrain.domain import Constraints, JobSpec, ModelSpec, Objective
from geotrain.errors import InputError, JobSpecError
from geotrain.perf.data import data_text
from geotrain.perf.memory import MIB, MemoryTable, misfit, needed_mib
from geotrain.perf.model import PerfModel
from geotrain.perf.rates import RateTable
from geotrain.perf.workloads import Workload, WorkloadRegistry
from geotrain.planning.planner import PlanOptions, build_context
from geotrain.pricing.egress import EgressPrices
from geotrain.pricing.snapshot import bundled_snapshot
from geotrain.specfile import Fields
from tests.conftest import REPO


def test_shipped_memory_is_what_the_script_derives(shared_data, tmp_path):
    if not (shared_data / "prices" / "skypilot-catalog-aws-gpu").is_dir():
        pytest.skip("the price catalogs are not in the shared data")
    out = tmp_path / "gpu_memory.csv"
    subprocess.run([sys.executable, str(REPO / "scripts" / "derive_gpu_memory.py"), "--data-dir", str(shared_data),
                    "--out", str(out)], check=True, capture_output=True, timeout=60)
    assert out.read_text("utf-8") == data_text("gpu_memory.csv")


def test_the_state_of_a_replica_is_sixteen_bytes_a_parameter_unless_the_workload_says_otherwise():
    table = MemoryTable.bundled()
    assert table.of("T4") == 16384 and table.of("A100-80GB") == 81920 and table.of("RTX8000") is None
    big = Workload("llm-1.3b", 1_300_000_000, "nlp", 8)
    assert needed_mib(big) == pytest.approx(1_300_000_000 * 16 / MIB)  # 19.4 GiB: more than a T4's 16
    reason = misfit(big, "T4", table)
    assert reason is not None and "19.4 GiB per GPU" in reason and "T4 has 16.0 GiB" in reason
    assert misfit(big, "A100", table) is None and misfit(big, "RTX8000", table) is None  # no figure: unchecked
    lean = Workload("llm-1.3b-sgd", 1_300_000_000, "nlp", 8, state_bytes_per_parameter=8)
    assert misfit(lean, "T4", table) is None
    with_activations = Workload("cnn", 25_600_000, "cv", 32, activation_mib_per_sample=600)
    assert "activations of 32 samples" in misfit(with_activations, "T4", table)
    for w in WorkloadRegistry.bundled().names():  # every bundled workload fits where it was measured
        assert misfit(WorkloadRegistry.bundled().get(w), "T4", table) is None, w


def test_a_plan_leaves_out_nodes_too_small_for_the_model_and_says_why(tmp_path):
    rates = tmp_path / "rates.csv"
    rates.write_text("workload,accelerator,samples_per_s\nllm-1.3b,T4,30\nllm-1.3b,A100,100\n", encoding="utf-8")
    perf = PerfModel(rates=RateTable.bundled().with_file(rates), egress=EgressPrices.bundled())
    job = JobSpec("fit", "llm-1.3b", Objective.MIN_COST, target_samples_per_s=50,
                  constraints=Constraints(accelerators=frozenset({"T4", "A100"})),
                  model=ModelSpec(parameters=1_300_000_000, kind="nlp", samples_per_step=8))
    ctx = build_context(job, bundled_snapshot(), perf=perf, options=PlanOptions(frontier_points=0))
    accelerators = {ctx.candidates.offers[c.key].shape.accelerator for c in ctx.problem.candidates}
    assert accelerators == {"A100", "A100-80GB"}  # the A100 filter matches both; no T4
    reasons = [r for r in ctx.candidates.skipped if "needs 19.4 GiB per GPU" in r]
    assert reasons and ctx.candidates.skipped[reasons[0]] > 0 and "T4 has 16.0 GiB" in reasons[0]


def test_the_spec_defines_a_model_by_its_size_and_the_plan_file_keeps_it(tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text("name: mine\nworkload: llm-1.3b\ntarget_samples_per_s: 10\n"
                    "model: {parameters: 1.3B, kind: nlp, samples_per_step: 8, state_bytes_per_parameter: 12}\n",
                    encoding="utf-8")
    job = load_job_spec(spec)
    assert job.model == ModelSpec(1_300_000_000, "nlp", 8, 12.0, 0.0)
    assert parse_job_spec(Fields(job_to_mapping(job), origin="plan", error=JobSpecError), base_dir=tmp_path) == job
    assert WorkloadRegistry.bundled().for_job(job).parameters == 1_300_000_000
    spec.write_text("name: mine\nworkload: x\ntarget_samples_per_s: 10\n"
                    "model: {parameters: lots, kind: nlp, samples_per_step: 8}\n", encoding="utf-8")
    with pytest.raises(JobSpecError, match="model.parameters: 'lots' is neither a number nor a size"):
        load_job_spec(spec)


def test_a_memory_column_that_is_not_a_number_is_an_input_error(tmp_path):
    path = tmp_path / "workloads.csv"
    path.write_text("name,parameters,kind,samples_per_step,activation_mib_per_sample\nx,10,cv,8,lots\n",
                    encoding="utf-8")
    with pytest.raises(InputError, match="activation_mib_per_sample: 'lots' is not a number"):
        WorkloadRegistry.bundled().with_file(path)

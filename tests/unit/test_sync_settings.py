"""Sync settings are one domain type with one set of defaults: spec files, flags, plan files and the
launch's training all read the same values; what the runtime cannot train is refused by name."""

from __future__ import annotations

import json
from dataclasses import replace
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from geotrain.cli import app
from geotrain.config import parse_job_spec
from geotrain.domain import JobSpec, Objective, SyncSettings, SyncStrategyName
from geotrain.errors import InputError, JobSpecError
from geotrain.launcher.options import LaunchOptions
from geotrain.launcher.training import resolve_training
from geotrain.planning.planfile import load_plan, plan_from_dict, plan_to_dict
from geotrain.planning.planner import PlanOptions, plan_for_nodes
from geotrain.pricing.snapshot import bundled_snapshot
from geotrain.specfile import Fields

NODES = "aws/usw2-az1/g4dn.xlarge,aws/use1-az1/g4dn.xlarge"
runner = CliRunner()


def spec(**fields) -> JobSpec:
    data = {"name": "j", "workload": "tiny-cnn", **fields}
    return parse_job_spec(Fields(data, origin="job.yaml", error=JobSpecError), base_dir=Path("."))


def test_defaults_live_in_one_place():
    assert spec().sync == SyncSettings()
    assert spec(strategy="local-sgd").sync == SyncSettings(SyncStrategyName.LOCAL_SGD)
    got = spec(strategy="local-sgd", sync={"local_steps": 4, "precision": "bf16", "micro_batches": 2}).sync
    assert got == SyncSettings(SyncStrategyName.LOCAL_SGD, local_steps=4, precision="bf16", micro_batches=2)
    assert spec(sync={"strategy": "allreduce"}).sync.strategy is SyncStrategyName.ALLREDUCE


@pytest.mark.parametrize(("fields", "message"), [
    ({"strategy": "allreduce", "sync": {"strategy": "hivemind"}}, "contradicts strategy"),
    ({"sync": {"local_steps": 0}}, "sync.local_steps: must be a whole number >= 1"),
    ({"sync": {"precision": "fp64"}}, "sync.precision: 'fp64' is not one of"),
    ({"sync": {"local_step": 4}}, "unknown field (did you mean 'local_steps'?)"),
])
def test_bad_sync_settings_name_the_field(fields, message):
    with pytest.raises(JobSpecError, match=re.escape(message)):
        spec(**fields)


def _plan(sync: SyncSettings, workload: str = "tiny-cnn", provider: str | None = "local"):
    job = JobSpec("j", workload, Objective.MIN_COST, sync=sync, target_samples_per_s=10)
    return plan_for_nodes(job, bundled_snapshot(), NODES, options=PlanOptions(frontier_points=0, provider=provider))


def test_a_plan_file_carries_every_knob_and_what_it_was_made_for(tmp_path):
    sync = SyncSettings(SyncStrategyName.LOCAL_SGD, local_steps=5, accumulation_steps=3, target_batch_size=512,
                        precision="bf16", micro_batches=3)
    plan = _plan(sync)
    data = plan_to_dict(plan)
    assert data["job"]["sync"] == {"strategy": "local-sgd", "target_batch_size": 512, "group_size": 16, "local_steps": 5,
                                   "accumulation_steps": 3, "staleness": 1, "averaging_pushes": 16,
                                   "precision": "bf16", "micro_batches": 3}
    back = plan_from_dict(json.loads(json.dumps(data)), "plan.json")
    assert back.sync == sync and back.provider == "local" and back.recovery_h == plan.recovery_h
    # a plan from the first format still loads, its knobs moved into the job's sync settings
    old = dict(data, format="geotrain-plan/1", strategy_options={"local_steps": 7, "precision": "fp32",
                                                                 "recovery_h": 0.5})
    old.pop("planning")
    old["job"] = {k: v for k, v in data["job"].items() if k != "sync"} | {"strategy": "local-sgd"}
    legacy = plan_from_dict(old, "old.json")
    assert legacy.sync == SyncSettings(SyncStrategyName.LOCAL_SGD, local_steps=7, precision="fp32")
    assert legacy.recovery_h == 0.5 and legacy.provider is None


def test_a_local_plan_predicts_with_this_machines_cpu_rate():
    from geotrain.perf.host import LocalHost
    from geotrain.perf.rates import RateTable
    from geotrain.perf.workloads import WorkloadRegistry

    plan = _plan(SyncSettings(SyncStrategyName.ALLREDUCE))
    cpu = RateTable.bundled().node_rate(WorkloadRegistry.bundled().get("tiny-cnn"), None, 1).samples_per_s
    share = LocalHost.measured().core_share(2)
    per_node = [i.samples_per_s for i in plan.items]
    assert all(rate <= cpu * share * (1 + 1e-9) for rate in per_node)  # the T4 offers train at the CPU's rate
    assert sum(per_node) == pytest.approx(plan.totals.samples_per_s)
    assert any("predicted for the local provider" in a for a in plan.assumptions) and plan.baseline is None
    with pytest.raises(Exception, match="no compute rate for workload 'tiny-cnn' on 1 x T4"):
        _plan(SyncSettings(SyncStrategyName.ALLREDUCE), provider=None)  # no GPU rate for a CPU workload


def test_launch_trains_the_plan_or_refuses_with_the_ways_out():
    plan = _plan(SyncSettings(SyncStrategyName.LOCAL_SGD, local_steps=4, precision="fp16", micro_batches=2))
    training = resolve_training(plan, LaunchOptions())
    assert (training.workload, training.sync, training.substitutions) == ("tiny-cnn", plan.sync, ())
    assert training.global_micro_batches == 2 * plan.nodes

    convnext = _plan(SyncSettings(SyncStrategyName.HIVEMIND), workload="convnext-large", provider=None)
    assert resolve_training(convnext, LaunchOptions()).workload == "convnext-large"  # a planned model: built in
    own = replace(convnext, job=replace(convnext.job, workload="my-gpt"))  # a model of the user's own
    with pytest.raises(InputError) as refused:
        resolve_training(own, LaunchOptions())
    assert "my-gpt" in str(refused.value) and "--train-workload" in str(refused.value)
    assert "after `--`" in str(refused.value)
    hivemind = resolve_training(own, LaunchOptions(train_workload="tiny-cnn"))  # the runtime runs every strategy
    assert hivemind.sync == own.sync
    assert hivemind.substitutions == ("trains tiny-cnn instead of the planned my-gpt",)
    stand_in = resolve_training(own, LaunchOptions(train_workload="tiny-cnn", sync="local-sgd"))
    assert stand_in.workload == "tiny-cnn" and stand_in.sync.strategy is SyncStrategyName.LOCAL_SGD
    assert stand_in.substitutions == ("trains tiny-cnn instead of the planned my-gpt",
                                      "syncs with local-sgd instead of the planned hivemind")
    assert stand_in.sync.target_batch_size == own.sync.target_batch_size  # the other knobs stay the plan's
    user = resolve_training(own, LaunchOptions(command=("python", "train.py")))
    assert user.workload == "python train.py" and user.substitutions == ()
    with pytest.raises(InputError, match="--train-workload: 'resnet51' is not a built-in workload"):
        resolve_training(own, LaunchOptions(train_workload="resnet51"))
    int8 = _plan(SyncSettings(SyncStrategyName.ALLREDUCE, precision="int8"))
    with pytest.raises(InputError, match="int8 on the wire"):
        resolve_training(int8, LaunchOptions())


def test_cli_flags_override_the_spec_and_defaults_stay_the_domains(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("name: j\nworkload: tiny-cnn\nstrategy: local-sgd\nsync: {local_steps: 9}\n")
    out = tmp_path / "plan.json"
    result = runner.invoke(app, ["plan", str(path), "--provider", "local", "--target-sps", "10", "--nodes", NODES,
                                 "--precision", "fp32", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert load_plan(out).sync == SyncSettings(SyncStrategyName.LOCAL_SGD, local_steps=9, precision="fp32")
    result = runner.invoke(app, ["plan", str(path), "--provider", "local", "--target-sps", "10", "--nodes", NODES,
                                 "--strategy", "allreduce", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert load_plan(out).sync == SyncSettings(SyncStrategyName.ALLREDUCE, local_steps=9)
    bad = runner.invoke(app, ["plan", str(path), "--precision", "fp64", "--nodes", NODES, "--provider", "local"])
    assert bad.exit_code == 2 and "precision" in bad.stderr
    refused = runner.invoke(app, ["launch", str(out), "--train-workload", "resnet51"])
    assert refused.exit_code == 2 and "is not a built-in workload" in refused.stderr


def test_settings_travel_as_themselves_and_one_registry_names_both_classes_of_every_strategy():
    from geotrain.perf.model import make_strategy
    from geotrain.strategies import STRATEGIES, resolve
    from geotrain.train.sync import SyncContext, make_sync  # noqa: F401 - the runtime's side resolves

    for name in SyncStrategyName:
        sync = SyncSettings(name, precision="bf16", local_steps=3)
        assert SyncSettings.from_mapping(json.loads(json.dumps(sync.to_mapping()))) == sync
        entry = STRATEGIES[name]
        assert type(make_strategy(sync)) is resolve(entry.perf_class)
        assert hasattr(resolve(entry.runtime_class), "from_settings")
    assert set(STRATEGIES) == set(SyncStrategyName)
    assert SyncSettings.from_mapping({"strategy": "ma"}) == SyncSettings("ma")  # a knob not given: the one default
    with pytest.raises(ValueError, match="no bogus"):
        SyncSettings.from_mapping({"strategy": "ma", "bogus": 1})

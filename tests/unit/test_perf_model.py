from __future__ import annotations

import json
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geotrain.domain import SyncSettings, SyncStrategyName
from geotrain.errors import NotFoundError
from geotrain.perf.calibration import fit_hivemind, load_runs, run_groups
from geotrain.perf.data import data_text
from geotrain.perf.model import PerfModel, bundled_fit, make_strategy
from geotrain.perf.network import NetworkModel
from geotrain.perf.rates import GpuScaling, RateTable
from geotrain.perf.workloads import WorkloadRegistry
from geotrain.pricing.egress import EgressPrices
from tests.helpers import examples
from tests.perf_helpers import AWS_US, EU, US, groups, network

REGISTRY = WorkloadRegistry.bundled()
EGRESS = EgressPrices.bundled()
SYNCHRONOUS = ("hivemind", "allreduce", "local-sgd")


def test_reproduces_the_one_zone_tables_within_ten_percent():
    model = PerfModel(egress=EGRESS)
    hivemind = SyncSettings("hivemind")
    errors = {}
    for run in load_runs(data_text("calibration_runs.csv")):
        if run.peers < 2:
            continue
        predicted = model.predict(REGISTRY.get(run.workload), run_groups(run), hivemind).samples_per_s
        key = (run.accelerator, "cv" if REGISTRY.get(run.workload).kind == "cv" else "nlp")
        errors.setdefault(key, []).append(abs(predicted / run.samples_per_s - 1))
    assert {("T4", "cv"), ("T4", "nlp"), ("A10", "cv"), ("A10", "nlp")} <= set(errors)
    for key, values in errors.items():
        assert statistics.median(values) < 0.10, (key, statistics.median(values))
    assert statistics.median([e for v in errors.values() for e in v]) < 0.10


def test_single_gpu_baselines_are_exact():
    model = PerfModel(egress=EGRESS)
    for run in load_runs(data_text("calibration_runs.csv")):
        if run.peers == 1:
            estimate = model.predict(REGISTRY.get(run.workload), run_groups(run), SyncSettings("hivemind"))
            assert estimate.samples_per_s == pytest.approx(run.samples_per_s)


def test_committed_calibration_is_what_the_fit_gives():
    runs = load_runs(data_text("calibration_runs.csv"))
    fit, _ = fit_hivemind(runs, NetworkModel.bundled(), {n: REGISTRY.get(n) for n in REGISTRY.names()})
    committed = bundled_fit()
    assert fit.efficiency == committed.efficiency
    assert fit.unseen_step_s_per_gparam == committed.unseen_step_s_per_gparam
    assert fit.round_floor_s == pytest.approx(committed.round_floor_s, abs=1e-3)
    assert fit.per_peer_s == pytest.approx(committed.per_peer_s, abs=1e-3)
    assert fit.per_gparam_s == pytest.approx(committed.per_gparam_s, abs=1e-3)
    assert fit.step_s_per_gparam == pytest.approx(committed.step_s_per_gparam, abs=1e-3)
    assert fit.host_exponent == pytest.approx(committed.host_exponent, abs=1e-3)
    assert fit.host_vcpus == committed.host_vcpus
    assert json.loads(data_text("calibration.json"))["fit"]["runs"] == 42


def predict(net: NetworkModel, strategy: str, mix, workload: str = "convnext-large"):
    return PerfModel(network=net, egress=EGRESS).predict(REGISTRY.get(workload), mix, SyncSettings(strategy))


@settings(max_examples=examples(60, 300), deadline=None)
@given(
    strategy=st.sampled_from(SYNCHRONOUS),
    fast=st.floats(0.05, 10), slow_factor=st.floats(0.01, 1.0), rtt=st.floats(1, 300),
    n_us=st.integers(1, 4), n_eu=st.integers(1, 4), n_aws=st.integers(0, 3),
)
def test_slower_link_never_raises_throughput(strategy, fast, slow_factor, rtt, n_us, n_eu, n_aws):
    mix = groups((US, n_us), (EU, n_eu), *([(AWS_US, n_aws)] if n_aws else []))
    links = {(US, AWS_US): (1.5, 15.0), (EU, AWS_US): (0.2, 110.0)}
    base = predict(network({**links, (US, EU): (fast, rtt)}), strategy, mix)
    slower = predict(network({**links, (US, EU): (fast * slow_factor, rtt)}), strategy, mix)
    assert slower.samples_per_s <= base.samples_per_s * (1 + 1e-9)


@settings(max_examples=examples(40, 200), deadline=None)
@given(strategy=st.sampled_from(SYNCHRONOUS), bw=st.floats(0.05, 5), more=st.floats(1.0, 20.0),
       nic=st.floats(1, 20), n=st.integers(1, 6))
def test_more_bandwidth_never_lowers_throughput(strategy, bw, more, nic, n):
    mix = groups((US, n), (EU, 2))
    low = predict(network({(US, EU): (bw, 100.0)}, nic_gbps=nic), strategy, mix)
    high = predict(network({(US, EU): (bw * more, 100.0)}, nic_gbps=nic * more), strategy, mix)
    assert high.samples_per_s >= low.samples_per_s * (1 - 1e-9)


@pytest.mark.parametrize("strategy", ["hivemind", "allreduce"])
@pytest.mark.parametrize(("n_us", "n_eu"), [(2, 0), (1, 1), (3, 2), (4, 4)])
def test_allreduce_averaging_sends_two_n_minus_one_over_n_parameters(strategy, n_us, n_eu):
    workload = REGISTRY.get("roberta-xlm")
    mix = groups((US, n_us), *([(EU, n_eu)] if n_eu else []))
    estimate = PerfModel(network=network({(US, EU): (0.2, 103.0)}), egress=EGRESS).predict(
        workload, mix, SyncSettings(strategy, precision="fp16"))
    n = n_us + n_eu
    expected = 2 * (n - 1) / n * workload.parameters * 2
    assert estimate.bytes_per_peer_per_round == pytest.approx(expected)
    # every node sends exactly that much per round, summed over its links
    total_gb = sum(link.gb_per_hour for link in estimate.links)
    rounds_per_hour = 3600 / estimate.time_per_round_s
    assert total_gb * 1e9 / rounds_per_hour == pytest.approx(n * expected, rel=1e-9)


def test_cross_continent_link_is_the_named_bottleneck_and_costs_egress():
    net = network({(US, EU): (0.21, 103.0)})
    estimate = predict(net, "hivemind", groups((US, 4), (EU, 4)), workload="roberta-xlm")
    one_zone = predict(net, "hivemind", groups((US, 8)), workload="roberta-xlm")
    assert estimate.samples_per_s < one_zone.samples_per_s
    assert estimate.egress_usd_per_hour > 0 and one_zone.egress_usd_per_hour == 0
    assert set(estimate.egress_usd_per_hour_by_link_class) >= {"cross_continent"}
    assert estimate.granularity < one_zone.granularity
    slow = predict(network({(US, EU): (0.02, 103.0)}), "hivemind", groups((US, 4), (EU, 4)), workload="roberta-xlm")
    assert slow.bottleneck.what == "link" and slow.bottleneck.link.bandwidth_gbps == 0.02
    assert slow.usd_per_million_samples > estimate.usd_per_million_samples


def test_local_sgd_averages_less_often_than_allreduce_over_a_slow_wan():
    net = network({(US, EU): (0.1, 110.0)})
    mix = groups((US, 2), (EU, 2))
    allreduce = predict(net, "allreduce", mix)
    local = PerfModel(network=net, egress=EGRESS).predict(REGISTRY.get("convnext-large"), mix,
                                           SyncSettings("local-sgd", local_steps=64))
    assert local.samples_per_s > allreduce.samples_per_s
    assert local.egress_gb_per_hour < allreduce.egress_gb_per_hour


def test_asgd_region_is_limited_by_its_link():
    fast = predict(network({(US, EU): (5.0, 110.0)}), "asgd-ga", groups((US, 4), (EU, 4)))
    slow = predict(network({(US, EU): (0.005, 110.0)}), "asgd-ga", groups((US, 4), (EU, 4)))
    assert slow.samples_per_s < fast.samples_per_s
    home_only = predict(network({(US, EU): (5.0, 110.0)}), "asgd-ga", groups((US, 4)))
    assert slow.samples_per_s >= home_only.samples_per_s * 0.999  # a starved region adds little, never subtracts
    assert slow.bottleneck.what == "link"


def test_rates_measured_kind_ratio_datasheet_and_missing():
    rates = RateTable.bundled()
    t4 = rates.node_rate(REGISTRY.get("convnext-large"), "T4", 1)
    assert not t4.estimated and t4.samples_per_s == 80.8
    r50 = rates.node_rate(REGISTRY.get("resnet50"), "T4", 1)
    assert r50.estimated and r50.samples_per_s == pytest.approx(779 * 80.8 / 186)
    h100 = rates.node_rate(REGISTRY.get("resnet50"), "H100", 8)  # Lambda's measured ratio and scaling
    scaling = GpuScaling.parse(data_text("gpu_scaling.csv"), "gpu_scaling.csv")
    assert h100.estimated and h100.basis == "derived"
    assert h100.samples_per_s == pytest.approx(779 * scaling.ratio("H100", "cv") * 8
                                               * scaling.efficiency("H100", "cv", 8).value)
    assert h100.samples_per_s < 779 * 989 / 125 * 8  # below the datasheet-TFLOPS guess it replaces
    dgx = rates.node_rate(REGISTRY.get("roberta-xlm"), "V100", 8)
    assert not dgx.estimated and dgx.samples_per_s == 1811.4
    cpu = rates.node_rate(REGISTRY.get("tiny-cnn"), None, 0)
    assert cpu.accelerator == "CPU" and cpu.samples_per_s > 0
    with pytest.raises(NotFoundError, match="--rates"):
        rates.node_rate(REGISTRY.get("resnet50"), "K80", 1)


def test_user_rate_file_overrides(tmp_path):
    path = tmp_path / "rates.csv"
    path.write_text("workload,accelerator,samples_per_s,source\nresnet50,T4,400,my bench\n")
    rate = RateTable.bundled().with_file(path).node_rate(REGISTRY.get("resnet50"), "T4", 1)
    assert rate.samples_per_s == 400 and not rate.estimated and rate.source == "my bench"


def test_unknown_workload_suggests():
    with pytest.raises(NotFoundError, match="did you mean 'convnext-large'"):
        REGISTRY.get("convnext-larg")


def test_strategy_names():
    assert {make_strategy(SyncSettings(s)).name for s in SyncStrategyName} == set(SyncStrategyName)

"""Synthetic spot markets (geotrain.sim.markets): deterministic in (spec, seed), every grid spec replays,
and each parameter does what the module docstring says, measured on long generated series."""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime

import numpy as np
import pytest

from geotrain.errors import InputError
from geotrain.sim.job import SimJob
from geotrain.sim.market import UNLIMITED, align
from geotrain.sim.markets import (
    GRID,
    ZONES_1R_2Z,
    ZONES_1Z,
    ZONES_3CONT,
    ZONES_3R,
    ZONES_3Z_2R,
    ZONES_10,
    ZONES_H100_GCP,
    MarketSpec,
    catalog_zones,
    generate,
    utc_offset_h,
)
from geotrain.sim.world import build_world

QUIET = {"price_noise": 0.0}  # prices flat at the catalog's unless a test says otherwise


def runs(series: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lengths, values) of the runs of equal values, the first and last (cut by the window) left out."""
    edges = np.flatnonzero(series[1:] != series[:-1]) + 1
    begins, ends = np.r_[0, edges], np.r_[edges, len(series)]
    return (ends - begins)[1:-1], series[begins][1:-1]


def spells_h(spec: MarketSpec, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Up and down spell lengths (hours) pooled over the zones."""
    up, down = [], []
    for trace in generate(spec, seed):
        lengths, values = runs(trace.available > 0)
        up.append(lengths[values])
        down.append(lengths[~values])
    tick_h = spec.tick_s / 3600
    return np.concatenate(up) * tick_h, np.concatenate(down) * tick_h


def local_hours(spec: MarketSpec, trace) -> np.ndarray:
    utc_h = spec.start.hour + trace.times_s / 3600
    return np.mod(utc_h + utc_offset_h(trace.location), 24)


# --- determinism and the catalog ---------------------------------------------------------------------


def test_same_seed_same_arrays_other_seed_other_arrays():
    spec = GRID[-1]
    a, b, c = generate(spec, 7), generate(spec, 7), generate(spec, 8)
    for x, y in zip(a, b, strict=True):
        assert np.array_equal(x.available, y.available) and np.array_equal(x.spot_usd_per_hour, y.spot_usd_per_hour)
        assert np.array_equal(x.times_s, y.times_s) and x.source == y.source
    assert any(not np.array_equal(x.available, z.available) for x, z in zip(a, c, strict=True))
    assert any(not np.array_equal(x.spot_usd_per_hour, z.spot_usd_per_hour) for x, z in zip(a, c, strict=True))


def test_pieces_draw_from_streams_of_their_own():
    """Changing the spike rate leaves availability as it was; appending zones leaves the first ones as they were."""
    spec = MarketSpec(zones=ZONES_3Z_2R, capacity=4, shape=0.7, partial_share=0.3, outage_per_day=0.5)
    plain = generate(spec, 3)
    spiky = generate(dataclasses.replace(spec, spike_per_day=3.0), 3)
    wider = generate(dataclasses.replace(spec, zones=(*ZONES_3Z_2R, "aws/us-west-2/usw2-az1")), 3)
    for x, y, z in zip(plain, spiky, wider, strict=False):
        assert np.array_equal(x.available, y.available)
        assert np.array_equal(x.available, z.available)


def test_traces_follow_the_zone_trace_contract():
    spec = MarketSpec(zones=ZONES_3R, days=2.0, tick_s=300.0, start=datetime(2024, 3, 5, 6, 30, tzinfo=UTC))
    traces = generate(spec, 1)
    assert [t.location.zone_scope for t in traces] == list(ZONES_3R)
    for t in traces:
        assert t.start == spec.start and t.instance_type == "p3.2xlarge"
        assert np.array_equal(t.times_s, np.arange(spec.ticks) * 300.0) and spec.ticks == 576
        assert t.on_demand_usd_per_hour is None and t.accelerator == "V100" and t.accelerator_count == 1
        assert t.source == f"generated:{spec.name} seed 1"
        assert t.available.dtype == np.int64 and t.spot_usd_per_hour.dtype == np.float64
    market = align(traces, tick_s=spec.tick_s)
    assert market.ticks == spec.ticks and market.start == spec.start


def test_default_zone_sets_are_in_the_catalog():
    v100 = set(catalog_zones("p3.2xlarge"))
    for zones in (ZONES_3Z_2R, ZONES_3R, ZONES_1R_2Z, ZONES_1Z, ZONES_3CONT, ZONES_10):
        assert set(zones) <= v100
    assert set(ZONES_H100_GCP) <= set(catalog_zones("a3-highgpu-1g"))
    assert "gcp/us-central1" in catalog_zones("a3-highgpu-8g")  # a region-wide price: the region is the scope


def test_a_region_wide_catalog_price_makes_a_region_scoped_zone():
    spec = MarketSpec(instance_type="a3-highgpu-8g", zones=("gcp/us-central1", "gcp/us-east4"), days=1.0)
    traces = generate(spec, 0)
    assert [t.location.zone for t in traces] == ["", ""] and traces[0].accelerator_count == 8


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"zones": ("aws/us-east-1/use1-az9",)}, "use1-az9"),  # no such zone
    ({"zones": ("aws/us-east-1/use1-az3",)}, "use1-az3"),  # an on-demand row only, no spot row
    ({"instance_type": "p9.nonsense"}, "p9.nonsense"),
    ({"instance_type": "a3-highgpu-8g", "zones": ("gcp/us-central1/us-central1-a",)}, "us-central1-a"),
])
def test_a_zone_without_a_catalog_spot_price_is_refused(kwargs, words):
    with pytest.raises(InputError, match=words):
        generate(MarketSpec(**kwargs), 0)


@pytest.mark.parametrize("kwargs", [
    {"zones": ()}, {"zones": ("use1-az1",)}, {"zones": (ZONES_3R[0], ZONES_3R[0])}, {"shape": 0.0},
    {"days": 0.0}, {"tick_s": -1.0}, {"capacity": -1}, {"capacity": 2.5}, {"diurnal_amplitude": 1.5},
    {"flap_zones": 4}, {"flap_episode_share": 0.0}, {"spike_factor": 0.5}, {"up_mean_h": float("nan")},
    {"days": 0.001},
])
def test_impossible_parameters_are_refused(kwargs):
    with pytest.raises(InputError):
        MarketSpec(**kwargs)


def test_a_negative_seed_is_refused():
    with pytest.raises(InputError, match="seed"):
        generate(MarketSpec(days=1.0), -1)


# --- the grid ---------------------------------------------------------------------------------------------


def test_the_grid_spans_the_regimes():
    assert 8 <= len(GRID) <= 14
    assert len({s.name for s in GRID}) == len(GRID)
    assert any(s.flag and len(s.zones) == 2 and len(s.regions) == 1 for s in GRID)
    # one zone with nowhere to fail over to, flapping, for one node and for a gang of 16
    assert any(s.flag and len(s.zones) == 1 and s.flap_zones for s in GRID)
    assert any(s.capacity == 16 and len(s.zones) == 1 and s.flap_zones for s in GRID)
    assert any(s.capacity == 4 and len(s.regions) == 3 for s in GRID)
    assert any(s.capacity == 16 and len(s.zones) == 3 and len(s.regions) == 2 and s.partial_share > 0 for s in GRID)
    assert any(s.flap_zones for s in GRID) and any(s.shape < 1 for s in GRID)
    assert any(s.outage_per_day for s in GRID) and any(s.diurnal_amplitude for s in GRID)
    assert any(s.spike_per_day for s in GRID) and any(s.instance_type == "a3-highgpu-1g" for s in GRID)
    for s in GRID:  # spells of minutes to days
        assert min(s.up_mean_h, s.down_mean_h, s.flap_up_h, s.flap_down_h) >= 0.1 and s.up_mean_h <= 72


@pytest.mark.parametrize("spec", GRID, ids=[s.name for s in GRID])
def test_every_grid_spec_generates_aligns_and_replays(spec):
    traces = generate(spec, 0)
    market = align(traces, tick_s=spec.tick_s)
    assert market.available.shape == (len(spec.zones), spec.ticks)
    nodes = max(1, spec.capacity)
    world = build_world(market, SimJob(name="t", workload="resnet50", nodes=nodes, deadline_h=24,
                                       work_gpu_hours=12.0 * nodes))
    assert world.zones == len(spec.zones) and np.all(np.isfinite(world.spot_usd_per_hour))
    assert all(od is not None for od in world.on_demand)
    assert world.work_samples > 0


def test_a_two_week_ten_zone_market_takes_well_under_a_tenth_of_a_second():
    spec = GRID[-1]
    assert len(spec.zones) == 10 and spec.days == 14 and spec.tick_s == 600
    generate(spec, 0)  # the catalog is read once
    best = min(_timed(spec, seed) for seed in range(5))
    assert best < 0.1


def _timed(spec: MarketSpec, seed: int) -> float:
    start = time.perf_counter()
    generate(spec, seed)
    return time.perf_counter() - start


# --- the parameters do what they say ----------------------------------------------------------------------


@pytest.mark.parametrize(("shape", "tolerance"), [(1.0, 0.1), (0.5, 0.2)])
def test_spell_lengths_have_the_given_means(shape, tolerance):
    spec = MarketSpec(zones=ZONES_10, capacity=0, days=120.0, up_mean_h=8.0, down_mean_h=2.0, shape=shape, **QUIET)
    up, down = spells_h(spec, 11)
    assert up.mean() == pytest.approx(8.0, rel=tolerance)
    assert down.mean() == pytest.approx(2.0, rel=tolerance)


def test_a_shape_below_one_is_heavy_tailed():
    def spread(shape: float) -> tuple[float, float]:
        up, _ = spells_h(MarketSpec(zones=ZONES_10, capacity=0, days=60.0, shape=shape, **QUIET), 2)
        return up.std() / up.mean(), float(np.mean(up <= 1.0))

    cv_exp, short_exp = spread(1.0)
    cv_heavy, short_heavy = spread(0.5)
    assert cv_exp == pytest.approx(1.0, abs=0.15)  # exponential
    assert cv_heavy > 1.6 and short_heavy > 2 * short_exp  # many short spells, a few very long ones


def test_zone_spread_makes_zones_unlike():
    def shares(spread: float) -> np.ndarray:
        spec = MarketSpec(zones=ZONES_10, capacity=0, days=60.0, zone_spread=spread, **QUIET)
        return np.array([np.mean(t.available > 0) for t in generate(spec, 4)])

    assert shares(0.0).std() < 0.05
    assert shares(1.0).std() > 2 * shares(0.0).std()


def test_flapping_zones_have_many_more_spells():
    spec = MarketSpec(zones=ZONES_3Z_2R, capacity=0, days=60.0, flap_zones=1, flap_up_h=0.2, flap_down_h=0.2, **QUIET)
    counts = [len(runs(t.available > 0)[0]) for t in generate(spec, 5)]
    assert counts[2] > 10 * max(counts[:2])  # the last zone flaps
    episodic = dataclasses.replace(spec, flap_episode_share=0.3, flap_episode_h=6.0)
    traces = generate(episodic, 5)
    some = [len(runs(t.available > 0)[0]) for t in traces]
    assert some[:2] == counts[:2]  # the others are as they were
    assert 3 * max(counts[:2]) < some[2] < counts[2]  # flapping a third of the time


def test_regional_outages_take_every_zone_of_the_region_at_the_same_ticks():
    spec = MarketSpec(zones=ZONES_3R, capacity=4, days=60.0, up_mean_h=1e4, down_mean_h=0.5, outage_per_day=1.0,
                      outage_h=3.0, **QUIET)  # zones that are seldom down on their own
    calm = generate(dataclasses.replace(spec, outage_per_day=0.0), 6)  # the same spells, no outage
    stormy = generate(spec, 6)
    out: dict[str, np.ndarray] = {}  # per region: the ticks an outage took some zone of it
    for c, s in zip(calm, stormy, strict=True):
        region = c.location.region_scope
        out[region] = out.get(region, np.zeros(spec.ticks, bool)) | ((s.available == 0) & (c.available > 0))
    for c, s in zip(calm, stormy, strict=True):  # every zone of the region: its own zeros and the outages'
        assert np.array_equal(s.available == 0, (c.available == 0) | out[c.location.region_scope])
        assert np.array_equal(s.available[s.available > 0], c.available[s.available > 0])
    for region, mask in out.items():
        assert np.mean(mask) == pytest.approx(1 - np.exp(-3.0 / 24), abs=0.05), region  # Poisson coverage
    masks = list(out.values())
    assert not np.array_equal(masks[0], masks[1]) and not np.array_equal(masks[1], masks[2])


@pytest.mark.parametrize("capacity", [0, 8])
def test_diurnal_dips_lower_business_hours(capacity):
    spec = MarketSpec(zones=ZONES_1R_2Z, capacity=capacity, days=60.0, diurnal_amplitude=0.6, **QUIET)

    def business_and_night(s: MarketSpec) -> tuple[float, float]:
        nodes, hours = [], []
        for t in generate(s, 9):
            nodes.append(np.where(t.available == UNLIMITED, 1, t.available))
            hours.append(local_hours(s, t))
        nodes, hours = np.concatenate(nodes), np.concatenate(hours)
        return nodes[(hours >= 11) & (hours < 17)].mean(), nodes[hours < 6].mean()

    business, night = business_and_night(spec)
    assert business < 0.65 * night  # a dip of up to 60 % (about 50 % over 11:00-17:00)
    business, night = business_and_night(dataclasses.replace(spec, diurnal_amplitude=0.0))
    assert business == pytest.approx(night, rel=0.15)


def test_diurnal_dips_follow_each_region_s_local_time():
    spec = MarketSpec(zones=ZONES_3CONT, capacity=8, days=30.0, up_mean_h=1e4, down_mean_h=0.5,
                      diurnal_amplitude=0.8, **QUIET)
    for t in generate(spec, 1):
        utc_h = np.floor(np.mod(t.times_s / 3600, 24)).astype(int)
        profile = np.array([t.available[utc_h == h].mean() for h in range(24)])
        deepest_local = (int(np.argmin(profile)) + utc_offset_h(t.location)) % 24
        assert 12 <= deepest_local <= 16, t.location.region  # the dip peaks at 14:00 local


def test_counts_stay_within_capacity_and_partial_levels_take_their_share():
    spec = MarketSpec(zones=ZONES_3R, capacity=16, days=60.0, partial_share=0.3, partial_h=2.0, **QUIET)
    traces = generate(spec, 12)
    up = np.concatenate([t.available[t.available > 0] for t in traces])
    assert up.max() <= 16 and up.min() >= 1
    assert np.mean(up < 16) == pytest.approx(0.3, abs=0.08)
    assert len(np.unique(up[up < 16])) >= 10  # levels 1 … 15
    whole = generate(dataclasses.replace(spec, partial_share=0.0), 12)
    assert set(np.unique(np.concatenate([t.available for t in whole]))) == {0, 16}


def test_flag_traces_hold_only_zero_and_unlimited():
    spec = MarketSpec(zones=ZONES_10, capacity=0, days=30.0, flap_zones=2, partial_share=0.5, outage_per_day=0.5,
                      diurnal_amplitude=0.5)
    for t in generate(spec, 3):
        assert set(np.unique(t.available)) <= {0, UNLIMITED} and t.flag


def test_prices_move_around_the_catalog_and_spikes_raise_them_never_above_on_demand():
    spec = MarketSpec(zones=ZONES_3CONT, days=60.0, price_noise=0.1, price_reversion_h=12.0)
    world = build_world(align(generate(dataclasses.replace(spec, price_noise=0.0), 0), tick_s=600),
                        SimJob(name="t", workload="resnet50", nodes=1, deadline_h=24, work_gpu_hours=1.0))
    catalog = world.spot_usd_per_hour[:, 0]  # flat: the catalog's spot price of each zone
    assert np.all(world.spot_usd_per_hour == catalog[:, None])
    on_demand = np.array([o.price_usd_per_hour for o in world.on_demand])
    plain = np.array([t.spot_usd_per_hour for t in generate(spec, 0)])
    assert np.median(plain, axis=1) == pytest.approx(catalog, rel=0.05)
    assert np.std(np.log(plain), axis=1) == pytest.approx(0.1, rel=0.35)
    spiky = np.array([t.spot_usd_per_hour for t in generate(dataclasses.replace(spec, spike_per_day=2.0,
                                                                                spike_factor=3.0), 0)])
    assert np.all(spiky >= plain) and np.mean(spiky > plain) > 0.03  # the same wiggle, spikes on top
    assert spiky.mean() > 1.05 * plain.mean()
    assert np.all(spiky <= on_demand[:, None]) and np.all(plain <= on_demand[:, None])
    capped = np.array([t.spot_usd_per_hour for t in generate(dataclasses.replace(spec, spike_per_day=5.0,
                                                                                 spike_factor=50.0), 0)])
    assert np.any(capped == on_demand[:, None]) and np.all(capped <= on_demand[:, None])


def test_the_name_describes_the_parameters():
    spec = MarketSpec(zones=ZONES_3Z_2R, capacity=16, up_mean_h=8, down_mean_h=2, shape=0.6, flap_zones=1,
                      outage_per_day=0.5, price_noise=0.0)
    assert spec.name == "3z/2r cap16 up8h/down2h k0.6 flap1 out0.5/d"
    assert MarketSpec(capacity=0, price_noise=0.0).name == "3z/2r flag up8h/down2h k1"

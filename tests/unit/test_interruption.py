"""Interruption signals: Spot Advisor bands → rates, and statistics of availability traces."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest

from geotrain.pricing.interruption import (
    HOURS_PER_MONTH,
    SPOT_ADVISOR_BANDS,
    ProbeStats,
    TraceStats,
    band_label,
    capacity_from_probes,
    interruptions_per_hour_for_band,
    rate_from_monthly_share,
    stats_from_availability,
    stats_from_probes,
)

T0 = datetime(2023, 2, 15, 0, 0, tzinfo=timezone.utc)


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


# --- Spot Advisor bands --------------------------------------------------------------------------


def test_bands_follow_the_feed_indices_and_labels():
    assert [b.index for b in SPOT_ADVISOR_BANDS] == [0, 1, 2, 3, 4]
    assert [band_label(i) for i in range(5)] == ["<5%", "5-10%", "10-15%", "15-20%", ">20%"]


def test_closed_bands_are_represented_by_their_midpoint_and_the_open_one_by_25_percent():
    for band in SPOT_ADVISOR_BANDS[:-1]:
        assert band.representative == pytest.approx((band.low + band.high) / 2)
        assert band.low <= band.representative <= band.high
    last = SPOT_ADVISOR_BANDS[-1]
    assert last.high is None and last.low == 0.20 and last.representative == 0.25


def test_band_rate_is_the_constant_hazard_of_the_monthly_share():
    # hand-computed: -ln(1 - 0.025) / 730 = 0.0253178... / 730
    assert interruptions_per_hour_for_band("<5%") == pytest.approx(0.025317807984 / 730, rel=1e-9)
    assert interruptions_per_hour_for_band(">20%") == pytest.approx(-math.log(0.75) / 730)
    # the rate reproduces the share over a month: 1 - exp(-λ·730) = p
    for band in SPOT_ADVISOR_BANDS:
        rate = interruptions_per_hour_for_band(band.label)
        assert 1 - math.exp(-rate * HOURS_PER_MONTH) == pytest.approx(band.representative)


def test_band_rates_increase_with_the_band():
    rates = [interruptions_per_hour_for_band(b.label) for b in SPOT_ADVISOR_BANDS]
    assert all(r > 0 for r in rates)
    assert rates == sorted(rates) and len(set(rates)) == len(rates)


@pytest.mark.parametrize("label", ["", "none", "trace", "<5", "20%", "5–10%"])
def test_unknown_band_labels_are_refused(label):
    with pytest.raises(ValueError, match="not a Spot Advisor band"):
        interruptions_per_hour_for_band(label)


@pytest.mark.parametrize("index", [-1, 5, 1.0, True, "0"])
def test_bad_band_indices_are_refused(index):
    with pytest.raises(ValueError):
        band_label(index)


def test_rate_from_monthly_share_edges():
    assert rate_from_monthly_share(0.0) == 0.0
    with pytest.raises(ValueError):
        rate_from_monthly_share(1.0)
    with pytest.raises(ValueError):
        rate_from_monthly_share(-0.1)


def test_bands_are_frozen():
    with pytest.raises(AttributeError):
        SPOT_ADVISOR_BANDS[0].representative = 0.5  # type: ignore[misc]


# --- availability traces -------------------------------------------------------------------------


def test_hand_computed_trace():
    # up 0-2 h, down 2-3 h, up 3-7 h, down 7-8 h, closing sample at 8 h
    times = [at(0), at(2), at(3), at(7), at(8)]
    up = [True, False, True, False, False]
    stats = stats_from_availability(times, up)
    assert isinstance(stats, TraceStats)
    assert stats.observed_h == pytest.approx(8.0)
    assert stats.available_h == pytest.approx(6.0)
    assert stats.availability == pytest.approx(0.75)
    assert stats.preemptions == 2
    assert stats.mean_time_between_preemptions_h == pytest.approx(3.0)
    assert stats.interruptions_per_hour == pytest.approx(2 / 6)


def test_each_sample_holds_until_the_next_so_the_last_one_only_closes_the_window():
    a = stats_from_availability([at(0), at(1)], [True, False])
    b = stats_from_availability([at(0), at(1)], [True, True])
    assert a.availability == b.availability == 1.0
    assert a.preemptions == 1 and b.preemptions == 0


def test_unequal_spacing_is_time_weighted():
    stats = stats_from_availability([at(0), at(0.5), at(10)], [False, True, True])
    assert stats.availability == pytest.approx(9.5 / 10)


def test_no_preemptions():
    stats = stats_from_availability([at(0), at(1), at(2)], [True, True, True])
    assert stats.preemptions == 0
    assert stats.mean_time_between_preemptions_h is None
    assert stats.interruptions_per_hour == 0.0
    assert stats.availability == 1.0


def test_never_available():
    stats = stats_from_availability([at(0), at(5)], [False, False])
    assert stats.availability == 0.0 and stats.available_h == 0.0
    assert stats.interruptions_per_hour == 0.0 and stats.preemptions == 0


def test_unavailable_to_available_is_not_a_preemption():
    stats = stats_from_availability([at(0), at(1), at(2), at(3)], [False, True, True, True])
    assert stats.preemptions == 0


def test_single_sample():
    assert stats_from_availability([at(0)], [True]).availability == 1.0
    assert stats_from_availability([at(0)], [False]).availability == 0.0


def test_equal_timestamps_are_allowed():
    stats = stats_from_availability([at(0), at(0), at(2)], [False, True, False])
    assert stats.availability == pytest.approx(1.0)
    assert stats.preemptions == 1


def test_empty_trace_is_refused():
    with pytest.raises(ValueError, match="empty"):
        stats_from_availability([], [])


def test_unsorted_trace_is_refused():
    with pytest.raises(ValueError, match="not sorted"):
        stats_from_availability([at(0), at(2), at(1)], [True, True, False])


def test_mismatched_lengths_are_refused():
    with pytest.raises(ValueError):
        stats_from_availability([at(0), at(1)], [True])


# --- launch probes -------------------------------------------------------------------------------


def test_probes_give_availability_only():
    stats = stats_from_probes([at(0), at(1), at(2), at(4)], [True, False, True, True])
    assert isinstance(stats, ProbeStats)
    assert not hasattr(stats, "preemptions")
    assert stats.availability == pytest.approx(3 / 4)
    assert (stats.probes, stats.successes) == (4, 3)


def test_probes_refuse_bad_input():
    with pytest.raises(ValueError):
        stats_from_probes([], [])
    with pytest.raises(ValueError):
        stats_from_probes([at(1), at(0)], [True, True])


def test_capacity_from_probes_is_an_observed_lower_median():
    assert capacity_from_probes([16, 0, 8, 16]) == 8
    assert capacity_from_probes([3]) == 3
    assert capacity_from_probes([0, 0, 16]) == 0
    with pytest.raises(ValueError):
        capacity_from_probes([])
    with pytest.raises(ValueError):
        capacity_from_probes([1, -1])

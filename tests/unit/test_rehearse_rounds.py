"""How a rehearsal times a rank's round from its progress windows (``SYNC_ROUNDS`` events): the
steady state, without the start-up's window nor the run's final synchronisation."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from geotrain.app.rehearse import _mean_round


def windows(*rows: tuple[int, float]) -> list[SimpleNamespace]:
    return [SimpleNamespace(detail={"rounds": n, "round_s": s}) for n, s in rows]


def test_the_first_window_with_rounds_and_the_last_are_left_out():
    assert _mean_round(windows((2, 1.0), (5, 0.8), (4, 0.64), (2, 1.0))) == pytest.approx(1.44 / 9)


def test_a_rank_whose_first_report_came_before_its_first_round_leaves_out_that_round_too():
    # a link-bound region: its first window is empty, its second holds the first pushes (no reply waited for)
    assert _mean_round(windows((0, 0.0), (2, 0.25), (5, 0.8), (2, 1.0))) == pytest.approx(0.16)


def test_with_too_few_windows_what_has_rounds_is_used():
    assert _mean_round(windows((2, 0.25), (2, 1.0))) == pytest.approx(0.5)
    assert _mean_round(windows((3, 0.3))) == pytest.approx(0.1)
    assert _mean_round(windows((0, 0.0))) != _mean_round(windows((0, 0.0)))  # nan: no round at all


def test_mas_start_up_is_two_rounds():
    # ma's first average is waited for one round later: the second round carries the start-up's wait
    got = windows((1, 0.35), (1, 0.59), (1, 0.32), (1, 0.33), (1, 0.44))
    assert _mean_round(got, startup_rounds=2) == pytest.approx(0.325)
    assert _mean_round(got) == pytest.approx((0.59 + 0.32 + 0.33) / 3)
    # windows of several rounds: the start-up's rounds may share the first window
    assert _mean_round(windows((2, 0.9), (2, 0.64), (2, 0.8)), startup_rounds=2) == pytest.approx(0.32)

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

"""The runtime's hivemind estimate of the other peers' samples in a round (Hivemind's progress
tracker's rule): what each peer told, plus its rate times the age of its last word."""

from __future__ import annotations

import pytest

from geotrain.train.sync.hivemind import Heard, estimated_samples

RATES = {1: 1000.0, 2: 500.0}  # samples/s, as the peers last told them


def test_a_peer_heard_from_counts_what_it_told_plus_its_rate_since_it_spoke():
    heard = {1: Heard(samples=64, at=10.0, samples_per_s=800.0), 2: Heard(samples=32, at=10.05, samples_per_s=400.0)}
    # 64 + 800·0.1 and 32 + 400·0.05: the rate of the round's own word, not the last round's
    assert estimated_samples(heard, RATES, since=9.9, now=10.1) == pytest.approx(144 + 52)


def test_a_peer_that_ended_the_round_counts_only_what_it_told():
    heard = {1: Heard(samples=64, at=10.0, samples_per_s=0.0, ended=True),
             2: Heard(samples=32, at=10.0, samples_per_s=400.0)}
    assert estimated_samples(heard, RATES, since=9.9, now=10.5) == pytest.approx(64 + 32 + 200)


def test_a_peer_not_heard_from_yet_started_when_this_one_did_at_its_last_rate():
    # its first word is still on the link: 0.2 s into the round, at 500 samples/s
    assert estimated_samples({1: Heard(16, 10.0, 1000.0)}, RATES, since=9.9, now=10.1) == pytest.approx(
        16 + 100 + 100)
    # the first round: no rate known yet, nothing extrapolated
    assert estimated_samples({}, {1: 0.0, 2: 0.0}, since=0.0, now=5.0) == 0.0


def test_a_clock_behind_the_speakers_adds_nothing_rather_than_taking_samples_away():
    heard = {1: Heard(samples=64, at=10.3, samples_per_s=800.0), 2: Heard(samples=32, at=10.2, samples_per_s=400.0)}
    assert estimated_samples(heard, RATES, since=10.4, now=10.1) == pytest.approx(96)

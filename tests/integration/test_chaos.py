"""Chaos: the launcher killed in every phase and resumed from a new session, preemptions in every phase
with and without notice, on rank 0 and others, several at once. Every run must end completed with the
uninterrupted run's weights, every preemption recorded once, no work lost beyond the last commit, no
node launched twice or left running, no process of the run alive and no temporary file left
(``tests/chaos.py`` has the checks; ``bench/chaos.py`` runs a longer campaign)."""

from __future__ import annotations

import pytest

from tests.chaos import Scenario, reference_weights, run_scenario

pytestmark = pytest.mark.slow

SCENARIOS = [
    Scenario("killed while the first nodes launch", kill_at="launching"),
    Scenario("killed mid-training, preempted with notice after", trace=[{"at_step": 20, "node": 1, "notice_s": 1}],
             kill_at="training"),
    Scenario("killed mid-checkpoint", kill_at="checkpoint"),
    Scenario("rank 0 preempted without notice, killed mid-recovery", trace=[{"at_step": 10, "node": 0}],
             kill_at="recovery"),
    Scenario("two preempted at once, killed while the replacement boots",
             trace=[{"at_step": 12, "node": 0}, {"at_step": 12, "node": 1, "notice_s": 0.5}], kill_at="replacement"),
    Scenario("a notice while the workers start, no restart budget",
             trace=[{"at_s": 0.0, "node": 1, "notice_s": 3}], max_restarts=0),
    Scenario("a preemption mid-checkpoint, killed just before completion",
             trace=[{"during_checkpoint": True, "at_step": 16}], kill_at="finishing"),
]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return reference_weights(tmp_path_factory.mktemp("chaos-reference"))


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_every_fault_ends_in_the_uninterrupted_result_with_nothing_lost_or_left(scenario, reference, tmp_path):
    result = run_scenario(scenario, tmp_path, reference)
    assert result.failures == [], result
    assert result.recovered and result.weights_equal
    if scenario.kill_at:
        assert result.kills == 1, f"the launcher was never caught in phase {scenario.kill_at}"
    assert result.recorded == result.preempted_nodes >= (1 if scenario.trace else 0)

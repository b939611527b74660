"""Each strategy over a shaped link between two regions (100 ms RTT, 50 Mbit/s, emulated with
network namespaces, a delay line and htb): the round time measured against the perf model's for the
same nodes at their measured compute rates, with what geotrain's runtime costs beyond the model's
terms (``perf/data/protocol.json``: fitted by ``bench/wan.py --write`` at 200 Mbit/s; round trips for
allreduce over gloo and asgd-ga's pushes, seconds for the strategies over the runtime's WAN transport).

Stated tolerance: the measured round is within 0.8× to 1.25× the model's (it was 0.7× to 1.4× before
the WAN transport; measured when written, two runs of each strategy: 0.92–1.04×; the bench's figures
are in the README; this test runs 16 steps a strategy, 32 for ma, 96 for asgd-ga). Needs root; skipped
otherwise (CI runs as root)."""

from __future__ import annotations

import pytest

from geotrain.domain import Continent, Location, SyncSettings
from geotrain.wan import Link, privileges

REASON = privileges()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(REASON is not None, reason=f"no emulated WAN here: {REASON}")]

EAST = Location("aws", "us-east-1", "use1-az1", Continent.NORTH_AMERICA)
EUROPE = Location("aws", "eu-west-1", "euw1-az1", Continent.EUROPE)
RTT_MS, RATE_MBIT = 100.0, 50.0


# steps a strategy runs: 16 unless its timed window needs more (see the test)
STEPS = {"ma": 32, "asgd-ga": 96}


def _link(a: Location, b: Location) -> Link:
    return Link(rtt_ms=0.2, rate_mbit=1000) if a.region == b.region else Link(rtt_ms=RTT_MS, rate_mbit=RATE_MBIT)


# not hivemind: it runs on the Hivemind library, predicted with the planner's fit of it, and its rounds
# here are not steady enough for a tolerance (tiny-lm, a target batch of 256: 2.73 s a round against the
# model's 2.58 s in one run, 21.3 s in the next, when matchmaking missed and peers waited for the averaging
# timeout; each node's core share also runs Hivemind's DHT, daemon and averager processes)
@pytest.mark.parametrize("strategy", ["allreduce", "local-sgd", "asgd-ga", "ma"])
def test_each_strategys_round_over_a_shaped_link_is_the_models_within_the_tolerance(strategy):
    from geotrain.app.rehearse import rehearse_topology

    sync = SyncSettings(strategy=strategy, local_steps=4, averaging_pushes=4, accumulation_steps=4,
                        target_batch_size=256)
    # ma's first two rounds are its start-up (its first average lands a round later), so 16 steps left two
    # rounds to time and one slow round decided the test (1.25x in one CI run, 0.92-1.01x in four here);
    # 32 steps time six.
    # asgd-ga's regions keep their own pace: the link-bound region pushes about once for every 3 of the
    # home's rounds, so its run is longer, for a steady progress window of the slowest region between its
    # first (no reply waited for yet) and its last (the run's final synchronisation): at 48 steps it had
    # two windows, and its round was the start-up's or the end's
    got = rehearse_topology([EAST, EUROPE], _link, sync, steps=STEPS.get(strategy, 16))
    assert got.rounds >= 4 and all(rate > 0 for rate in got.compute_samples_per_s)
    assert got.cores_per_node is not None  # each node held to its share of the cores (geotrain.wan.cpu)
    assert got.round_s >= RTT_MS / 1e3  # every round waits on the link at least once
    ratio = got.round_s / got.predicted_round_s
    assert 0.8 <= ratio <= 1.25, f"{strategy}: measured {got.round_s:.3f} s a round, model {got.predicted_round_s:.3f} s"
    crossing = [link for link in got.links if link.link_class == "cross_continent"]
    assert len(crossing) == 2 and all(link.bytes_per_s > 0 for link in crossing)

"""The runtime's measured protocol terms (``geotrain.perf.protocol.Protocol``): round trips added to the
round of a synchronous strategy and to each push of asgd-ga, whose home region's compute pays none;
seconds added to a round of a strategy over the WAN transport, across places only."""

from __future__ import annotations

import pytest

from geotrain.domain import Continent, Location, link_class
from geotrain.perf.network import LinkEstimate
from geotrain.perf.protocol import Protocol
from geotrain.perf.strategies import AllReduce, AsgdGA, LocalSGD, ModelAveraging, PeerGroup, Topology
from geotrain.perf.workloads import WorkloadRegistry

US = Location("aws", "us-east-1", "use1-az1", Continent.NORTH_AMERICA)
EU = Location("aws", "eu-west-1", "euw1-az1", Continent.EUROPE)
RTT_MS, GBPS, W = 100.0, 0.2, 200e3  # the link, and a payload of 200 kB
TINY_LM = WorkloadRegistry.bundled().get("tiny-lm")


def _topology(us_rate: float, eu_rate: float) -> Topology:
    def link(a: Location, b: Location) -> LinkEstimate:
        same = a.region == b.region
        return LinkEstimate(bandwidth_gbps=1.0 if same else GBPS, rtt_ms=0.2 if same else RTT_MS,
                            link_class=link_class(a, b), bandwidth_measured=False, rtt_measured=False, source="test",
                            aggregate_gbps=None if same else GBPS)  # the pair's streams share GBPS

    return Topology([PeerGroup(US, 1, us_rate, 16), PeerGroup(EU, 1, eu_rate, 16)], link, lambda site: None)


def test_asgd_ga_pays_the_round_trips_in_the_link_bound_regions_push_and_not_in_the_home_regions_compute():
    k = 3.0
    topo = _topology(us_rate=2000.0, eu_rate=1000.0)  # US is home: the most compute
    bare = AsgdGA(4).cost(topo, W, TINY_LM)
    got = Protocol("test", (("asgd-ga", k),)).cost(AsgdGA(4), topo, W, TINY_LM)
    push = 2 * W * 8 / (GBPS * 1e9) + RTT_MS / 1e3
    step_eu = 16 / 1000.0
    assert push > 4 * step_eu  # EU is bound by its link
    home_samples = 2000.0  # the home region trains at its compute rate, A steps a cycle
    assert bare.samples_per_s == pytest.approx(home_samples + 4 * 16 / push, rel=1e-3)
    assert got.samples_per_s == pytest.approx(home_samples + 4 * 16 / (push + k * RTT_MS / 1e3), rel=1e-3)
    assert got.time_per_round_s == pytest.approx(push + k * RTT_MS / 1e3, rel=1e-3)
    # the old rule (every sample scaled by the round's growth) would take most of the home's rate away
    assert got.samples_per_s > bare.samples_per_s * push / (push + k * RTT_MS / 1e3) * 1.5


def test_a_synchronous_strategy_pays_the_round_trips_in_its_round_and_its_samples():
    k = 2.5
    topo = _topology(1000.0, 1000.0)
    bare = AllReduce().cost(topo, W, TINY_LM)
    got = Protocol("test", (("allreduce", k),)).cost(AllReduce(), topo, W, TINY_LM)
    assert got.time_per_round_s == pytest.approx(bare.time_per_round_s + k * RTT_MS / 1e3)
    assert got.samples_per_s == pytest.approx(bare.samples_per_s * bare.time_per_round_s / got.time_per_round_s)
    assert Protocol().cost(AllReduce(), topo, W, TINY_LM) == bare  # nothing measured: no term


def test_a_strategy_over_the_wan_transport_pays_its_seconds_across_places_and_nothing_in_one():
    c = 0.05
    topo = _topology(1000.0, 1000.0)
    bare = ModelAveraging(4).cost(topo, W, TINY_LM)
    got = Protocol("test", seconds=(("ma", c),)).cost(ModelAveraging(4), topo, W, TINY_LM)
    assert got.time_per_round_s == pytest.approx(bare.time_per_round_s + c)  # the same at any RTT
    assert got.samples_per_s == pytest.approx(bare.samples_per_s * bare.time_per_round_s / got.time_per_round_s)
    one_place = Topology([PeerGroup(US, 2, 1000.0, 16)], topo._link, lambda site: None)
    assert Protocol("test", seconds=(("ma", c),)).cost(ModelAveraging(4), one_place, W, TINY_LM) == \
        ModelAveraging(4).cost(one_place, W, TINY_LM)


def test_the_leaders_butterfly_is_one_round_trip_and_two_pieces_over_the_streams():
    topo = _topology(1000.0, 1000.0)
    got = LocalSGD(4).cost(topo, W, TINY_LM)
    step = 16 / 1000.0
    wan = 2 * (W / 2) * 8 / (GBPS * 1e9) + RTT_MS / 1e3  # 2W/R with R = 2 over the pair's aggregate
    assert got.time_per_round_s == pytest.approx(4 * step + wan)
    assert got.bytes_per_s[(0, 1)] == pytest.approx(W / got.time_per_round_s)



from __future__ import annotations

import pytest

from geotrain.domain import Continent, LinkClass, Location
from geotrain.errors import InputError
from geotrain.perf.network import NetworkModel, SitePlacement, load_overrides

NET = NetworkModel.bundled()
US_C = Location("gcp", "us-central1", "us-central1-a", Continent.NORTH_AMERICA)
EU_3 = Location("gcp", "europe-west3", "europe-west3-b", Continent.EUROPE)
AWS_W = Location("aws", "us-west-2", "usw2-az1", Continent.NORTH_AMERICA)
AWS_E = Location("aws", "us-east-1", "use1-az1", Continent.NORTH_AMERICA)
LAB = Location("onprem", "lab", "", Continent.EUROPE)


def test_measured_single_stream_pair():
    link = NET.link(US_C, EU_3)
    assert link.measured and link.bandwidth_gbps == pytest.approx(0.21)
    assert link.rtt_ms == pytest.approx(103.15)
    assert NET.link(EU_3, US_C) is link  # symmetric and cached


def test_same_zone_is_the_measured_nic_cap_and_cross_zone_is_estimated():
    same = NET.link(US_C, US_C)
    assert same.link_class is LinkClass.SAME_ZONE and same.measured and same.bandwidth_gbps == pytest.approx(6.91)
    other_zone = NET.link(US_C, Location("gcp", "us-central1", "us-central1-b", Continent.NORTH_AMERICA))
    assert other_zone.link_class is LinkClass.CROSS_ZONE and not other_zone.measured


def test_modelled_link_uses_skyplane_rtt_and_the_window():
    link = NET.link(AWS_W, AWS_E)
    assert link.rtt_measured and not link.bandwidth_measured
    assert link.bandwidth_gbps == pytest.approx(2.684e6 * 8 / (link.rtt_ms / 1e3) / 1e9)
    farther = NET.link(AWS_W, Location("aws", "eu-west-1", "euw1-az1", Continent.EUROPE))
    assert farther.rtt_ms > link.rtt_ms and farther.bandwidth_gbps < link.bandwidth_gbps


def test_unknown_region_falls_back_to_the_continent_median():
    link = NET.link(US_C, Location("gcp", "mars-north1", "mars-north1-a", Continent.EUROPE))
    assert not link.rtt_measured and "median RTT" in link.source


def test_onprem_site_uses_its_uplink_and_near_region():
    net = NetworkModel.bundled(sites={"lab": SitePlacement(0.05, "gcp/europe-west3")})
    link = net.link(LAB, US_C)
    assert link.link_class is LinkClass.INTERNET and link.bandwidth_gbps <= 0.05
    assert 100 < link.rtt_ms < 115 and not link.rtt_measured  # europe-west3 <-> us-central1, by proxy
    assert net.link(LAB, LAB).link_class is LinkClass.SAME_ZONE


def test_overrides_win_most_specific_first(tmp_path):
    path = tmp_path / "links.csv"
    path.write_text("src,dst,bandwidth_gbps,rtt_ms\ngcp/us-central1,aws/us-west-2,0.9,20\n"
                    "gcp/us-central1/us-central1-a,aws/us-west-2,0.5,21\n")
    net = NET.with_overrides_file(path)
    assert net.link(AWS_W, US_C).bandwidth_gbps == 0.5
    other = Location("gcp", "us-central1", "us-central1-b", Continent.NORTH_AMERICA)
    assert net.link(other, AWS_W).bandwidth_gbps == 0.9


def test_bad_override_file(tmp_path):
    path = tmp_path / "links.csv"
    path.write_text("src,dst,bandwidth_gbps,rtt_ms\ngcp,aws/us-west-2,fast,20\n")
    with pytest.raises(InputError, match="line 2"):
        load_overrides(path)


# -- two caps, per-destination links, measured pairs nearby -------------------------------------------

EU_4 = Location("gcp", "europe-west4", "europe-west4-a", Continent.EUROPE)
MUNICH = Location("onprem", "munich-lab", "", Continent.EUROPE)
RTX8000_SITE = """
sites:
  - site: munich-lab
    continent: europe
    near_region: gcp/europe-west3
    uplink_gbps: {uplink}
    single_stream_gbps: 0.5
    links:
{links}
    machines:
      - {{instance_type: rtx8000-ws, accelerator: RTX8000, count: {count}, vcpus: 16, memory_gib: 128}}
  - site: boston-lab
    continent: north_america
    uplink_gbps: 1
    machines:
      - {{instance_type: box, accelerator: A10, count: 1, vcpus: 16, memory_gib: 64}}
"""
US_LINK = "      - {to: gcp/us-central1, single_stream_gbps: 0.06, rtt_ms: 151}"
EU_LINK = "      - {to: gcp/europe-west3, single_stream_gbps: 0.5, aggregate_gbps: 2.2, rtt_ms: 0}"


def site_network(tmp_path, links=(US_LINK,), uplink=5.0, count=1):
    from geotrain.planning.planner import site_placements
    from geotrain.pricing.inventory import load_inventory

    path = tmp_path / "sites.yaml"
    path.write_text(RTX8000_SITE.format(uplink=uplink, links="\n".join(links), count=count))
    inventory = load_inventory(path)
    return NetworkModel.bundled(sites=site_placements(inventory)), inventory


def test_typed_in_us_path_of_the_rtx8000_site_is_the_measured_60_mbits_at_151_ms(tmp_path):
    modelled = NetworkModel.bundled(sites={"munich-lab": SitePlacement(0.5, "gcp/europe-west3")}).link(MUNICH, US_C)
    assert not modelled.bandwidth_measured and modelled.bandwidth_gbps == pytest.approx(0.095, abs=0.002)
    assert modelled.rtt_ms == pytest.approx(107, abs=1)  # the window / RTT guess the typed-in figures replace
    net, _ = site_network(tmp_path)
    link = net.link(MUNICH, US_C)
    assert link.measured and link.basis == "measured" and "inventory" in link.source
    assert (link.bandwidth_gbps, link.rtt_ms) == (0.06, 151)
    assert net.link(US_C, MUNICH) is link
    # a destination without a typed-in link is modelled, one stream capped by the site's single stream
    other = net.link(MUNICH, AWS_E)
    assert not other.bandwidth_measured and other.bandwidth_gbps <= 0.5


def test_links_file_wins_over_the_inventory_and_reads_an_aggregate(tmp_path):
    net, _ = site_network(tmp_path)
    path = tmp_path / "links.csv"
    path.write_text("src,dst,bandwidth_gbps,rtt_ms,aggregate_gbps\nonprem/munich-lab,gcp/us-central1,0.07,150,0.9\n"
                    "gcp/us-central1,aws/us-west-2,0.9,20,\n")
    link = net.with_overrides_file(path).link(MUNICH, US_C)
    assert (link.bandwidth_gbps, link.rtt_ms, link.aggregate_gbps) == (0.07, 150, 0.9)
    assert net.with_overrides_file(path).link(US_C, AWS_W).aggregate_gbps is None
    path.write_text("src,dst,bandwidth_gbps,rtt_ms,aggregate_gbps\ngcp/us-central1,aws/us-west-2,0.9,20,0.5\n")
    with pytest.raises(InputError, match="aggregate_gbps .* below"):
        load_overrides(path)


def test_measured_pair_carries_its_multi_stream_aggregate():
    link = NET.link(US_C, EU_3)
    assert link.bandwidth_gbps == pytest.approx(0.21) and link.aggregate_gbps == pytest.approx(6.22)
    modelled = NET.link(AWS_W, AWS_E)
    assert modelled.aggregate_gbps and modelled.aggregate_gbps > modelled.bandwidth_gbps  # Skyplane's 64 streams


def test_a_measured_pair_serves_regions_near_its_ends_scaled_by_rtt():
    link = NET.link(EU_4, US_C)
    assert link.basis == "derived" and link.derived_from == "gcp/europe-west3 <-> gcp/us-central1"
    assert not link.bandwidth_measured and link.rtt_measured
    # europe-west4 is 9.1 ms from europe-west3; Skyplane: 106.98 ms measured pair, 103.25 ms this one
    assert link.rtt_ms == pytest.approx(103.25)
    assert link.bandwidth_gbps == pytest.approx(0.21 * 106.98 / 103.25)
    assert "scaled from the measured pair" in link.source
    assert NET.link(EU_3, US_C).basis == "measured"  # the exact pair stays measured
    london = NET.link(Location("gcp", "europe-west2", "europe-west2-a", Continent.EUROPE), US_C)
    assert london.basis == "modelled"  # 14 ms from europe-west3: beyond the radius
    aws = NET.link(Location("aws", "eu-central-1", "euc1-az1", Continent.EUROPE), US_C)
    assert aws.basis == "modelled"  # Frankfurt, but another cloud than the measured VMs


def hivemind_transfer(net, groups, uplinks=None):
    from geotrain.perf.hivemind_fit import HivemindFit
    from geotrain.perf.strategies import Hivemind, PeerGroup, Topology

    fit = HivemindFit({}, {}, 0.0, 0.0, 0.0)
    topo = Topology([PeerGroup(loc, n, 100.0, 32) for loc, n in groups], net.link,
                    lambda site: (uplinks or {}).get(site))
    return Hivemind(fit, 32768).transfer(topo, 1e9)


@pytest.mark.parametrize("peers", [1, 2, 4, 8])
def test_a_sites_traffic_to_n_peers_moves_at_n_streams_up_to_its_aggregate(tmp_path, peers):
    net, _ = site_network(tmp_path, links=(EU_LINK,))
    t, bound, _ = hivemind_transfer(net, [(MUNICH, 1), (EU_3, peers)], {"munich-lab": 5.0})
    chunk = 2 * 1e9 / (peers + 1)
    rate_gbps = peers * chunk * 8 / t / 1e9  # what leaves the site during the transfer
    assert rate_gbps == pytest.approx(min(peers * 0.5, 2.2))
    assert bound.what == ("link" if peers * 0.5 < 2.2 else "link aggregate")


@pytest.mark.parametrize("peers", [1, 2, 4, 8])
def test_without_a_multi_stream_figure_a_sites_peers_share_one_streams_worth_of_its_path(tmp_path, peers):
    """Every peer's share of the butterfly crosses the site's path to the US: with only a single-stream
    measurement there, n peers together move at what one stream carries, so the transfer grows with
    the peers' count instead of shrinking as 2W/n per pair."""
    net, _ = site_network(tmp_path, links=(US_LINK,))
    t, bound, _ = hivemind_transfer(net, [(MUNICH, 1), (US_C, peers)], {"munich-lab": 5.0})
    leaving_bytes = peers * 2 * 1e9 / (peers + 1)
    one_pair_rtts_s = 2 * 0.151 if peers == 1 else 0.0  # one peer: the pair's own term, with its two RTTs
    assert t == pytest.approx(leaving_bytes * 8 / 0.06e9 + one_pair_rtts_s)
    assert bound.what == ("link" if peers == 1 else "link aggregate")


def test_a_sites_machines_share_its_aggregate_and_its_uplink(tmp_path):
    net, _ = site_network(tmp_path, links=(EU_LINK,), count=4)
    # 4 machines x 4 peers x chunk through one 2.2 Gbit/s path; the 5 Gbit/s uplink does not bind
    t, bound, _ = hivemind_transfer(net, [(MUNICH, 4), (EU_3, 4)], {"munich-lab": 5.0})
    assert bound.what == "link aggregate" and t == pytest.approx(16 * (2e9 / 8) * 8 / 2.2e9)
    t, bound, _ = hivemind_transfer(net, [(MUNICH, 4), (EU_3, 4)], {"munich-lab": 1.0})
    assert bound.what == "site uplink" and t == pytest.approx(16 * (2e9 / 8) * 8 / 1e9)


def test_inventory_links_are_checked(tmp_path):
    from geotrain.errors import CatalogError

    cases = [
        (("      - {to: gcp, single_stream_gbps: 0.06, rtt_ms: 151}",), 5.0, "is not cloud/region"),
        (("      - {to: onprem/nowhere, single_stream_gbps: 0.06, rtt_ms: 151}",), 5.0, "no site 'nowhere'"),
        (("      - {to: onprem/munich-lab, single_stream_gbps: 0.06, rtt_ms: 151}",), 5.0, "to itself"),
        ((US_LINK, US_LINK), 5.0, "appears twice"),
        (("      - {to: gcp/us-central1, single_stream_gbps: 0.06}",), 5.0, "rtt_ms: required"),
        ((EU_LINK,), 2.0, "aggregate_gbps: 2.2 must lie between"),
        ((US_LINK,), 0.4, "single_stream_gbps: 0.5 is above the site's uplink_gbps"),
    ]
    for links, uplink, message in cases:
        with pytest.raises(CatalogError, match=message):
            site_network(tmp_path, links=links, uplink=uplink)
    _, inventory = site_network(tmp_path, links=(EU_LINK, "      - {to: onprem/boston-lab, single_stream_gbps: 0.05, "
                                                          "rtt_ms: 95}"))
    site = inventory.site("munich-lab")
    assert site.single_stream_gbps == 0.5 and [link.to for link in site.links] == ["gcp/europe-west3",
                                                                                   "onprem/boston-lab"]


@pytest.mark.parametrize(("streams", "aggregate", "site", "expected"), [
    (8, None, False, 8 * 0.1),  # no multi-stream figure: the streams add up
    (8, 0.5, False, 0.5),  # up to the pair's aggregate
    (2, 0.5, False, 0.2),
    (8, None, True, 0.1),  # an on-prem site's path without a multi-stream figure: one stream's worth
    (8, 0.3, True, 0.3),
])
def test_several_streams_carry_n_times_one_up_to_the_pairs_aggregate(streams, aggregate, site, expected):
    from geotrain.perf.network import LinkEstimate

    link = LinkEstimate(bandwidth_gbps=0.1, rtt_ms=50.0, link_class=LinkClass.CROSS_REGION, bandwidth_measured=True,
                        rtt_measured=True, source="test", aggregate_gbps=aggregate)
    assert link.streams_gbps(streams, site=site) == pytest.approx(expected)

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

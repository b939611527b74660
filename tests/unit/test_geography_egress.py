from __future__ import annotations

import pytest

from geotrain.clouds.geography import clouds_of_region, continent_of, region_continents
from geotrain.domain import Continent, LinkClass, Location, link_class
from geotrain.errors import CatalogError
from geotrain.pricing.egress import EgressPrices, EgressRate

US_A = Location("aws", "us-east-1", "use1-az1", Continent.NORTH_AMERICA)
US_B = Location("aws", "us-east-1", "use1-az2", Continent.NORTH_AMERICA)
US_W = Location("aws", "us-west-2", "usw2-az1", Continent.NORTH_AMERICA)
EU = Location("aws", "eu-west-1", "euw1-az1", Continent.EUROPE)
GCP = Location("gcp", "us-central1", "us-central1-a", Continent.NORTH_AMERICA)
LAB = Location("onprem", "lab", "", Continent.EUROPE)


@pytest.mark.parametrize(
    ("src", "dst", "expected"),
    [
        (US_A, US_A, LinkClass.SAME_ZONE),
        (US_A, US_B, LinkClass.CROSS_ZONE),
        (US_A, US_W, LinkClass.CROSS_REGION),
        (US_A, EU, LinkClass.CROSS_CONTINENT),
        (US_A, GCP, LinkClass.INTERNET),
        (LAB, EU, LinkClass.INTERNET),
        (Location("azure", "eastus", "", Continent.NORTH_AMERICA),
         Location("azure", "eastus", "", Continent.NORTH_AMERICA), LinkClass.SAME_ZONE),
    ],
)
def test_link_class(src, dst, expected):
    assert link_class(src, dst) is expected


def test_region_map_covers_the_three_clouds_and_known_regions():
    clouds = {cloud for cloud, _ in region_continents()}
    assert {"aws", "gcp", "azure"} <= clouds
    assert continent_of("aws", "eu-central-1") is Continent.EUROPE
    assert continent_of("gcp", "asia-northeast1") is Continent.ASIA
    assert continent_of("azure", "australiaeast") is Continent.OCEANIA
    assert continent_of("aws", "nowhere-1") is None
    assert clouds_of_region("us-east-1") == {"aws"}


def test_most_specific_egress_rate_wins():
    rates = (
        EgressRate("aws", LinkClass.CROSS_CONTINENT, "*", "*", 0.02, "t"),
        EgressRate("aws", LinkClass.CROSS_CONTINENT, "north_america", "*", 0.03, "t"),
        EgressRate("aws", LinkClass.CROSS_CONTINENT, "north_america", "europe", 0.04, "t"),
        EgressRate("aws", LinkClass.CROSS_CONTINENT, "*", "north_america", 0.05, "t"),
    )
    prices = EgressPrices(rates)
    assert prices.usd_per_gb(US_A, EU) == 0.04
    asia = Location("aws", "ap-northeast-1", "apne1-az1", Continent.ASIA)
    assert prices.usd_per_gb(US_A, asia) == 0.03
    assert prices.usd_per_gb(EU, US_A) == 0.05
    assert prices.usd_per_gb(EU, asia) == 0.02
    with pytest.raises(CatalogError, match="no egress price for cross_region"):
        prices.usd_per_gb(US_A, US_W)


def test_bundled_egress_has_every_link_class_for_each_cloud():
    prices = EgressPrices.bundled()
    for cloud in ("aws", "gcp", "azure"):
        for kind in LinkClass:
            assert any(r.cloud == cloud and r.link_class is kind and r.src_continent == "*" and r.dst_continent == "*"
                       for r in prices.rates), (cloud, kind)
    assert prices.usd_per_gb(US_A, US_A) == 0.0
    assert 0 < prices.usd_per_gb(US_A, US_B) <= prices.usd_per_gb(US_A, EU)
    assert prices.usd_per_gb(LAB, EU) == 0.0  # on-prem uplinks are not billed per GB

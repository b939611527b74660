"""What of a mix's traffic crosses the internet unencrypted is said in one sentence (plan, launch --dry-run)."""

from geotrain.domain import Continent, Location
from geotrain.planning.exposure import SSH_CLOUDS, plaintext_words

EAST = Location("aws", "us-east-1", "use1-az1", Continent.NORTH_AMERICA)
EAST_2 = Location("aws", "us-east-1", "use1-az2", Continent.NORTH_AMERICA)
WEST = Location("aws", "us-west-2", "usw2-az1", Continent.NORTH_AMERICA)
GCP = Location("gcp", "europe-west4", "europe-west4-a", Continent.EUROPE)
SITE = Location("onprem", "lab", "", Continent.EUROPE)


def test_one_region_or_site_keeps_its_training_traffic_inside() -> None:
    assert plaintext_words([EAST, EAST_2]) is None
    assert plaintext_words([SITE, SITE]) is None


def test_regions_clouds_and_sites_apart_are_named_and_plain_http_agents_too() -> None:
    words = plaintext_words([EAST, WEST])
    assert words is not None and "aws/us-east-1, aws/us-west-2 crosses the internet unencrypted" in words
    words = plaintext_words([EAST, SITE, GCP])
    assert words is not None and "aws/us-east-1, gcp, onprem/lab" in words
    assert ("gcp node agents over plain HTTP" in words) == ("gcp" not in SSH_CLOUDS)
    assert "over plain HTTP" not in (plaintext_words([EAST, WEST, SITE]) or "")  # AWS and on-prem: over SSH


def test_a_gcp_network_spans_its_regions() -> None:
    iowa = Location("gcp", "us-central1", "us-central1-a", Continent.NORTH_AMERICA)
    assert plaintext_words([GCP, iowa]) is None  # one VPC network: private addresses, Google's own network
    assert iowa.network_scope == GCP.network_scope == "gcp" and EAST.network_scope != WEST.network_scope


def test_cloud_nodes_in_several_networks_cannot_be_joined_yet() -> None:
    from geotrain.planning.exposure import unjoined_networks

    iowa = Location("gcp", "us-central1", "us-central1-a", Continent.NORTH_AMERICA)
    assert unjoined_networks([EAST, EAST_2]) == () and unjoined_networks([GCP, iowa]) == ()
    assert unjoined_networks([SITE, Location("onprem", "home", "", Continent.EUROPE)]) == ()  # your own network
    assert unjoined_networks([EAST, WEST]) == ()  # AWS: per-peer rules join its regions
    assert unjoined_networks([EAST, WEST, GCP]) == ()  # and GCP's
    assert unjoined_networks([SITE, GCP]) == ("gcp", "onprem/lab")  # a site beside a cloud


def test_aws_azure_and_gcp_networks_are_joined_by_peer_rules_but_not_a_site_beside_them() -> None:
    from geotrain.planning.exposure import unjoined_networks

    eastus = Location("azure", "eastus", "", Continent.NORTH_AMERICA)
    westus2 = Location("azure", "westus2", "", Continent.NORTH_AMERICA)
    assert unjoined_networks([eastus, westus2]) == () and unjoined_networks([EAST, westus2]) == ()
    assert unjoined_networks([eastus, GCP]) == () and unjoined_networks([eastus, SITE]) != ()

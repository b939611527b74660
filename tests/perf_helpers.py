"""Builders for throughput-model tests: offers at chosen places, a network with chosen links."""

from __future__ import annotations

from datetime import datetime, timezone

from geotrain.domain import Continent, InstanceShape, InterruptionSignal, Location, Market, NodeGroup, Offer
from geotrain.perf.network import NetworkModel

US = Location("gcp", "us-central1", "us-central1-a", Continent.NORTH_AMERICA)
EU = Location("gcp", "europe-west3", "europe-west3-a", Continent.EUROPE)
AWS_US = Location("aws", "us-west-2", "usw2-az1", Continent.NORTH_AMERICA)


def offer(location: Location, accelerator: str = "T4", count: int = 1, price: float = 0.3,
          market: Market = Market.SPOT, uplink_gbps: float | None = None) -> Offer:
    return Offer(location, InstanceShape(f"vm-{accelerator}x{count}", 8, 32, accelerator, count), market, price,
                 None, InterruptionSignal(None, None), datetime(2026, 1, 1, tzinfo=timezone.utc), "test",
                 uplink_gbps)


def groups(*items: tuple[Location, int]) -> list[NodeGroup]:
    return [NodeGroup(offer(loc), n) for loc, n in items]


def network(links: dict[tuple[Location, Location], tuple[float, float]], nic_gbps: float = 7.0) -> NetworkModel:
    """A network whose region pairs have exactly the given (bandwidth Gbit/s, RTT ms)."""
    measured = {}
    for (a, b), (bandwidth, rtt) in links.items():
        key = tuple(sorted((f"{a.cloud}/{a.region}", f"{b.cloud}/{b.region}")))
        measured[key] = (bandwidth, rtt, "test")
    return NetworkModel(
        rtt_ms={}, aggregate_gbps={}, measured=measured,
        nic_cap={"gcp": (nic_gbps, 0.7), "aws": (nic_gbps, 0.2), "azure": (nic_gbps, 1.0)},
        window_mb={"cross_continent": 2.7, "internet": 2.9, "onprem": 1.3},
        continent_rtt_ms={("europe", "north_america"): 110.0, ("north_america", "north_america"): 40.0,
                          ("europe", "europe"): 20.0},
    )

"""The capacity model: the chance of obtaining k nodes of an offer, from the shipped measurements."""

from __future__ import annotations

import csv
import gzip
import subprocess
import sys
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

import pytest

from geotrain.domain import Continent, InstanceShape, InterruptionSignal, Location, Market, Offer
from geotrain.errors import CatalogError
from geotrain.pricing.capacity import (
    BASES,
    MAX_NODES,
    ON_DEMAND_PRIOR_NODES,
    CapacityModel,
    CapacityRow,
    rows_from_csv,
    rows_to_csv,
)
from geotrain.pricing.snapshot import bundled_snapshot

REPO = Path(__file__).resolve().parents[2]
CONFIDENCES = (0.05, 0.3, 0.5, 0.8, 0.9, 0.99, 1.0)


def make_offer(cloud="gcp", region="us-central1", zone="us-central1-a", accelerator="H100", count=1,
               market=Market.SPOT, hint=None, instance_type=None) -> Offer:
    return Offer(
        location=Location(cloud, region, zone, Continent.NORTH_AMERICA),
        shape=InstanceShape(instance_type or f"test-{accelerator}-{count}", 8.0 * max(count, 1), 64.0,
                            accelerator, count),
        market=market, price_usd_per_hour=1.0, capacity_hint=hint,
        interruption=InterruptionSignal(None, None), observed_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
        source="test")


def make_row(zone="us-central1-a", region="us-central1", accelerator="H100", curve=((1, 0.9), (4, 0.5), (16, 0.2)),
             kind="probe", scope="zone", cloud="gcp", units=1, source="test-probes") -> CapacityRow:
    return CapacityRow(
        cloud=cloud, region=region, zone=zone, zone_name=zone, scope=scope, accelerator=accelerator,
        instance_type="", accelerators_per_node=units, market="spot", kind=kind,
        availability=None if kind == "pool" else curve[0][1], curve=tuple(curve), max_units=curve[-1][0],
        requested_units=None, samples=10, observed_h=1.0, start="", end="", source=source, note="")


@pytest.fixture(scope="module")
def offers():
    return bundled_snapshot().offers()


@pytest.fixture(scope="module")
def bundled():
    return CapacityModel.bundled()


# --- the contract on every bundled offer -------------------------------------------------------


def test_every_bundled_offer_gets_a_probability_in_0_1_a_basis_and_a_one_line_explanation(offers, bundled):
    assert len(offers) > 4000
    bases = defaultdict(int)
    for offer in offers:
        p = bundled.probability(offer, 1)
        assert 0.0 <= p <= 1.0, offer.offer_id
        basis = bundled.basis(offer)
        assert basis in BASES, offer.offer_id
        bases[basis] += 1
        line = bundled.explain(offer)
        assert line.startswith(basis) and "\n" not in line, offer.offer_id
    assert bases["probed"] > 0 and bases["prior"] > 0 and bases["pool-trace"] > 0


def test_probability_is_one_at_zero_and_never_rises_with_k(offers, bundled):
    for offer in offers:
        previous = bundled.probability(offer, 0)
        assert previous == 1.0
        for k in range(1, 90):
            p = bundled.probability(offer, k)
            assert p <= previous, (offer.offer_id, k)
            previous = p


def test_cap_is_the_largest_k_whose_probability_meets_the_confidence(offers, bundled):
    for offer in offers[::7]:
        for c in CONFIDENCES:
            k = bundled.cap(offer, c)
            assert 0 <= k <= MAX_NODES
            assert bundled.probability(offer, k) >= c, (offer.offer_id, c, k)
            assert bundled.probability(offer, k + 1) < c or k == MAX_NODES, (offer.offer_id, c, k)
        caps = [bundled.cap(offer, c) for c in CONFIDENCES]
        assert caps == sorted(caps, reverse=True), offer.offer_id  # a higher confidence never allows more


def test_bigger_nodes_of_a_family_in_one_place_get_no_more_nodes(offers, bundled):
    groups = defaultdict(list)
    for o in offers:
        if o.market == Market.SPOT and o.capacity_hint is None:
            loc = o.location
            groups[(loc.cloud, loc.region, loc.zone, o.shape.accelerator)].append(o)
    compared = 0
    for group in groups.values():
        group.sort(key=lambda o: o.shape.accelerator_count)
        for small, big in zip(group, group[1:]):
            if small.shape.accelerator_count == big.shape.accelerator_count:
                continue
            compared += 1
            for c in CONFIDENCES:
                assert bundled.cap(big, c) <= bundled.cap(small, c), (small.offer_id, big.offer_id, c)
            for k in range(1, 20):
                assert bundled.probability(big, k) <= bundled.probability(small, k), (big.offer_id, k)
    assert compared > 100


# --- the model on rows a test gives -------------------------------------------------------------


def test_a_probe_row_of_the_zone_gives_its_own_curve_counted_in_gpus():
    model = CapacityModel([make_row()])
    one, eight = make_offer(count=1), make_offer(count=8)
    assert model.basis(one) == "probed"
    assert [model.probability(one, k) for k in (1, 2, 4, 5, 16, 17)] == [0.9, 0.5, 0.5, 0.2, 0.2, 0.0]
    # an 8-GPU node draws 8 units of the same pool: k nodes need 8k units
    assert [model.probability(eight, k) for k in (1, 2, 3)] == [0.2, 0.2, 0.0]
    assert model.cap(one, 0.5) == 4 and model.cap(eight, 0.5) == 0 and model.cap(one, 0.1) == 16
    assert model.cap(eight, 0.1) == 2


def test_availability_rows_take_their_pool_shape_from_the_family_pool_trace():
    rows = [make_row(kind="availability", curve=((1, 0.6),), source="test-avail"),
            make_row(zone="", region="", scope="cloud", kind="pool", curve=((2, 1.0), (4, 0.5)), source="test-pool")]
    model = CapacityModel(rows)
    offer = make_offer()
    assert model.basis(offer) == "probed"
    assert [model.probability(offer, k) for k in (1, 2, 3, 4, 5)] == pytest.approx([0.6, 0.6, 0.3, 0.3, 0.0])
    assert "test-avail" in model.explain(offer) and "test-pool" in model.explain(offer)
    # elsewhere in the cloud: p is a prior, the shape the family's pool trace → "pool-trace"
    far = make_offer(region="europe-west4", zone="europe-west4-a")
    assert model.basis(far) == "pool-trace"
    assert model.probability(far, 3) == pytest.approx(0.3)


def test_priors_come_from_the_nearest_data_and_say_so():
    rows = [make_row(zone="us-central1-a", curve=((1, 0.9), (16, 0.5))),
            make_row(zone="us-central1-b", curve=((1, 0.5), (16, 0.1))),
            make_row(zone="us-east4-a", region="us-east4", curve=((1, 0.2), (16, 0.2))),
            make_row(zone="use1-az1", region="us-east-1", cloud="aws", accelerator="V100", kind="availability",
                     curve=((1, 0.4),))]
    model = CapacityModel(rows)
    same_region = make_offer(zone="us-central1-f")
    assert model.basis(same_region) == "prior"
    assert model.estimate(same_region).availability == pytest.approx(0.7)  # mean of -a and -b
    assert "mean of us-central1 zones" in model.explain(same_region)
    other_region = make_offer(region="europe-west4", zone="europe-west4-a")
    assert model.estimate(other_region).availability == pytest.approx(0.5)  # median of 0.9, 0.5, 0.2
    other_family = make_offer(accelerator="L4", region="europe-west4", zone="europe-west4-a")
    assert model.estimate(other_family).availability == pytest.approx(0.5)
    assert "other families" in model.explain(other_family)
    other_cloud = make_offer(cloud="azure", region="eastus", zone="", accelerator="A100")
    assert model.estimate(other_cloud).availability == pytest.approx(0.45)  # median of all four zones
    assert model.basis(other_cloud) == "prior" and "no azure data" in model.explain(other_cloud)
    # beyond the largest count ever seen (16 units) the model promises nothing
    assert model.probability(other_cloud, 16) > 0 and model.probability(other_cloud, 17) == 0


def test_region_wide_offers_use_the_region_row_and_zoned_offers_do_not():
    rows = [make_row(zone="us-central1-a", curve=((1, 0.5), (16, 0.2))),
            make_row(zone="", scope="region", curve=((1, 0.8), (16, 0.6)))]
    model = CapacityModel(rows)
    assert model.probability(make_offer(zone=""), 1) == 0.8 and model.basis(make_offer(zone="")) == "probed"
    assert model.probability(make_offer(zone="us-central1-a"), 1) == 0.5
    assert model.basis(make_offer(zone="us-central1-c")) == "prior"


def test_the_smallest_node_size_measured_in_a_zone_gives_p():
    rows = [make_row(kind="availability", curve=((1, 0.6),)), make_row(kind="availability", units=8, curve=((8, 0.9),))]
    model = CapacityModel(rows)
    assert model.probability(make_offer(count=1), 1) == 0.6
    assert model.probability(make_offer(count=8), 1) <= 0.6


def test_a_capacity_hint_bounds_every_market():
    model = CapacityModel([make_row()])
    for market in (Market.SPOT, Market.ON_DEMAND, Market.OWNED):
        offer = make_offer(market=market, hint=3)
        assert model.probability(offer, 4) == 0.0, market
        assert model.cap(offer, 0.01) <= 3, market
        assert "capacity_hint 3" in model.explain(offer) or market == Market.OWNED
        zero = make_offer(market=market, hint=0)
        assert model.cap(zero, 0.01) == 0 and model.probability(zero, 1) == 0.0, market
    assert model.probability(make_offer(hint=3), 3) == model.probability(make_offer(), 3)


def test_on_demand_is_a_documented_prior_and_owned_is_the_inventory_count():
    model = CapacityModel([])
    od = make_offer(market=Market.ON_DEMAND, cloud="aws", region="us-east-1", zone="use1-az1")
    assert model.probability(od, ON_DEMAND_PRIOR_NODES) == 1.0 and model.probability(od, ON_DEMAND_PRIOR_NODES + 1) == 0.0
    assert model.cap(od, 0.99) == ON_DEMAND_PRIOR_NODES and model.basis(od) == "prior"
    owned = make_offer(market=Market.OWNED, cloud="onprem", region="lab", zone="", hint=5)
    assert model.probability(owned, 5) == 1.0 and model.probability(owned, 6) == 0.0
    assert model.cap(owned, 1.0) == 5 and model.basis(owned) == "inventory"
    spot = make_offer()
    assert model.probability(spot, 1) == 0.0 and model.basis(spot) == "prior"  # no data at all


def test_bad_arguments_and_bad_rows_are_refused():
    model = CapacityModel([make_row()])
    for k in (-1, 1.5, True):
        with pytest.raises(ValueError):
            model.probability(make_offer(), k)
    for c in (0.0, -0.1, 1.01):
        with pytest.raises(ValueError):
            model.cap(make_offer(), c)
    with pytest.raises(CatalogError):
        make_row(curve=((1, 0.5), (2, 0.6)))  # a survival curve cannot rise
    with pytest.raises(CatalogError):
        make_row(curve=((2, 0.5), (2, 0.4)))
    text = rows_to_csv([make_row()]).decode().replace("1:0.9;4:0.5;16:0.2", "1:0.9;4:x")
    with pytest.raises(CatalogError, match="line 2"):
        rows_from_csv(text.encode())


def test_rows_survive_the_csv_form(bundled):
    assert rows_from_csv(rows_to_csv(bundled.rows)) == bundled.rows
    assert rows_to_csv(rows_from_csv(rows_to_csv([make_row()]))) == rows_to_csv([make_row()])


# --- against the raw public files ---------------------------------------------------------------


def time_weighted_share(times, flags) -> float:
    """Each sample holds until the next one; the last holds no time (interruption.py's rule)."""
    spans = [(b - a).total_seconds() for a, b in zip(times, times[1:])]
    return sum(s for s, up in zip(spans, flags) if up) / sum(spans)


def test_a_probed_h100_zone_matches_the_raw_probe_file(shared_data, bundled):
    with (shared_data / "skynomad" / "gcp_h100_16x_probe_counts.csv").open(newline="") as handle:
        probes = [r for r in csv.DictReader(handle) if r["zone"] == "us-central1-b"]
    probes.sort(key=lambda r: datetime.fromisoformat(r["scheduled_at"]))
    times = [datetime.fromisoformat(r["scheduled_at"]) for r in probes]
    created = [int(r["instances_created"]) for r in probes]
    assert len(probes) == 2104
    offer = make_offer(zone="us-central1-b")  # a3-highgpu-1g-like: 1 H100, no hint
    for k in (1, 8, 16):
        hand = time_weighted_share(times, [c >= k for c in created])
        assert bundled.probability(offer, k) == pytest.approx(hand, abs=5e-6), k
    assert bundled.probability(offer, 1) == pytest.approx(sum(c >= 1 for c in created) / len(created), abs=2e-3)
    assert bundled.probability(offer, 17) == 0.0  # 16 were asked for: nothing is known beyond
    # 2 nodes of 8 H100 need 16 at once
    assert bundled.probability(make_offer(zone="us-central1-b", count=8), 2) == bundled.probability(offer, 16)


def test_a_probed_aws_zone_matches_the_raw_availability_csv(shared_data, bundled):
    # us-east-1d is AZ use1-az1 (PROVENANCE.md: the series maximum equals the archive maximum)
    path = shared_data / "skynomad" / "data" / "real_availability_2023-02-15" / "us-east-1d_v100_1.csv.gz"
    with gzip.open(path, "rt", newline="") as handle:
        ticks = list(csv.DictReader(handle))
    times = [datetime.fromisoformat(r["date"]) for r in ticks]
    hand = time_weighted_share(times, [r["availability"] == "1" for r in ticks])  # CSV: 1 = available
    offer = make_offer(cloud="aws", region="us-east-1", zone="use1-az1", accelerator="V100",
                       instance_type="p3.2xlarge")
    assert bundled.basis(offer) == "probed"
    assert bundled.probability(offer, 1) == pytest.approx(hand, abs=5e-6)
    assert 0.44 < hand < 0.45


def test_probed_zones_agree_with_the_availability_the_bundled_offers_carry(offers, bundled):
    checked = 0
    for offer in offers:
        if offer.market == Market.SPOT and bundled.basis(offer) == "probed":
            if offer.interruption.availability is not None and offer.shape.accelerator_count == 1:
                assert bundled.estimate(offer).availability == pytest.approx(offer.interruption.availability,
                                                                            abs=1e-6), offer.offer_id
                checked += 1
    assert checked >= 13 + 4 + 5  # the H100 probe zones, the four AWS zones tied to AZ IDs, the Dime 1-GPU zones


def test_the_build_script_reproduces_the_shipped_files(shared_data):
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "build_capacity.py"), "--data-dir", str(shared_data), "--check"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr + result.stdout


# --- a whole mix, and pools for the planner ------------------------------------------------------


def test_a_mix_in_one_pool_needs_all_its_units_at_once_and_pools_multiply(bundled):
    a = make_offer(zone="us-central1-a", count=1, instance_type="small")
    b = make_offer(zone="us-central1-a", count=4, instance_type="big")
    other = make_offer(zone="us-central1-b", count=1)
    same_pool = bundled.launch_probability([(a, 2), (b, 1)])
    assert same_pool == pytest.approx(bundled.estimate(a).at(6))
    assert same_pool <= bundled.probability(a, 2) * 1.0 + 1e-12
    both = bundled.launch_probability([(a, 2), (other, 1)])
    assert both == pytest.approx(bundled.probability(a, 2) * bundled.probability(other, 1))
    assert bundled.launch_probability([]) == 1.0
    assert bundled.launch_probability([(make_offer(hint=1), 2)]) == 0.0


def test_a_pool_cap_is_the_most_units_had_at_once_at_the_confidence(bundled):
    offer = make_offer(zone="us-central1-a")
    assert bundled.pool_of(offer) == "gcp/us-central1/us-central1-a/H100"
    assert bundled.pool_of(make_offer(market=Market.ON_DEMAND)) is None
    for confidence in CONFIDENCES:
        units = bundled.pool_cap_units(offer, confidence)
        assert units == 0 or bundled.estimate(offer).at(units) >= confidence
        assert bundled.estimate(offer).at(units + 1) < confidence

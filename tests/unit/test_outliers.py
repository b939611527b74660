"""Prices a planner can trust (``geotrain.pricing.outliers``): a listing far below its type's price elsewhere
that nothing recent confirms is planned at that price; the user can ask for the listed one."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from geotrain.domain import Constraints, JobSpec, Objective
from geotrain.planning.planner import PlanOptions, plan_for_nodes
from geotrain.pricing.outliers import LOW_SHARE, OLD_DAYS, ROBUST_MARK, price_flags, robust_offers
from geotrain.pricing.snapshot import bundled_snapshot

NOW = datetime(2026, 12, 7, tzinfo=timezone.utc)
P4D_AZ1 = "aws/us-east-1/use1-az1/p4d.24xlarge/spot"


@pytest.fixture(scope="module")
def offers():
    return list(bundled_snapshot().offers())


def test_the_stale_p4d_listing_is_low_against_its_regions_other_zones(offers):
    """$2.47/h in use1-az1 while us-east-1's other AZs list $7.88–8.19/h, all seen 2026-01-21."""
    flag = price_flags(offers, NOW)[P4D_AZ1]
    others = sorted(o.price_usd_per_hour for o in offers if o.shape.instance_type == "p4d.24xlarge"
                    and o.market.value == "spot" and o.location.region == "us-east-1" and o.offer_id != P4D_AZ1)
    assert flag.low and not flag.confirmed and flag.listed_usd_per_hour == pytest.approx(2.4655)
    assert flag.reference_usd_per_hour == pytest.approx(others[len(others) // 2])  # the median of three
    assert flag.robust_usd_per_hour == flag.reference_usd_per_hour
    assert "30% of the type's $8.12/h elsewhere, not seen since" in flag.words()
    # the region's other zones are not flagged: each is near the others
    assert not any(price_flags(offers, NOW).get(o.offer_id, None) and price_flags(offers, NOW)[o.offer_id].low
                   for o in offers if o.shape.instance_type == "p4d.24xlarge" and o.location.region == "us-east-1"
                   and o.offer_id != P4D_AZ1 and o.market.value == "spot")


def test_a_recent_observation_confirms_a_low_listing(offers):
    fresh = [replace(o, observed_at=NOW - timedelta(days=1)) if o.offer_id == P4D_AZ1 else o for o in offers]
    flag = price_flags(fresh, NOW)[P4D_AZ1]
    assert flag.low and flag.confirmed and flag.robust_usd_per_hour == pytest.approx(2.4655)
    assert "confirmed by a recent observation" in flag.words()


def test_a_type_listed_in_too_few_places_is_not_judged(offers):
    few = [o for o in offers if o.shape.instance_type == "p4d.24xlarge" and o.market.value == "spot"][:2]
    cheap = replace(few[0], price_usd_per_hour=few[1].price_usd_per_hour * LOW_SHARE / 10)
    assert not price_flags([cheap, few[1]], NOW)  # one other: no reference


def test_an_offer_far_older_than_its_clouds_others_is_flagged_and_keeps_its_price(offers):
    flags = price_flags(offers, NOW)
    old = [f for f in flags.values() if f.old_days is not None]
    assert old and all(f.old_days > OLD_DAYS for f in old)
    assert all(f.robust_usd_per_hour == f.listed_usd_per_hour for f in old if not f.low)


def test_robust_offers_price_a_low_listing_at_the_reference_and_say_so(offers):
    flags = price_flags(offers, NOW)
    robust = {o.offer_id: o for o in robust_offers(offers, flags)}
    p4d = robust[P4D_AZ1]
    assert p4d.price_usd_per_hour == pytest.approx(flags[P4D_AZ1].reference_usd_per_hour)
    assert ROBUST_MARK in p4d.source and "$2.466/h" in p4d.source
    unflagged = next(o for o in offers if o.offer_id not in flags)
    assert robust[unflagged.offer_id] == unflagged


def test_a_plan_prices_the_listing_robustly_unless_the_user_asks_for_the_listed_price():
    """The bench's SkyPilot pick (4 p4d.24xlarge spot in use1-az1): $9.86/h as listed, $32.48/h at the
    type's price, which is what the plan bills and what cost-report compares against."""
    job = JobSpec("p4d", "convnext-large", Objective.MIN_COST, target_samples_per_s=1.0,
                  constraints=Constraints(max_nodes=64))
    nodes = "aws/use1-az1/p4d.24xlarge/spot=4"
    robust = plan_for_nodes(job, bundled_snapshot(), nodes, options=PlanOptions(frontier_points=0))
    raw = plan_for_nodes(job, bundled_snapshot(), nodes, options=PlanOptions(frontier_points=0, raw_prices=True))
    assert raw.totals.usd_per_hour == pytest.approx(4 * 2.4655)
    assert robust.totals.usd_per_hour == pytest.approx(4 * 8.1203)
    assert any("use1-az1/p4d.24xlarge/spot: listed at $2.466/h" in a and "--raw-prices" in a
               for a in robust.assumptions)
    assert not any(ROBUST_MARK in i.offer.source for i in raw.items)

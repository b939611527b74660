"""Prices a planner can trust: an offer listed far below its type's price elsewhere, with nothing recent
to confirm it, is planned at the type's price; an offer far older than its cloud's others is flagged.

A stale spot row can sit in a snapshot for months at a price nobody can buy at any more: p4d.24xlarge
spot at $2.47/h in one us-east-1 AZ while the region's other AZs list $7.9–8.2/h, all seen 2026-01-21.
A planner that takes the lowest row plans the whole job there. The rules, per offer of a cloud,
instance type and market:

- its *reference* is the median price of the type's other offers in the same market: in the same
  region where at least ``MIN_OTHERS`` other zones list it, else in every region of the cloud (at
  least ``MIN_OTHERS`` others; with fewer, nothing is said);
- it is *low* when its price is below ``LOW_SHARE`` (one half) of the reference. Spot prices of one
  type differ between zones and regions by tens of per cent; less than half is what a listing left
  behind by the market looks like (the bundled snapshot's low rows are 24–41 % of their reference);
- a low offer observed within ``CONFIRMED_DAYS`` (the staleness limit of
  ``geotrain.pricing.snapshot``) is *confirmed*: the market said so recently, and it is planned as
  listed. Otherwise it is planned at the reference (its *robust* price), unless the user asks for
  the listed prices (``--raw-prices``);
- it is *old* when observed more than ``OLD_DAYS`` before the newest offer of its cloud: flagged in
  ``catalog list`` and in the plan, its price kept.

The robust price goes into the offer the plan carries (what ``launch`` runs and ``cost-report``
compares against), with the listed price and why in its ``source``.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime

from geotrain.domain import Offer

ROBUST_MARK = "planned at the type's price elsewhere"  # in the ``source`` of an offer so priced
LOW_SHARE = 0.5
MIN_OTHERS = 2
CONFIRMED_DAYS = 7.0  # = snapshot.STALE_AFTER_DAYS: an observation this recent confirms a price
OLD_DAYS = 90.0


@dataclass(frozen=True, slots=True)
class PriceFlag:
    """What is doubtful about one offer's price, and what a plan uses instead."""

    offer_id: str
    listed_usd_per_hour: float
    reference_usd_per_hour: float | None  # the type's price elsewhere (None: too few others to say)
    low: bool  # listed below LOW_SHARE of the reference
    confirmed: bool  # observed within CONFIRMED_DAYS
    old_days: float | None  # days before its cloud's newest offer, where more than OLD_DAYS

    @property
    def robust_usd_per_hour(self) -> float:
        """The price a plan uses: the reference for a low, unconfirmed listing; else the listed one."""
        if self.low and not self.confirmed and self.reference_usd_per_hour is not None:
            return self.reference_usd_per_hour
        return self.listed_usd_per_hour

    def words(self) -> str:
        parts = []
        if self.low and self.reference_usd_per_hour:
            share = self.listed_usd_per_hour / self.reference_usd_per_hour
            parts.append(f"listed at ${self.listed_usd_per_hour:,.4g}/h, {share:.0%} of the type's "
                         f"${self.reference_usd_per_hour:,.4g}/h elsewhere"
                         + (", confirmed by a recent observation" if self.confirmed else ", not seen since"))
        if self.old_days is not None:
            parts.append(f"observed {self.old_days:.0f} days before its cloud's newest prices")
        return "; ".join(parts)


def price_flags(offers: Iterable[Offer], now: datetime) -> dict[str, PriceFlag]:
    """The offers whose price is low against their type elsewhere, or old against their cloud, by id."""
    offers = list(offers)
    by_type: dict[tuple[str, str, str], list[Offer]] = defaultdict(list)
    newest: dict[str, datetime] = {}
    for o in offers:
        by_type[(o.location.cloud, o.shape.instance_type, o.market.value)].append(o)
        newest[o.location.cloud] = max(newest.get(o.location.cloud, o.observed_at), o.observed_at)
    flags: dict[str, PriceFlag] = {}
    for group in by_type.values():
        prices = [o.price_usd_per_hour for o in group]
        regions = [o.location.region for o in group]
        for n, o in enumerate(group):
            reference = _reference(n, prices, regions)
            low = reference is not None and o.price_usd_per_hour < LOW_SHARE * reference
            behind = (newest[o.location.cloud] - o.observed_at).total_seconds() / 86400
            old = behind if behind > OLD_DAYS else None
            if not low and old is None:
                continue
            confirmed = (now - o.observed_at).total_seconds() / 86400 <= CONFIRMED_DAYS
            flags[o.offer_id] = PriceFlag(o.offer_id, o.price_usd_per_hour, reference, low, confirmed, old)
    return flags


def robust_offers(offers: Iterable[Offer], flags: dict[str, PriceFlag]) -> list[Offer]:
    """The offers with each low, unconfirmed listing at its robust price (the listing named in ``source``)."""
    out = []
    for o in offers:
        flag = flags.get(o.offer_id)
        if flag is None or flag.robust_usd_per_hour == o.price_usd_per_hour:
            out.append(o)
            continue
        out.append(replace(o, price_usd_per_hour=flag.robust_usd_per_hour,
                           source=f"{o.source}; {ROBUST_MARK}: {flag.words()}"))
    return out


def as_planned(offers: Iterable[Offer], now: datetime | None = None) -> list[Offer]:
    """The offers at the prices plans use: :func:`robust_offers` of their own :func:`price_flags` (a type's
    reference is its own listings', so one type's offers are enough)."""
    from geotrain.pricing.schema import utc_now

    offers = list(offers)
    return robust_offers(offers, price_flags(offers, now or utc_now()))


def _reference(n: int, prices: list[float], regions: list[str]) -> float | None:
    """The median price of the group's other offers: in offer ``n``'s region where enough, else all."""
    others = [(p, r) for j, (p, r) in enumerate(zip(prices, regions, strict=True)) if j != n and p > 0]
    near = [p for p, r in others if r == regions[n]]
    if len(near) >= MIN_OTHERS:
        return statistics.median(near)
    if len(others) >= MIN_OTHERS:
        return statistics.median(p for p, _ in others)
    return None

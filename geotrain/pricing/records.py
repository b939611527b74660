"""Offers as JSON records keyed by the offer schema's column names, and back (validated)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from geotrain.clouds.geography import continent_of
from geotrain.domain import Offer
from geotrain.errors import CatalogError
from geotrain.pricing.schema import COLUMN_NAMES, parse_offers


def offer_record(offer: Offer) -> dict[str, Any]:
    loc, shape, signal = offer.location, offer.shape, offer.interruption
    return {
        "cloud": loc.cloud, "region": loc.region, "zone": loc.zone, "continent": loc.continent.value,
        "instance_type": shape.instance_type, "accelerator": shape.accelerator,
        "accelerator_count": shape.accelerator_count, "vcpus": shape.vcpus, "memory_gib": shape.memory_gib,
        "market": offer.market.value, "price_usd_per_hour": offer.price_usd_per_hour,
        "capacity_hint": offer.capacity_hint, "interruption_band": signal.band,
        "interruptions_per_hour": signal.interruptions_per_hour, "availability": signal.availability,
        "uplink_gbps": offer.uplink_gbps, "observed_at": offer.observed_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "source": offer.source,
    }


def offers_from_records(records: Sequence[Mapping[str, Any]], origin: str) -> tuple[Offer, ...]:
    """Validate records with the offer schema (errors name the record and the column)."""
    from geotrain.pricing.snapshot import offers_from_table

    rows = []
    for n, record in enumerate(records):
        if not isinstance(record, Mapping):
            raise CatalogError(f"{origin}: offer {n}: not an object")
        unknown = set(record) - set(COLUMN_NAMES)
        if unknown:
            raise CatalogError(f"{origin}: offer {n}: unknown field {', '.join(sorted(unknown))}")
        rows.append({k: "" if v is None else (repr(v) if isinstance(v, float) else str(v)) for k, v in record.items()})
    # one record at a time: the schema normalises fields (trims, lower-cases clouds) and sorts a table's
    # rows, so the n-th offer is parsed from the n-th record alone (plans and ledgers hold a few)
    out = []
    for n, row in enumerate(rows):
        raw = pd.DataFrame([row], index=[f"offer {n}"], dtype="string")
        table = parse_offers(raw, origin, continent_of=continent_of)
        out.append(offers_from_table(table)[0])
    return tuple(out)

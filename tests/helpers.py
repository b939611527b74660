"""Small builders for tests: price tables from a few literal rows."""

from __future__ import annotations

import pandas as pd

from geotrain.pricing.geography import continent_of
from geotrain.pricing.schema import parse_offers

DEFAULTS = {
    "zone": "", "accelerator": "T4", "accelerator_count": "1", "vcpus": "8", "memory_gib": "32",
    "observed_at": "2026-05-20T00:00:00Z", "source": "test",
}


def offer_table(*rows: dict) -> pd.DataFrame:
    """A validated price table; each row needs cloud, region, instance_type, market, price_usd_per_hour."""
    records = [{**DEFAULTS, **{k: str(v) for k, v in row.items()}} for row in rows]
    raw = pd.DataFrame(records, index=range(2, len(records) + 2), dtype="string")
    return parse_offers(raw, "test rows", continent_of=continent_of)

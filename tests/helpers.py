"""Small builders for tests: price tables from a few literal rows; the live processes of a run; how
many examples a property test draws."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from geotrain.clouds.geography import continent_of
from geotrain.pricing.schema import parse_offers

DEFAULTS = {
    "zone": "", "accelerator": "T4", "accelerator_count": "1", "vcpus": "8", "memory_gib": "32",
    "observed_at": "2026-05-20T00:00:00Z", "source": "test",
}


def examples(fast: int, every: int) -> int:
    """Examples a property test draws: ``fast`` in `make test`, ``every`` in `make test-all` (which sets
    GEOTRAIN_TEST_ALL=1)."""
    return every if os.environ.get("GEOTRAIN_TEST_ALL") == "1" else fast


def offer_table(*rows: dict) -> pd.DataFrame:
    """A validated price table; each row needs cloud, region, instance_type, market, price_usd_per_hour."""
    records = [{**DEFAULTS, **{k: str(v) for k, v in row.items()}} for row in rows]
    raw = pd.DataFrame(records, index=range(2, len(records) + 2), dtype="string")
    return parse_offers(raw, "test rows", continent_of=continent_of)


def processes_of_run(run_id: str) -> list[int]:
    """Live (not zombie) processes whose environment names the run (``GEOTRAIN_RUN_ID``)."""
    found = []
    marker = f"GEOTRAIN_RUN_ID={run_id}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if marker in environ.split(b"\0") and state != "Z":
            found.append(int(entry.name))
    return found

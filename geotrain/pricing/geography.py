"""Region → continent map of the three clouds, from the bundled ``regions.csv``.

On-prem sites are not in it: their continent comes from the inventory file.
"""

from __future__ import annotations

import csv
import functools
import io

from geotrain.domain import Continent
from geotrain.pricing.bundled import data_bytes


@functools.cache
def region_continents() -> dict[tuple[str, str], Continent]:
    """(cloud, region) → continent for every region geotrain knows."""
    text = data_bytes("regions.csv").decode("utf-8")
    return {
        (row["cloud"], row["region"]): Continent(row["continent"])
        for row in csv.DictReader(io.StringIO(text))
    }


def continent_of(cloud: str, region: str) -> Continent | None:
    """The continent of a cloud region, or None when geotrain does not know the region."""
    return region_continents().get((cloud.lower(), region))


def clouds_of_region(region: str) -> set[str]:
    """Which clouds have a region of this name (used to infer the cloud of a foreign catalog)."""
    return {cloud for cloud, name in region_continents() if name == region}

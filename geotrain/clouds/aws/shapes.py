"""AWS answers both the price source and the provider read."""

from __future__ import annotations

from typing import Any

from geotrain.errors import CatalogError


def availability_zone_ids(zones: Any, region: str) -> dict[str, str]:
    """Zone name → AZ id, from the AvailabilityZones list of a DescribeAvailabilityZones answer."""
    try:
        return {z["ZoneName"]: z["ZoneId"] for z in zones}
    except (KeyError, TypeError) as exc:
        raise CatalogError(f"AWS DescribeAvailabilityZones in {region}: unexpected answer ({exc!r})") from exc

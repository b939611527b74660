"""``geotrain catalog refresh`` and ``geotrain check``: the clouds' own prices and signals, through
each cloud's SDK and its standard credential chain."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from geotrain.errors import InputError
from geotrain.pricing.live.base import CheckReport, FetchRequest, PriceSource, Progress, no_progress
from geotrain.pricing.live.refresh import RefreshOutcome, refresh_catalog
from geotrain.pricing.snapshot import SnapshotStore

# cloud -> "module:class"; each class builds itself from the SDK's standard credential chain
# (``from_environment``), so that nothing here knows a cloud's SDK
SOURCES = {
    "aws": "geotrain.pricing.live.aws:AwsSource",
    "gcp": "geotrain.pricing.live.gcp:GcpSource",
    "azure": "geotrain.pricing.live.azure:AzureSource",
}


@dataclass(frozen=True, slots=True)
class RefreshRequest:
    clouds: tuple[str, ...] = ()  # () = every cloud
    regions: tuple[str, ...] = ()
    accelerators: tuple[str, ...] = ()
    gang_nodes: int | None = None  # placement scores asked for a gang of this many nodes (None: the sources' 8)


def source_for(cloud: str) -> PriceSource:
    module, _, name = SOURCES[cloud].partition(":")
    cls = getattr(importlib.import_module(module), name)
    return cls.from_environment()


def chosen_clouds(clouds: Sequence[str]) -> tuple[str, ...]:
    unknown = sorted(set(clouds) - set(SOURCES))
    if unknown:
        raise InputError(f"--cloud: {', '.join(unknown)} is not a cloud geotrain can refresh; "
                         f"one of {', '.join(SOURCES)}")
    return tuple(clouds) or tuple(SOURCES)


def refresh(request: RefreshRequest, *, progress: Progress = no_progress,
            make_source: Callable[[str], PriceSource] = source_for) -> RefreshOutcome:
    sources = [make_source(cloud) for cloud in chosen_clouds(request.clouds)]
    fetch = FetchRequest(regions=frozenset(request.regions) or None,
                         accelerators=frozenset(request.accelerators) or None, gang_nodes=request.gang_nodes)
    return refresh_catalog(sources, store=SnapshotStore(), request=fetch, progress=progress)


def check(clouds: Sequence[str] = (), *, make_source: Callable[[str], PriceSource] = source_for) -> list[CheckReport]:
    return [make_source(cloud).check() for cloud in chosen_clouds(clouds)]


def history(*, instance_type: str, zone: str | None = None, region: str | None = None, cloud: str | None = None,
            market: str = "spot", live_days: float | None = None,
            make_source: Callable[[str], PriceSource] = source_for):  # noqa: ANN201 - a pandas frame
    """The stored snapshots' prices of one instance type; with ``live_days``, AWS's own spot price
    history of the last that many days too (source ``aws-spot-price-history-api``, no snapshot)."""
    import pandas as pd

    from geotrain.pricing.catalog import price_history

    store = SnapshotStore()
    rows = price_history(store, instance_type=instance_type, zone=zone, region=region, cloud=cloud, market=market)
    if live_days is None:
        return rows
    if market != "spot" or cloud not in (None, "aws"):
        raise InputError("--live: AWS publishes a spot price history only; use it with --market spot on aws offers")
    if region is None:  # the AZ id's region, from the offers that carry it
        table = store.current().table
        known = table[(table["cloud"] == "aws") & (table["zone"] == (zone or ""))]["region"].unique().tolist()
        if len(known) != 1:
            raise InputError("--live: give --region (the AWS region of the history), e.g. --region us-east-1")
        region = known[0]
    live = make_source("aws").spot_price_history(instance_type, region, zone_id=zone, days=live_days)
    extra = pd.DataFrame([{"cloud": "aws", "region": region, "zone": z, "instance_type": instance_type,
                           "market": "spot", "price_usd_per_hour": price, "observed_at": pd.Timestamp(when),
                           "source": "aws-spot-price-history-api", "snapshot_id": ""} for z, when, price in live])
    if extra.empty:
        return rows
    out = pd.concat([rows, extra], ignore_index=True) if not rows.empty else extra
    return out.sort_values(["observed_at", "zone"], kind="stable").reset_index(drop=True)

"""The AWS price source: :class:`AwsSource`, the calls of a refresh and of ``geotrain check``.

The rules (which call feeds which column, what is skipped, what raises) are in the docstring of
:mod:`geotrain.pricing.live.aws`. Built on :mod:`.calls` (clients, error codes) and :mod:`.shapes`
(answers → specs and prices)."""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from geotrain.clouds.aws.clients import ClientFactory, default_client_factory
from geotrain.clouds.aws.errors import CREDENTIAL_CODES, CREDENTIALS_HINT, code_of, one_line, sdk_errors
from geotrain.clouds.aws.shapes import availability_zone_ids
from geotrain.clouds.geography import continent_of
from geotrain.errors import CatalogError, CredentialsError, InputError
from geotrain.files import geotrain_home
from geotrain.pricing import interruption
from geotrain.pricing.live.aws.calls import SPOT_ADVISOR_URL, SPOT_ADVISOR_URL_ENV, AwsCalls, http_json, term_match
from geotrain.pricing.live.aws.check import check_access
from geotrain.pricing.live.aws.placement import (
    QUOTA_CODE,
    RECOMMENDED_TYPES,
    Answer,
    Configuration,
    ScoreCache,
    groups,
)
from geotrain.pricing.live.aws.shapes import (
    InstanceSpec,
    checked_price,
    enabled_regions,
    instance_spec,
    product_price,
    spot_advisor_bands,
)
from geotrain.pricing.live.base import (
    EVERY_OFFER,
    INTERRUPTION_BANDS,
    ON_DEMAND_PRICES,
    PLACEMENT_SCORES,
    REGION_LIST,
    SPOT_PRICES,
    CheckReport,
    FetchRequest,
    Progress,
    Skipped,
    SourceResult,
    no_progress,
    offer_row,
)


T = TypeVar("T")


SCORE_CACHE_FILE = "aws-placement-scores.json"  # under GEOTRAIN_HOME: placement scores asked, with when


class _RegionFailed(Exception):
    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class AwsSource:
    """Prices, capacity and interruption signals of AWS (see the module docstring for the rules)."""

    cloud = "aws"

    def __init__(self, client_factory: ClientFactory | None = None, *, endpoint_url: str | None = None,
                 home_region: str = "us-east-1", pricing_region: str = "us-east-1",
                 spot_advisor_url: str = SPOT_ADVISOR_URL,
                 fetch_json: Callable[[str], Any] | None = None,
                 placement_scores: bool = True, placement_capacity: int = 8, likely_score: int = 7,
                 score_cache: ScoreCache | None = None, daily_configurations: int = 10,
                 sleep: Callable[[float], None] = time.sleep, attempts: int = 6, first_pause_s: float = 0.5,
                 clock: Callable[[], datetime] | None = None) -> None:
        self._api = AwsCalls(client_factory or default_client_factory(endpoint_url),
                             sleep=sleep, attempts=attempts, first_pause_s=first_pause_s)
        self.home_region, self.pricing_region = home_region, pricing_region
        self.spot_advisor_url = spot_advisor_url
        self._fetch_json = fetch_json or http_json
        self.placement_scores, self.placement_capacity, self.likely_score = (
            placement_scores, placement_capacity, likely_score)
        self._score_cache, self.daily_configurations = score_cache, daily_configurations
        self._clock = clock or (lambda: datetime.now(timezone.utc))
        self._specs: dict[str, InstanceSpec | None] = {}  # type → spec (None: no accelerator); global

    @classmethod
    def from_environment(cls) -> AwsSource:
        """The source as ``geotrain catalog refresh`` and ``geotrain check`` build it; no network call.

        - credentials: boto3's standard chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE,
          ~/.aws/credentials and ~/.aws/config, SSO, container or instance metadata), resolved at the
          first API call, not here;
        - home region (DescribeRegions, GetSpotPlacementScores, the ``check`` probes): the region boto3
          is configured with (AWS_DEFAULT_REGION or the ``region`` of the profile), else
          us-east-1; the Price List API stays in us-east-1;
        - endpoint: AWS_ENDPOINT_URL (and AWS_ENDPOINT_URL_<SERVICE>), honoured by boto3 itself;
        - ``GEOTRAIN_AWS_SPOT_ADVISOR_URL``: the Spot Advisor feed to read instead of
          :data:`SPOT_ADVISOR_URL` (a mirror, or a fake in tests) when set and not empty.

        An AWS configuration boto3 cannot read (AWS_PROFILE naming no profile …) → CredentialsError."""
        import boto3
        from botocore.exceptions import BotoCoreError

        feed_url = os.environ.get(SPOT_ADVISOR_URL_ENV) or SPOT_ADVISOR_URL
        try:
            home_region = boto3.session.Session().region_name or "us-east-1"
            return cls(home_region=home_region, spot_advisor_url=feed_url,
                       score_cache=ScoreCache(geotrain_home() / SCORE_CACHE_FILE))
        except BotoCoreError as exc:  # ProfileNotFound (AWS_PROFILE names no profile), an unreadable config
            raise CredentialsError(f"AWS: {exc}; {CREDENTIALS_HINT}", scope="aws") from exc

    # ------------------------------------------------------------------ fetch

    def fetch(self, request: FetchRequest, progress: Progress = no_progress) -> SourceResult:
        self._api.counts = defaultdict(int)
        self._specs = {}
        observed = _iso(request.observed_at or self._clock())
        skipped: list[Skipped] = []
        regions = self._regions(request, skipped)
        progress(self.cloud, "*", "spot advisor feed")
        bands = self._bands(skipped)
        rows: list[dict[str, Any]] = []
        spot_types: dict[str, set[str]] = defaultdict(set)  # type → regions with a spot price
        for region in regions:
            try:
                region_rows = self._region(region, request, observed, bands, progress, skipped)
            except _RegionFailed as exc:
                skipped.append(Skipped(region, EVERY_OFFER, exc.why))
                continue
            rows += region_rows
            for row in region_rows:
                if row["market"] == "spot":
                    spot_types[row["instance_type"]].add(region)
        if self.placement_scores and spot_types:
            progress(self.cloud, "*", "placement scores")
            self._apply_scores(rows, spot_types, skipped, request.observed_at or self._clock(),
                               request.gang_nodes or self.placement_capacity)
        signals = {"capacity_hint": sum(1 for r in rows if r["capacity_hint"] != ""),
                   "interruption_band": sum(1 for r in rows if r["market"] == "spot" and r["interruption_band"] != ""),
                   "availability": sum(1 for r in rows if r["availability"] != "")}
        return SourceResult(cloud=self.cloud, rows=tuple(rows), skipped=tuple(skipped), signals=signals,
                            calls=dict(self._api.counts))

    def _regions(self, request: FetchRequest, skipped: list[Skipped]) -> list[str]:
        from botocore.exceptions import ClientError

        try:
            answer = self._api.call("ec2", self.home_region, "DescribeRegions")
        except sdk_errors() as exc:
            code = code_of(exc)
            if isinstance(exc, ClientError) and code in CREDENTIAL_CODES:
                raise CredentialsError(f"AWS rejected the credentials ({code}); {CREDENTIALS_HINT}") from exc
            hint = "needs ec2:DescribeRegions" if isinstance(exc, ClientError) else "check the network or AWS_ENDPOINT_URL"
            skipped.append(Skipped("*", REGION_LIST, f"DescribeRegions in {self.home_region}: {one_line(exc)}; "
                                                     f"no region was refreshed ({hint})"))
            return []
        enabled = enabled_regions(answer)
        if request.regions is None:
            return enabled
        for region in sorted(request.regions - set(enabled)):
            skipped.append(Skipped(region, EVERY_OFFER,
                                   "not a region enabled for this AWS account (DescribeRegions does not list it)"))
        return [r for r in enabled if r in request.regions]

    def _bands(self, skipped: list[Skipped]) -> dict[tuple[str, str], str]:
        """(region, instance type) → Spot Advisor band label (Linux)."""
        self._api.counts["SpotAdvisorFeed"] += 1
        try:
            feed = self._fetch_json(self.spot_advisor_url)
        except (OSError, ValueError) as exc:
            skipped.append(Skipped("*", INTERRUPTION_BANDS, f"Spot Advisor feed {self.spot_advisor_url} unreachable "
                                                             f"({exc}); interruption bands left empty"))
            return {}
        return spot_advisor_bands(feed, self.spot_advisor_url)

    def _region(self, region: str, request: FetchRequest, observed: str, bands: Mapping[tuple[str, str], str],
                progress: Progress, skipped: list[Skipped]) -> list[dict[str, Any]]:
        from botocore.exceptions import NoCredentialsError

        try:
            return self._region_rows(region, request, observed, bands, progress, skipped)
        except NoCredentialsError as exc:
            raise CredentialsError(f"AWS: no credentials found; {CREDENTIALS_HINT}", scope=region) from exc
        except sdk_errors() as exc:
            raise _RegionFailed(one_line(exc)) from exc

    def _apart(self, region: str, data: str, read: Callable[[], T], skipped: list[Skipped], empty: T,
               kept: str) -> T:
        """``read()``, or ``empty`` with ``(region, data, why)`` in ``skipped`` where its calls fail: one
        kind of data failing leaves the others (no credentials still stops the refresh)."""
        from botocore.exceptions import NoCredentialsError

        try:
            return read()
        except NoCredentialsError:
            raise
        except sdk_errors() as exc:
            skipped.append(Skipped(region, data, f"{one_line(exc)}; {kept}"))
            return empty

    def _region_rows(self, region: str, request: FetchRequest, observed: str, bands: Mapping[tuple[str, str], str],
                     progress: Progress, skipped: list[Skipped]) -> list[dict[str, Any]]:
        progress(self.cloud, region, "zones")
        zones = self._api.call("ec2", region, "DescribeAvailabilityZones").get("AvailabilityZones")
        zone_id = availability_zone_ids(zones, region)

        progress(self.cloud, region, "instance types")
        in_region = sorted({o["InstanceType"] for o in self._api.pages(
            "ec2", region, "DescribeInstanceTypeOfferings", "InstanceTypeOfferings",
            LocationType="region", MaxResults=1000)})
        unknown = [t for t in in_region if t not in self._specs]
        for chunk in _chunks(unknown, 100):
            for record in self._api.pages("ec2", region, "DescribeInstanceTypes", "InstanceTypes",
                                          InstanceTypes=chunk, MaxResults=100):
                try:
                    self._specs[record["InstanceType"]] = instance_spec(record)
                except (KeyError, TypeError, ValueError) as exc:
                    raise CatalogError(f"AWS DescribeInstanceTypes in {region}: {record.get('InstanceType', '?')} "
                                       f"lacks {exc!r}; expected VCpuInfo, MemoryInfo and GpuInfo/NeuronInfo") from exc
        specs: dict[str, InstanceSpec] = {}
        for itype in in_region:
            spec = self._specs.get(itype)
            if spec and (request.accelerators is None or (spec.accelerator or "CPU") in request.accelerators):
                specs[itype] = spec
        if not specs:
            return []
        types = sorted(specs)

        progress(self.cloud, region, "offerings")
        offered: dict[str, set[str]] = defaultdict(set)
        for chunk in _chunks(types, 100):
            for o in self._api.pages("ec2", region, "DescribeInstanceTypeOfferings", "InstanceTypeOfferings",
                                     LocationType="availability-zone", MaxResults=1000,
                                     Filters=[{"Name": "instance-type", "Values": chunk}]):
                offered[o["InstanceType"]].add(o["Location"])

        progress(self.cloud, region, "spot prices")
        latest = self._apart(region, SPOT_PRICES, lambda: self._spot_prices(region, types), skipped, {},
                             "the region's on-demand prices are kept")

        progress(self.cloud, region, "on-demand prices")
        on_demand = self._apart(region, ON_DEMAND_PRICES, lambda: self._on_demand_prices(region, types), skipped, {},
                                "spot prices are kept; on-demand prices stay as the current snapshot has them "
                                "(its source and observed_at say where they come from; needs pricing:GetProducts "
                                f"in {self.pricing_region})")

        continent = continent_of(self.cloud, region)
        rows = []
        for itype in types:
            spec = specs[itype]
            base = dict(cloud=self.cloud, region=region, continent=continent.value if continent else "",
                        instance_type=itype, accelerator=spec.accelerator,
                        accelerator_count=spec.accelerator_count, vcpus=spec.vcpus, memory_gib=spec.memory_gib,
                        observed_at=observed)
            if itype in on_demand:
                zone_ids = sorted(zone_id[z] for z in offered.get(itype, ()) if z in zone_id) or [""]
                for zid in zone_ids:
                    rows.append(offer_row(**base, zone=zid, market="on_demand", price_usd_per_hour=on_demand[itype],
                                          interruption_band="none", interruptions_per_hour=0.0,
                                          source="aws-price-list"))
            band = bands.get((region, itype))
            for (t, zone), (_, price) in sorted(latest.items()):
                if t != itype:
                    continue
                if zone not in zone_id:
                    raise CatalogError(f"AWS DescribeSpotPriceHistory in {region}: zone {zone!r} is not one of "
                                       f"the region's zones ({', '.join(sorted(zone_id))})")
                rows.append(offer_row(**base, zone=zone_id[zone], market="spot",
                                      price_usd_per_hour=checked_price(price, f"DescribeSpotPriceHistory in {region}"),
                                      interruption_band=band or "",
                                      interruptions_per_hour=(interruption.interruptions_per_hour_for_band(band)
                                                              if band else ""),
                                      source="aws-spot-price-history"))
        return rows

    def spot_price_history(self, instance_type: str, region: str, *, zone_id: str | None = None,
                           days: float = 7.0) -> list[tuple[str, datetime, float]]:
        """AWS's own spot price history of one type in a region, all its AZs or one AZ id, over the last
        ``days`` (``DescribeSpotPriceHistory``, Linux/UNIX, paginated): (AZ id, when the price took
        effect, $/h), oldest first."""
        zones = self._api.call("ec2", region, "DescribeAvailabilityZones").get("AvailabilityZones")
        ids = availability_zone_ids(zones, region)
        params: dict[str, Any] = dict(InstanceTypes=[instance_type], ProductDescriptions=["Linux/UNIX"],
                                      StartTime=self._clock() - timedelta(days=days), MaxResults=1000)
        if zone_id is not None:
            name = next((n for n, i in ids.items() if i == zone_id), None)
            if name is None:
                raise InputError(f"--zone {zone_id!r} is not an AZ id of {region} (its AZ ids: "
                                 f"{', '.join(sorted(ids.values()))})")
            params["AvailabilityZone"] = name
        out = []
        for record in self._api.pages("ec2", region, "DescribeSpotPriceHistory", "SpotPriceHistory", **params):
            try:
                zone, stamp, price = record["AvailabilityZone"], record["Timestamp"], record["SpotPrice"]
            except (KeyError, TypeError) as exc:
                raise CatalogError(f"AWS DescribeSpotPriceHistory in {region}: record lacks {exc!r}") from exc
            out.append((ids.get(zone, zone), stamp, checked_price(price, f"DescribeSpotPriceHistory in {region}")))
        return sorted(out, key=lambda r: (r[1], r[0]))

    def _spot_prices(self, region: str, types: list[str]) -> dict[tuple[str, str], tuple[Any, str]]:
        """(type, AZ name) → (when, $/h) of the latest DescribeSpotPriceHistory record (Linux/UNIX)."""
        latest: dict[tuple[str, str], tuple[Any, str]] = {}
        start = self._clock()
        for chunk in _chunks(types, 100):
            for record in self._api.pages("ec2", region, "DescribeSpotPriceHistory", "SpotPriceHistory",
                                          InstanceTypes=chunk, ProductDescriptions=["Linux/UNIX"],
                                          StartTime=start, MaxResults=1000):
                try:
                    key = (record["InstanceType"], record["AvailabilityZone"])
                    stamp, price = record.get("Timestamp"), record["SpotPrice"]
                except (KeyError, TypeError) as exc:
                    raise CatalogError(f"AWS DescribeSpotPriceHistory in {region}: record lacks {exc!r}") from exc
                if key not in latest or _later(stamp, latest[key][0]):
                    latest[key] = (stamp, price)
        return latest

    def _on_demand_prices(self, region: str, types: list[str]) -> dict[str, float]:
        prices: dict[str, float] = {}
        for chunk in _chunks(types, 50):
            filters = [term_match("regionCode", region), term_match("operatingSystem", "Linux"),
                       term_match("tenancy", "Shared"), term_match("preInstalledSw", "NA"),
                       term_match("capacitystatus", "Used"),
                       {"Type": "ANY_OF", "Field": "instanceType", "Value": ",".join(chunk)}]
            for entry in self._api.pages("pricing", self.pricing_region, "GetProducts", "PriceList",
                                         ServiceCode="AmazonEC2", FormatVersion="aws_v1", Filters=filters,
                                         MaxResults=100):
                itype, price = product_price(entry, region)
                if itype in chunk and itype not in prices and price is not None:
                    prices[itype] = price
        return prices

    def _apply_scores(self, rows: list[dict[str, Any]], spot_types: Mapping[str, set[str]],
                      skipped: list[Skipped], now: datetime, target_capacity: int) -> None:
        """Placement scores per group of one accelerator model's types (:mod:`.placement`), for
        ``target_capacity`` instances (the job's gang where the refresh names one), from the cache where
        asked in the last 24 hours, within the account's allowance of new configurations."""
        from botocore.exceptions import ClientError

        cache = self._score_cache if self._score_cache is not None else ScoreCache()
        by_model: dict[str, set[str]] = defaultdict(set)
        for itype in spot_types:
            spec = self._specs.get(itype)
            if spec is not None and spec.accelerator:
                by_model[spec.accelerator].add(itype)
        configs = groups(by_model, spot_types, target_capacity)
        scored: dict[tuple[str, str, str], tuple[int, Configuration, datetime]] = {}  # (region, AZ id, type)
        left = 0
        for config in configs:
            answer = cache.fresh(config, now)
            if answer is None and cache.asked_since(now) >= self.daily_configurations:
                left += 1
                continue
            if answer is None:
                try:
                    got = tuple((s["Region"], s["AvailabilityZoneId"], int(s["Score"])) for s in self._api.pages(
                        "ec2", self.home_region, "GetSpotPlacementScores", "SpotPlacementScores",
                        InstanceTypes=list(config.instance_types), TargetCapacity=config.target_capacity,
                        SingleAvailabilityZone=config.single_az, RegionNames=list(config.regions), MaxResults=1000)
                        if s.get("AvailabilityZoneId") and s.get("Region"))
                except sdk_errors() as exc:
                    if isinstance(exc, ClientError) and code_of(exc) == QUOTA_CODE:
                        left += 1
                        continue
                    skipped.append(Skipped("*", PLACEMENT_SCORES, f"GetSpotPlacementScores: {one_line(exc)}; "
                                                                   f"capacity_hint and availability left empty"))
                    cache.save(now)
                    return
                except (KeyError, TypeError, ValueError) as exc:
                    raise CatalogError(f"AWS GetSpotPlacementScores: unexpected score record ({exc!r})") from exc
                answer = Answer(now, got)
                cache.put(config, answer)
            for region, zone, score in answer.scores:
                for itype in config.instance_types:
                    scored[(region, zone, itype)] = (score, config, answer.asked_at)
        if left:
            skipped.append(Skipped("*", PLACEMENT_SCORES, f"{left} of {len(configs)} groups of instance types not "
                                                           f"scored: the account's allowance of new configurations "
                                                           f"in 24 hours ({self.daily_configurations}) is used; the "
                                                           f"next refresh after it renews asks them"))
        cache.save(now)
        for row in rows:
            found = scored.get((row["region"], row["zone"], row["instance_type"])) if row["market"] == "spot" else None
            if found is None:
                continue
            score, config, asked = found
            row["availability"] = score / 10.0
            if score >= self.likely_score:
                row["capacity_hint"] = config.target_capacity
            few = len(config.instance_types) < RECOMMENDED_TYPES
            row["source"] = (f"{row['source']}; availability = placement score {score}/10 for {config.target_capacity} "
                             f"instances of {', '.join(config.instance_types)}"
                             + (" (fewer than 3 types: AWS scores such requests low)" if few else "")
                             + f", asked {_iso(asked)}")

    # ------------------------------------------------------------------ check

    def check(self) -> CheckReport:
        """See :func:`geotrain.pricing.live.aws.check.check_access`."""
        return check_access(self._api, self.cloud, self.home_region, self.pricing_region)


# ---------------------------------------------------------------------- helpers


def _chunks(items: list[str], size: int) -> Iterable[list[str]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def _iso(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _later(a: Any, b: Any) -> bool:
    try:
        return a > b
    except TypeError:
        return False

"""Region → continent map of the three clouds, from the bundled ``regions.csv`` (shipped with the price
data in ``geotrain/pricing/data``, where PROVENANCE.md says where it comes from; read here by its
package path, so that the price sources and the providers both stand on it).

On-prem sites are not in it: their continent comes from the inventory file.
"""

from __future__ import annotations

import csv
import functools
import io
import re
from collections.abc import Iterable
from importlib import resources

from geotrain.domain import Continent, JobSpec, Location, Plan


@functools.cache
def region_continents() -> dict[tuple[str, str], Continent]:
    """(cloud, region) → continent for every region geotrain knows."""
    text = resources.files("geotrain.pricing").joinpath("data", "regions.csv").read_text("utf-8")
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


# ---- places a new account cannot use without opting in --------------------------------------------------

# AWS opt-in Regions: every Region launched after March 20, 2019 is disabled by default and must be enabled
# before use ("Enable or disable AWS Regions in your account",
# https://docs.aws.amazon.com/accounts/latest/reference/manage-acct-regions.html); which Regions those are is
# the "Opt-in status" column of https://docs.aws.amazon.com/global-infrastructure/latest/regions/aws-regions.html
# (ap-northeast-3, Osaka, is enabled by default). GovCloud and China Regions are other partitions that a
# standard account cannot reach at all ("You can't describe or access the Regions of one type of account from
# another", same page).
AWS_OPT_IN_REGIONS = frozenset({
    "af-south-1", "ap-east-1", "ap-east-2", "ap-south-2", "ap-southeast-3", "ap-southeast-4", "ap-southeast-5",
    "ap-southeast-6", "ap-southeast-7", "ca-west-1", "eu-central-2", "eu-south-1", "eu-south-2", "il-central-1",
    "me-central-1", "me-south-1", "mx-central-1",
})
_AWS_OTHER_PARTITIONS = ("us-gov-", "cn-", "us-iso")
# An AWS Availability Zone: AZ id "use1-az1" or name "us-east-1a". Local Zones (id "use1-atl2-az1", name
# "us-east-1-atl-2a", https://docs.aws.amazon.com/local-zones/latest/ug/available-local-zones.html) and
# Wavelength Zones (id "use1-wl1-bos-wlz1", name "us-east-1-wl1-bos-wlz-1",
# https://docs.aws.amazon.com/wavelength/latest/developerguide/available-wavelength-zones.md) are opted in per
# zone group (DescribeAvailabilityZones: OptInStatus opted-in / not-opted-in for them, "opt-in-not-required"
# for Availability Zones, https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_AvailabilityZone.html).
_AWS_AZ = re.compile(r"^(?:[a-z]{2,5}\d+-az\d+|[a-z]{2}(?:-[a-z]+)+-\d+[a-z])$")


def aws_zone_kind(zone: str) -> str:
    """"" (region-wide), "availability zone", "wavelength zone" or "local zone" for an AWS zone id or name."""
    if not zone:
        return ""
    if _AWS_AZ.match(zone):
        return "availability zone"
    return "wavelength zone" if re.search(r"-wl\d|wlz", zone) else "local zone"


def needs_opt_in(location: Location) -> str | None:
    """Why a new account cannot use ``location`` without opting in (e.g. "AWS opt-in region af-south-1",
    "AWS local zone use1-atl2-az1"), or None where any account can. Only AWS has such places among the
    clouds geotrain buys from (GCP and Azure regions need no opt-in)."""
    if location.cloud != "aws":
        return None
    if location.region.startswith(_AWS_OTHER_PARTITIONS):
        return f"AWS {location.region} (a GovCloud or China region: another kind of account)"
    if location.region in AWS_OPT_IN_REGIONS:
        return f"AWS opt-in region {location.region}"
    kind = aws_zone_kind(location.zone)
    if kind in ("local zone", "wavelength zone"):
        return f"AWS {kind} {location.zone}"
    return None


def named_places(job: JobSpec, plan: Plan | None = None, locations: Iterable[Location] = ()) -> frozenset[str]:
    """The regions and zones the user's job named (its regions constraint, a task file's region / zone), and
    those ``plan`` chose (or ``locations``, a mix being planned): as bare names and ``cloud/region`` / zone
    scopes."""
    names: set[str] = set(job.constraints.regions or ())
    for choice in job.constraints.resources:
        names.update(n for n in (choice.region, choice.zone) if n)
    chosen = [item.offer.location for item in plan.items] if plan is not None else []
    for loc in [*chosen, *locations]:
        names.update({loc.region, loc.region_scope, loc.zone_scope} | ({loc.zone} if loc.zone else set()))
    return frozenset(names)


def launcher_may_go(location: Location, named: frozenset[str]) -> bool:
    """Whether a launcher, on its own after a failure (a fallback, a re-plan, the spot policy), may move nodes
    to ``location``: anywhere an account can use without opting in, and places that need opting in only where
    the job or its plan named them (``named``: :func:`named_places`)."""
    if needs_opt_in(location) is None:
        return True
    return bool({location.region, location.region_scope, location.zone, location.zone_scope} & named)

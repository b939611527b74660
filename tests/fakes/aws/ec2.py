"""The EC2 actions the AWS fake answers itself, in front of moto's EC2 dispatcher, serialized from the
botocore model."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape as xml_escape

from tests.fakes.aws.wire import page

if TYPE_CHECKING:
    from tests.fakes.aws.server import FakeAws

EC2_ERRORS = {  # knob → (code, HTTP status, message)
    "throttle": ("RequestLimitExceeded", 503, "Request limit exceeded."),
    "fail": ("Unavailable", 503, "The server is overloaded or under maintenance (fake failing region)."),
    "denied": ("UnauthorizedOperation", 403, "You are not authorized to perform this operation."),
}


@functools.cache
def _ec2_model() -> Any:
    import botocore.session
    return botocore.session.get_session().get_service_model("ec2")


def ec2_xml(operation: str, result: Mapping[str, Any]) -> str:
    """An EC2 query-protocol answer, serialized from the botocore model (moto's own serializer takes
    ~2 s for the 1,412 instance types)."""
    shape = _ec2_model().operation_model(operation).output_shape
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<{operation}Response '
            f'xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>fake-0000</requestId>'
            f"{_xml_members(shape, result)}</{operation}Response>")


def _xml_members(shape: Any, value: Mapping[str, Any]) -> str:
    parts = []
    for name, member in shape.members.items():
        if name in value and value[name] is not None:
            tag = member.serialization.get("name") or name[0].lower() + name[1:]
            parts.append(f"<{tag}>{_xml_value(member, value[name])}</{tag}>")
    return "".join(parts)


def _xml_value(shape: Any, value: Any) -> str:
    if shape.type_name == "structure":
        return _xml_members(shape, value)
    if shape.type_name == "list":
        tag = shape.member.serialization.get("name") or "item"
        return "".join(f"<{tag}>{_xml_value(shape.member, v)}</{tag}>" for v in value)
    if shape.type_name == "boolean":
        return "true" if value else "false"
    return xml_escape(str(value))


class Query:
    """EC2 query-protocol parameters (``InstanceType.1``, ``Filter.1.Name``, ``Filter.1.Value.1`` …)
    with the accessors moto's handlers use, so the handlers below read like moto's."""

    def __init__(self, form: Mapping[str, list[str]], region: str, fake: FakeAws) -> None:
        self.form, self.region, self.fake = {k: v[0] for k, v in form.items()}, region, fake

    def get(self, name: str) -> str | None:
        return self.form.get(name)

    def int(self, name: str) -> int | None:
        value = self.form.get(name)
        return int(value) if value else None

    def flag(self, name: str) -> bool:
        return self.form.get(name, "").lower() == "true"

    def list(self, prefix: str) -> list[str]:
        items = [(int(k[len(prefix) + 1:]), v) for k, v in self.form.items()
                 if k.startswith(prefix + ".") and k[len(prefix) + 1:].isdigit()]
        return [v for _, v in sorted(items)]

    def filters(self) -> dict[str, list[str]]:
        out = {}
        for n in sorted({k.split(".")[1] for k in self.form if k.startswith("Filter.")}, key=int):
            out[self.form[f"Filter.{n}.Name"]] = self.list(f"Filter.{n}.Value")
        return out


def _paged(q: Query, key: str, items: list[Any]) -> dict[str, Any]:
    chunk, token = page(items, q.get("NextToken"), q.int("MaxResults"), q.fake.page_size)
    result: dict[str, Any] = {key: chunk}
    if token:
        result["NextToken"] = token
    return result


def _describe_spot_price_history(q: Query) -> dict[str, Any]:
    fake = q.fake
    types = set(q.list("InstanceType"))
    products = set(q.list("ProductDescription"))
    zone = q.get("AvailabilityZone")
    history = []
    for r in fake.data.spot:
        if r.region != q.region or (types and r.instance_type not in types):
            continue
        if products and "Linux/UNIX" not in products:
            continue
        name = fake.data.zone_name[(r.region, r.zone)]
        if zone and zone != name:
            continue
        price = "n/a" if "DescribeSpotPriceHistory" in fake.bad_shape else r.price
        history.append({"InstanceType": r.instance_type, "ProductDescription": "Linux/UNIX", "SpotPrice": price,
                        "AvailabilityZone": name, "Timestamp": r.observed_at})
    return _paged(q, "SpotPriceHistory", history)


def _describe_instance_types(q: Query) -> dict[str, Any]:
    fake = q.fake
    wanted = q.list("InstanceType")
    types = fake.data.instance_types
    if wanted:
        known = {t["InstanceType"] for t in types}
        unknown = sorted(set(wanted) - known)
        if unknown:
            raise Ec2Error("InvalidInstanceType", 400, f"The following supplied instance types do not exist: [{', '.join(unknown)}]")
        types = [t for t in types if t["InstanceType"] in set(wanted)]
    result = _paged(q, "InstanceTypes", types)
    if "DescribeInstanceTypes" in fake.bad_shape:
        result["InstanceTypes"] = [{k: v for k, v in t.items() if k != "VCpuInfo"} for t in result["InstanceTypes"]]
    return result


def _describe_instance_type_offerings(q: Query) -> dict[str, Any]:
    fake = q.fake
    location_type = q.get("LocationType") or "region"
    filters = q.filters()
    offers: list[dict[str, Any]] = list(fake.data.moto_offerings.get(location_type, {}).get(q.region, []))
    offered = fake.data.offered.get(q.region, [])
    if location_type == "availability-zone":
        offers += [{"InstanceType": t, "LocationType": location_type, "Location": z} for t, z in offered]
    elif location_type == "availability-zone-id":
        ids = {name: zid for (region, zid), name in fake.data.zone_name.items() if region == q.region}
        offers += [{"InstanceType": t, "LocationType": location_type, "Location": ids[z]} for t, z in offered]
    elif location_type == "region":
        offers += [{"InstanceType": t, "LocationType": "region", "Location": q.region}
                   for t in sorted(fake.data.in_region.get(q.region, ()))]
    if "instance-type" in filters:
        offers = [o for o in offers if o["InstanceType"] in filters["instance-type"]]
    if "location" in filters:
        offers = [o for o in offers if o["Location"] in filters["location"]]
    offers.sort(key=lambda o: (o["InstanceType"], o["Location"]))
    return _paged(q, "InstanceTypeOfferings", offers)


def _get_spot_placement_scores(q: Query) -> dict[str, Any]:
    fake = q.fake
    types = q.list("InstanceType")
    regions = q.list("RegionName") or sorted({r for r, _ in fake.data.scores})
    single = q.flag("SingleAvailabilityZone")
    scores = []
    for region in regions:
        by_zone: dict[str, int] = {}
        for itype in types:
            for zone, score in fake.data.scores.get((region, itype), {}).items():
                by_zone[zone] = max(score, by_zone.get(zone, 0))
        if single:
            scores += [{"Region": region, "AvailabilityZoneId": z, "Score": s} for z, s in sorted(by_zone.items())]
        elif by_zone:
            scores.append({"Region": region, "Score": max(by_zone.values())})
    return _paged(q, "SpotPlacementScores", scores)


def _describe_regions(q: Query) -> dict[str, Any]:
    from moto.ec2.models.availability_zones_and_regions import RegionsAndZonesBackend
    names = q.list("RegionName")
    # the fake's account has opted in to every opt-in region (moto says "not-opted-in")
    listed = [{"RegionName": r.name, "Endpoint": r.endpoint,
               "OptInStatus": "opted-in" if r.opt_in_status == "not-opted-in" else r.opt_in_status}
              for r in RegionsAndZonesBackend.regions
              if (q.fake.regions is None or r.name in q.fake.regions) and (not names or r.name in names)]
    return {"Regions": listed}


def _describe_availability_zones(q: Query) -> dict[str, Any]:
    from moto.ec2.models.availability_zones_and_regions import RegionsAndZonesBackend
    zones = RegionsAndZonesBackend.zones.get(q.region, [])
    names, ids = q.list("ZoneName"), q.list("ZoneId")
    return {"AvailabilityZones": [
        {"ZoneName": z.name, "ZoneId": z.zone_id, "RegionName": z.region_name, "State": "available",
         "ZoneType": z.zone_type, "OptInStatus": "opt-in-not-required", "Messages": []}
        for z in zones if (not names or z.name in names) and (not ids or z.zone_id in ids)]}


class Ec2Error(Exception):
    def __init__(self, code: str, status: int, message: str) -> None:
        super().__init__(message)
        self.code, self.status, self.message = code, status, message


# served here instead of by moto: moto lacks them, fakes them (spot prices) or is slow at them
# (serializing 1,412 instance types through moto takes ~0.5 s a page)
EC2_HANDLERS = {
    "DescribeSpotPriceHistory": _describe_spot_price_history,
    "DescribeInstanceTypes": _describe_instance_types,
    "DescribeInstanceTypeOfferings": _describe_instance_type_offerings,
    "GetSpotPlacementScores": _get_spot_placement_scores,
    "DescribeRegions": _describe_regions,
    # moto's own table, answered here: moto builds a whole region backend (default VPC …) on the first
    # call per region, ~0.25 s each
    "DescribeAvailabilityZones": _describe_availability_zones,
}

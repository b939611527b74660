"""The node syntax users type: which offers, how many of each.

A node list is comma-separated items ``CLOUD/WHERE/INSTANCE[/MARKET]=COUNT``:

- ``WHERE`` is a zone (``us-central1-a``, an AWS AZ id such as ``usw2-az1``) or a region
  (``us-west-2``, ``eastus``); for a region the cheapest zone of that region is taken;
- ``MARKET`` is ``spot`` (default for clouds), ``on_demand`` or ``owned`` (default, and the only
  market, for ``onprem``);
- ``COUNT`` is the number of nodes (default 1).

Examples::

    gcp/us-central1-a/n1-standard-8+T4/spot=4
    aws/us-west-2/g4dn.2xlarge=4
    azure/eastus/Standard_NC4as_T4_v3/on_demand=2
    onprem/munich-lab/rtx8000-ws=1
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from geotrain.domain import CLOUD_ONPREM, Market, NodeGroup, Offer
from geotrain.errors import InputError, NotFoundError


@dataclass(frozen=True, slots=True)
class NodeRequest:
    cloud: str
    where: str
    instance_type: str
    market: Market
    count: int
    text: str


def parse_nodes(spec: str) -> list[NodeRequest]:
    """Parse the node syntax; errors name the item and say what is expected."""
    items = [item.strip() for item in spec.split(",") if item.strip()]
    if not items:
        raise InputError("--nodes: empty; give e.g. gcp/us-central1-a/n1-standard-8+T4/spot=4")
    return [_parse_item(item) for item in items]


def _parse_item(item: str) -> NodeRequest:
    expected = "expected CLOUD/ZONE-OR-REGION/INSTANCE[/MARKET]=COUNT, e.g. aws/us-west-2/g4dn.2xlarge/spot=4"
    body, _, count_text = item.partition("=")
    try:
        count = int(count_text) if count_text else 1
    except ValueError:
        raise InputError(f"--nodes: {item!r}: count {count_text!r} is not a whole number; {expected}") from None
    if count < 1:
        raise InputError(f"--nodes: {item!r}: count must be at least 1")
    parts = body.split("/")
    if len(parts) not in (3, 4) or not all(parts):
        raise InputError(f"--nodes: {item!r}: {expected}")
    cloud = parts[0].lower()
    default = Market.OWNED if cloud == CLOUD_ONPREM else Market.SPOT
    market_text = parts[3] if len(parts) == 4 else default.value
    markets = [m.value for m in Market]
    if market_text not in markets:
        raise InputError(f"--nodes: {item!r}: market {market_text!r} is not one of {', '.join(markets)}")
    return NodeRequest(cloud, parts[1], parts[2], Market(market_text), count, item)


def resolve_nodes(requests: Sequence[NodeRequest], offers: Sequence[Offer]) -> list[NodeGroup]:
    """The offer each request means. A region picks its cheapest zone; nothing matching is an error."""
    groups = []
    for request in requests:
        candidates = [
            o for o in offers
            if o.location.cloud == request.cloud and o.shape.instance_type == request.instance_type
            and o.market == request.market
            and request.where in (o.location.zone, o.location.region)
        ]
        if not candidates:
            raise NotFoundError(f"--nodes: {request.text!r}: {_nearby(request, offers)}")
        best = min(candidates, key=lambda o: (o.price_usd_per_hour, o.location.zone))
        groups.append(NodeGroup(best, request.count))
    return groups


def _nearby(request: NodeRequest, offers: Sequence[Offer]) -> str:
    same_type = [o for o in offers if o.location.cloud == request.cloud
                 and o.shape.instance_type == request.instance_type]
    if not same_type:
        return (f"no offer of {request.instance_type} on {request.cloud} in the catalog; "
                "see `geotrain catalog list --cloud " + request.cloud + "`")
    aws_zone_name = re.fullmatch(r"([a-z]{2}(?:-[a-z]+)+-\d+)[a-z]", request.where) if request.cloud == "aws" else None
    if aws_zone_name:
        region = aws_zone_name.group(1)
        ids = sorted({o.location.zone for o in same_type if o.location.region == region and o.market == request.market
                      and o.location.zone})
        return (f"AWS zone names such as {request.where} point at different zones in each account, so prices are "
                f"kept by AZ id; give the region {region} (its cheapest zone)"
                + (f" or one of its AZ ids: {', '.join(ids)}" if ids else "")
                + " (`aws ec2 describe-availability-zones` shows your account's mapping)")
    here = [o for o in same_type if request.where in (o.location.zone, o.location.region)]
    if here:
        markets = sorted({o.market.value for o in here})
        return f"{request.instance_type} in {request.where} is offered as {', '.join(markets)}, not {request.market}"
    places = sorted({o.location.zone or o.location.region for o in same_type if o.market == request.market})[:8]
    listed = ", ".join(places) if places else "nowhere in this market"
    return f"no {request.market} offer of {request.instance_type} in {request.where}; it is offered in {listed}"

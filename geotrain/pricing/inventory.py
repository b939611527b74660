"""On-prem inventory: the user's own machines, as offers with market ``owned``.

File format (YAML)::

    sites:
      - site: munich-lab               # unique name; becomes the offer's region
        continent: europe              # one of geotrain's continents
        near_region: gcp/europe-west3  # optional: the cloud region closest on the network
        uplink_gbps: 2.2               # all streams leaving the site together (multi-stream iperf)
        single_stream_gbps: 0.5        # optional: what one TCP stream leaving the site carries
                                       # (default: the uplink); the model still caps it by window / RTT
        links:                         # optional: measured links to given destinations; they win over
                                       # the model for those pairs (``--links`` wins over them)
          - {to: gcp/us-central1, single_stream_gbps: 0.06, rtt_ms: 151}
          - {to: aws/eu-central-1, single_stream_gbps: 0.5, aggregate_gbps: 2.2, rtt_ms: 18}
        machines:
          - instance_type: rtx8000-ws  # your name for this kind of machine
            accelerator: RTX8000       # empty or absent for CPU-only machines
            accelerator_count: 1
            count: 2                   # how many such machines the site has
            vcpus: 16
            memory_gib: 128
            price_usd_per_hour: 0.0    # amortized cost of one machine-hour (often 0)
            hosts:                     # for `geotrain launch --provider onprem`: one SSH login per machine
              - {host: 10.0.0.5, user: me, port: 22, key: ~/.ssh/id_ed25519, python: python3}

A link's ``to`` is ``cloud/region``, ``cloud/region/zone`` or ``onprem/<another site>``;
``single_stream_gbps`` (one TCP stream, e.g. ``iperf`` without ``-P``) and ``rtt_ms`` (``ping``) are
required, ``aggregate_gbps`` (all streams from the site to there together, e.g. ``iperf -P 10``) is
optional. Hivemind opens one stream per peer, and every peer's share of an averaging round crosses
the site's one path: the site's traffic to its peers there moves at ``min(aggregate_gbps,
uplink_gbps)``, and without an ``aggregate_gbps`` at what one stream carries there (the streams share
the path; more is counted only where a multi-stream measurement says so).

Each machine kind becomes one offer: cloud ``onprem``, region = site, zone "", market ``owned``,
capacity_hint = count, interruption band ``none`` (0 interruptions per hour).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pandas as pd

from geotrain.domain import CLOUD_ONPREM, Continent, Market
from geotrain.errors import CatalogError
from geotrain.pricing.schema import parse_offers, utc_now
from geotrain.specfile import Fields, load_yaml_mapping


@dataclass(frozen=True, slots=True)
class OnPremMachine:
    instance_type: str
    accelerator: str | None
    accelerator_count: int
    count: int
    vcpus: float
    memory_gib: float
    price_usd_per_hour: float


@dataclass(frozen=True, slots=True)
class OnPremLink:
    """A measured link from a site to a cloud region or zone, or to another site."""

    to: str  # "cloud/region", "cloud/region/zone" or "onprem/site"
    single_stream_gbps: float
    rtt_ms: float
    aggregate_gbps: float | None = None  # all streams from the site to there together


@dataclass(frozen=True, slots=True)
class OnPremSite:
    site: str
    continent: Continent
    uplink_gbps: float  # all streams leaving the site together
    machines: tuple[OnPremMachine, ...]
    near_region: str | None = None  # "cloud/region"
    single_stream_gbps: float | None = None  # one stream leaving the site (None: the uplink)
    links: tuple[OnPremLink, ...] = ()


@dataclass(frozen=True, slots=True)
class Inventory:
    sites: tuple[OnPremSite, ...]
    origin: str

    def site(self, name: str) -> OnPremSite:
        for site in self.sites:
            if site.site == name:
                return site
        raise KeyError(name)


def load_inventory(path: str | Path) -> Inventory:
    """Read and validate an inventory file."""
    path = Path(path)
    data = load_yaml_mapping(path, CatalogError)
    top = Fields(data, origin=str(path), error=CatalogError)
    sites = []
    seen: set[str] = set()
    for fields in top.sections("sites"):
        site = _site(fields)
        if site.site in seen:
            raise fields.fail("site", f"{site.site!r} appears twice; site names must be unique")
        seen.add(site.site)
        sites.append(site)
    for fields, site in zip(top.sections("sites"), sites, strict=True):
        for n, link in enumerate(site.links):
            cloud, _, other = link.to.partition("/")
            if cloud == CLOUD_ONPREM and other not in seen:
                raise fields.fail(f"links[{n}].to", f"{link.to!r}: no site {other!r} in this inventory")
    top.finish()
    return Inventory(tuple(sites), str(path))


def _site(fields: Fields) -> OnPremSite:
    name = fields.text("site")
    continent = Continent(fields.choice("continent", [c.value for c in Continent]))
    near = fields.text("near_region", None)
    if near is not None and near.count("/") != 1:
        raise fields.fail("near_region", f"{near!r} is not of the form cloud/region, e.g. gcp/europe-west3")
    uplink = fields.number("uplink_gbps", above=0)
    stream = fields.number("single_stream_gbps", None, above=0)
    if stream is not None and stream > uplink:
        raise fields.fail("single_stream_gbps", f"{stream:g} is above the site's uplink_gbps ({uplink:g}): one "
                          "stream cannot carry more than all of them together")
    links = []
    if "links" in fields.keys():
        targets: set[str] = set()
        for link_fields in fields.sections("links"):
            link = _link(link_fields, name, uplink)
            if link.to in targets:
                raise link_fields.fail("to", f"{link.to!r} appears twice in site {name!r}")
            targets.add(link.to)
            links.append(link)
    machines = []
    kinds: set[str] = set()
    for machine_fields in fields.sections("machines"):
        machine = _machine(machine_fields)
        if machine.instance_type in kinds:
            raise machine_fields.fail("instance_type", f"{machine.instance_type!r} appears twice in site {name!r}")
        kinds.add(machine.instance_type)
        machines.append(machine)
    fields.finish()
    return OnPremSite(name, continent, uplink, tuple(machines), near, stream, tuple(links))


def _link(fields: Fields, site: str, uplink: float) -> OnPremLink:
    to = fields.text("to")
    parts = to.split("/")
    if not all(parts) or len(parts) not in ((2,) if parts[0] == CLOUD_ONPREM else (2, 3)):
        raise fields.fail("to", f"{to!r} is not cloud/region, cloud/region/zone or onprem/<site>, "
                          "e.g. gcp/us-central1")
    if to == f"{CLOUD_ONPREM}/{site}":
        raise fields.fail("to", f"a link from site {site!r} to itself")
    stream = fields.number("single_stream_gbps", above=0)
    rtt = fields.number("rtt_ms", minimum=0)
    aggregate = fields.number("aggregate_gbps", None, above=0)
    if stream > uplink:
        raise fields.fail("single_stream_gbps", f"{stream:g} is above the site's uplink_gbps ({uplink:g})")
    if aggregate is not None and not stream <= aggregate <= uplink:
        raise fields.fail("aggregate_gbps", f"{aggregate:g} must lie between single_stream_gbps ({stream:g}) and "
                          f"the site's uplink_gbps ({uplink:g})")
    fields.finish()
    return OnPremLink(to, stream, rtt, aggregate)


def _machine(fields: Fields) -> OnPremMachine:
    accelerator = fields.text("accelerator", None)
    count_per_node = fields.whole("accelerator_count", 1 if accelerator else 0, minimum=0)
    if bool(accelerator) != (count_per_node > 0):
        raise fields.fail("accelerator_count", "give an accelerator and a count above 0, or neither")
    machine = OnPremMachine(
        instance_type=fields.text("instance_type"),
        accelerator=accelerator,
        accelerator_count=count_per_node,
        count=fields.whole("count", minimum=1),
        vcpus=fields.number("vcpus", minimum=0),
        memory_gib=fields.number("memory_gib", minimum=0),
        price_usd_per_hour=fields.number("price_usd_per_hour", 0.0, minimum=0),
    )
    if "hosts" in fields.keys():
        fields.sections("hosts")  # the machines' SSH logins: read by geotrain.providers.onprem.load_hosts
    fields.finish()
    return machine


def inventory_table(inventory: Inventory, *, observed_at: datetime | None = None) -> pd.DataFrame:
    """The inventory as a validated price table (one owned offer per machine kind and site)."""
    when = (observed_at or utc_now()).strftime("%Y-%m-%dT%H:%M:%SZ")
    rows = []
    for site in inventory.sites:
        for m in site.machines:
            rows.append({
                "cloud": CLOUD_ONPREM, "region": site.site, "zone": "", "continent": site.continent.value,
                "instance_type": m.instance_type, "accelerator": m.accelerator or "",
                "accelerator_count": str(m.accelerator_count), "vcpus": repr(m.vcpus),
                "memory_gib": repr(m.memory_gib), "market": Market.OWNED.value,
                "price_usd_per_hour": repr(m.price_usd_per_hour), "capacity_hint": str(m.count),
                "interruption_band": "none", "interruptions_per_hour": "0.0",
                "uplink_gbps": repr(site.uplink_gbps), "observed_at": when,
                "source": f"inventory {Path(inventory.origin).name}",
            })
    raw = pd.DataFrame(rows, dtype="string")
    return parse_offers(raw, inventory.origin)

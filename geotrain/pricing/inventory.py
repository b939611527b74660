"""On-prem inventory: the user's own machines, as offers with market ``owned``.

File format (YAML)::

    sites:
      - site: munich-lab               # unique name; becomes the offer's region
        continent: europe              # one of geotrain's continents
        near_region: gcp/europe-west3  # optional: the cloud region closest on the network
        uplink_gbps: 0.5               # the site's internet uplink
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
class OnPremSite:
    site: str
    continent: Continent
    uplink_gbps: float
    machines: tuple[OnPremMachine, ...]
    near_region: str | None = None  # "cloud/region"


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
    top.finish()
    return Inventory(tuple(sites), str(path))


def _site(fields: Fields) -> OnPremSite:
    name = fields.text("site")
    continent = Continent(fields.choice("continent", [c.value for c in Continent]))
    near = fields.text("near_region", None)
    if near is not None and near.count("/") != 1:
        raise fields.fail("near_region", f"{near!r} is not of the form cloud/region, e.g. gcp/europe-west3")
    uplink = fields.number("uplink_gbps", above=0)
    machines = []
    kinds: set[str] = set()
    for machine_fields in fields.sections("machines"):
        machine = _machine(machine_fields)
        if machine.instance_type in kinds:
            raise machine_fields.fail("instance_type", f"{machine.instance_type!r} appears twice in site {name!r}")
        kinds.add(machine.instance_type)
        machines.append(machine)
    fields.finish()
    return OnPremSite(name, continent, uplink, tuple(machines), near)


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

"""Egress prices: USD per GB of traffic leaving a VM, by cloud and link class.

The bundled ``egress.csv`` has one row per (cloud, link class, source continent, destination
continent), where a continent may be ``*`` (any). A lookup takes the most specific row: exact
source and destination, then exact source, then exact destination, then ``*``/``*``.

Traffic leaving an on-prem site costs nothing per GB (the uplink is paid flat; put its cost in the
inventory's amortized price), and traffic between two nodes of one zone costs nothing on any cloud
(none of the clouds' price lists bills it). Traffic *into* a cloud is free on all three clouds, so
only the sender's cloud is charged.
"""

from __future__ import annotations

import csv
import functools
import io
from dataclasses import dataclass

from geotrain.domain import CLOUD_ONPREM, LinkClass, Location, link_class
from geotrain.errors import CatalogError
from geotrain.pricing.bundled import data_bytes

ANY = "*"


@dataclass(frozen=True, slots=True)
class EgressRate:
    cloud: str
    link_class: LinkClass
    src_continent: str  # a Continent value or "*"
    dst_continent: str
    usd_per_gb: float
    source: str


class EgressPrices:
    """A lookup over egress rates. Build one with :meth:`bundled` or from your own rates."""

    def __init__(self, rates: tuple[EgressRate, ...]) -> None:
        self.rates = rates
        self._index = {(r.cloud, r.link_class, r.src_continent, r.dst_continent): r for r in rates}

    @classmethod
    @functools.cache
    def bundled(cls) -> EgressPrices:
        text = data_bytes("egress.csv").decode("utf-8")
        rates = tuple(
            EgressRate(
                cloud=row["cloud"], link_class=LinkClass(row["link_class"]),
                src_continent=row["src_continent"], dst_continent=row["dst_continent"],
                usd_per_gb=float(row["usd_per_gb"]), source=row["source"],
            )
            for row in csv.DictReader(io.StringIO(text))
        )
        return cls(rates)

    def rate(self, src: Location, dst: Location) -> EgressRate:
        """The rate that applies to traffic from ``src`` to ``dst``."""
        kind = link_class(src, dst)
        if src.cloud == CLOUD_ONPREM:
            return EgressRate(CLOUD_ONPREM, kind, ANY, ANY, 0.0, "on-prem uplinks are not billed per GB")
        if kind is LinkClass.SAME_ZONE and not any(r.cloud == src.cloud for r in self.rates):
            return EgressRate(src.cloud, kind, ANY, ANY, 0.0, "traffic inside one zone is not billed")
        s, d = str(src.continent), str(dst.continent)
        for key in ((s, d), (s, ANY), (ANY, d), (ANY, ANY)):
            found = self._index.get((src.cloud, kind, *key))
            if found is not None:
                return found
        raise CatalogError(
            f"no egress price for {kind.value} traffic leaving cloud {src.cloud!r}; "
            "add rows for it to the egress table"
        )

    def usd_per_gb(self, src: Location, dst: Location) -> float:
        return self.rate(src, dst).usd_per_gb

"""What clouds bill for traffic between two VMs: USD per GB, by cloud, link class and payer.

The bundled ``egress.csv`` has one row per (cloud, link class, source continent, destination
continent, payer), where a continent may be ``*`` (any). ``payer`` is ``sender`` (the sending VM's
cloud bills the traffic as egress) or ``receiver`` (the receiving VM's cloud bills it too, as AWS
does "in each direction" between Availability Zones of one region). A lookup takes the most specific
row: exact source and destination, then exact source, then exact destination, then ``*``/``*``.

:meth:`EgressPrices.charges` is the one rule for what a transfer costs and who pays it; the perf
model, the planner's MIP, launch's spend so far and cost-report all price traffic through it (see
``PROVENANCE.md`` for each cloud's published rule).

Traffic leaving an on-prem site costs nothing per GB (the uplink is paid flat; put its cost in the
inventory's amortized price), and traffic between two nodes of one zone costs nothing on any cloud.
Traffic *into* a cloud is free unless a ``receiver`` row says otherwise. Free tiers are per account
and month and are not deducted.
"""

from __future__ import annotations

import csv
import functools
import io
from dataclasses import dataclass
from enum import StrEnum

from geotrain.domain import CLOUD_ONPREM, LinkClass, Location, link_class
from geotrain.errors import CatalogError
from geotrain.pricing.bundled import data_bytes

ANY = "*"


class Payer(StrEnum):
    SENDER = "sender"
    RECEIVER = "receiver"


@dataclass(frozen=True, slots=True)
class EgressRate:
    cloud: str
    link_class: LinkClass
    src_continent: str  # a Continent value or "*"
    dst_continent: str
    usd_per_gb: float
    source: str
    payer: Payer = Payer.SENDER


@dataclass(frozen=True, slots=True)
class Charge:
    """One side's bill for a transfer: ``payer`` side, at ``location``, ``usd_per_gb``."""

    payer: Payer
    location: Location  # the paying VM's location (its cloud and region send the bill)
    usd_per_gb: float
    source: str


class EgressPrices:
    """A lookup over egress rates. Build one with :meth:`bundled` or from your own rates."""

    def __init__(self, rates: tuple[EgressRate, ...]) -> None:
        self.rates = rates
        self._index = {(r.cloud, r.link_class, r.payer, r.src_continent, r.dst_continent): r for r in rates}

    @classmethod
    @functools.cache
    def bundled(cls) -> EgressPrices:
        text = data_bytes("egress.csv").decode("utf-8")
        rates = tuple(
            EgressRate(
                cloud=row["cloud"], link_class=LinkClass(row["link_class"]),
                src_continent=row["src_continent"], dst_continent=row["dst_continent"],
                usd_per_gb=float(row["usd_per_gb"]), source=row["source"],
                payer=Payer(row.get("payer") or Payer.SENDER),
            )
            for row in csv.DictReader(io.StringIO(text))
        )
        return cls(rates)

    def rate(self, src: Location, dst: Location) -> EgressRate:
        """The sender's rate for traffic from ``src`` to ``dst`` (what leaving ``src`` costs)."""
        kind = link_class(src, dst)
        if src.cloud == CLOUD_ONPREM:
            return EgressRate(CLOUD_ONPREM, kind, ANY, ANY, 0.0, "on-prem uplinks are not billed per GB")
        if kind is LinkClass.SAME_ZONE and not any(r.cloud == src.cloud for r in self.rates):
            return EgressRate(src.cloud, kind, ANY, ANY, 0.0, "traffic inside one zone is not billed")
        found = self._lookup(src.cloud, kind, Payer.SENDER, src, dst)
        if found is None:
            raise CatalogError(
                f"no egress price for {kind.value} traffic leaving cloud {src.cloud!r}; "
                "add rows for it to the egress table"
            )
        return found

    def charges(self, src: Location, dst: Location) -> tuple[Charge, ...]:
        """Every bill a transfer from ``src`` to ``dst`` causes: the sender's, and the receiver's
        where its cloud bills incoming traffic for that link class. Free sides are left out."""
        out = []
        sent = self.rate(src, dst)
        if sent.usd_per_gb:
            out.append(Charge(Payer.SENDER, src, sent.usd_per_gb, sent.source))
        if dst.cloud != CLOUD_ONPREM:
            received = self._lookup(dst.cloud, link_class(src, dst), Payer.RECEIVER, src, dst)
            if received is not None and received.usd_per_gb:
                out.append(Charge(Payer.RECEIVER, dst, received.usd_per_gb, received.source))
        return tuple(out)

    def usd_per_gb(self, src: Location, dst: Location) -> float:
        """What one GB from ``src`` to ``dst`` costs in all (both sides)."""
        return sum(c.usd_per_gb for c in self.charges(src, dst))

    def _lookup(self, cloud: str, kind: LinkClass, payer: Payer, src: Location, dst: Location) -> EgressRate | None:
        s, d = str(src.continent), str(dst.continent)
        for key in ((s, d), (s, ANY), (ANY, d), (ANY, ANY)):
            found = self._index.get((cloud, kind, payer, *key))
            if found is not None:
                return found
        return None

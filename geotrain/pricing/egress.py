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

A cloud with no rows at all (one whose offers were imported, e.g. ``lambda``) is *assumed* to bill
every transfer leaving one of its zones at the internet rate of its continent: the median of the
known clouds' internet rates from that continent to the destination (:meth:`EgressPrices.assumed`
says which clouds that applies to, so plans and estimates can say so). ``--egress FILE`` adds rows in
this table's own format (:meth:`EgressPrices.with_file`), which win over the bundled ones.
"""

from __future__ import annotations

import csv
import functools
import io
import statistics
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from geotrain.domain import CLOUD_ONPREM, Continent, LinkClass, Location, link_class
from geotrain.errors import CatalogError, InputError
from geotrain.pricing.bundled import data_bytes
from geotrain.specfile import read_text

ANY = "*"
COLUMNS = ("cloud", "link_class", "src_continent", "dst_continent", "usd_per_gb", "payer", "source")
_REQUIRED = COLUMNS[:5]
ASSUMED = "assumed"  # the source of a rate that no row gives (an unknown cloud's default)


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
        self._index = {(r.cloud, r.link_class, r.payer, r.src_continent, r.dst_continent): r for r in rates}
        self.rates = tuple(self._index.values())  # a later row of the same key wins
        self.clouds = frozenset(r.cloud for r in self.rates)

    @classmethod
    @functools.cache
    def bundled(cls) -> EgressPrices:
        return cls(parse_egress(data_bytes("egress.csv").decode("utf-8"), "egress.csv", "bundled"))

    def with_file(self, path: str | Path) -> EgressPrices:
        """These rates with the rows of a CSV file in the egress table's format (columns
        cloud,link_class,src_continent,dst_continent,usd_per_gb[,payer][,source]); its rows win."""
        path = Path(path)
        extra = parse_egress(read_text(path, InputError), str(path), path.name)
        return EgressPrices(self.rates + extra)

    def knows(self, cloud: str) -> bool:
        """Whether the table has rows for ``cloud`` (on-prem needs none: its uplinks are not billed per GB)."""
        return cloud == CLOUD_ONPREM or cloud in self.clouds

    def assumed(self, locations) -> dict[str, tuple[str, ...]]:  # noqa: ANN001 - an iterable of Locations
        """Clouds among ``locations`` whose egress is assumed (no rows), each with its continents."""
        out: dict[str, set[str]] = {}
        for loc in locations:
            if not self.knows(loc.cloud):
                out.setdefault(loc.cloud, set()).add(str(loc.continent))
        return {cloud: tuple(sorted(continents)) for cloud, continents in sorted(out.items())}

    def assumed_words(self, locations) -> list[str]:  # noqa: ANN001
        """One assumption line per cloud whose egress is assumed, with the rate applied."""
        lines = []
        for cloud, continents in self.assumed(locations).items():
            rates = ", ".join(f"${self._assumed_usd_per_gb(c, ANY):.4g}/GB from {c.replace('_', ' ')}"
                              for c in continents)
            lines.append(f"egress of cloud {cloud!r} assumed (no rows in the egress table): every transfer leaving "
                         f"it at the internet rate of its continent, the median of {', '.join(sorted(self.clouds))}'s "
                         f"({rates}); give real rows with --egress FILE")
        return lines

    def rate(self, src: Location, dst: Location) -> EgressRate:
        """The sender's rate for traffic from ``src`` to ``dst`` (what leaving ``src`` costs)."""
        kind = link_class(src, dst)
        if src.cloud == CLOUD_ONPREM:
            return EgressRate(CLOUD_ONPREM, kind, ANY, ANY, 0.0, "on-prem uplinks are not billed per GB")
        found = self._lookup(src.cloud, kind, Payer.SENDER, src, dst)
        if found is None and kind is LinkClass.SAME_ZONE:
            return EgressRate(src.cloud, kind, ANY, ANY, 0.0, "traffic inside one zone is not billed")
        if found is None and not self.knows(src.cloud):
            usd = self._assumed_usd_per_gb(str(src.continent), str(dst.continent))
            return EgressRate(src.cloud, kind, str(src.continent), ANY, usd,
                              f"{ASSUMED}: median internet rate of {', '.join(sorted(self.clouds))} "
                              f"from {src.continent}")
        if found is None:
            raise CatalogError(
                f"no egress price for {kind.value} traffic leaving cloud {src.cloud!r}; give rows for it with "
                f"--egress FILE (columns {','.join(COLUMNS)}, as in the bundled egress table)"
            )
        return found

    def _assumed_usd_per_gb(self, src_continent: str, dst_continent: str) -> float:
        """The median of the known clouds' internet rates from ``src_continent`` to ``dst_continent``."""
        rates = []
        for cloud in sorted(self.clouds):
            for key in ((src_continent, dst_continent), (src_continent, ANY), (ANY, dst_continent), (ANY, ANY)):
                found = self._index.get((cloud, LinkClass.INTERNET, Payer.SENDER, *key))
                if found is not None:
                    rates.append(found.usd_per_gb)
                    break
        if not rates:
            raise CatalogError("the egress table has no internet rates to assume an unknown cloud's from; "
                               "give rows with --egress FILE")
        return statistics.median(rates)

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


def parse_egress(text: str, origin: str, default_source: str) -> tuple[EgressRate, ...]:
    """Rows of an egress table (CSV with a header), each checked: a bad one is named by its line."""
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in _REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(f"{origin}: missing column(s) {', '.join(missing)}; the egress table's columns are "
                         f"{','.join(COLUMNS)} (payer and source optional)")
    continents = {ANY, *(c.value for c in Continent)}
    out = []
    for line, row in enumerate(reader, start=2):
        try:
            kind = LinkClass(row["link_class"])
            payer = Payer(row.get("payer") or Payer.SENDER)
            usd = float(row["usd_per_gb"])
        except ValueError as exc:
            raise InputError(f"{origin}: line {line}: {exc} (link_class one of {', '.join(k.value for k in LinkClass)}; "
                             f"payer sender or receiver; usd_per_gb a number)") from None
        cloud = (row["cloud"] or "").strip().lower()
        ends = (row["src_continent"] or "").strip(), (row["dst_continent"] or "").strip()
        if not cloud or usd < 0 or usd != usd or any(e not in continents for e in ends):
            raise InputError(f"{origin}: line {line}: needs a cloud, continents among {', '.join(sorted(continents))} "
                             "and a usd_per_gb >= 0")
        out.append(EgressRate(cloud, kind, ends[0], ends[1], usd, (row.get("source") or "").strip() or default_source,
                              payer))
    return tuple(out)

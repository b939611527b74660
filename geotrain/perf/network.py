"""Network between any two locations: what one TCP stream carries, and what all streams together do.

A link has two caps. Training peers talk over one TCP stream per peer pair (Hivemind opens one per
peer), so the first is the *single-stream* bandwidth; the second is an *aggregate*: what all the
streams of one sender (a VM; an on-prem site as a whole) towards the other end carry together. A
VM's traffic to n peers there moves at most at ``min(n × single stream, aggregate)``; an on-prem
site's at its measured aggregate there, else at one stream's figure (its streams share one path), and all its
traffic together at most at its own egress cap (a VM's NIC figure, a site's ``uplink_gbps``: the
strategies in :mod:`geotrain.perf.strategies` apply that one). For a pair of locations the model
answers, in this order:

1. a user measurement: ``--links FILE`` (``src,dst,bandwidth_gbps,rtt_ms[,aggregate_gbps]``, src/dst
   ``cloud/region``, ``cloud/region/zone`` or ``onprem/site``; symmetric; the most specific wins), then
   the on-prem inventory's per-destination ``links`` of a site (same meaning; ``--links`` wins on the
   same pair) — *measured*;
2. a single-stream measurement between training VMs of those two regions (Erben et al.,
   ``measured_links.csv``, with the most that its multi-stream runs carried as the aggregate) —
   *measured*;
3. a measured pair nearby: a measured pair (A, B) serves (A', B') when A' is A or near it and B' is B
   or near it: same cloud and continent, and at most ``NEAR_RTT_MS`` = 10 ms apart by Skyplane's ping
   (a metro area and its neighbours: Frankfurt, Zurich, Belgium, the Netherlands). The measured stream
   is window-limited, so it is scaled with the round trip: ``bw' = bw × RTT(A,B) / RTT(A',B')`` (both
   Skyplane's, one source), capped as in 4 — *derived* (``derived_from`` names the pair);
4. the model: ``bandwidth = min(cap_a, cap_b, window / RTT, aggregate)`` where
   - ``cap`` is a VM's single-stream throughput inside one zone (measured per cloud:
     ``network.json``), or an on-prem site's ``single_stream_gbps`` (default: its uplink);
   - ``window`` is the effective TCP window fitted on the measured single-stream WAN pairs of the
     same kind (same cloud across regions, cloud to cloud, on-prem to cloud): a stream carries at
     most one window per round trip;
   - ``RTT`` is Skyplane's ping between the two regions (*measured*), else the median RTT between
     the two continents (*estimated*);
   - ``aggregate`` is Skyplane's 64-stream throughput between two VMs of the regions (cloud pairs
     only; also the link's aggregate cap). An on-prem end without a measured link has no aggregate
     but its uplink.
   An on-prem site's streams to one place share its path there: without a measured aggregate for
   the pair, the strategies count what one stream carries as the path's aggregate
   (``LinkEstimate.site_path_gbps``).
   Inside one zone the cap alone applies (RTT measured per cloud); across zones of one region
   there is no measurement in the sources, so the same-zone figures are used (*estimated*).

On-prem sites are placed on the network by their inventory's ``near_region`` (the cloud region
with the closest network path); without one, continent medians are used.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from geotrain.domain import CLOUD_ONPREM, LinkClass, Location, link_class
from geotrain.errors import InputError
from geotrain.perf.data import data_text
from geotrain.specfile import read_text

MB = 1e6
NEAR_RTT_MS = 10.0  # a measured pair serves regions at most this far (Skyplane ping) from its own ends


@dataclass(frozen=True, slots=True)
class LinkEstimate:
    """One direction-free link between two locations."""

    bandwidth_gbps: float  # one TCP stream
    rtt_ms: float
    link_class: LinkClass
    bandwidth_measured: bool
    rtt_measured: bool
    source: str
    # all streams of one sender towards the other end together (a VM; an on-prem site: all its
    # machines); None: no figure, only the ends' own egress caps apply
    aggregate_gbps: float | None = None
    derived_from: str | None = None  # the measured pair this one was scaled from ("cloud/region <-> cloud/region")
    # what ``bandwidth_gbps`` is: one stream, or what NCCL's ``streams`` sockets carry (inside a region,
    # ``geotrain.perf.nic``), at most the machines' NIC figure where ``nic_capped``
    streams: int = 1
    nic_capped: bool = False

    @property
    def measured(self) -> bool:
        return self.bandwidth_measured and self.rtt_measured

    @property
    def basis(self) -> str:
        """measured | derived (scaled from a measured pair nearby) | modelled (RTT measured) | estimated."""
        if self.measured:
            return "measured"
        if self.derived_from is not None:
            return "derived"
        return "modelled" if self.rtt_measured else "estimated"

    @property
    def site_path_gbps(self) -> float:
        """What all streams between an on-prem site and the other end carry together: the measured
        aggregate, else what one stream carries (the site's streams share one path, and a site is not
        assumed to add streams up where nobody measured that it does)."""
        return self.aggregate_gbps or self.bandwidth_gbps

    def streams_gbps(self, streams: int, *, site: bool = False) -> float:
        """What ``streams`` TCP streams between the two ends carry together: that many times one
        stream, at most the pair's aggregate (an on-prem site's path: ``site_path_gbps``)."""
        cap = self.site_path_gbps if site else self.aggregate_gbps
        return min(streams * self.bandwidth_gbps, cap) if cap else streams * self.bandwidth_gbps

    def transfer_s(self, payload_bytes: float) -> float:
        return payload_bytes * 8 / (self.bandwidth_gbps * 1e9)


@dataclass(frozen=True, slots=True)
class LinkOverride:
    """A measured link given by the user (``--links`` or an inventory site's ``links``)."""

    src: str
    dst: str
    bandwidth_gbps: float  # one stream
    rtt_ms: float
    source: str
    aggregate_gbps: float | None = None  # all streams of one sender (an on-prem site: the whole site) together


@dataclass(frozen=True, slots=True)
class SitePlacement:
    """Where an on-prem site sits on the network, and what its uplink carries."""

    uplink_gbps: float  # all streams leaving the site together
    near_region: str | None = None  # "cloud/region"
    single_stream_gbps: float | None = None  # one stream leaving the site (None: the uplink)
    links: tuple[LinkOverride, ...] = ()  # measured links to given destinations

    @property
    def stream_cap_gbps(self) -> float:
        return min(self.uplink_gbps, self.single_stream_gbps or self.uplink_gbps)


@dataclass(frozen=True, slots=True)
class MeasuredPair:
    """A single-stream measurement between VMs of two regions (``measured_links.csv``)."""

    bandwidth_gbps: float
    rtt_ms: float
    source: str
    skyplane_rtt_ms: float | None = None  # Skyplane's ping between the same regions (to scale by)
    aggregate_gbps: float | None = None  # the most that several parallel streams carried
    continents: tuple[str, str] | None = None  # of the pair's two regions, in key order


class NetworkModel:
    """Answers :meth:`link` for any two locations. Build with :meth:`bundled`."""

    def __init__(self, *, rtt_ms: Mapping[tuple[str, str], float], aggregate_gbps: Mapping[tuple[str, str], float],
                 measured: Mapping[tuple[str, str], MeasuredPair | tuple], nic_cap: Mapping[str, tuple[float, float]],
                 window_mb: Mapping[str, float], continent_rtt_ms: Mapping[tuple[str, str], float],
                 sites: Mapping[str, SitePlacement] | None = None, overrides: Iterable[LinkOverride] = ()) -> None:
        self._rtt = rtt_ms
        self._aggregate = aggregate_gbps
        self._measured = {k: v if isinstance(v, MeasuredPair) else MeasuredPair(*v) for k, v in measured.items()}
        self._nic_cap = nic_cap
        self._window = window_mb
        self._continent_rtt = continent_rtt_ms
        self._sites = dict(sites or {})
        self._file_overrides = tuple(overrides)
        # a site's own links, then --links over them (the same pair: the file wins)
        site_links = [link for site in self._sites.values() for link in site.links]
        self._overrides = {_pair(o.src, o.dst): o for o in [*site_links, *self._file_overrides]}
        self._cache: dict[tuple[Location, Location], LinkEstimate] = {}

    @classmethod
    def bundled(cls, *, sites: Mapping[str, SitePlacement] | None = None,
                overrides: Iterable[LinkOverride] = ()) -> NetworkModel:
        base = _bundled_tables()
        return cls(**base, sites=sites, overrides=overrides)

    def _with(self, *, sites: Mapping[str, SitePlacement], overrides: Iterable[LinkOverride]) -> NetworkModel:
        return NetworkModel(rtt_ms=self._rtt, aggregate_gbps=self._aggregate, measured=self._measured,
                            nic_cap=self._nic_cap, window_mb=self._window, continent_rtt_ms=self._continent_rtt,
                            sites=sites, overrides=overrides)

    def with_sites(self, sites: Mapping[str, SitePlacement]) -> NetworkModel:
        return self._with(sites={**self._sites, **sites}, overrides=self._file_overrides)

    def with_overrides_file(self, path: str | Path) -> NetworkModel:
        return self._with(sites=self._sites, overrides=[*self._file_overrides, *load_overrides(path)])

    def zone_specific(self) -> bool:
        """Whether a link can depend on the zones (an override names one): otherwise every two zones of
        two regions are linked alike, as are every two zones of one region."""
        return any(scope.count("/") >= 2 for pair in self._overrides for scope in pair)

    def link(self, a: Location, b: Location) -> LinkEstimate:
        key = (a, b) if (a.cloud, a.region, a.zone) <= (b.cloud, b.region, b.zone) else (b, a)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._resolve(*key)
        return found

    # -- resolution -------------------------------------------------------------------------

    def _resolve(self, a: Location, b: Location) -> LinkEstimate:
        kind = link_class(a, b)
        override = self._override(a, b)
        if override is not None:
            return LinkEstimate(override.bandwidth_gbps, override.rtt_ms, kind, True, True, override.source,
                                override.aggregate_gbps)
        if kind in (LinkClass.SAME_ZONE, LinkClass.CROSS_ZONE):
            return self._local(a, b, kind)
        aggregate = self._vm_aggregate(a, b)
        measured = self._measured.get(_pair(a.region_scope, b.region_scope))
        if measured is not None:
            return LinkEstimate(measured.bandwidth_gbps, measured.rtt_ms, kind, True, True, measured.source,
                                measured.aggregate_gbps or aggregate)
        derived = self._near_measured(a, b, kind, aggregate)
        if derived is not None:
            return derived
        rtt, rtt_measured, rtt_source = self._rtt_between(a, b)
        window = self._window["onprem" if CLOUD_ONPREM in (a.cloud, b.cloud) else
                              "internet" if kind is LinkClass.INTERNET else "cross_continent"]
        caps = [self._cap(a), self._cap(b), window * MB * 8 / (rtt / 1e3) / 1e9]
        skyplane = self._aggregate.get(_pair(*(self._network_region(x) or "" for x in (a, b))))
        if skyplane:
            caps.append(skyplane)
        bandwidth = min(caps)
        return LinkEstimate(bandwidth, rtt, kind, False, rtt_measured,
                            f"{rtt_source}; single stream modelled as min(caps, {window:.2f} MB window / RTT)",
                            aggregate)

    def _near_measured(self, a: Location, b: Location, kind: LinkClass,
                       aggregate: float | None) -> LinkEstimate | None:
        """The measured pair whose ends are nearest to a and b (each within ``NEAR_RTT_MS``), scaled."""
        ra, rb = a.region_scope, b.region_scope
        rtt = self._rtt.get(_pair(ra, rb))
        if CLOUD_ONPREM in (a.cloud, b.cloud) or rtt is None:
            return None
        best: tuple[float, tuple[str, str], MeasuredPair] | None = None
        for key, m in self._measured.items():
            if m.skyplane_rtt_ms is None:
                continue
            continents = m.continents or ("", "")
            for (pa, ca), (pb, cb) in (((key[0], continents[0]), (key[1], continents[1])),
                                       ((key[1], continents[1]), (key[0], continents[0]))):
                da, db = self._distance(a, pa, ca), self._distance(b, pb, cb)
                if da <= NEAR_RTT_MS and db <= NEAR_RTT_MS and (best is None or da + db < best[0]):
                    best = (da + db, key, m)
        if best is None:
            return None
        _, key, m = best
        scaled = m.bandwidth_gbps * m.skyplane_rtt_ms / rtt
        caps = [self._cap(a), self._cap(b), scaled] + ([aggregate] if aggregate else [])
        name = f"{key[0]} <-> {key[1]}"
        return LinkEstimate(min(caps), rtt, kind, False, True,
                            f"Skyplane ping; single stream scaled from the measured pair {name} "
                            f"({m.bandwidth_gbps * 1000:.0f} Mbit/s at {m.skyplane_rtt_ms:.1f} ms) "
                            f"by RTT ratio", aggregate, derived_from=name)

    def _distance(self, location: Location, region: str, continent: str) -> float:
        """Skyplane RTT between a location's region and ``region``: 0 if the same, inf unless both are
        of one cloud and continent (and measured)."""
        if location.region_scope == region:
            return 0.0
        if region.split("/", 1)[0] != location.cloud or (continent and continent != str(location.continent)):
            return float("inf")
        return self._rtt.get(_pair(location.region_scope, region), float("inf"))

    def _vm_aggregate(self, a: Location, b: Location) -> float | None:
        """Skyplane's 64-stream figure between two VMs of the regions: one VM's aggregate towards the
        other region (cloud pairs only; a site's aggregate is its uplink or a measured link)."""
        if CLOUD_ONPREM in (a.cloud, b.cloud):
            return None
        return self._aggregate.get(_pair(a.region_scope, b.region_scope))

    def _local(self, a: Location, b: Location, kind: LinkClass) -> LinkEstimate:
        if a.cloud == CLOUD_ONPREM:
            cap, rtt = self._typical_cap()
            return LinkEstimate(cap, rtt, kind, False, False,
                                "on-prem LAN: no figure in the inventory; a cloud zone's single stream assumed")
        cap, rtt = self._nic_cap.get(a.cloud) or self._typical_cap()
        measured = a.cloud in self._nic_cap and kind is LinkClass.SAME_ZONE
        where = "same zone" if kind is LinkClass.SAME_ZONE else "cross-zone (same-zone figures used)"
        return LinkEstimate(cap, rtt, kind, measured, measured, f"{a.cloud} {where}: single-stream iperf/ping")

    def _typical_cap(self) -> tuple[float, float]:
        caps = sorted(self._nic_cap.values())
        return caps[len(caps) // 2]

    def _cap(self, location: Location) -> float:
        """What one stream can carry out of a location: a VM's same-zone figure, a site's single stream."""
        if location.cloud == CLOUD_ONPREM:
            site = self._sites.get(location.region)
            return site.stream_cap_gbps if site else self._typical_cap()[0]
        return (self._nic_cap.get(location.cloud) or self._typical_cap())[0]

    def _network_region(self, location: Location) -> str | None:
        """The cloud region whose network position stands for this location."""
        if location.cloud == CLOUD_ONPREM:
            site = self._sites.get(location.region)
            return site.near_region if site else None
        return f"{location.cloud}/{location.region}"

    def _rtt_between(self, a: Location, b: Location) -> tuple[float, bool, str]:
        ra, rb = self._network_region(a), self._network_region(b)
        if ra and rb:
            if ra == rb:
                cap_rtt = self._typical_cap()[1]
                return cap_rtt, False, f"both near {ra}: same-zone RTT assumed"
            rtt = self._rtt.get(_pair(ra, rb))
            if rtt is not None:
                proxy = CLOUD_ONPREM in (a.cloud, b.cloud)
                return rtt, not proxy, "Skyplane ping" + (" (on-prem placed at its near_region)" if proxy else "")
        key = _pair(str(a.continent), str(b.continent))
        rtt = self._continent_rtt.get(key)
        if rtt is None:
            raise InputError(f"no RTT known between {a.continent} and {b.continent}; give one with --links FILE")
        return rtt, False, f"median RTT {a.continent}-{b.continent} (Skyplane)"

    def _override(self, a: Location, b: Location) -> LinkOverride | None:
        for sa in _scopes(a):
            for sb in _scopes(b):
                found = self._overrides.get(_pair(sa, sb))
                if found is not None:
                    return found
        return None


def _scopes(location: Location) -> list[str]:
    """Most specific first."""
    region = f"{location.cloud}/{location.region}"
    return [f"{region}/{location.zone}", region] if location.zone else [region]


def _pair(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)


@functools.cache
def _bundled_tables() -> dict:
    rtt, aggregate = {}, {}
    for row in csv.DictReader(io.StringIO(data_text("links.csv"))):
        key = _pair(f"{row['cloud_a']}/{row['region_a']}", f"{row['cloud_b']}/{row['region_b']}")
        if row["rtt_ms"]:
            rtt[key] = float(row["rtt_ms"])
        if row["aggregate_gbps"]:
            aggregate[key] = float(row["aggregate_gbps"])
    measured = {}
    for row in csv.DictReader(io.StringIO(data_text("measured_links.csv"))):
        ends = sorted([(f"{row['cloud_a']}/{row['region_a']}", row["continent_a"]),
                       (f"{row['cloud_b']}/{row['region_b']}", row["continent_b"])])
        measured[(ends[0][0], ends[1][0])] = MeasuredPair(
            float(row["bandwidth_gbps"]), float(row["rtt_ms"]), f"measured single stream: {row['source']}",
            float(row["skyplane_rtt_ms"]) if row["skyplane_rtt_ms"] else None,
            float(row["aggregate_gbps"]) if row["aggregate_gbps"] else None, (ends[0][1], ends[1][1]))
    network = json.loads(data_text("network.json"))
    return {
        "rtt_ms": rtt,
        "aggregate_gbps": aggregate,
        "measured": measured,
        "nic_cap": {cloud: (v["gbps"], v["rtt_ms"]) for cloud, v in network["nic_cap"].items()},
        "window_mb": {kind: v["window_mb"] for kind, v in network["window"].items()},
        "continent_rtt_ms": {_pair(*k.split("|")): v for k, v in network["continent_rtt_ms"].items()},
    }


def continent_medians(rtt: Mapping[tuple[str, str], float], continent_of: Mapping[str, str]) -> dict[str, float]:
    """Median RTT per continent pair (``"a|b"`` sorted), for regions whose continent is known."""
    groups: dict[tuple[str, str], list[float]] = {}
    for (ra, rb), value in rtt.items():
        ca, cb = continent_of.get(ra), continent_of.get(rb)
        if ca and cb:
            groups.setdefault(_pair(ca, cb), []).append(value)
    return {f"{a}|{b}": round(statistics.median(v), 2) for (a, b), v in sorted(groups.items())}


def load_overrides(path: str | Path) -> list[LinkOverride]:
    """``src,dst,bandwidth_gbps,rtt_ms[,aggregate_gbps]``: one stream's bandwidth and the RTT, and
    optionally what all streams of one sender carry together (multi-stream iperf)."""
    text = read_text(Path(path), InputError)
    reader = csv.DictReader(io.StringIO(text))
    missing = {"src", "dst", "bandwidth_gbps", "rtt_ms"} - set(reader.fieldnames or [])
    if missing:
        raise InputError(f"{path}: missing column {', '.join(sorted(missing))} "
                         "(need src,dst,bandwidth_gbps,rtt_ms and optionally aggregate_gbps)")
    out = []
    for line, row in enumerate(reader, start=2):
        try:
            bandwidth, rtt = float(row["bandwidth_gbps"]), float(row["rtt_ms"])
            aggregate = float(row["aggregate_gbps"]) if (row.get("aggregate_gbps") or "").strip() else None
        except ValueError:
            raise InputError(f"{path}: line {line}: bandwidth_gbps, rtt_ms and aggregate_gbps must be "
                             "numbers") from None
        if not all(math.isfinite(x) for x in (bandwidth, rtt, aggregate or 1.0)) or bandwidth <= 0 or rtt < 0:
            raise InputError(f"{path}: line {line}: bandwidth_gbps must be above 0 and rtt_ms not negative "
                             "(finite numbers)")
        if aggregate is not None and aggregate < bandwidth:
            raise InputError(f"{path}: line {line}: aggregate_gbps ({aggregate:g}) is below bandwidth_gbps "
                             f"({bandwidth:g}); all streams together carry at least what one does")
        for column in ("src", "dst"):
            if (row[column] or "").count("/") not in (1, 2):
                raise InputError(f"{path}: line {line}, column {column}: {row[column]!r} is not cloud/region[/zone]")
        out.append(LinkOverride(row["src"].strip(), row["dst"].strip(), bandwidth, rtt, f"user measurement ({path})",
                                aggregate))
    return out

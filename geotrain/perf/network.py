"""Network between any two locations: single-stream bandwidth and round-trip time.

Training peers talk over one TCP stream per peer pair, so the model predicts *single-stream*
throughput, not a VM's aggregate capacity. For a pair of locations it answers, in this order:

1. a user override (``--links FILE``: ``src,dst,bandwidth_gbps,rtt_ms`` where src/dst are
   ``cloud/region`` or ``cloud/region/zone`` or ``onprem/site``; symmetric; the most specific wins);
2. a single-stream measurement between training VMs of those two regions (Erben et al.,
   ``measured_links.csv``) — *measured*;
3. the model: ``bandwidth = min(cap_a, cap_b, window / RTT, aggregate)`` where
   - ``cap`` is a VM's single-stream throughput inside one zone (measured per cloud:
     ``network.json``), or an on-prem site's uplink;
   - ``window`` is the effective TCP window fitted on the measured single-stream WAN pairs of the
     same kind (same cloud across regions, cloud to cloud, on-prem to cloud): a stream carries at
     most one window per round trip;
   - ``RTT`` is Skyplane's ping between the two regions (*measured*), else the median RTT between
     the two continents (*estimated*);
   - ``aggregate`` is Skyplane's 64-stream throughput between the regions, an upper bound.
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
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from geotrain.domain import CLOUD_ONPREM, LinkClass, Location, link_class
from geotrain.errors import InputError
from geotrain.perf.data import data_text
from geotrain.specfile import read_text

MB = 1e6


@dataclass(frozen=True, slots=True)
class LinkEstimate:
    """One direction-free link between two locations."""

    bandwidth_gbps: float  # one TCP stream
    rtt_ms: float
    link_class: LinkClass
    bandwidth_measured: bool
    rtt_measured: bool
    source: str

    @property
    def measured(self) -> bool:
        return self.bandwidth_measured and self.rtt_measured

    def transfer_s(self, payload_bytes: float) -> float:
        return payload_bytes * 8 / (self.bandwidth_gbps * 1e9)


@dataclass(frozen=True, slots=True)
class SitePlacement:
    """Where an on-prem site sits on the network."""

    uplink_gbps: float
    near_region: str | None = None  # "cloud/region"


@dataclass(frozen=True, slots=True)
class LinkOverride:
    src: str
    dst: str
    bandwidth_gbps: float
    rtt_ms: float
    source: str


class NetworkModel:
    """Answers :meth:`link` for any two locations. Build with :meth:`bundled`."""

    def __init__(self, *, rtt_ms: Mapping[tuple[str, str], float], aggregate_gbps: Mapping[tuple[str, str], float],
                 measured: Mapping[tuple[str, str], tuple[float, float, str]], nic_cap: Mapping[str, tuple[float, float]],
                 window_mb: Mapping[str, float], continent_rtt_ms: Mapping[tuple[str, str], float],
                 sites: Mapping[str, SitePlacement] | None = None, overrides: Iterable[LinkOverride] = ()) -> None:
        self._rtt = rtt_ms
        self._aggregate = aggregate_gbps
        self._measured = measured
        self._nic_cap = nic_cap
        self._window = window_mb
        self._continent_rtt = continent_rtt_ms
        self._sites = dict(sites or {})
        self._overrides = {(_pair(o.src, o.dst)): o for o in overrides}
        self._cache: dict[tuple[Location, Location], LinkEstimate] = {}

    @classmethod
    def bundled(cls, *, sites: Mapping[str, SitePlacement] | None = None,
                overrides: Iterable[LinkOverride] = ()) -> NetworkModel:
        base = _bundled_tables()
        return cls(**base, sites=sites, overrides=overrides)

    def with_sites(self, sites: Mapping[str, SitePlacement]) -> NetworkModel:
        return NetworkModel(rtt_ms=self._rtt, aggregate_gbps=self._aggregate, measured=self._measured,
                            nic_cap=self._nic_cap, window_mb=self._window, continent_rtt_ms=self._continent_rtt,
                            sites={**self._sites, **sites}, overrides=self._overrides.values())

    def with_overrides_file(self, path: str | Path) -> NetworkModel:
        return NetworkModel(rtt_ms=self._rtt, aggregate_gbps=self._aggregate, measured=self._measured,
                            nic_cap=self._nic_cap, window_mb=self._window, continent_rtt_ms=self._continent_rtt,
                            sites=self._sites, overrides=[*self._overrides.values(), *load_overrides(path)])

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
            return LinkEstimate(override.bandwidth_gbps, override.rtt_ms, kind, True, True, override.source)
        if kind in (LinkClass.SAME_ZONE, LinkClass.CROSS_ZONE):
            return self._local(a, b, kind)
        measured = self._measured.get(_pair(f"{a.cloud}/{a.region}", f"{b.cloud}/{b.region}"))
        if measured is not None:
            bandwidth, rtt, source = measured
            return LinkEstimate(bandwidth, rtt, kind, True, True, source)
        rtt, rtt_measured, rtt_source = self._rtt_between(a, b)
        window = self._window["onprem" if CLOUD_ONPREM in (a.cloud, b.cloud) else
                              "internet" if kind is LinkClass.INTERNET else "cross_continent"]
        caps = [self._cap(a), self._cap(b), window * MB * 8 / (rtt / 1e3) / 1e9]
        aggregate = self._aggregate.get(_pair(*(self._network_region(x) or "" for x in (a, b))))
        if aggregate:
            caps.append(aggregate)
        bandwidth = min(caps)
        return LinkEstimate(bandwidth, rtt, kind, False, rtt_measured,
                            f"{rtt_source}; single stream modelled as min(caps, {window:.2f} MB window / RTT)")

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
        if location.cloud == CLOUD_ONPREM:
            site = self._sites.get(location.region)
            return site.uplink_gbps if site else self._typical_cap()[0]
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
    measured = {
        _pair(f"{row['cloud_a']}/{row['region_a']}", f"{row['cloud_b']}/{row['region_b']}"):
            (float(row["bandwidth_gbps"]), float(row["rtt_ms"]), f"measured single stream: {row['source']}")
        for row in csv.DictReader(io.StringIO(data_text("measured_links.csv")))
    }
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
    text = read_text(Path(path), InputError)
    reader = csv.DictReader(io.StringIO(text))
    missing = {"src", "dst", "bandwidth_gbps", "rtt_ms"} - set(reader.fieldnames or [])
    if missing:
        raise InputError(f"{path}: missing column {', '.join(sorted(missing))} (need src,dst,bandwidth_gbps,rtt_ms)")
    out = []
    for line, row in enumerate(reader, start=2):
        try:
            bandwidth, rtt = float(row["bandwidth_gbps"]), float(row["rtt_ms"])
        except ValueError:
            raise InputError(f"{path}: line {line}: bandwidth_gbps and rtt_ms must be numbers") from None
        if bandwidth <= 0 or rtt < 0:
            raise InputError(f"{path}: line {line}: bandwidth_gbps must be above 0 and rtt_ms not negative")
        for column in ("src", "dst"):
            if row[column].count("/") not in (1, 2):
                raise InputError(f"{path}: line {line}, column {column}: {row[column]!r} is not cloud/region[/zone]")
        out.append(LinkOverride(row["src"].strip(), row["dst"].strip(), bandwidth, rtt, f"user measurement ({path})"))
    return out

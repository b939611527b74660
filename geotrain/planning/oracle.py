"""The solver's communication oracle, answered by the perf model (network + strategy formulas).

Places are the offers' zones (``Location.zone_scope``), each at its own network location; zones of
one region share their network figures in the perf model but not their prices, so cross-zone
traffic is priced as the bill does. The terms here are the perf model's own round terms
(``geotrain.perf.strategies``): pairs over the single-stream link, a node's egress over its own cap,
an on-prem site's traffic over its uplink (its aggregate). Hivemind's per-region aggregate term
(``B(q,q')/agg(q,q')``, one VM's or one site's streams to another region together) needs the counts
of two places at once and has no row; the oracle keeps one bound of it: the site's traffic leaves at
most at the sum of its paths to the other regions (each its measured aggregate, else one stream's
figure: ``LinkEstimate.site_path_gbps``; ``site_cap_gbps``).
Its times stay at most the perf model's (the MIP a relaxation), and the referee's evaluation rejects
a mix the rest of the term would slow.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geotrain.domain import CLOUD_ONPREM, Location, SyncStrategyName
from geotrain.perf.network import NetworkModel
from geotrain.perf.workloads import Workload
from geotrain.perf.hivemind_fit import HivemindFit
from geotrain.perf.terms import (
    BACKWARD_SHARE, asgd_push_s, butterfly_pair_s, ddp_bucket_share, ddp_step_s, hivemind_group,
    hivemind_node_egress_s, hivemind_overhead_s, hivemind_pair_s, hivemind_reach, hivemind_site_s, nccl_link,
    ring_pair_s, seconds,
)
from geotrain.pricing.egress import EgressPrices

GB = 1e9


@dataclass(eq=False)
class PerfOracle:
    """Implements ``geotrain.solver.problem.CommOracle`` for one workload and strategy."""

    strategy: str
    places: dict[str, Location]  # place key (zone scope) -> its network location
    network: NetworkModel
    egress: EgressPrices
    payload_bytes: float
    fit: HivemindFit
    workload: Workload
    samples_per_round: float  # the sync settings' knobs (geotrain.domain.SyncSettings)
    local_steps: int  # local-sgd: H; ma: K
    accumulation_steps: int
    uplinks: dict[str, float] | None = None  # on-prem site -> uplink Gbit/s
    # the collectives on NCCL (GPUs in the clouds, not the local host): inside a region a place's rings
    # run over ``nccl_link`` with the fastest NIC among the place's candidates (None: one has no figure)
    nccl: bool = False
    place_nic_gbps: dict[str, float | None] | None = None
    # the slowest NIC among a place's region's candidates (None: no figure for any): bounds a ring from above
    place_nic_floor_gbps: dict[str, float | None] | None = None
    group_size: int | None = None  # hivemind: G, the most peers in one averaging group (None: one group)

    def __post_init__(self) -> None:
        SyncStrategyName(self.strategy)
        # allreduce: b, DDP's last bucket's share of the gradients (geotrain.perf.terms.ddp_step_s)
        self.bucket_share = ddp_bucket_share(self.workload.parameters)
        self.backward_share = BACKWARD_SHARE
        self._collectives: dict[tuple[str, str], object] = {}
        self._tables: dict[tuple, list[float]] = {}
        self._links: dict[tuple, object] = {}
        self._prices: dict[tuple, float] = {}
        self._site_caps: dict[str, float] = {}
        zone_specific = getattr(self.network, "zone_specific", None)
        self._by_zone = zone_specific() if zone_specific is not None else True
        self._region = {p: loc.region_scope for p, loc in self.places.items()}

    def _key(self, a: str, b: str) -> tuple:
        """Links and prices depend on the two regions and on whether the places are one zone (unless a
        link override names a zone)."""
        if self._by_zone:
            return (a, b)
        return (self._region[a], self._region[b], a == b)

    def _link(self, a: str, b: str):  # noqa: ANN202
        key = self._key(a, b)
        found = self._links.get(key)
        if found is None:
            found = self._links[key] = self.network.link(self.places[a], self.places[b])
        return found

    def _collective(self, a: str, b: str, floor: bool = False):  # noqa: ANN202
        """The link a ring hop or broadcast between places a and b uses (the perf model's
        ``Topology.collective``), with each place's fastest NIC: at least as fast as any mix's (with
        ``floor``, its slowest: at most as fast as any mix's)."""
        found = self._collectives.get((a, b, floor))
        if found is None:
            link, la, lb = self._link(a, b), self.places[a], self.places[b]
            if self.nccl and la.region_scope == lb.region_scope and la.cloud != CLOUD_ONPREM:
                nics = (self.place_nic_floor_gbps if floor else self.place_nic_gbps) or {}
                link = nccl_link(link, la.cloud, nics.get(a), nics.get(b))
            found = self._collectives[(a, b, floor)] = link
        return found

    def step_s(self, compute_s: float, ring_s: float) -> float:
        """allreduce: one DDP step (``geotrain.perf.terms.ddp_step_s``)."""
        return ddp_step_s(compute_s, ring_s, self.bucket_share)

    def overhead_s(self, k: int) -> float:
        if self.strategy != SyncStrategyName.HIVEMIND or k < 2:
            return 0.0
        return hivemind_overhead_s(self.fit, k, self.workload.parameters, group_size=self.group_size)

    def pair_share(self, k: int) -> float:
        """hivemind: what one node sends another per round, as a share of 2W (``hivemind_reach / m``)."""
        if k < 2:
            return 0.0
        return hivemind_reach(k, self.group_size) / hivemind_group(k, self.group_size)

    def place_s(self, place: str, k: int) -> float:
        """Hivemind: a node's own egress (to the others of its group of min(k, G)); the others: a ring
        of k nodes over the place's own link."""
        if k < 2:
            return 0.0
        w = self.payload_bytes
        if self.strategy == SyncStrategyName.HIVEMIND:
            return hivemind_node_egress_s(w, k, self._link(place, place).bandwidth_gbps, self.group_size)
        return ring_pair_s(w, k, self._collective(place, place))

    def slowest_place_s(self, place: str, k: int) -> float:
        """A ring of k nodes at ``place`` on its slowest NIC: at least any mix's ring there (bounds a
        cycle from above, where ``place_s`` bounds it from below)."""
        if k < 2 or self.strategy == SyncStrategyName.HIVEMIND:
            return self.place_s(place, k)
        return ring_pair_s(self.payload_bytes, k, self._collective(place, place, floor=True))

    def _pair_link(self, a: str, b: str):  # noqa: ANN202
        """allreduce's ring hops run on NCCL (the collective link); the others' pairs are WAN transports."""
        return self._collective(a, b) if self.strategy == SyncStrategyName.ALLREDUCE else self._link(a, b)

    def pair_s(self, a: str, b: str, k: int) -> float:
        site = CLOUD_ONPREM in (self.places[a].cloud, self.places[b].cloud)
        return self._pair_terms(self._pair_link(a, b), max(k, 2), site)

    def _pair_terms(self, link, n, site: bool):  # noqa: ANN001, ANN202 - n: a count, or an array of counts
        """The pair term at ``n`` nodes (the formulas are arithmetic: an array of counts gives an array)."""
        w = self.payload_bytes
        if self.strategy == SyncStrategyName.HIVEMIND:
            return hivemind_pair_s(w, n, link, self.group_size)
        if self.strategy == SyncStrategyName.ALLREDUCE:
            return ring_pair_s(w, n, link)
        if self.strategy in (SyncStrategyName.LOCAL_SGD, SyncStrategyName.MA):
            return butterfly_pair_s(w, n, link, site=site)  # the butterfly of n region leaders
        return asgd_push_s(w, link) + 0 * n

    def broadcast_s(self, place: str) -> float:
        return seconds(self.payload_bytes, self._collective(place, place).bandwidth_gbps)

    def pair_table(self, a: str, b: str, ks: range) -> list[float]:
        """``pair_s`` for every k at once (the solver asks for whole tables); pairs over links with the
        same figures share one table."""
        link = self._pair_link(a, b)
        site = CLOUD_ONPREM in (self.places[a].cloud, self.places[b].cloud)
        key = (link.bandwidth_gbps, link.rtt_ms, link.aggregate_gbps, site, ks.start, ks.stop)
        table = self._tables.get(key)
        if table is None:  # every k at once: the same formulas over an array of counts
            counts = np.maximum(np.arange(ks.start, ks.stop, dtype=np.float64), 2.0)
            table = self._tables[key] = self._pair_terms(link, counts, site).tolist()
        return table

    def site_s(self, site: str, inside: int, k: int) -> float | None:
        if self.strategy != SyncStrategyName.HIVEMIND or not self.uplinks or site not in self.uplinks:
            return None
        return hivemind_site_s(self.payload_bytes, k, inside, self.site_cap_gbps(site), self.group_size)

    def site_cap_gbps(self, site: str) -> float:
        """What all of a site's traffic to the other places can leave at: its uplink, or less where the
        paths from the site to the other regions carry less (their sum: the site's traffic to the nodes
        elsewhere, ``inside·(k − inside)·2W/k``, then takes at least that long through the per-region
        aggregate terms of the perf model)."""
        found = self._site_caps.get(site)
        if found is None:
            uplink = self.uplinks[site]
            home = next((loc for loc in self.places.values()
                         if loc.cloud == CLOUD_ONPREM and loc.region == site), None)
            per_region: dict[str, float] = {}
            for loc in self.places.values():
                if home is None or loc.region_scope == home.region_scope:
                    continue
                # the largest over a region's places: a mix may use only that one
                aggregate = self.network.link(home, loc).site_path_gbps
                per_region[loc.region_scope] = max(per_region.get(loc.region_scope, 0.0), aggregate)
            total = sum(per_region.values())
            found = self._site_caps[site] = min(uplink, total) if per_region else uplink
        return found

    def usd_per_byte(self, src: str, dst: str) -> float:
        key = self._key(src, dst)
        found = self._prices.get(key)
        if found is None:
            found = self._prices[key] = self.egress.usd_per_gb(self.places[src], self.places[dst]) / GB
        return found

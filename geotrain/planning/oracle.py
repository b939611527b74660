"""The solver's communication oracle, answered by the perf model (network + strategy formulas).

Each region is placed at one network location (its region-wide location; zones of one region share
their network figures in the perf model), so the terms here are the perf model's own round terms
(``geotrain.perf.strategies``) for the regions in use.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from geotrain.domain import Location, SyncStrategyName
from geotrain.perf.network import NetworkModel
from geotrain.perf.strategies import (
    HivemindFit, asgd_push_s, hivemind_node_egress_s, hivemind_overhead_s, hivemind_pair_s, hivemind_site_s,
    ring_pair_s,
)
from geotrain.pricing.egress import EgressPrices

GB = 1e9


@dataclass(eq=False)
class PerfOracle:
    """Implements ``geotrain.solver.problem.CommOracle`` for one workload and strategy."""

    strategy: str
    places: dict[str, Location]  # region key -> its network location
    network: NetworkModel
    egress: EgressPrices
    payload_bytes: float
    parameters: int
    fit: HivemindFit
    workload: str
    samples_per_round: float  # the sync settings' knobs (geotrain.domain.SyncSettings)
    local_steps: int
    accumulation_steps: int
    uplinks: dict[str, float] | None = None  # on-prem site -> uplink Gbit/s

    def __post_init__(self) -> None:
        SyncStrategyName(self.strategy)
        self.efficiency = self.fit.efficiency_of(self.workload)
        self._link = functools.lru_cache(maxsize=None)(self._link_uncached)

    def _link_uncached(self, a: str, b: str):  # noqa: ANN202
        return self.network.link(self.places[a], self.places[b])

    def overhead_s(self, k: int) -> float:
        if self.strategy != SyncStrategyName.HIVEMIND or k < 2:
            return 0.0
        return hivemind_overhead_s(self.fit, k, self.parameters)

    def region_s(self, region: str, k: int) -> float:
        if k < 2:
            return 0.0
        link = self._link(region, region)
        w = self.payload_bytes
        if self.strategy == SyncStrategyName.HIVEMIND:
            return max(hivemind_node_egress_s(w, k, link.bandwidth_gbps), hivemind_pair_s(w, k, link))
        return ring_pair_s(w, k, link)

    def pair_s(self, a: str, b: str, k: int) -> float:
        link = self._link(a, b)
        w = self.payload_bytes
        if self.strategy == SyncStrategyName.HIVEMIND:
            return hivemind_pair_s(w, max(k, 2), link)
        if self.strategy == SyncStrategyName.ALLREDUCE:
            return ring_pair_s(w, max(k, 2), link)
        if self.strategy == SyncStrategyName.LOCAL_SGD:
            return ring_pair_s(w, 2, link)  # the leaders' ring, taken as two regions
        return asgd_push_s(w, link)

    def pair_table(self, a: str, b: str, ks: range) -> list[float]:
        """``pair_s`` for every k at once (the solver asks for whole tables)."""
        return [self.pair_s(a, b, k) for k in ks]

    def site_s(self, site: str, inside: int, k: int) -> float | None:
        if self.strategy != SyncStrategyName.HIVEMIND or not self.uplinks or site not in self.uplinks:
            return None
        return hivemind_site_s(self.payload_bytes, k, inside, self.uplinks[site])

    def usd_per_byte(self, src: str, dst: str) -> float:
        return self.egress.usd_per_gb(self.places[src], self.places[dst]) / GB

"""What a runtime's transport adds to a round beyond the sync strategies' terms (``perf.strategies``).

Two kinds of cost, by how the transport works. gloo waits for the receiver before each send, so an
all-reduce over gloo costs about 3 round trips where the ring model counts one: that grows with the
RTT (``k_s`` round trips of the longest RTT in use). geotrain's WAN transport
(``geotrain.train.sync.streams``) sends without waiting, so what it adds beyond the model's one round
trip is the host's own time per round (threads, copies, the step's bookkeeping): ``c_s`` seconds, the
same at any RTT. :class:`Protocol` adds both per strategy ``s``; :func:`runtime_protocol` reads the
figures geotrain's runtime was measured at (``perf/data/protocol.json``, made by ``bench/wan.py --write``).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, replace

from geotrain.perf.data import data_text
from geotrain.perf.strategies import AsgdGA, Strategy, SyncCost, Topology
from geotrain.perf.workloads import Workload


MESH_STRATEGIES = frozenset({"hivemind", "local-sgd", "ma"})  # average across places over geotrain's WAN transport


@dataclass(frozen=True, slots=True)
class Protocol:
    """What a runtime's transport adds to a round beyond the terms above: ``k_s`` round trips of the
    longest RTT between two places in use and ``c_s`` seconds, per strategy ``s``, across places::

        T_round' = T_round + k_s · max_{g,h at different places} rtt(g,h) + c_s,
        samples/s · T_round / T_round'

    asgd-ga, whose regions keep their own pace: ``k_s · rtt(q, home)`` in each region's push instead
    (``T_cycle_q = max(A·T_step_q, 2W·8/bw + (1 + k_s)·rtt)``).

    Measured for geotrain's runtime on gloo over emulated links (``perf/data/protocol.json``, fitted
    on one topology and checked on another); zero where nothing was measured (``NO_PROTOCOL``)."""

    name: str = "none"
    round_trips: tuple[tuple[str, float], ...] = ()  # (strategy, k_s)
    seconds: tuple[tuple[str, float], ...] = ()  # (strategy, c_s)

    def of(self, strategy: str) -> float:
        return dict(self.round_trips).get(strategy, 0.0)

    def seconds_of(self, strategy: str) -> float:
        return dict(self.seconds).get(strategy, 0.0)

    @staticmethod
    def rtt_s(topo: Topology) -> float:
        """The longest RTT between two places in use (0 in one place)."""
        return max((topo.link(i, j).rtt_ms / 1e3 for i in range(len(topo.groups)) for j in range(i + 1, len(topo.groups))
                    if topo.groups[i].location.zone_scope != topo.groups[j].location.zone_scope), default=0.0)

    def cost(self, strategy: Strategy, topo: Topology, payload: float, workload: Workload) -> SyncCost:
        """``strategy``'s cost with the protocol's round trips: in each push's cycle for asgd-ga (whose
        regions keep their own pace: the home region's compute pays none), added to the round for the
        others."""
        if isinstance(strategy, AsgdGA):
            return replace(strategy, push_round_trips=self.of(strategy.name.value)).cost(topo, payload, workload)
        return self.applied(strategy.name.value, topo, strategy.cost(topo, payload, workload))

    def applied(self, strategy: str, topo: Topology, cost: SyncCost) -> SyncCost:
        """``cost`` with the protocol's round trips added to its round."""
        rtt = self.rtt_s(topo)
        extra = self.of(strategy) * rtt + (self.seconds_of(strategy) if rtt > 0 else 0.0)
        if extra <= 0 or cost.time_per_round_s <= 0:
            return cost
        scale = cost.time_per_round_s / (cost.time_per_round_s + extra)
        return replace(cost, samples_per_s=cost.samples_per_s * scale, time_per_round_s=cost.time_per_round_s + extra,
                       comm_s=cost.comm_s + extra,
                       bytes_per_s={pair: rate * scale for pair, rate in cost.bytes_per_s.items()},
                       good_samples_per_s=None if cost.good_samples_per_s is None else cost.good_samples_per_s * scale)


NO_PROTOCOL = Protocol()


@functools.cache
def runtime_protocol(backend: str = "gloo") -> Protocol:
    """The round trips geotrain's runtime adds per round on ``backend``; none for a backend that was
    not measured."""
    data = json.loads(data_text("protocol.json"))["backends"].get(backend)
    if data is None:
        return NO_PROTOCOL
    return Protocol(backend, tuple(sorted(data["round_trips"].items())), tuple(sorted(data.get("seconds", {}).items())))

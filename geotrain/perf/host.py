"""This machine as the local provider uses it: every node is a training process with one thread here.

A plan for the local provider (``geotrain plan --provider local``) is predicted with what this machine
really does, not with the hardware its offers name:

- **compute**: the workload's measured CPU rate of one process with one thread
  (``perf/data/cpu_rates.csv``, re-measured by ``bench/cpu_rates.py --write``), whatever accelerator
  the offer has; when more nodes than cores run, they share the cores (each gets ``cores / nodes``);
- **network**: loopback, timed as gloo's all-reduce between two processes here
  (``perf/data/local_host.json``, measured by the same bench script): a bandwidth and a per-hop
  latency, the same for every pair of nodes;
- **prices and link classes** stay those of the offers' locations: the local nodes carry the plan's
  locations, so traffic between them is billed (in plans and in cost-report) as it would be there.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass

from geotrain.domain import Location, link_class
from geotrain.perf.data import data_text
from geotrain.perf.network import LinkEstimate
from geotrain.perf.rates import CPU, ComputeRate, RateTable
from geotrain.perf.workloads import Workload


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


@dataclass(frozen=True, slots=True)
class LocalHost:
    cores: int
    loopback_gbps: float  # what one gloo all-reduce stream between two processes here carries
    loopback_rtt_ms: float  # its per-hop latency
    source: str

    @classmethod
    @functools.cache
    def measured(cls) -> LocalHost:
        """This machine's cores, with the bundled loopback measurement."""
        data = json.loads(data_text("local_host.json"))
        return cls(usable_cores(), float(data["loopback_gbps"]), float(data["loopback_rtt_ms"]),
                   f"loopback gloo all-reduce, {data['measured_on']}")

    def core_share(self, nodes: int) -> float:
        return 1.0 if nodes <= self.cores else self.cores / nodes


class LocalRates:
    """Rates of local nodes: the workload's CPU rate, whatever the offer's accelerator."""

    def __init__(self, base: RateTable, host: LocalHost) -> None:
        self.base = base
        self.host = host

    def node_rate(self, workload: Workload, accelerator: str | None, count: int) -> ComputeRate:
        rate = self.base.node_rate(workload, None, 1)
        return ComputeRate(workload.name, CPU, 1, rate.samples_per_s, rate.estimated,
                           f"{rate.source}; a local provider node is one process on this machine's CPU",
                           workload.kind)

    def measured(self) -> list[ComputeRate]:
        return self.base.measured()


class LoopbackNetwork:
    """Every pair of local nodes talks over loopback; the link class still follows the locations."""

    def __init__(self, host: LocalHost) -> None:
        self.host = host

    def link(self, a: Location, b: Location) -> LinkEstimate:
        return LinkEstimate(self.host.loopback_gbps, self.host.loopback_rtt_ms, link_class(a, b), True, True,
                            self.host.source)

    def with_sites(self, sites: object) -> LoopbackNetwork:
        return self

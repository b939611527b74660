"""A GPU machine's network as its cloud sells it, and what NCCL's socket transport carries over it.

``instance_network.csv`` (``scripts/build_instance_network.py``; sources in ``perf/data/PROVENANCE.md``)
gives per cloud and machine type:

- ``nic_gbps``: what the primary network interface sustains (AWS: the primary card's baseline from
  ``DescribeInstanceTypes``; GCP and Azure: the published per-VM bandwidth). An "up to" figure is a
  burst (``burst_gbps``): a training job sends for hours, so the sustained figure is the one used.
- ``fabric``: EFA, InfiniBand or GPUDirect-TCPX/TCPXO where the machine has one, with its total.
  geotrain's launch does not set a fabric up (no EFA interfaces, no placement group, no TCPX plugin),
  so NCCL runs over its socket transport on the primary interface and the model uses ``nic_gbps``;
  the fabric is listed so that plans can say what they leave unused.

NCCL's socket transport opens ``NCCL_SOCKET_NTHREADS × NCCL_NSOCKS_PERTHREAD`` TCP streams per peer
connection; with neither set it detects the interface's vendor: 2 × 8 = 16 on an AWS ENA interface
(PCI vendor ``0x1d0f``), 1 × 1 elsewhere (``src/transport/net_socket.cc`` of NVIDIA/nccl,
``ncclSocketGetNsockNthread``). So a ring hop between two machines of one region carries::

    bw_nccl(a, b) = min(S_cloud · bw(a, b), agg(a, b), nic_a, nic_b)

with ``bw`` the single-stream link and ``agg`` its aggregate cap (:mod:`geotrain.perf.network`), and no
NIC cap for a machine without a published figure. Across regions the rings keep the single stream:
no measurement of NCCL's streams over a WAN path is in the sources.
"""

from __future__ import annotations

import csv
import functools
import io
from collections.abc import Mapping
from dataclasses import dataclass

from geotrain.perf.data import data_text

# NCCL's socket streams per peer connection by default, per cloud (1 where the cloud is not listed)
NCCL_SOCKETS = {"aws": 16}


@dataclass(frozen=True, slots=True)
class MachineNetwork:
    """One machine type's network (Gbit/s)."""

    nic_gbps: float  # sustained, primary interface
    burst_gbps: float | None = None  # "up to"
    fabric: str = "none"  # efa | infiniband | gpudirect-tcpx | gpudirect-tcpxo | none
    fabric_gbps: float | None = None
    source: str = ""


class MachineNetworks:
    """Per (cloud, instance type): its :class:`MachineNetwork`. Build with :meth:`bundled`."""

    def __init__(self, rows: Mapping[tuple[str, str], MachineNetwork]) -> None:
        self._rows = dict(rows)

    @classmethod
    def bundled(cls) -> MachineNetworks:
        return _bundled()

    def of(self, cloud: str, instance_type: str) -> MachineNetwork | None:
        return self._rows.get((cloud, instance_type))

    def nic_gbps(self, cloud: str, instance_type: str) -> float | None:
        """The machine's sustained NIC figure; None where no figure is published (no cap)."""
        found = self._rows.get((cloud, instance_type))
        return found.nic_gbps if found is not None else None

    def __len__(self) -> int:
        return len(self._rows)


def nccl_streams(cloud: str) -> int:
    """NCCL's default socket streams per peer connection on this cloud's interfaces."""
    return NCCL_SOCKETS.get(cloud, 1)


@functools.cache
def _bundled() -> MachineNetworks:
    rows = {}
    for row in csv.DictReader(io.StringIO(data_text("instance_network.csv"))):
        number = lambda key: float(row[key]) if row[key] else None  # noqa: E731
        rows[(row["cloud"], row["instance_type"])] = MachineNetwork(
            float(row["nic_gbps"]), number("burst_gbps"), row["fabric"] or "none", number("fabric_gbps"),
            row["source"])
    return MachineNetworks(rows)

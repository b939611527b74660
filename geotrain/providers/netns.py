"""Emulated links for the local provider's nodes (``geotrain launch --emulate-wan``): every node is a
network namespace of its own, joined to the others by links of the perf model's figures for the two
nodes' planned locations (``geotrain.wan``: a delay line for the latency, htb for the rate).

The launcher's rendezvous store listens in a namespace of its own, the *coordinator*, at the
location of the plan's first node. A preemption kills everything in the node's namespace. Bytes per
directed link are the kernel's counters (tc classes), so a user's own script is metered too.
Everything goes when the launch ends (``close``), when the launcher is killed (the delay line tears
the run down when its pipe closes) or with ``geotrain cleanup``.

With ``cores_per_node``, every node's processes are held to that share of this machine's cores (a
CPU control group per node, :mod:`geotrain.wan.cpu`), as the rehearsal's are: separate machines
compute at their own rate whether the others compute or wait on the network; unheld, nodes that
share a few cores ran faster while their peers waited on a WAN round. Where no group can be made,
``unheld`` says why and the nodes run unheld.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable

from geotrain.domain import Location
from geotrain.wan import EmulatedWan, Endpoint, Link
from geotrain.wan.cpu import CpuShares, cpu_shares
from geotrain.wan.namespaces import run_inside

COORDINATOR = "coordinator"


class EmulatedNetwork:
    """The namespaces and links of one launch; ``link(a, b)`` is the directed link between two locations."""

    def __init__(self, link: Callable[[Location, Location], Link], coordinator_at: Location,
                 wan: EmulatedWan | None = None, cores_per_node: float | None = None) -> None:
        self._link = link
        self._wan = wan if wan is not None else EmulatedWan()
        self._where: dict[str, Location] = {}
        self._lock = threading.Lock()
        self.shares: CpuShares | None = None
        self.unheld: str | None = None  # why the nodes run unheld, where cores_per_node was asked for
        if cores_per_node is not None:
            made = cpu_shares(self.tag, [], cores_per_node)
            self.shares, self.unheld = (made, None) if isinstance(made, CpuShares) else (None, made)
        try:
            self._add(COORDINATOR, coordinator_at)
        except BaseException:
            self.close()
            raise

    @property
    def tag(self) -> str:
        return self._wan.tag

    def _add(self, name: str, location: Location) -> Endpoint:
        with self._lock:
            where = dict(self._where)
            self._where[name] = location
        try:
            endpoint = self._wan.add(name, lambda other: self._link(location, where[other]),
                                     lambda other: self._link(where[other], location))
            # a training connection stays busy; a window that collapses after every idle pause (Linux's
            # default) would cost a few round trips per sync, which the perf model does not count
            subprocess.run([*self._wan.exec_prefix(name), "sysctl", "-qw", "net.ipv4.tcp_slow_start_after_idle=0"],
                           check=True, capture_output=True, timeout=30)
            return endpoint
        except BaseException:
            with self._lock:
                self._where.pop(name, None)
            raise

    def attach(self, node_id: str, location: Location) -> Endpoint:
        """A namespace for a new node, linked to every node there is (and its CPU group, if held)."""
        endpoint = self._add(node_id, location)
        if self.shares is not None:
            try:
                self.shares.group(node_id)
            except BaseException:
                self.detach(node_id)
                raise
        return endpoint

    def hold(self, node_id: str, pid: int) -> None:
        """Process ``pid`` (and every process it starts from now on) computes in the node's CPU share."""
        if self.shares is not None:
            self.shares.add(node_id, pid)

    def prefix(self, node_id: str) -> list[str]:
        """The command prefix that runs a program inside the node's namespace."""
        return self._wan.exec_prefix(node_id)

    def env(self, node_id: str) -> dict[str, str]:
        """What a worker in the node needs: its address and interface (gloo binds to it)."""
        endpoint = self._wan.endpoint(node_id)
        return {"GEOTRAIN_NODE_ADDRESS": endpoint.address, "GLOO_SOCKET_IFNAME": endpoint.device,
                "TP_SOCKET_IFNAME": endpoint.device, "GEOTRAIN_WIRE_METERED": "1"}

    def has(self, node_id: str) -> bool:
        return node_id in self._where

    def kill(self, node_id: str) -> None:
        """Every process in the node's namespace dies (a preemption, a terminated VM)."""
        if self.has(node_id):
            self._wan.kill(node_id)

    def detach(self, node_id: str) -> None:
        """The node's namespace and links go (its bytes stay counted)."""
        if self.has(node_id):
            self._wan.remove(node_id)

    def coordinator(self) -> Endpoint:
        return self._wan.endpoint(COORDINATOR)

    def inside_coordinator(self, fn, *args):  # noqa: ANN001, ANN201
        """``fn(*args)`` run in the coordinator's namespace (a socket made there listens there)."""
        return run_inside(self.coordinator().namespace, fn, *args)

    def wire_bytes(self) -> dict[tuple[str, str], int]:
        """(source node, destination node) → bytes sent on that link so far, the coordinator left out."""
        return {pair: sent for pair, sent in self._wan.bytes_sent().items() if COORDINATOR not in pair}

    def close(self) -> None:
        try:
            self._wan.close()  # the namespaces' processes are killed first: their groups are empty then
        finally:
            if self.shares is not None:
                self.shares.close()

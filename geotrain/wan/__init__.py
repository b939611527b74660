"""Emulated wide-area links between network namespaces: one namespace per node, a delay line (TUN
devices, one process) for each directed pair's latency, htb classes for its rate and byte counters.

Linux only, as root (or with CAP_NET_ADMIN and CAP_SYS_ADMIN); :func:`privileges` says why not.
Addresses are 10.78.0.0/16 inside the run's own namespaces; the root namespace is left alone.
"""

from __future__ import annotations

from geotrain.wan.emulator import EmulatedWan, Endpoint, Link, cleanup
from geotrain.wan.namespaces import exec_prefix, privileges
from geotrain.wan.shaping import DeviceBytes
from geotrain.wan.system import WanError

__all__ = ["DeviceBytes", "EmulatedWan", "Endpoint", "Link", "WanError", "cleanup", "exec_prefix", "privileges"]

"""Bandwidth of an emulated WAN: an htb tree on each endpoint's TUN device, inside its namespace.

The tree on one device (the sender's side of every directed link that starts there)::

    1:      htb qdisc, unclassified traffic to 1:fffe
    1:ffff  root class: the endpoint's egress cap (or unlimited)
      1:<minor of the destination address>   one per destination endpoint: that directed link's rate
      1:fffe                                  default: anything else, at the root's rate

Each destination class has a u32 filter on its destination address, at filter priority = its minor,
so that it can be deleted on its own. Without an egress cap a destination class has rate = ceil = the
link's rate. With one, its guaranteed rate is small (1 % of the link's) and its ceil is the link's rate:
every destination then borrows from the root, and the root's cap binds their sum.

Counters: :func:`class_bytes` reads each destination class's sent bytes (IP packets as they left the
device, headers included); :func:`device_bytes` the device's own tx/rx bytes.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from geotrain.wan.addresses import address_of_minor, class_minor
from geotrain.wan.system import WanError, run, run_batch

UNLIMITED_MBIT = 10_000.0
"""What "no limit" is shaped at: far above what the delay line forwards."""
BURST_S = 0.002
"""A class may send this long at its rate in one burst (never less than two full packets)."""
BORROWING_SHARE = 0.01
ROOT_MINOR = 0xFFFF
DEFAULT_MINOR = 0xFFFE

_TEXT_CLASS = re.compile(r"^class htb (?P<handle>\S+) .*?\n\s*Sent (?P<bytes>\d+) bytes", re.M | re.S)


@dataclass(frozen=True)
class DeviceBytes:
    """A device's own byte counters, as the kernel keeps them."""

    tx_bytes: int
    rx_bytes: int


def _rate(mbit: float) -> str:
    return f"{round(mbit * 1e6)}bit"


def _capped(mbit: float | None) -> float:
    if mbit is None or math.isinf(mbit) or mbit > UNLIMITED_MBIT:
        return UNLIMITED_MBIT
    if not mbit > 0:
        raise ValueError(f"a rate must be positive, not {mbit}")
    return float(mbit)


def burst_bytes(rate_mbit: float, mtu_bytes: int) -> int:
    """The htb burst for a class at ``rate_mbit``: :data:`BURST_S` of its rate, at least two packets."""
    return max(2 * mtu_bytes, math.ceil(rate_mbit * 1e6 / 8 * BURST_S))


def _class_line(minor: int, parent: str, rate_mbit: float, ceil_mbit: float, mtu_bytes: int) -> str:
    burst = burst_bytes(ceil_mbit, mtu_bytes)
    return (f"class add dev {{dev}} parent {parent} classid 1:{minor:x} htb rate {_rate(rate_mbit)} "
            f"ceil {_rate(ceil_mbit)} burst {burst} cburst {burst} quantum {mtu_bytes + 100}")


def setup(namespace: str, device: str, *, egress_mbit: float | None, mtu_bytes: int) -> None:
    """Put the htb qdisc, its root class (the egress cap, or unlimited) and the default class on
    ``device`` in ``namespace``."""
    root_mbit = _capped(egress_mbit)
    lines = [f"qdisc add dev {device} root handle 1: htb default {DEFAULT_MINOR:x}",
             _class_line(ROOT_MINOR, "1:", root_mbit, root_mbit, mtu_bytes).format(dev=device),
             _class_line(DEFAULT_MINOR, f"1:{ROOT_MINOR:x}", root_mbit * BORROWING_SHARE, root_mbit,
                         mtu_bytes).format(dev=device)]
    run_batch(lines, tool="tc", namespace=namespace)


def add_destination(namespace: str, device: str, address: str, *, rate_mbit: float | None,
                    egress_mbit: float | None, mtu_bytes: int) -> None:
    """Shape what ``device`` sends to ``address`` at ``rate_mbit`` (None or inf: unlimited)."""
    minor = class_minor(address)
    ceil_mbit = _capped(rate_mbit)
    if egress_mbit is not None:
        ceil_mbit = min(ceil_mbit, _capped(egress_mbit))
        rate = ceil_mbit * BORROWING_SHARE
    else:
        rate = ceil_mbit
    lines = [_class_line(minor, f"1:{ROOT_MINOR:x}", rate, ceil_mbit, mtu_bytes).format(dev=device),
             f"filter add dev {device} parent 1: protocol ip prio {minor} u32 "
             f"match ip dst {address}/32 flowid 1:{minor:x}"]
    run_batch(lines, tool="tc", namespace=namespace)


def remove_destination(namespace: str, device: str, address: str) -> None:
    """Take away the class and filter of ``address`` on ``device`` (nothing if there are none)."""
    minor = class_minor(address)
    run_batch([f"filter del dev {device} parent 1: protocol ip prio {minor}",
               f"class del dev {device} classid 1:{minor:x}"], tool="tc", namespace=namespace, check=False)


def parse_class_bytes(output: str) -> dict[str, int]:
    """{destination address: bytes sent} from ``tc -s [-j] class show`` output: JSON where this
    iproute2 prints it, else its text form (iproute2 6.1 prints htb classes as text even with ``-j``)."""
    handles: dict[str, int] = {}
    text = output.strip()
    if text.startswith("["):
        for entry in json.loads(text):
            stats = entry.get("stats", entry)
            handles[str(entry.get("handle", ""))] = int(stats.get("bytes", 0))
    else:
        for match in _TEXT_CLASS.finditer(text):
            handles[match.group("handle")] = int(match.group("bytes"))
    out = {}
    for handle, sent in handles.items():
        major, _, minor = handle.partition(":")
        if major != "1" or not minor:
            continue
        address = address_of_minor(int(minor, 16))
        if address is not None:
            out[address] = sent
    return out


def class_bytes(namespace: str, device: str) -> dict[str, int]:
    """{destination address: bytes the device has sent there}, from the kernel's tc class counters."""
    done = run(["tc", "-s", "-j", "-n", namespace, "class", "show", "dev", device], scope=namespace)
    try:
        return parse_class_bytes(done.stdout)
    except (ValueError, KeyError, TypeError) as exc:
        raise WanError(f"could not read tc class counters of {device} in {namespace}: {exc}.",
                       scope=namespace) from exc


def device_bytes(namespace: str, device: str) -> DeviceBytes:
    """The device's tx/rx byte counters (``ip -s -j link show``, read inside the namespace)."""
    done = run(["ip", "-n", namespace, "-s", "-j", "link", "show", "dev", device], scope=namespace)
    try:
        stats = json.loads(done.stdout)[0]["stats64"]
        return DeviceBytes(tx_bytes=int(stats["tx"]["bytes"]), rx_bytes=int(stats["rx"]["bytes"]))
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise WanError(f"could not read the byte counters of {device} in {namespace}: {exc}.",
                       scope=namespace) from exc

"""TUN devices: open one (layer 3, no packet-information header), move it into a namespace, address it.

The device lives as long as the file descriptor that made it: closing the descriptor (or the death of
the process holding it) removes the device, wherever it has been moved.
"""

from __future__ import annotations

import fcntl
import os
import struct
from dataclasses import dataclass

from geotrain.wan.addresses import PREFIX_LENGTH
from geotrain.wan.system import WanError, run, run_batch

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
IFNAMSIZ = 16
DEFAULT_MTU_BYTES = 9000


@dataclass(frozen=True)
class Port:
    """One endpoint's end of the delay line: its TUN device, the descriptor that holds it, where it is."""

    name: str
    namespace: str
    address: str
    device: str
    fd: int


def address_bytes(address: str) -> bytes:
    """The four bytes of a dotted IPv4 address, as they stand in a packet header."""
    parts = [int(part) for part in address.split(".")]
    if len(parts) != 4 or not all(0 <= part <= 255 for part in parts):
        raise ValueError(f"{address!r} is not an IPv4 address")
    return bytes(parts)


def device_name(tag: str, index: int) -> str:
    """The device name of endpoint number ``index`` of run ``tag`` (at most 15 characters)."""
    name = f"gt{tag}t{index}"
    if len(name) >= IFNAMSIZ:
        raise WanError(f"device name {name} is longer than {IFNAMSIZ - 1} characters.")
    return name


def open_tun(name: str) -> int:
    """Create TUN device ``name`` (IFF_TUN | IFF_NO_PI) in this process's namespace; returns its
    non-blocking, close-on-exec file descriptor."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH22x", name.encode(), IFF_TUN | IFF_NO_PI))
    except OSError as exc:
        os.close(fd)
        raise WanError(f"could not create TUN device {name}: {exc.strerror}.", scope=name) from exc
    return fd


def place(name: str, namespace: str, address: str, mtu_bytes: int = DEFAULT_MTU_BYTES) -> None:
    """Move device ``name`` into ``namespace``, give it ``address``/16 (so every other endpoint of
    10.78.0.0/16 routes through it), set its MTU and bring it up."""
    run(["ip", "link", "set", "dev", name, "netns", namespace], scope=namespace)
    run_batch([f"addr add {address}/{PREFIX_LENGTH} dev {name}",
               f"link set dev {name} mtu {mtu_bytes} up"], tool="ip", namespace=namespace)

"""Addresses of an emulated WAN's endpoints (10.78.0.0/16, inside the run's namespaces only) and the
tc class each one is the destination of.

Endpoint number ``index`` (0, 1, ...) gets ``10.78.<index // 254>.<index % 254 + 1>``. Its tc class
minor is the address's low 16 bits (``1:0201`` for 10.78.2.1), so a class counter maps back to its
destination address with no lookup. Minors ``fffe`` and ``ffff`` stay free for the default and root
classes.
"""

from __future__ import annotations

NETWORK = "10.78"
PREFIX_LENGTH = 16
MAX_ENDPOINTS = 254 * 254


def address_of(index: int) -> str:
    """The address of endpoint number ``index`` of a run."""
    if not 0 <= index < MAX_ENDPOINTS:
        raise ValueError(f"endpoint index {index} is outside 0..{MAX_ENDPOINTS - 1}")
    return f"{NETWORK}.{index // 254}.{index % 254 + 1}"


def class_minor(address: str) -> int:
    """The tc class minor (1..0xfdfe) of the class whose destination is ``address``."""
    parts = address.split(".")
    if len(parts) != 4 or ".".join(parts[:2]) != NETWORK:
        raise ValueError(f"{address!r} is not an address of {NETWORK}.0.0/{PREFIX_LENGTH}")
    high, low = int(parts[2]), int(parts[3])
    if not (0 <= high <= 253 and 1 <= low <= 254):
        raise ValueError(f"{address!r} is not an endpoint address")
    return high << 8 | low


def address_of_minor(minor: int) -> str | None:
    """The destination address of class minor ``minor``, or None for a minor no endpoint has."""
    high, low = minor >> 8, minor & 0xFF
    if 0 <= high <= 253 and 1 <= low <= 254:
        return f"{NETWORK}.{high}.{low}"
    return None

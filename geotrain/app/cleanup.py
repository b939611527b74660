"""``geotrain cleanup``: remove what emulated-WAN runs left behind (network namespaces, delay lines)."""

from __future__ import annotations


def cleanup(*, everything: bool = False) -> list[str]:
    """Namespaces and delay lines of runs whose launcher is gone (``everything``: of every run, live
    or not), removed; what was removed, in words. Nothing to do without the privileges to list them."""
    from geotrain.wan import cleanup as remove_leftovers
    from geotrain.wan import privileges

    if privileges() is not None:
        return []
    return remove_leftovers(everything=everything)

"""Files shipped inside the package (``geotrain/pricing/data``); see PROVENANCE.md there."""

from __future__ import annotations

from importlib import resources


def data_bytes(name: str) -> bytes:
    """The content of one bundled data file."""
    return resources.files("geotrain.pricing").joinpath("data", name).read_bytes()

"""Data shipped with the throughput model; see PROVENANCE.md here."""

from __future__ import annotations

from importlib import resources


def data_text(name: str) -> str:
    return resources.files("geotrain.perf.data").joinpath(name).read_text("utf-8")

"""Output helpers shared by the commands: JSON to stdout, rich tables, number formats."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from geotrain.errors import InputError


def print_json(value: Any) -> None:
    """Machine-readable output: plain JSON on stdout, nothing else."""
    sys.stdout.write(json.dumps(value, indent=2, default=str, allow_nan=False) + "\n")


SCHEMA_VERSION = 1


def schema_name(kind: str) -> str:
    """The ``schema`` field of a ``--json`` document: ``geotrain.<kind>.v<N>`` (e.g. geotrain.offers.v1)."""
    return f"geotrain.{kind}.v{SCHEMA_VERSION}"


def print_document(kind: str, body: dict[str, Any]) -> None:
    """Every ``--json`` prints exactly one JSON object on stdout: ``{"schema": "geotrain.<kind>.v1", ...}``
    with a stable shape per kind (a list goes under a key of its own, never at the top); progress and
    notes go to stderr."""
    if "schema" in body:
        raise ValueError("a document's body must not carry its own schema field")
    print_json({"schema": schema_name(kind), **body})


def console():  # noqa: ANN201 - rich is imported lazily
    """A rich console for stdout. Output to a pipe or file gets 160 columns unless COLUMNS says
    otherwise, so tables are not squeezed to rich's default of 80."""
    import os

    from rich.console import Console

    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160
    return Console(highlight=False, soft_wrap=False, width=width)


def split_values(values: list[str] | None) -> tuple[str, ...]:
    """Repeated options and comma-separated lists both work: --cloud aws,gcp --cloud azure."""
    out: list[str] = []
    for value in values or []:
        out.extend(part.strip() for part in value.split(",") if part.strip())
    return tuple(out)


def checked(values: tuple[str, ...], choices: tuple[str, ...], option: str) -> tuple[str, ...]:
    for value in values:
        if value not in choices:
            raise InputError(f"{option}: {value!r} is not one of {', '.join(choices)}")
    return values


def sync_settings(**given: Any):  # noqa: ANN201
    """SyncSettings from flags: the ones given, the one set of defaults for the rest."""
    from geotrain.domain import SyncSettings, SyncStrategyName

    values = {k: v for k, v in given.items() if v is not None}
    if "strategy" in values:
        checked((values["strategy"],), tuple(s.value for s in SyncStrategyName), "--strategy")
    try:
        return SyncSettings(**values)
    except ValueError as exc:
        raise InputError(f"--{str(exc).split()[0].replace('_', '-')}: {exc}") from None


def finite(minimum: float, maximum: float):  # noqa: ANN201 - a typer callback
    """A callback that accepts a number from ``minimum`` to ``maximum`` (NaN and infinities refused,
    which click's FloatRange lets through)."""
    import typer

    def check(value: float | None) -> float | None:
        if value is None:
            return value
        if not math.isfinite(value) or not minimum <= value <= maximum:
            raise typer.BadParameter(f"{value!r} is not a number from {minimum:g} to {maximum:g}")
        return value

    return check


def usd(value: float | None, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"${value:,.{digits}f}"


def percent(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value * 100:.0f}%"

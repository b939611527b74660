"""Output helpers shared by the commands: JSON to stdout, rich tables, number formats."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from typing import Any

from geotrain.errors import InputError


def print_json(value: Any, *, one_line: bool = False) -> None:
    """Machine-readable output: plain JSON on stdout, nothing else (on one line with ``one_line``)."""
    sys.stdout.write(json.dumps(value, indent=None if one_line else 2, default=str, allow_nan=False) + "\n")


SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class DocumentKind:
    """One kind of ``--json`` document: the command that prints it and the top-level keys every document
    of the kind has (besides ``schema``). One thing is flat fields; a list is under its plural key."""

    command: str
    keys: tuple[str, ...]


DOCUMENTS: dict[str, DocumentKind] = {
    "offers": DocumentKind("catalog list", ("snapshot_id", "total", "stale", "offers")),
    "snapshot": DocumentKind("catalog show", ("snapshot_id", "label", "bundled", "created_at", "parent_id", "offers",
                                              "observed_from", "observed_to", "stale", "clouds", "sources")),
    "snapshots": DocumentKind("catalog snapshots", ("current", "snapshots")),
    "refresh": DocumentKind("catalog refresh", ("snapshot_id", "parent_id", "offers", "snapshot_offers", "seconds",
                                                "clouds", "failed", "unmapped_regions")),
    "price-history": DocumentKind("catalog history", ("instance_type", "market", "prices")),
    "check": DocumentKind("check", ("clouds",)),
    "estimate": DocumentKind("estimate", ("workload", "strategy", "nodes", "samples_per_s", "usd_per_hour",
                                          "usd_per_million_samples", "bottleneck")),
    "estimate-error": DocumentKind("estimate --batch", ("line", "error")),
    "plan": DocumentKind("plan", ("plan_id", "items")),
    "pipeline": DocumentKind("plan (a pipeline file)", ("name", "plans")),
    "launch": DocumentKind("launch", ("run_id", "status", "reason", "steps", "generations", "preemptions",
                                      "restarts", "usd", "wall_s", "checkpoint_url")),
    "launch-dry-run": DocumentKind("launch --dry-run", ("nodes",)),
    "status": DocumentKind("status", ("runs",)),
    "profile": DocumentKind("profile", ("workload", "accelerator", "accelerator_count", "samples_per_s", "output")),
    "cost-report": DocumentKind("cost-report", ("total_usd", "runs")),
    "simulate": DocumentKind("simulate", ("job", "traces", "zones", "tick_s", "start", "policies")),
    "rehearse": DocumentKind("rehearse", ("plan", "plan_strategy", "rehearsals", "suggestion")),
}


def schema_name(kind: str) -> str:
    """The ``schema`` field of a ``--json`` document: ``geotrain.<kind>.v<N>`` (e.g. geotrain.offers.v1)."""
    if kind not in DOCUMENTS:
        raise ValueError(f"{kind!r} is not a document kind (render.DOCUMENTS)")
    return f"geotrain.{kind}.v{SCHEMA_VERSION}"


def print_document(kind: str, body: dict[str, Any], *, one_line: bool = False) -> None:
    """Every ``--json`` prints exactly one JSON object on stdout: ``{"schema": "geotrain.<kind>.v1", ...}``
    with the keys :data:`DOCUMENTS` names for the kind (a list goes under a key of its own, never at the
    top); progress and notes go to stderr. ``one_line``: the document on one line (a JSON Lines answer,
    one per line of ``estimate --batch``)."""
    if "schema" in body:
        raise ValueError("a document's body must not carry its own schema field")
    name = schema_name(kind)
    missing = [key for key in DOCUMENTS[kind].keys if key not in body]
    if missing:
        raise ValueError(f"a {kind} document lacks {', '.join(missing)}")
    print_json({"schema": name, **body}, one_line=one_line)


def note(message: str) -> None:
    """A note beside a ``--json`` document (a file written, stale prices): on stderr, never in the document's
    stream."""
    sys.stderr.write(f"note: {message}\n")


def console(err: bool = False):  # noqa: ANN201 - rich is imported lazily
    """A rich console for stdout (stderr with ``err``: progress beside a ``--json`` document). Output to
    a pipe or file gets 160 columns unless COLUMNS says otherwise, so tables are not squeezed to rich's
    default of 80."""
    import os

    from rich.console import Console

    stream = sys.stderr if err else sys.stdout
    width = None if stream.isatty() or os.environ.get("COLUMNS") else 160
    return Console(highlight=False, soft_wrap=False, width=width, stderr=err)


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


ENV_HELP = "A task's env: NAME=VALUE, or NAME for this shell's value (fills envs the file leaves null and $NAME in its file_mounts)."
SECRET_HELP = "A task's secret (its secrets section), as --env."
ENV_FILE_HELP = "A dotenv file of NAME=VALUE lines, as --env for each."


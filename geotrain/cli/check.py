"""``geotrain check``: per cloud, whether its credentials work and which permissions are missing."""

from __future__ import annotations

import typer

from geotrain.cli.render import console, print_document, split_values


def check(
    cloud: list[str] = typer.Option(None, "--cloud", help="aws, gcp, azure (repeat or comma-separate; default all)."),
    as_json: bool = typer.Option(False, "--json", help="Print the reports as JSON."),
) -> None:
    """Check each cloud's credentials (the SDK's standard chain) and the permissions geotrain uses."""
    from geotrain.app import refresh as live

    reports = live.check(split_values(cloud))
    if as_json:
        print_document("check", {"clouds": [{"cloud": r.cloud, "ok": r.ok, "identity": r.identity, "message": r.message,
                                             "missing": list(r.missing)} for r in reports]})
    else:
        out = console()
        for r in reports:
            mark = "ok" if r.ok else "not ready"
            who = f" ({r.identity})" if r.identity else ""
            out.print(f"{r.cloud:<6} {mark}{who}: {r.message}")
            for permission in r.missing:
                out.print(f"       missing permission: {permission}")
    if not any(r.ok for r in reports):
        raise typer.Exit(4)  # as a provider refusal (README, exit codes): no cloud can be reached

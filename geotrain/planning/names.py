"""The names a job may filter offers by, checked before planning: a cloud, region or accelerator that
no offer has is a typo, said so by name (exit 2), never an empty candidate set.

Known clouds are the providers geotrain has (and ``onprem``) plus every cloud of the snapshot's offers
and the inventory's, so an imported cloud (e.g. ``lambda``) is known. Known regions and accelerators
are those of the offers (an accelerator name also matches its variants: ``A100`` is known where an
``A100-80GB`` is offered).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from geotrain.domain import CLOUD_ONPREM, JobSpec, Offer
from geotrain.errors import InputError
from geotrain.pricing.images import OTHER_STACK
from geotrain.providers.registry import CLOUD_PROVIDERS

BUILTIN_CLOUDS = frozenset({*CLOUD_PROVIDERS, CLOUD_ONPREM})
CPU = "CPU"


def check_names(job: JobSpec, offers: Sequence[Offer]) -> None:
    """Raise :class:`InputError` for the first cloud, region or accelerator of the job's constraints
    that no offer (nor the built-in clouds) knows."""
    c = job.constraints
    clouds = BUILTIN_CLOUDS | {o.location.cloud for o in offers}
    _check("cloud", c.clouds, clouds, lambda name, known: name in known)
    regions = {o.location.region for o in offers} | {o.location.region_scope for o in offers}
    _check("region", c.regions, regions, lambda name, known: name in known, shown=8)
    accelerators = {o.shape.accelerator for o in offers if o.shape.accelerator} | {CPU}
    _check("accelerator", c.accelerators, accelerators, _accelerator_known)
    # a task file's resource choices: the same names, accelerators exactly (as SkyPilot matches them)
    _check("cloud", {r.cloud for r in c.resources if r.cloud}, clouds, lambda name, known: name in known)
    _check("region", {r.region for r in c.resources if r.region}, regions, lambda name, known: name in known, shown=8)
    exact = {a.lower() for a in accelerators}
    named = {r.accelerator for r in c.resources if r.accelerator}
    if not any(name.lower() in exact for name in named):  # one known choice is enough, as SkyPilot skips the rest
        _check("accelerator", named, accelerators, lambda name, known: name.lower() in exact)
    asked = set(c.accelerators or ()) | {r.accelerator for r in c.resources if r.accelerator}
    stacks = {name: OTHER_STACK[known] for name in asked for known in OTHER_STACK if known.lower() == name.lower()}
    if asked and len(stacks) == len(asked):  # every accelerator asked for needs an image geotrain has not
        words = ", ".join(f"{name} ({stack})" for name, stack in sorted(stacks.items()))
        raise InputError(f"{words}: offers of these need an image geotrain does not boot yet (its images are "
                         "x86-64 with NVIDIA's driver); ask for NVIDIA accelerators, or use your own machines "
                         "with that software (onprem)")


def _accelerator_known(name: str, known: set[str]) -> bool:
    lower = name.lower()
    return any(a.lower() == lower or a.lower().startswith(lower + "-") for a in known)


def _check(what: str, wanted: Iterable[str] | None, known: set[str], matches, shown: int | None = None) -> None:  # noqa: ANN001
    for name in sorted(wanted or ()):
        if not matches(name, known):
            listed = sorted(known)
            more = ""
            if shown is not None and len(listed) > shown:
                more = f", … ({len(listed) - shown} more; `geotrain catalog list` shows them)"
                listed = listed[:shown]
            raise InputError(f"unknown {what} {name!r}; known: {', '.join(listed)}{more}")

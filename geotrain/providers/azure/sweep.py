"""``geotrain cleanup --cloud azure``: a run's (or every geotrain run's) Azure resources, found by the
``geotrain-run`` tag alone in the subscription (AZURE_SUBSCRIPTION_ID), deleted.

Calls, with no state file: ``resource_groups.list``; in every group tagged ``geotrain-run`` (the run's, or
any run's; ``regions`` keep the groups of those locations): ``virtual_machines.list`` → ``begin_delete`` of
each VM of the run (its OS disk, NIC and public IP go with it: ``deleteOption`` Delete), then, for a
group geotrain made (``geotrain-<run>``), ``resource_groups.begin_delete`` (its VNet, NSG and anything
left); in a group of the user's (the provider's ``resource_group`` setting, untagged) nothing is found.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from geotrain.providers.azure import arm
from geotrain.providers.sweep import Say, Swept

CLOUD = "azure"


def sweep(*, run_id: str | None = None, regions: Sequence[str] = (), dry_run: bool = False, say: Say | None = None,
          clients: Any = None) -> list[Swept]:
    """Find (and unless ``dry_run`` delete) the run's VMs and resource groups; what was found and done."""
    from geotrain.providers.azure.clients import azure_clients

    c = clients or azure_clients()
    tell = say or (lambda s: None)
    opts = dict(c.call_options)
    out: list[Swept] = []

    def note(swept: Swept) -> None:
        out.append(swept)
        tell(swept)

    wanted = arm.tag_value(run_id) if run_id else None
    for group in list(c.resources.resource_groups.list(**opts)):
        tags = dict(group.tags or {})
        run = tags.get(arm.TAG_RUN)
        if run is None or (wanted is not None and run != wanted):
            continue
        if regions and group.location not in regions:
            continue
        for vm in list(c.compute.virtual_machines.list(group.name, **opts)):
            if (vm.tags or {}).get(arm.TAG_RUN) != run:
                continue
            if not dry_run:
                c.compute.virtual_machines.begin_delete(group.name, vm.name, polling_interval=0, **opts).result()
            note(Swept(CLOUD, group.name, "vm", vm.name, run, str(vm.provisioning_state or ""),
                       "would delete" if dry_run else "deleted", not dry_run))
        made_by_geotrain = group.name.lower() == arm.resource_group_name(run).lower()
        if not made_by_geotrain:
            continue
        if not dry_run:
            c.resources.resource_groups.begin_delete(group.name, polling_interval=0, **opts).result()
        note(Swept(CLOUD, group.location, "resource-group", group.name, run, "present",
                   "would delete (with its network)" if dry_run else "deleted (with its network)", not dry_run))
    return out

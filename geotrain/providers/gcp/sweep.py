"""``geotrain cleanup --cloud gcp``: a run's (or every geotrain run's) Compute Engine VMs and firewall rules,
found by label and name alone in the project (GOOGLE_CLOUD_PROJECT), deleted.

Calls, with no state file: ``compute.instances.aggregatedList`` (filter ``labels.geotrain-run = "<run>"``,
or ``labels.geotrain-run:*``; every zone of every region, or those of ``regions``) → ``compute.instances.
delete`` of each (a request id per instance, the zone operation waited for, several at once); then
``compute.firewalls.list`` → ``compute.firewalls.delete`` of the run's rules (``gt-<run>-agent``,
``gt-<run>-peers``; for every run: the rules named so whose description says "geotrain run"), once no VM
of the project still carries their target tag. A VM's boot disk goes with it (``autoDelete``) and its
external address is ephemeral: geotrain makes no disk or address that outlives its VM.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from geotrain.providers.gcp.clients import ComputeClients, Where, default_clients
from geotrain.providers.gcp.gce import Gce
from geotrain.providers.gcp.shapes import LABEL_RUN, firewall_names, label_value, metadata_value
from geotrain.providers.sweep import Say, Swept

CLOUD = "gcp"
DELETE_THREADS = 8
_RULE = re.compile(r"^gt-.+-(agent|peers)$")


def sweep(*, run_id: str | None = None, regions: Sequence[str] = (), dry_run: bool = False, say: Say | None = None,
          clients: ComputeClients | None = None, project: str | None = None, poll_s: float = 1.0) -> list[Swept]:
    """Find (and unless ``dry_run`` delete) the run's VMs and firewall rules; what was found and done."""
    if clients is None:
        clients, project = default_clients(project)
    assert project
    tell = say or (lambda s: None)
    gce = Gce(clients, timeout_s=60.0, attempts=5, first_pause_s=1.0, operation_timeout_s=900.0, poll_s=poll_s,
              sleep=time.sleep)
    out: list[Swept] = []

    def note(swept: Swept) -> None:
        out.append(swept)
        tell(swept)

    found = [(zone, inst) for zone, inst in _instances(gce, project, run_id)
             if not regions or any(zone.startswith(region + "-") or zone == region for region in regions)]

    def delete(entry: tuple[str, Any]) -> Swept:
        zone, inst = entry
        run = metadata_value(inst, LABEL_RUN) or str(inst.labels.get(LABEL_RUN, ""))
        if dry_run:
            return Swept(CLOUD, zone, "instance", inst.name, run, inst.status, "would delete", False)
        gce.delete_instance(project, zone, inst.name)
        return Swept(CLOUD, zone, "instance", inst.name, run, inst.status, "deleted", True)

    if found:
        with ThreadPoolExecutor(max_workers=min(DELETE_THREADS, len(found)), thread_name_prefix="sweep") as pool:
            for swept in pool.map(delete, found):
                note(swept)

    wanted = set(firewall_names(run_id)) if run_id else None
    rules = [r for r in gce.policy.call(Where("compute.firewalls.list"), lambda t: list(clients.firewalls.list(
        request={"project": project}, retry=None, timeout=t)))
        if (r.name in wanted if wanted is not None else
            bool(_RULE.match(r.name)) and (r.description or "").startswith("geotrain run"))]
    if rules:
        in_use = set() if dry_run else {tag for _, inst in _instances(gce, project, None)
                                        for tag in (inst.tags.items if inst.tags else [])}
        for rule in rules:
            run = _run_of_rule(rule)
            if dry_run:
                note(Swept(CLOUD, "global", "firewall", rule.name, run, "present", "would delete", False))
            elif set(rule.target_tags) & in_use:
                note(Swept(CLOUD, "global", "firewall", rule.name, run, "present",
                           "left: VMs of its target tag still exist (another region?)", False))
            else:
                gce.delete_firewall(project, run or rule.name, rule.name)
                note(Swept(CLOUD, "global", "firewall", rule.name, run, "present", "deleted", True))
    return out


def _instances(gce: Gce, project: str, run_id: str | None) -> list[tuple[str, Any]]:
    flt = f'labels.{LABEL_RUN} = "{label_value(run_id)}"' if run_id else f"labels.{LABEL_RUN}:*"
    pairs = gce.policy.call(Where("compute.instances.aggregatedList"), lambda t: list(
        gce.clients.instances.aggregated_list(request={"project": project, "filter": flt}, retry=None, timeout=t)))
    out = []
    for scope, scoped in pairs:
        zone = scope.rsplit("/", 1)[-1]
        for inst in scoped.instances or []:
            if run_id is None or metadata_value(inst, LABEL_RUN) in (None, run_id):
                out.append((zone, inst))
    return out


def _run_of_rule(rule: Any) -> str:
    text = rule.description or ""
    match = re.match(r"geotrain run (\S+?):", text)
    return match.group(1) if match else ""

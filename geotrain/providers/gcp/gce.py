"""Every Compute Engine call the GCP provider makes, each through the one retry policy, with geotrain's errors:
instances, their zone operations, the run's firewall rules and their global operations, a region's zones."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from geotrain.errors import ConfigurationError, GeotrainError, NotFoundError, ProviderError, ProviderTimeoutError
from geotrain.providers.gcp.clients import CallPolicy, ComputeClients, Where, operation_error, refused_insert
from geotrain.providers.gcp.shapes import LABEL_RUN, gce_request_id, label_value

PREEMPTED_OPERATION = "compute.instances.preempted"
WAIT_SERVER_S = 130.0  # operations.wait answers within about 2 minutes, done or not


class NotSoldError(ConfigurationError):
    """The zone does not sell the offer's machine (or accelerator) type: not capacity (it never will), and
    about that offer alone (the provider sets ``offer_id``)."""


class Gce:
    """The SDK calls of one provider: ``clients`` with ``policy`` (``wait_policy`` for operations.wait, whose
    answer may take two minutes)."""

    def __init__(self, clients: ComputeClients, *, timeout_s: float, attempts: int, first_pause_s: float,
                 operation_timeout_s: float, poll_s: float, sleep: Callable[[float], None]) -> None:
        self.clients = clients
        self.policy = CallPolicy(timeout_s=timeout_s, attempts=attempts, first_pause_s=first_pause_s, sleep=sleep)
        self.wait_policy = CallPolicy(timeout_s=timeout_s + WAIT_SERVER_S, attempts=attempts,
                                      first_pause_s=first_pause_s, sleep=sleep)
        self.operation_timeout_s = operation_timeout_s
        self.poll_s = poll_s
        self.sleep = sleep

    # ---- reading ------------------------------------------------------------------------------------
    def probe(self, project: str) -> None:
        """One page of instances.aggregatedList and of firewalls.list (what check_credentials needs to work)."""
        c = self.clients
        for what, probe in (("compute.instances.aggregatedList", lambda t: next(iter(c.instances.aggregated_list(
                request={"project": project, "max_results": 1}, retry=None, timeout=t).pages))),
                            ("compute.firewalls.list", lambda t: next(iter(c.firewalls.list(
                                request={"project": project, "max_results": 1}, retry=None, timeout=t).pages)))):
            self.policy.call(Where(f"{what} in project {project}"), probe)

    def get_instance(self, project: str, zone: str, name: str) -> Any | None:
        """The compute_v1.Instance, or None if there is none of that name."""
        from google.api_core import exceptions as gexc

        try:
            return self.policy.call(Where(f"compute.instances.get {name} in {zone}"), lambda t: (
                self.clients.instances.get(project=project, zone=zone, instance=name, retry=None, timeout=t)),
                passthrough=(gexc.NotFound,))
        except gexc.NotFound:
            return None

    def list_zone(self, project: str, zone: str, run_id: str | None) -> dict[str, Any]:
        """The zone's instances labelled with the run (any run: None), by name, every page."""
        flt = f'labels.{LABEL_RUN} = "{label_value(run_id)}"' if run_id is not None else f"labels.{LABEL_RUN}:*"
        return self.policy.call(Where(f"compute.instances.list in {zone}"), lambda t: {
            inst.name: inst for inst in self.clients.instances.list(
                request={"project": project, "zone": zone, "filter": flt}, retry=None, timeout=t)})

    def preempted(self, project: str, zone: str) -> set[str]:
        """Instances of the zone that GCE preempted (its ``compute.instances.preempted`` operations)."""
        flt = f'operationType = "{PREEMPTED_OPERATION}"'
        operations = self.policy.call(Where(f"compute.zoneOperations.list in {zone}"), lambda t: list(
            self.clients.zone_operations.list(request={"project": project, "zone": zone, "filter": flt}, retry=None,
                                              timeout=t)))
        return {op.target_link.rstrip("/").rsplit("/", 1)[-1] for op in operations
                if op.operation_type == PREEMPTED_OPERATION and op.target_link}

    def region_zones(self, project: str, region: str, where: Where) -> list[str]:
        found = self.policy.call(where, lambda t: self.clients.regions.get(project=project, region=region, retry=None,
                                                                           timeout=t))
        return sorted(z.rstrip("/").rsplit("/", 1)[-1] for z in found.zones)

    # ---- instances ----------------------------------------------------------------------------------
    def insert_instance(self, project: str, zone: str, body: dict[str, Any], request_id: str, where: Where) -> None:
        """instances.insert and its operation. A name already taken (an earlier try made it) is no error;
        NotSoldError where the zone lacks the machine / accelerator type; the operation's error raised."""
        from google.api_core import exceptions as gexc
        from google.cloud import compute_v1

        resource = compute_v1.Instance.from_json(json.dumps(body))
        try:
            operation = self.policy.call(where, lambda t: self.clients.instances.insert_unary(request={
                "project": project, "zone": zone, "instance_resource": resource, "request_id": request_id},
                retry=None, timeout=t), unknown_outcome=True, passthrough=(gexc.Conflict, gexc.NotFound,
                                                                           gexc.BadRequest))
        except gexc.Conflict:
            return
        except (gexc.NotFound, gexc.BadRequest) as exc:
            error = refused_insert(exc, where)
            if error is None:
                raise NotSoldError(f"{where.action}: {zone} does not sell it ({' '.join(str(exc).split())[:300]}); "
                                   "plan another zone", scope=where.zone_scope) from exc
            raise error from exc
        done = self.wait(project, zone, operation.name, where)
        error = operation_error(done, where)
        if error is not None:
            raise error

    def delete_instance(self, project: str, zone: str, name: str, *, best_effort: bool = False) -> None:
        """instances.delete (a request id per instance) and its operation; nothing there is no error."""
        from google.api_core import exceptions as gexc

        where = Where(f"compute.instances.delete {name} in {zone}")
        try:
            operation = self.policy.call(where, lambda t: self.clients.instances.delete_unary(request={
                "project": project, "zone": zone, "instance": name,
                "request_id": gce_request_id("delete", project, zone, name)}, retry=None, timeout=t),
                passthrough=(gexc.NotFound,))
            self.wait(project, zone, operation.name, where)
        except gexc.NotFound:
            return
        except GeotrainError:
            if not best_effort:
                raise

    def wait(self, project: str, zone: str | None, operation: str, where: Where) -> Any:
        """The operation once done (zoneOperations.wait, or globalOperations.wait for zone None)."""
        from google.cloud import compute_v1

        deadline = time.monotonic() + self.operation_timeout_s
        wait_where = Where(f"waiting for {where.action}", where.region, where.zone_scope)
        ops = self.clients
        while True:
            if zone is None:
                done = self.wait_policy.call(wait_where, lambda t: ops.global_operations.wait(
                    project=project, operation=operation, retry=None, timeout=t), unknown_outcome=True)
            else:
                done = self.wait_policy.call(wait_where, lambda t: ops.zone_operations.wait(
                    project=project, zone=zone, operation=operation, retry=None, timeout=t), unknown_outcome=True)
            if done.status == compute_v1.Operation.Status.DONE:
                return done
            if time.monotonic() > deadline:
                raise ProviderTimeoutError(f"{where.action} still runs after {self.operation_timeout_s:.0f} s "
                                           f"(operation {operation}); list the run's nodes later",
                                           scope=where.zone_scope)
            self.sleep(self.poll_s)

    # ---- firewall rules -----------------------------------------------------------------------------
    def ensure_firewall(self, project: str, run_id: str, body: dict[str, Any]) -> None:
        """The rule, found by name or inserted (a request id per run and rule) and waited for."""
        from google.api_core import exceptions as gexc
        from google.cloud import compute_v1

        name = body["name"]
        where = Where(f"compute.firewalls.insert {name}", None, "gcp")
        try:
            self.policy.call(where, lambda t: self.clients.firewalls.get(project=project, firewall=name, retry=None,
                                                                         timeout=t), passthrough=(gexc.NotFound,))
            return
        except gexc.NotFound:
            pass
        resource = compute_v1.Firewall.from_json(json.dumps(body))
        try:
            operation = self.policy.call(where, lambda t: self.clients.firewalls.insert_unary(request={
                "project": project, "firewall_resource": resource,
                "request_id": gce_request_id("firewall", run_id, name)},
                retry=None, timeout=t), passthrough=(gexc.Conflict,))
        except gexc.Conflict:
            return
        except NotFoundError as exc:
            raise ProviderError(f"network {body['network']} not found in project {project} ({exc}): create it "
                                "(gcloud compute networks create default --subnet-mode=auto) or give the provider "
                                "another network", scope="gcp") from exc.__cause__
        done = self.wait(project, None, operation.name, where)
        error = operation_error(done, where)
        if error is not None and not any(e.code == "RESOURCE_ALREADY_EXISTS" for e in done.error.errors):
            raise error

    def put_firewall(self, project: str, run_id: str, body: dict[str, Any]) -> None:
        """The rule as ``body`` says: inserted, or patched where it exists (its sourceRanges replaced)."""
        from google.api_core import exceptions as gexc
        from google.cloud import compute_v1

        name = body["name"]
        where = Where(f"compute.firewalls.patch {name}", None, "gcp")
        try:
            self.policy.call(where, lambda t: self.clients.firewalls.get(project=project, firewall=name, retry=None,
                                                                         timeout=t), passthrough=(gexc.NotFound,))
        except gexc.NotFound:
            self.ensure_firewall(project, run_id, body)
            return
        resource = compute_v1.Firewall.from_json(json.dumps(body))
        key = gce_request_id("firewall-patch", run_id, name, *body.get("sourceRanges", []))
        operation = self.policy.call(where, lambda t: self.clients.firewalls.patch_unary(request={
            "project": project, "firewall": name, "firewall_resource": resource, "request_id": key},
            retry=None, timeout=t))
        done = self.wait(project, None, operation.name, where)
        error = operation_error(done, where)
        if error is not None:
            raise error

    def delete_firewall(self, project: str, run_id: str, name: str) -> None:
        from google.api_core import exceptions as gexc

        where = Where(f"compute.firewalls.delete {name}", None, "gcp")
        try:
            operation = self.policy.call(where, lambda t: self.clients.firewalls.delete_unary(request={
                "project": project, "firewall": name, "request_id": gce_request_id("firewall-delete", run_id, name)},
                retry=None, timeout=t), passthrough=(gexc.NotFound,))
        except gexc.NotFound:
            return
        self.wait(project, None, operation.name, where)

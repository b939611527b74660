"""GcpProvider: nodes are Compute Engine VMs (see the package docstring for what it calls and why)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from geotrain.clouds.gcp.credentials import PROJECT_HINT, environment_project
from geotrain.domain import Market
from geotrain.errors import (
    CapacityError,
    ConfigurationError,
    CredentialsError,
    GeotrainError,
    NotFoundError,
    ProviderError,
    ProviderTimeoutError,
)
from geotrain.providers.base import Capabilities, LaunchRequest, NodeInfo, NodeState
from geotrain.providers.bootimage import GCP_DISK_TYPES
from geotrain.providers.cloudnodes import CloudNodes, SshNodes
from geotrain.providers.gcp import records
from geotrain.providers.gcp.clients import ComputeClients, Where, default_clients
from geotrain.providers.gcp.gce import Gce, NotSoldError
from geotrain.providers.gcp.records import PENDING_STATUSES
from geotrain.providers.gcp.shapes import (
    CLOUD,
    DEFAULT_DISK_GB,
    DEFAULT_IMAGE,
    DEFAULT_NETWORK,
    HYPERDISK_SERIES,
    firewall_bodies,
    firewall_names,
    public_peers_body,
    gce_request_id,
    instance_body,
    instance_name,
    launch_request_id,
    machine_of,
)
from geotrain.providers.gcp.state import StateFile
from geotrain.providers.remote import AGENT_PORT

ClientFactory = Callable[[], tuple[ComputeClients, str]]


class GcpProvider(SshNodes):
    """Compute Engine VMs of one project. Construct with ``clients`` (tests: clients pointed at a fake) or a
    ``client_factory`` (``() -> (clients, project)``); :meth:`from_environment` uses Application Default
    Credentials.

    ``control_cidr``: the launcher's address range that may reach the VMs' SSH port (a bare address means
    /32); required to launch. ``nodes``: how the launcher reaches its VMs over SSH
    (:class:`~geotrain.providers.cloudnodes.CloudNodes`: port, node user, timeouts; ``agent_port`` is no
    longer used: the agent listens on the VM's loopback). ``home``: the GEOTRAIN_HOME of the state file
    (None: GEOTRAIN_HOME at each call). What the VMs do over SSH (set-up at boot, ``start``, ``ship``,
    ``store_address``, ``login_command``) is :class:`~geotrain.providers.cloudnodes.SshNodes`'.
    ``channel``: the :class:`~geotrain.providers.remote.AgentChannel` that ``start`` uses. The other settings:
    the boot image and disk, the network, call and operation timeouts, the poll period, the retry policy.
    """

    name = CLOUD
    capabilities = Capabilities(spot=True, notice_s=30.0, preemption_injection=False, shared_host=False)

    def __init__(self, project: str | None = None, *, clients: ComputeClients | None = None,
                 client_factory: ClientFactory | None = None, home: Path | None = None,
                 control_cidr: str | None = None, agent_port: int = AGENT_PORT, channel: Any = None,
                 nodes: CloudNodes | None = None, image: str = DEFAULT_IMAGE, network: str = DEFAULT_NETWORK,
                 disk_gb: int = DEFAULT_DISK_GB, instance_role: str | None = None,
                 disk_type: str | None = None, call_timeout_s: float = 60.0, operation_timeout_s: float = 900.0,
                 running_timeout_s: float = 600.0, poll_s: float = 2.0, attempts: int = 5,
                 first_pause_s: float = 1.0, sleep: Callable[[float], None] = time.sleep) -> None:
        self._project = project
        self._clients = clients
        self._factory = client_factory
        self._owns_clients = False
        self._gce: Gce | None = None
        self._state = StateFile(home)
        self.control_cidr = records.cidr(control_cidr) if control_cidr else None
        self.agent_port = int(agent_port)
        self._channel = channel
        self.nodes = nodes or CloudNodes(CLOUD)  # how the launcher reaches the VMs: SSH, its own keys
        # the VPC network's link (not ``network``: the launcher reads a provider's ``network`` as its emulated one)
        self.image, self.vpc_network, self.disk_gb, self.disk_type = image, network, disk_gb, disk_type
        self.instance_role = instance_role  # the service account (email) the nodes get, if any
        self._call = {"timeout_s": call_timeout_s, "attempts": attempts, "first_pause_s": first_pause_s,
                      "operation_timeout_s": operation_timeout_s, "poll_s": poll_s, "sleep": sleep}
        self._running_timeout_s = running_timeout_s
        self._poll_s = poll_s
        self._sleep = sleep

    @classmethod
    def from_environment(cls, **settings: Any) -> GcpProvider:
        """A provider on Application Default Credentials; the project from ``project=``, GOOGLE_CLOUD_PROJECT
        (or CLOUDSDK_CORE_PROJECT, GCLOUD_PROJECT), else the credentials' own; ``api_endpoint=`` or
        GEOTRAIN_GCP_ENDPOINT to reach another server. Nothing is read until used."""
        project = environment_project(settings.pop("project", None))
        endpoint = settings.pop("api_endpoint", None)
        return cls(project, client_factory=lambda: default_clients(project, endpoint), **settings)

    @property
    def channel(self) -> Any:
        if self._channel is None:
            from geotrain.providers.remote import AgentChannel

            self._channel = AgentChannel()
        return self._channel

    # ---- Provider protocol --------------------------------------------------------------------------
    def check_credentials(self) -> None:
        gce, project = self._resolve()
        try:
            gce.probe(project)
        except NotFoundError as exc:
            raise CredentialsError(f"GCP project {project} not found, or the Compute Engine API is not enabled in it: "
                                   "set GOOGLE_CLOUD_PROJECT to a project with the Compute Engine API",
                                   scope="gcp") from exc

    def launch(self, request: LaunchRequest) -> NodeInfo:
        offer, loc = request.offer, request.offer.location
        if loc.cloud != CLOUD or offer.market is Market.OWNED:
            raise ValueError(f"offer {offer.offer_id} is not a GCP spot or on-demand offer")
        try:
            machine_of(offer.shape.instance_type)
        except ValueError as exc:
            raise ProviderError(f"cannot launch {offer.offer_id}: {exc}", scope=loc.zone_scope) from exc
        if self.control_cidr is None:
            raise ProviderError("the GCP provider needs control_cidr (the launcher's address, e.g. 203.0.113.7/32) "
                                "to open the VMs' SSH port to it", scope="gcp")
        name = instance_name(request.request_id)
        gce, project = self._resolve()
        with self._state.locked() as st:
            rec = st["nodes"].get(name)
            if rec is not None and (rec["run_id"] != request.run_id or rec["offer_id"] != offer.offer_id):
                raise ValueError(f"request id {request.request_id!r} was used for run {rec['run_id']} and offer "
                                 f"{rec['offer_id']}, not run {request.run_id} and offer {offer.offer_id}")
            if rec is None:  # recorded before anything is made: a crash leaves a record that finds the VM by name
                rec = st["nodes"][name] = records.new_record(request, project, int(st["attempts"].get(
                    request.request_id, 0)))
            rec = dict(rec)
        if rec["status"] != "launching":
            return self._refresh_one(name)
        try:
            self._ensure_firewall(gce, request.run_id, rec["project"])
            self._create(gce, rec, request)
        except ProviderTimeoutError:
            raise  # outcome unknown: the record stays, and a retry (same request id, same name) finds the VM
        except GeotrainError as exc:
            if isinstance(exc, NotSoldError) and exc.offer_id is None:
                exc.offer_id = offer.offer_id  # about this offer alone: its type where it is
            self._abandon(gce, rec)
            raise
        return self._refresh_one(name)

    def list(self, run_id: str | None = None) -> list[NodeInfo]:
        st = self._state.read()
        live = [r for r in st["nodes"].values() if (run_id is None or r["run_id"] == run_id) and r["status"] != "ended"]
        if live:
            gce, _ = self._resolve()
            by_zone: dict[tuple[str, str], list[dict[str, Any]]] = {}
            for rec in live:
                if rec["zone"]:
                    by_zone.setdefault((rec["project"], rec["zone"]), []).append(rec)
            updates: dict[str, dict[str, Any]] = {}
            adopted: list[dict[str, Any]] = []
            for (project, zone), zone_recs in sorted(by_zone.items()):
                found = gce.list_zone(project, zone, run_id)
                for rec in zone_recs:  # a list may lag an insert: ask for the one VM before calling it gone
                    if rec["node_id"] not in found and (inst := gce.get_instance(project, zone, rec["node_id"])):
                        found[rec["node_id"]] = inst
                need = any(not records.live(found.get(r["node_id"])) for r in zone_recs)
                preempted = gce.preempted(project, zone) if need else set()
                for rec in zone_recs:
                    updates[rec["node_id"]] = records.observe(rec, found.get(rec["node_id"]), preempted)
                adopted.extend(r for name, inst in found.items() if name not in st["nodes"]
                               for r in [records.adopt(inst, project, zone)] if r and run_id in (None, r["run_id"]))
            with self._state.locked() as state:
                records.merge(state, updates, adopted)
                st = json_copy(state)
        shown = [r for r in st["nodes"].values()
                 if (run_id is None or r["run_id"] == run_id) and r["status"] != "launching"]
        shown.sort(key=lambda r: (r["launched_at"], r["node_id"]))
        return [records.info(r) for r in shown]

    def terminate(self, node_id: str, *, reason: str = "terminated") -> None:
        rec = self._record(node_id)
        if records.ended(rec):
            if rec.get("lingering") and rec["zone"]:  # a stopped VM still holds its disk
                gce, _ = self._resolve()
                gce.delete_instance(rec["project"], rec["zone"], node_id)
                self._merge({node_id: {"lingering": False}})
            self._cleanup_firewall(rec["run_id"], rec["project"])
            return
        gce, _ = self._resolve()
        zone = rec["zone"]
        inst = gce.get_instance(rec["project"], zone, node_id) if zone else None
        # gone before this call, and not by an earlier terminate of ours that died before it recorded the end
        vanished = inst is None and rec["status"] == "up" and not rec.get("deleting")
        preempted = zone is not None and not records.live(inst) and node_id in gce.preempted(rec["project"], zone)
        with self._state.locked() as st:
            stored = st["nodes"][node_id]
            if not records.ended(stored):
                stored.setdefault("terminate_reason", reason)
                stored["deleting"] = True
            rec = dict(stored)
        if not records.ended(rec):  # (else another process recorded its end meanwhile)
            if inst is not None:
                gce.delete_instance(rec["project"], zone, node_id)
            if preempted:
                end = records.ended_update(NodeState.PREEMPTED, "preempted")
            else:
                end = records.ended_update(NodeState.TERMINATED, "lost" if vanished else rec["terminate_reason"])
            self._merge({node_id: end})
        self._cleanup_firewall(rec["run_id"], rec["project"])

    # start, booted (BootWatch), ship, store_address (NodeLink), login_command (NodeLogin): SshNodes, over
    # these hooks
    def _ssh_node(self, node_id: str) -> NodeInfo:
        return self._refresh_one(node_id)

    def _ssh_record(self, node_id: str) -> dict[str, Any]:
        return self._record(node_id)

    def _ssh_save_agent(self, node_id: str, agent: dict) -> None:
        with self._state.locked() as st:
            stored = st["nodes"].get(node_id)
            if stored is not None:
                stored["agent"] = agent

    def _ssh_scope(self, record: dict) -> str:
        return f"{CLOUD}/{record['location']['region']}"

    def _ssh_alive(self, node_id: str) -> bool:
        return self._alive(node_id)

    def _startup_script(self, request: LaunchRequest, *, dry: bool = False) -> str:
        """The VM's ``startup-script``: only an sshd of geotrain's own with this node's host key and the
        run's login key (a dry run shows placeholders and makes no key)."""
        from geotrain.providers.startup import ssh_startup_script

        if dry:
            return ssh_startup_script(cloud=CLOUD, login_public="ssh-ed25519 <run-login-key>",
                                      host_private="<this node's host key>", ssh_port=self.nodes.ssh_port,
                                      node_user=self.nodes.node_user)
        from geotrain.providers.runkeys import host_key, login_key

        return ssh_startup_script(cloud=CLOUD, login_public=login_key(request.run_id)[1],
                                  host_private=host_key(request.run_id, request.request_id).private,
                                  ssh_port=self.nodes.ssh_port, node_user=self.nodes.node_user)

    @classmethod
    def for_dry_run(cls, **settings: Any) -> GcpProvider:
        """A provider for :meth:`dry_run` only: no credentials, no client, no call."""
        return cls(None, **settings)

    def dry_run(self, request: LaunchRequest) -> list[dict[str, Any]]:
        """The SDK calls ``launch`` would make, in order (each ``get`` finds what an earlier try made; the
        insert after it is made only where it finds nothing). No call is made, no key is made: the startup
        script shows placeholders for the keys."""
        loc = request.offer.location
        project = self._project or environment_project() or "<GOOGLE_CLOUD_PROJECT>"
        calls: list[dict[str, Any]] = []
        for body in firewall_bodies(request.run_id, control_cidr=self.control_cidr or "<control_cidr>",
                                    ssh_port=self.nodes.ssh_port, network=self.vpc_network):
            calls.append({"call": "compute.firewalls.get", "params": {"project": project, "firewall": body["name"]}})
            calls.append({"call": "compute.firewalls.insert", "params": {
                "project": project, "request_id": gce_request_id("firewall", request.run_id, body["name"]),
                "firewall_resource": body}})
            calls.append({"call": "compute.globalOperations.wait", "params": {
                "project": project, "operation": f"<the operation of firewalls.insert {body['name']}>"}})
        zone = loc.zone
        if not zone:
            calls.append({"call": "compute.regions.get", "params": {"project": project, "region": loc.region}})
            zone = f"<each zone of {loc.region} in turn, until one has capacity>"
        name = instance_name(request.request_id)
        script = self._startup_script(request, dry=True)
        calls.append({"call": "compute.instances.get", "params": {"project": project, "zone": zone, "instance": name}})
        calls.append({"call": "compute.instances.insert", "params": {
            "project": project, "zone": zone, "request_id": launch_request_id(
                request.request_id, zone, attempt=0, zone_chosen=not loc.zone),
            "instance_resource": self._body(request, zone, script)}})
        calls.append({"call": "compute.zoneOperations.wait", "params": {
            "project": project, "zone": zone, "operation": "<the operation of instances.insert>"}})
        calls.append({"call": "compute.instances.get", "params": {"project": project, "zone": zone, "instance": name,
                                                                  "until": "status RUNNING"}})
        return calls

    def close(self) -> None:
        """Close the clients this provider built (injected ones are the caller's); terminates nothing."""
        if self._owns_clients and self._clients is not None:
            self._clients.close()
            self._clients, self._gce = None, None

    def __enter__(self) -> GcpProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- launching ----------------------------------------------------------------------------------
    def _resolve(self) -> tuple[Gce, str]:
        if self._clients is None:
            if self._factory is None:
                raise CredentialsError("the GCP provider has no clients; use GcpProvider.from_environment()",
                                       scope="gcp")
            clients, project = self._factory()
            self._clients, self._owns_clients = clients, True
            self._project = self._project or project
        if not self._project:
            raise CredentialsError(f"no Google Cloud project given: {PROJECT_HINT}", scope="gcp")
        if self._gce is None:
            self._gce = Gce(self._clients, **self._call)
        return self._gce, self._project

    def _body(self, request: LaunchRequest, zone: str, script: str) -> dict[str, Any]:
        return instance_body(name=instance_name(request.request_id), zone=zone, request_id=request.request_id,
                             run_id=request.run_id, offer=request.offer, script=script, image=request.image or self.image,
                             network=self.vpc_network, service_account=self.instance_role,
                             **self._disk(request))

    def _disk(self, request: LaunchRequest) -> dict[str, Any]:
        """The boot disk: the task's size and tier (``bootimage.GCP_DISK_TYPES``; a Hyperdisk-only series keeps
        hyperdisk-balanced), else the provider's settings."""
        disk = request.disk
        size = disk.size_gib if disk is not None and disk.size_gib is not None else self.disk_gb
        kind = GCP_DISK_TYPES[disk.tier] if disk is not None and disk.tier else self.disk_type
        if kind is not None and request.offer.shape.instance_type.startswith(HYPERDISK_SERIES):
            kind = None  # these machines boot only from Hyperdisk
        return {"disk_gb": size, "disk_type": kind}

    def _create(self, gce: Gce, rec: dict[str, Any], request: LaunchRequest) -> None:
        """Make the VM (or find the one an earlier try made) in the offer's zone, or for a region-wide offer
        in the first of the region's zones that can, and wait until it runs."""
        loc = request.offer.location
        if rec["zone"]:
            self._create_in(gce, rec, request, rec["zone"])
            return
        zones = gce.region_zones(rec["project"], loc.region, Where(f"compute.regions.get {loc.region}", loc.region,
                                                                   loc.zone_scope))
        refused: list[str] = []
        last: GeotrainError | None = None
        for zone in zones:
            self._merge({rec["node_id"]: {"zone": zone}})
            rec["zone"] = zone
            try:
                self._create_in(gce, rec, request, zone)
                return
            except (CapacityError, NotSoldError) as exc:
                refused.append(f"{zone}: {'not sold there' if isinstance(exc, NotSoldError) else 'no capacity'}")
                last = exc
                gce.delete_instance(rec["project"], zone, rec["node_id"], best_effort=True)
        if zones and all(r.endswith("not sold there") for r in refused):  # never, whatever the capacity
            raise ConfigurationError(f"no zone of {loc.region} sells {request.offer.shape.instance_type} "
                                     f"({', '.join(refused)}): the offer {request.offer.offer_id} cannot be launched; "
                                     "plan another region or machine type", scope=loc.zone_scope,
                                     offer_id=request.offer.offer_id) from last
        raise CapacityError(f"no zone of {loc.region} could make {request.offer.offer_id} ({', '.join(refused)}); "
                            "try another region or later", scope=loc.zone_scope) from last

    def _create_in(self, gce: Gce, rec: dict[str, Any], request: LaunchRequest, zone: str) -> None:
        name, project, offer = rec["node_id"], rec["project"], request.offer
        where = Where(f"compute.instances.insert {name} ({offer.shape.instance_type}, {offer.market}) in {zone}",
                      offer.location.region, offer.location.zone_scope)
        if gce.get_instance(project, zone, name) is None:
            script = self._startup_script(request)
            gce.insert_instance(project, zone, self._body(request, zone, script), launch_request_id(
                request.request_id, zone, attempt=rec["attempt"], zone_chosen=rec["zone_chosen"]), where)
        self._merge({name: {"status": "up"}})
        deadline = time.monotonic() + self._running_timeout_s
        while True:
            inst = gce.get_instance(project, zone, name)
            if inst is None or inst.status not in PENDING_STATUSES or time.monotonic() > deadline:
                return
            self._sleep(self._poll_s)

    def _abandon(self, gce: Gce, rec: dict[str, Any]) -> None:
        """After a launch failed for certain: delete what it made, forget the record (the next try sends GCE a
        new request id), and the run's firewall rules if the run has no other node."""
        if rec.get("zone"):
            gce.delete_instance(rec["project"], rec["zone"], rec["node_id"], best_effort=True)
        with self._state.locked() as st:
            st["nodes"].pop(rec["node_id"], None)
            st["attempts"][rec["request_id"]] = int(rec["attempt"]) + 1
        self._cleanup_firewall(rec["run_id"], rec["project"])

    # ---- the run's firewall rules -------------------------------------------------------------------
    def _ensure_firewall(self, gce: Gce, run_id: str, project: str) -> None:
        """The run's two rules, made once per run (recorded before they are made, so that a cleanup finds them)."""
        with self._state.locked() as st:
            known = st["firewalls"].get(run_id)
            if known and known.get("present"):
                return
            st["firewalls"][run_id] = {"names": list(firewall_names(run_id)), "present": False, "project": project}
        for body in firewall_bodies(run_id, control_cidr=str(self.control_cidr), ssh_port=self.nodes.ssh_port,
                                    network=self.vpc_network):
            gce.ensure_firewall(project, run_id, body)
        with self._state.locked() as st:
            names = list(dict.fromkeys([*firewall_names(run_id), *(st["firewalls"].get(run_id) or {}).get("names", [])]))
            st["firewalls"][run_id] = {"names": names, "present": True, "project": project}

    def admit_peers(self, run_id: str, addresses: Sequence[str]) -> None:
        """PeerRules: the run's ``-public`` rule admits all TCP from each of ``addresses`` (/32) to its VMs,
        and from no address no longer among them (patched; deleted when none is left)."""
        known = self._state.read()["firewalls"].get(run_id)
        if not known:
            return
        gce, _ = self._resolve()
        body = public_peers_body(run_id, [f"{a}/32" for a in addresses], network=self.vpc_network)
        if addresses:
            with self._state.locked() as st:  # recorded first: a cleanup deletes it with the others
                names = st["firewalls"][run_id]["names"]
                if body["name"] not in names:
                    names.append(body["name"])
            gce.put_firewall(known["project"], run_id, body)
        elif body["name"] in known["names"]:
            gce.delete_firewall(known["project"], run_id, body["name"])

    def _cleanup_firewall(self, run_id: str, project: str) -> None:
        """Delete the run's rules once none of its nodes is left. Best effort: a failure keeps them recorded,
        and the next terminate of a node of the run tries again."""
        with self._state.locked() as st:
            known = st["firewalls"].get(run_id)
            if not known or any(r["run_id"] == run_id and not records.ended(r) for r in st["nodes"].values()):
                return
            known["present"] = False
            names = list(known["names"])
        try:
            gce, _ = self._resolve()
            for name in names:
                gce.delete_firewall(project, run_id, name)
        except GeotrainError:
            return
        with self._state.locked() as st:
            if not any(r["run_id"] == run_id and not records.ended(r) for r in st["nodes"].values()):
                st["firewalls"].pop(run_id, None)

    # ---- observing ----------------------------------------------------------------------------------
    def _record(self, node_id: str) -> dict[str, Any]:
        rec = self._state.read()["nodes"].get(node_id)
        if rec is None:
            raise NotFoundError(f"no GCP node {node_id!r} in {self._state.path} (list the run's nodes to see "
                                "their ids)")
        return rec

    def _merge(self, updates: dict[str, dict[str, Any]]) -> None:
        with self._state.locked() as st:
            records.merge(st, updates, [])

    def _refresh_one(self, node_id: str) -> NodeInfo:
        rec = self._record(node_id)
        if rec["status"] != "ended" and rec["zone"]:
            gce, _ = self._resolve()
            inst = gce.get_instance(rec["project"], rec["zone"], node_id)
            preempted = set() if records.live(inst) else gce.preempted(rec["project"], rec["zone"])
            self._merge({node_id: records.observe(rec, inst, preempted)})
            rec = self._record(node_id)
        return records.info(rec)

    def _alive(self, node_id: str) -> bool:
        try:
            return not self._refresh_one(node_id).ended
        except GeotrainError:
            return True  # cannot tell now: the channel gives up on a silent agent after a while


def json_copy(state: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(state))

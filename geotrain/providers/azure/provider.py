"""AzureProvider: nodes are Azure VMs (see the package docstring for the calls, the errors and the setup)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from geotrain.clouds.geography import continent_of
from geotrain.domain import Location, Market, OfferId
from geotrain.errors import (
    NotFoundError,
    ProviderError,
    ProviderTimeoutError,
)
from geotrain.files import geotrain_home
from geotrain.providers.azure import arm
from geotrain.providers.bootimage import AZURE_DISK_TYPES
from geotrain.providers.azure.activity import vm_evidence
from geotrain.providers.azure.clients import AzureClients, azure_clients
from geotrain.providers.azure.errors import is_not_found, is_throttle, is_timeout, translate
from geotrain.providers.azure.state import (
    CREATED,
    CREATING,
    FAILED,
    StateStore,
    check_offer,
    check_same_request,
    location_of,
    new_record,
    node_info,
    now_text,
)
from geotrain.providers.base import Capabilities, LaunchRequest, NodeInfo, NodeState
from geotrain.providers.cloudnodes import CloudNodes, SshNodes
from geotrain.providers.remote import AGENT_PORT, AgentChannel, RemoteProcess, run_token
from geotrain.providers.startup import ssh_startup_script

log = logging.getLogger(__name__)

HIDDEN_LOGIN_KEY = "ssh-ed25519 <run-login-key>"  # what a dry run shows for the run's login key (none is made)
HIDDEN_HOST_KEY = "<this node's host key>"
CLIENT_SETTINGS = ("credential", "subscription_id", "arm_url", "enforce_https", "retry_total", "request_timeout_s",
                   "client_kwargs", "environ")


class AzureProvider(SshNodes):
    """Nodes as Azure VMs, one per launch request. See the package docstring.

    ``clients``: an :class:`AzureClients`, or a callable making one on first use (so that ``dry_run`` needs
    no credentials), or None (a provider that can only ``dry_run``). Settings: ``control_cidr`` (the only
    source geotrain's SSH port on the VMs is open to; required to launch), ``nodes`` (a
    :class:`~geotrain.providers.cloudnodes.CloudNodes`: how the launcher reaches the VMs over SSH, its
    port and node user), ``agent_port`` (unused: the agent listens on the VM's loopback),
    ``resource_group`` (an existing group to use instead of one ``geotrain-<run>`` per run), ``image`` (an
    ARM imageReference), ``admin_username`` (its SSH key: the run's login key), ``os_disk_type``, ``os_disk_gib``, ``vnet_prefix`` / ``subnet_prefix``,
    ``polling_interval_s`` (LRO polls when Azure gives no Retry-After), ``launch_timeout_s`` (until the VM
    runs), ``delete_timeout_s``, ``use_activity_log`` (tell a spot eviction from a deletion by the activity
    log), ``channel`` (the :class:`AgentChannel` of ``start``), ``home`` (GEOTRAIN_HOME; None: at each call),
    ``startup`` (the startup-script function, default :func:`geotrain.providers.startup.ssh_startup_script`,
    called with its keyword arguments), ``token`` (unused: the agent's token is
    :func:`geotrain.providers.remote.run_token`'s). Booting, ``start``, ``ship``, ``store_address`` and
    ``login_command`` over SSH are :class:`~geotrain.providers.cloudnodes.SshNodes`'.
    """

    name = arm.CLOUD
    capabilities = Capabilities(spot=True, notice_s=30.0, preemption_injection=False, shared_host=False)

    def __init__(self, clients: AzureClients | Callable[[], AzureClients] | None, *, control_cidr: str | None = None,
                 agent_port: int = AGENT_PORT, resource_group: str | None = None,
                 image: Mapping[str, Any] | None = None, admin_username: str = arm.DEFAULT_ADMIN,
                 os_disk_type: str = arm.DEFAULT_OS_DISK_TYPE, os_disk_gib: int | None = None,
                 vnet_prefix: str = arm.DEFAULT_VNET_PREFIX, subnet_prefix: str = arm.DEFAULT_SUBNET_PREFIX,
                 polling_interval_s: float = 5.0, launch_timeout_s: float = 900.0, delete_timeout_s: float = 900.0,
                 use_activity_log: bool = True, channel: AgentChannel | None = None, home: Path | None = None,
                 startup: Callable[..., str] = ssh_startup_script, token: Callable[[str], str] = run_token,
                 nodes: CloudNodes | None = None, instance_role: str | None = None) -> None:
        self._clients_given = clients
        self._client_cache: AzureClients | None = clients if isinstance(clients, AzureClients) else None
        self.control_cidr = control_cidr
        self.agent_port = int(agent_port)
        self.resource_group = resource_group
        self.image = dict(image or arm.DEFAULT_IMAGE)
        self.instance_role = instance_role  # the user-assigned managed identity (resource ID) the nodes get
        self.admin_username = admin_username
        self.os_disk_type = os_disk_type
        self.os_disk_gib = os_disk_gib
        self.vnet_prefix = vnet_prefix
        self.subnet_prefix = subnet_prefix
        self.polling_interval_s = polling_interval_s
        self.launch_timeout_s = launch_timeout_s
        self.delete_timeout_s = delete_timeout_s
        self.use_activity_log = use_activity_log
        self.channel = channel or AgentChannel()
        self._home = Path(home) if home is not None else None
        self._startup = startup
        self._token = token
        self.nodes = nodes or CloudNodes(arm.CLOUD)  # how the launcher reaches the VMs: SSH, its own keys
        self._store = StateStore(lambda: (self._home if self._home is not None else geotrain_home())
                                 / "providers" / arm.CLOUD)

    @classmethod
    def from_environment(cls, **settings: Any) -> AzureProvider:
        """Real SDK clients (made on first use) from DefaultAzureCredential and ``$AZURE_SUBSCRIPTION_ID``.
        Client settings: ``credential``, ``subscription_id``, ``arm_url`` (default management.azure.com),
        ``enforce_https``, ``retry_total``, ``request_timeout_s``, ``client_kwargs``; the rest go to the
        constructor."""
        client_settings = {k: settings.pop(k) for k in CLIENT_SETTINGS if k in settings}
        return cls(lambda: azure_clients(**client_settings), **settings)

    @classmethod
    def for_dry_run(cls, **settings: Any) -> AzureProvider:
        """A provider that makes no client at all: for :meth:`dry_run`."""
        for key in CLIENT_SETTINGS:
            settings.pop(key, None)
        return cls(None, **settings)

    # -- Provider protocol ---------------------------------------------------------------------

    def check_credentials(self) -> None:
        """Lists one page of the subscription's resource groups (credentials, subscription, read access)."""
        clients = self._clients()
        try:
            pages = clients.resources.resource_groups.list(top=1, **clients.call_options).by_page()
            next(iter(pages), None)
        except Exception as exc:  # noqa: BLE001 - every SDK error is translated
            raise translate(exc, what=f"list the resource groups of subscription {clients.subscription_id}") from exc

    def launch(self, request: LaunchRequest) -> NodeInfo:
        """One VM for ``request`` (see the package docstring), RUNNING when this returns; or the node this
        request id made before, in whatever state it is now."""
        offer, name = request.offer, arm.vm_name(request.request_id)
        check_offer(offer)
        with self._store.key_lock(name):
            with self._store.transaction() as state:
                rec = state["nodes"].get(name)
                if rec is not None:
                    check_same_request(rec, request)
                else:
                    run = self._run_entry(state, request.run_id, offer.location.region)
                    rec = state["nodes"][name] = new_record(
                        name, request.request_id, request.run_id, offer.offer_id, offer.location,
                        resource_group=run["resource_group"], spot=offer.market is Market.SPOT, launched_at=now_text())
                rec = dict(rec)
            if rec["status"] == CREATED:
                if not NodeState(rec["state"]).ended:
                    rec = self._refresh(rec)
                return node_info(rec)
            return node_info(self._create(rec, request))

    def list(self, run_id: str | None = None) -> list[NodeInfo]:
        """The nodes of ``run_id`` (or of every run this state knows), ended ones included, oldest first."""
        state = self._store.read()
        runs = {r["run_id"] for r in state["nodes"].values()} if run_id is None else {run_id}
        for run in sorted(runs):
            records = [r for r in state["nodes"].values() if r["run_id"] == run]
            live = [r for r in records if r["status"] != FAILED and not NodeState(r["state"]).ended]
            if records and not live:
                continue  # nothing of this run can change any more: no call
            self._sync_run(run, state)
        state = self._store.read()
        recs = [r for r in state["nodes"].values() if (run_id is None or r["run_id"] == run_id)
                and r["status"] == CREATED]
        recs.sort(key=lambda r: (r["launched_at"], r["node_id"]))
        return [node_info(r) for r in recs]

    def terminate(self, node_id: str, *, reason: str = "terminated") -> None:
        """Delete the VM, its NIC, public IP and OS disk, and wait until they are gone. Idempotent; a node
        that had already ended keeps its end reason (its leftovers are deleted all the same). The run's
        network in the region goes with the run's last node there (best effort)."""
        with self._store.key_lock(node_id):
            rec = self._record(node_id)
            clients = self._clients()
            if rec["status"] == FAILED:
                raise NotFoundError(f"no Azure node {node_id}: its launch failed")
            if not NodeState(rec["state"]).ended:
                vm = self._get_vm(clients, rec, view=True)
                seen = (NodeState.PENDING, None) if vm is None and rec["status"] == CREATING \
                    else self._observe(clients, rec, vm)  # a launch that never made its VM is not preempted
                if seen[0].ended:
                    self._end(node_id, seen[0], seen[1])
                else:
                    self._end(node_id, NodeState.TERMINATED, reason)
            elif rec.get("cleaned"):
                return
            self._delete_resources(clients, rec)
            with self._store.transaction() as state:
                state["nodes"][node_id]["cleaned"] = True
                state["nodes"][node_id]["status"] = CREATED
        self._teardown_network(rec["run_id"], rec["location"]["region"], rec["resource_group"])

    def start(self, node_id: str, argv: list[str], env: dict[str, str], log_path: Path,
              cwd: Path | str | None = None, files: Mapping[str, str] | None = None) -> RemoteProcess:
        """Run ``argv`` through the node's agent, reached over the launcher's SSH link (the VM is set up
        first if it is not yet: geotrain shipped and installed, its agent started)."""
        if self._record(node_id)["status"] != CREATED:
            raise NotFoundError(f"no Azure node {node_id} (its launch did not finish; list the run's nodes)")
        return super().start(node_id, argv, env, log_path, cwd, files)

    # -- nodes over SSH: booted, ship, store_address, login_command (SshNodes' hooks) --------------

    def _ssh_node(self, node_id: str) -> NodeInfo:
        """The node as Azure shows it now (one or two GETs); PENDING while its launch has not finished."""
        rec = self._record(node_id)
        if rec["status"] == CREATED and not NodeState(rec["state"]).ended:
            rec = self._refresh(rec)
        return node_info(rec)

    def _ssh_record(self, node_id: str) -> dict[str, Any]:
        return self._record(node_id)

    def _ssh_save_agent(self, node_id: str, agent: dict) -> None:
        with self._store.transaction() as state:
            rec = state["nodes"].get(node_id)
            if rec is not None:
                rec["agent"] = agent

    def _ssh_scope(self, record: dict) -> str:
        return f"azure/{record['location']['region']}"

    def dry_run(self, request: LaunchRequest) -> list[dict[str, Any]]:
        """The SDK calls ``launch`` would make, in order; makes none (needs no credentials)."""
        offer, run_id = request.offer, request.run_id
        check_offer(offer)
        region = offer.location.region
        name = arm.vm_name(request.request_id)
        group = self.resource_group or arm.resource_group_name(run_id)
        sub = "<subscription id>"
        vnet, nsg = arm.network_names(run_id, region)
        nsg_id = arm.arm_id(sub, group, "Microsoft.Network/networkSecurityGroups", nsg)
        subnet_id = arm.arm_id(sub, group, "Microsoft.Network/virtualNetworks", vnet) + f"/subnets/{arm.SUBNET}"
        ip_id = arm.arm_id(sub, group, "Microsoft.Network/publicIPAddresses", arm.ip_name(name))
        nic_id = arm.arm_id(sub, group, "Microsoft.Network/networkInterfaces", arm.nic_name(name))
        script = self._script(request, dry=True)
        body = self._vm_body(request, name, nic_id, "<base64 of startup_script>", HIDDEN_LOGIN_KEY)
        cidr = self.control_cidr or "<control_cidr: the launcher's address/32, required>"
        calls: list[dict[str, Any]] = [{"call": "resources.resource_groups.get",
                                        "params": {"resource_group_name": group}}]
        if self.resource_group is None:  # a group of the setting is never made
            calls.append({"call": "resources.resource_groups.create_or_update", "params": {
                "resource_group_name": group, "parameters": arm.group_body(region, run_id),
                "when": "the group does not exist yet"}})
        calls += [
            {"call": "network.network_security_groups.begin_create_or_update", "params": {
                "resource_group_name": group, "network_security_group_name": nsg,
                "parameters": arm.nsg_body(region, run_id, control_cidr=cidr, ssh_port=self.nodes.ssh_port,
                                           vnet_prefix=self.vnet_prefix)}},
            {"call": "network.virtual_networks.begin_create_or_update", "params": {
                "resource_group_name": group, "virtual_network_name": vnet,
                "parameters": arm.vnet_body(region, run_id, nsg_id=nsg_id, vnet_prefix=self.vnet_prefix,
                                            subnet_prefix=self.subnet_prefix)}},
            {"call": "compute.virtual_machines.get", "params": {"resource_group_name": group, "vm_name": name,
                                                                "why": "idempotency: a VM of this name is reused"}},
            {"call": "network.public_ip_addresses.begin_create_or_update", "params": {
                "resource_group_name": group, "public_ip_address_name": arm.ip_name(name),
                "parameters": arm.ip_body(offer, run_id, request.request_id)}},
            {"call": "network.network_interfaces.begin_create_or_update", "params": {
                "resource_group_name": group, "network_interface_name": arm.nic_name(name),
                "parameters": arm.nic_body(offer, run_id, request.request_id, subnet_id=subnet_id, ip_id=ip_id)}},
            {"call": "compute.virtual_machines.begin_create_or_update", "params": {
                "resource_group_name": group, "vm_name": name, "parameters": body, "startup_script": script}},
            {"call": "compute.virtual_machines.get", "params": {"resource_group_name": group, "vm_name": name,
                                                                "expand": "instanceView",
                                                                "until": "PowerState/running"}},
        ]
        return calls

    def close(self) -> None:
        """Closes the SDK clients it made (given ones are the caller's); terminates nothing (VMs outlive
        the provider)."""
        if self._client_cache is not None and not isinstance(self._clients_given, AzureClients):
            self._client_cache.close()
            self._client_cache = None

    def __enter__(self) -> AzureProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- clients and state -----------------------------------------------------------------------

    def _clients(self) -> AzureClients:
        if self._client_cache is None:
            if self._clients_given is None:
                raise ProviderError("this Azure provider was made for dry runs only; use "
                                    "AzureProvider.from_environment() to launch")
            self._client_cache = self._clients_given()  # type: ignore[operator]
        return self._client_cache

    def _record(self, node_id: str) -> dict[str, Any]:
        rec = self._store.read()["nodes"].get(node_id)
        if rec is None:
            raise NotFoundError(f"no Azure node {node_id}; `geotrain` lists a run's nodes by its run id")
        return rec

    def _run_entry(self, state: dict[str, Any], run_id: str, region: str) -> dict[str, Any]:
        run = state["runs"].get(run_id)
        if run is None:
            run = state["runs"][run_id] = {
                "resource_group": self.resource_group or arm.resource_group_name(run_id),
                "group_ours": self.resource_group is None, "group_region": region, "group_ready": False,
                "networks": {}}
        return run

    def _end(self, node_id: str, node_state: NodeState, reason: str) -> None:
        """Record how the node ended, unless it already had (the first end wins)."""
        with self._store.transaction() as state:
            rec = state["nodes"][node_id]
            if not NodeState(rec["state"]).ended:
                rec.update(state=node_state.value, end_reason=reason, ended_at=now_text(), status=CREATED)

    def _wait(self, poller: Any, what: str, timeout_s: float) -> Any:
        poller.wait(timeout_s)
        if not poller.done():
            raise ProviderTimeoutError(f"Azure did not finish {what} within {timeout_s:.0f} s (it may still): list "
                                       "the run's nodes before trying again")
        return poller.result()

    # -- launch ------------------------------------------------------------------------------------

    def _script(self, request: LaunchRequest, *, dry: bool = False) -> str:
        """The VM's custom data: an sshd of geotrain's own with this node's host key and the run's login
        key (a dry run shows placeholders and makes no key)."""
        if dry:
            login_public, host_private = HIDDEN_LOGIN_KEY, HIDDEN_HOST_KEY
        else:
            from geotrain.providers.runkeys import host_key, login_key

            login_public = login_key(request.run_id)[1]
            host_private = host_key(request.run_id, request.request_id).private
        return self._startup(cloud=arm.CLOUD, login_public=login_public, host_private=host_private,
                             ssh_port=self.nodes.ssh_port, node_user=self.nodes.node_user)

    def _login_public(self, run_id: str) -> str:
        """The run's login key, for Azure's own channel too (the admin user's authorized keys)."""
        from geotrain.providers.runkeys import login_key

        return login_key(run_id)[1]

    def _vm_body(self, request: LaunchRequest, name: str, nic_id: str, custom: str, key: str) -> dict[str, Any]:
        disk = request.disk  # the task's disk_size / disk_tier (bootimage.AZURE_DISK_TYPES), else the provider's
        return arm.vm_body(request.offer, request.run_id, request.request_id, name=name, nic_id=nic_id,
                           custom_data_b64=custom, ssh_public_key=key,
                           image=arm.image_reference(request.image) if request.image else self.image,
                           admin_username=self.admin_username,
                           os_disk_type=AZURE_DISK_TYPES[disk.tier] if disk and disk.tier else self.os_disk_type,
                           os_disk_gib=disk.size_gib if disk and disk.size_gib is not None else self.os_disk_gib,
                           identity=self.instance_role)

    def _create(self, rec: dict[str, Any], request: LaunchRequest) -> dict[str, Any]:
        """Make (or find) the VM of a record in status "creating" and wait until it runs."""
        if not self.control_cidr:
            self._forget(rec["node_id"])
            raise ProviderError("Azure: control_cidr is not set: the run's firewall opens geotrain's SSH port only "
                                "to the launcher's address (e.g. 203.0.113.7/32); pass it to launch")
        clients, offer, name = self._clients(), request.offer, rec["node_id"]
        group, opts, loc = rec["resource_group"], clients.call_options, offer.location
        size = offer.shape.instance_type
        try:
            subnet_id = self._ensure_network(clients, request.run_id, loc, group)
            vm = self._get_vm(clients, rec, view=False)
        except ProviderError:
            self._forget(name)
            raise
        if vm is not None:
            if arm.tags_of(vm).get(arm.TAG_REQUEST) != arm.tag_value(request.request_id):
                self._forget(name)
                raise ProviderError(f"Azure: a VM named {name} in {group} was not made for request "
                                    f"{request.request_id}; delete it or use another request id", scope=loc.zone_scope)
        else:
            ip = self._put_nic_and_ip(clients, rec, request, subnet_id)
            nic_id = arm.arm_id(clients.subscription_id, group, "Microsoft.Network/networkInterfaces",
                                arm.nic_name(name))
            script = self._script(request)
            body = self._vm_body(request, name, nic_id, arm.custom_data(script), self._login_public(request.run_id))
            what = f"create VM {name} ({size}) in {loc.zone_scope}"
            try:
                poller = clients.compute.virtual_machines.begin_create_or_update(
                    group, name, body, polling_interval=self.polling_interval_s, **opts)
            except Exception as exc:  # noqa: BLE001
                if is_timeout(exc):  # the PUT may have been taken: a retry finds the VM by name
                    raise translate(exc, what=what, location=loc, size=size, offer_id=request.offer.offer_id) from exc
                self._undo(clients, rec, vm_too=True)
                raise translate(exc, what=what, location=loc, size=size, offer_id=request.offer.offer_id) from exc
            try:
                vm = self._wait(poller, f"creating VM {name}", self.launch_timeout_s)
            except ProviderTimeoutError:
                raise
            except Exception as exc:  # noqa: BLE001
                if not (is_timeout(exc) or is_throttle(exc)):  # the create failed: nothing of it may stay
                    self._undo(clients, rec, vm_too=True)
                raise translate(exc, what=what, location=loc, size=size, offer_id=request.offer.offer_id) from exc
            with self._store.transaction() as state:
                state["nodes"][name]["address"] = ip
        rec = self._wait_running(clients, rec)
        private = self._private_ip(clients, rec) if NodeState(rec["state"]) is NodeState.RUNNING else None
        with self._store.transaction() as state:
            state["nodes"][name]["status"] = CREATED
            if private:
                state["nodes"][name]["private_address"] = private  # the NIC's address now the VM runs
            return dict(state["nodes"][name])

    def _put_nic_and_ip(self, clients: AzureClients, rec: dict[str, Any], request: LaunchRequest,
                        subnet_id: str) -> str | None:
        name, group, opts = rec["node_id"], rec["resource_group"], clients.call_options
        offer, loc = request.offer, request.offer.location
        ip_id = arm.arm_id(clients.subscription_id, group, "Microsoft.Network/publicIPAddresses", arm.ip_name(name))
        what = f"create the public IP and NIC of VM {name} in {loc.zone_scope}"
        try:
            ip = self._wait(clients.network.public_ip_addresses.begin_create_or_update(
                group, arm.ip_name(name), arm.ip_body(offer, request.run_id, request.request_id),
                polling_interval=self.polling_interval_s, **opts), f"creating public IP {arm.ip_name(name)}",
                self.launch_timeout_s)
            nic = self._wait(clients.network.network_interfaces.begin_create_or_update(
                group, arm.nic_name(name), arm.nic_body(offer, request.run_id, request.request_id,
                                                        subnet_id=subnet_id, ip_id=ip_id),
                polling_interval=self.polling_interval_s, **opts), f"creating NIC {arm.nic_name(name)}",
                self.launch_timeout_s)
        except Exception as exc:  # noqa: BLE001
            self._undo(clients, rec)
            if isinstance(exc, ProviderError):
                raise
            raise translate(exc, what=what, location=loc, size=offer.shape.instance_type) from exc
        configs = arm.props(nic).get("ipConfigurations") or [{}]
        private = (configs[0].get("properties") or {}).get("privateIPAddress")
        with self._store.transaction() as state:
            state["nodes"][name]["private_address"] = private
        return arm.props(ip).get("ipAddress")

    def _undo(self, clients: AzureClients, rec: dict[str, Any], *, vm_too: bool = False) -> None:
        """A launch failed: delete what it made for its VM (the VM if asked, its NIC, public IP, disk) and
        forget the request; if that fails too, keep it as "failed" (a retry of the request reuses the names)."""
        try:
            self._delete_resources(clients, rec, vm=vm_too)
        except ProviderError as exc:
            log.warning("Azure: could not delete what the failed launch of %s made (%s)", rec["node_id"], exc)
            with self._store.transaction() as state:
                state["nodes"][rec["node_id"]]["status"] = FAILED
            return
        self._forget(rec["node_id"])

    def _forget(self, name: str) -> None:
        with self._store.transaction() as state:
            rec = state["nodes"].get(name)
            if rec is not None and rec["status"] != CREATED:
                del state["nodes"][name]

    def _wait_running(self, clients: AzureClients, rec: dict[str, Any]) -> dict[str, Any]:
        deadline = time.monotonic() + self.launch_timeout_s
        while True:
            rec = self._refresh(rec)
            if NodeState(rec["state"]) is not NodeState.PENDING:
                return rec
            if time.monotonic() > deadline:
                raise ProviderTimeoutError(f"Azure VM {rec['node_id']} was not running after "
                                           f"{self.launch_timeout_s:.0f} s; list the run's nodes to see it",
                                           scope=location_of(rec).zone_scope)
            time.sleep(max(self.polling_interval_s, 0.05))

    def _ensure_network(self, clients: AzureClients, run_id: str, loc: Location, group: str) -> str:
        """The run's resource group and, in the region of ``loc``, its NSG and VNet (made once); the subnet's id."""
        region = loc.region
        vnet, nsg = arm.network_names(run_id, region)
        subnet_id = arm.arm_id(clients.subscription_id, group, "Microsoft.Network/virtualNetworks", vnet) \
            + f"/subnets/{arm.SUBNET}"
        opts = clients.call_options
        with self._store.key_lock(f"net-{arm.digest(run_id + '/' + region, 16)}"):
            run = self._store.read()["runs"][run_id]
            if run["networks"].get(region):
                return subnet_id
            try:
                if not run["group_ready"]:
                    self._ensure_group(clients, run_id, run)
                nsg_made = self._wait(clients.network.network_security_groups.begin_create_or_update(
                    group, nsg, arm.nsg_body(region, run_id, control_cidr=str(self.control_cidr),
                                             ssh_port=self.nodes.ssh_port, vnet_prefix=self.vnet_prefix),
                    polling_interval=self.polling_interval_s, **opts), f"creating NSG {nsg}", self.launch_timeout_s)
                self._wait(clients.network.virtual_networks.begin_create_or_update(
                    group, vnet, arm.vnet_body(region, run_id, nsg_id=nsg_made["id"], vnet_prefix=self.vnet_prefix,
                                               subnet_prefix=self.subnet_prefix),
                    polling_interval=self.polling_interval_s, **opts), f"creating VNet {vnet}", self.launch_timeout_s)
            except ProviderError:
                raise
            except Exception as exc:  # noqa: BLE001
                raise translate(exc, what=f"create the network of run {run_id} in {region} (resource group {group})",
                                location=loc) from exc
            with self._store.transaction() as state:
                state["runs"][run_id]["networks"][region] = True
                state["runs"][run_id]["group_ready"] = True
        return subnet_id

    def admit_peers(self, run_id: str, addresses: Sequence[str]) -> None:
        """PeerRules: each region's NSG of the run admits all TCP from each of ``addresses`` (/32), and from
        no address no longer among them (the NSG put again, with its ``geotrain-peers`` rule)."""
        clients = self._clients()
        run = self._store.read()["runs"].get(run_id)
        if run is None:
            return
        for region, made in sorted(run["networks"].items()):
            if not made:
                continue
            _, nsg = arm.network_names(run_id, region)
            body = arm.nsg_body(region, run_id, control_cidr=str(self.control_cidr), ssh_port=self.nodes.ssh_port,
                                vnet_prefix=self.vnet_prefix, peers=[f"{a}/32" for a in addresses])
            try:
                self._wait(clients.network.network_security_groups.begin_create_or_update(
                    run["resource_group"], nsg, body, polling_interval=self.polling_interval_s,
                    **clients.call_options), f"updating NSG {nsg}", self.launch_timeout_s)
            except ProviderError:
                raise
            except Exception as exc:  # noqa: BLE001
                raise translate(exc, what=f"admit the run's nodes to NSG {nsg} in {region}") from exc

    def _ensure_group(self, clients: AzureClients, run_id: str, run: dict[str, Any]) -> None:
        group, opts = run["resource_group"], clients.call_options
        try:
            clients.resources.resource_groups.get(group, **opts)
            return
        except Exception as exc:  # noqa: BLE001
            if not is_not_found(exc):
                raise
            if not run["group_ours"]:
                raise ProviderError(f"Azure: resource group {group} (setting resource_group) does not exist; create "
                                    f"it (`az group create -n {group} -l <region>`) or leave the setting out") from exc
        clients.resources.resource_groups.create_or_update(group, arm.group_body(run["group_region"], run_id), **opts)

    # -- observing -----------------------------------------------------------------------------

    def _get_vm(self, clients: AzureClients, rec: dict[str, Any], *, view: bool) -> Any:
        """The VM (with its instance view if ``view``), or None if Azure has no VM of that name."""
        kwargs = {"expand": "instanceView"} if view else {}
        try:
            return clients.compute.virtual_machines.get(rec["resource_group"], rec["node_id"], **kwargs,
                                                        **clients.call_options)
        except Exception as exc:  # noqa: BLE001
            if is_not_found(exc):
                return None
            raise translate(exc, what=f"read VM {rec['node_id']}", location=location_of(rec)) from exc

    def _refresh(self, rec: dict[str, Any]) -> dict[str, Any]:
        """One node brought up to date with Azure (one or two GETs); the stored record."""
        clients = self._clients()
        vm = self._get_vm(clients, rec, view=True)
        self._apply(clients, rec, vm)
        return self._record(rec["node_id"])

    def _sync_run(self, run_id: str, state: dict[str, Any]) -> None:
        """List the run's VMs (one list call, then one instance view per live VM) and record what changed."""
        clients = self._clients()
        run = state["runs"].get(run_id) or {"resource_group": self.resource_group or arm.resource_group_name(run_id)}
        group = run["resource_group"]
        try:
            listed = {vm["name"].lower(): vm for vm in clients.compute.virtual_machines.list(group, **clients.call_options)
                      if arm.tags_of(vm).get(arm.TAG_RUN) == arm.tag_value(run_id)}
        except Exception as exc:  # noqa: BLE001
            if not is_not_found(exc):
                raise translate(exc, what=f"list the VMs of resource group {group}") from exc
            listed = {}
        known = {r["node_id"].lower() for r in state["nodes"].values() if r["run_id"] == run_id}
        for key, vm in listed.items():
            if key not in known:
                self._adopt(vm, run_id, group)
        for rec in self._store.read()["nodes"].values():
            key = rec["node_id"].lower()
            if rec["run_id"] != run_id:
                continue
            if rec["status"] == FAILED or NodeState(rec["state"]).ended:
                continue
            if key not in listed and rec["status"] == CREATING:
                continue  # asked for, never seen: not a node (yet)
            vm = listed.get(key)
            if vm is None or arm.provisioning_state(vm) != "Creating":  # the power state (or: a list may lag)
                vm = self._get_vm(clients, rec, view=True)
            self._apply(clients, rec, vm)

    def _apply(self, clients: AzureClients, rec: dict[str, Any], vm: Any) -> None:
        if vm is None and rec["status"] == CREATING:
            return
        node_state, reason = self._observe(clients, rec, vm)
        address = rec["address"] or (self._public_ip(clients, rec) if vm is not None else None)
        with self._store.transaction() as state:
            fresh = state["nodes"].get(rec["node_id"])
            if fresh is None or NodeState(fresh["state"]).ended:
                return
            fresh["status"] = CREATED
            if address:
                fresh["address"] = address
            fresh["state"] = node_state.value
            if node_state.ended:
                fresh.update(end_reason=reason, ended_at=now_text())

    def _observe(self, clients: AzureClients, rec: dict[str, Any], vm: Any) -> tuple[NodeState, str | None]:
        """The node's state from its VM (None: no VM of that name), for a node not ended by us."""
        if vm is None or arm.provisioning_state(vm) == "Deleting":
            return self._gone(clients, rec)
        power, provisioning = arm.power_state(vm), arm.provisioning_state(vm)
        if power == "running":
            return NodeState.RUNNING, None
        if power in ("deallocated", "deallocating"):
            if rec["spot"]:
                return self._gone(clients, rec)
            return NodeState.TERMINATED, "lost"
        if power in ("stopped", "stopping") or (provisioning == "Failed" and power is None):
            return NodeState.TERMINATED, "lost"
        return NodeState.PENDING, None

    def _gone(self, clients: AzureClients, rec: dict[str, Any]) -> tuple[NodeState, str]:
        """A VM that vanished (or, spot, was deallocated) without our terminate: a spot eviction if the
        activity log says so, lost if it shows someone deleting/stopping it; with no word either way a spot
        VM counts as evicted (eviction policy Delete: Azure deletes it) and an on-demand one as lost."""
        evidence = vm_evidence(clients, resource_group=rec["resource_group"], vm=rec["node_id"],
                               since=datetime.fromisoformat(rec["launched_at"])) if self.use_activity_log else None
        if evidence == "evicted":
            return NodeState.PREEMPTED, "preempted"
        if evidence == "removed" or not rec["spot"]:
            return NodeState.TERMINATED, "lost"
        return NodeState.PREEMPTED, "preempted"

    def _private_ip(self, clients: AzureClients, rec: dict[str, Any]) -> str | None:
        """The private address of the VM's NIC (None: no NIC, or none yet)."""
        try:
            nic = clients.network.network_interfaces.get(rec["resource_group"], arm.nic_name(rec["node_id"]),
                                                         **clients.call_options)
        except Exception:  # noqa: BLE001 - the address the NIC had when it was made serves
            return None
        configs = arm.props(nic).get("ipConfigurations") or [{}]
        return (configs[0].get("properties") or {}).get("privateIPAddress")

    def _public_ip(self, clients: AzureClients, rec: dict[str, Any]) -> str | None:
        try:
            ip = clients.network.public_ip_addresses.get(rec["resource_group"], arm.ip_name(rec["node_id"]),
                                                         **clients.call_options)
        except Exception:  # noqa: BLE001 - no public IP (yet): the private address serves
            return None
        return arm.props(ip).get("ipAddress")

    def _adopt(self, vm: Any, run_id: str, group: str) -> None:
        """A VM of the run this state does not know (launched from another machine): recorded from its tags."""
        found = arm.tags_of(vm)
        try:
            offer = OfferId.parse(found.get(arm.TAG_OFFER, ""))
        except ValueError:
            return
        continent = continent_of(offer.cloud, offer.region)
        if continent is None or not found.get(arm.TAG_REQUEST):
            return
        created = arm.props(vm).get("timeCreated")
        launched = now_text(datetime.fromisoformat(str(created).replace("Z", "+00:00"))) if created else now_text()
        with self._store.transaction() as state:
            if vm["name"] in state["nodes"]:
                return
            self._run_entry(state, run_id, offer.region)["resource_group"] = group
            state["nodes"][vm["name"]] = new_record(
                vm["name"], found[arm.TAG_REQUEST], run_id, str(offer),
                Location(offer.cloud, offer.region, offer.zone, continent), resource_group=group,
                spot=arm.props(vm).get("priority") == "Spot", launched_at=launched)

    # -- deleting ------------------------------------------------------------------------------

    def _delete_resources(self, clients: AzureClients, rec: dict[str, Any], *, vm: bool = True) -> None:
        """Delete the VM (if ``vm``), its NIC, public IP and OS disk, each waited for (absent ones: no-ops)."""
        group, name, opts = rec["resource_group"], rec["node_id"], clients.call_options
        steps: list[tuple[str, Callable[[], Any]]] = []
        if vm:
            steps.append((f"VM {name}", lambda: clients.compute.virtual_machines.begin_delete(
                group, name, polling_interval=self.polling_interval_s, **opts)))
        steps += [
            (f"NIC {arm.nic_name(name)}", lambda: clients.network.network_interfaces.begin_delete(
                group, arm.nic_name(name), polling_interval=self.polling_interval_s, **opts)),
            (f"public IP {arm.ip_name(name)}", lambda: clients.network.public_ip_addresses.begin_delete(
                group, arm.ip_name(name), polling_interval=self.polling_interval_s, **opts)),
            (f"disk {arm.disk_name(name)}", lambda: clients.compute.disks.begin_delete(
                group, arm.disk_name(name), polling_interval=self.polling_interval_s, **opts)),
        ]
        for what, begin in steps:
            try:
                self._wait(begin(), f"deleting {what}", self.delete_timeout_s)
            except ProviderError:
                raise
            except Exception as exc:  # noqa: BLE001
                if is_not_found(exc):
                    continue
                raise translate(exc, what=f"delete {what} (terminate again to finish)", location=location_of(rec)) \
                    from exc

    def _teardown_network(self, run_id: str, region: str, group: str) -> None:
        """Delete the run's VNet and NSG in ``region`` once no node of the run there may need them. Best
        effort: a failure is logged, the network then stays (delete it with the resource group)."""
        vnet, nsg = arm.network_names(run_id, region)
        with self._store.key_lock(f"net-{arm.digest(run_id + '/' + region, 16)}"):
            state = self._store.read()
            if not (state["runs"].get(run_id) or {}).get("networks", {}).get(region):
                return
            busy = [r for r in state["nodes"].values() if r["run_id"] == run_id and r["location"]["region"] == region
                    and (r["status"] != CREATED or not NodeState(r["state"]).ended or not r.get("cleaned"))]
            if busy:
                return
            clients, opts = self._clients(), self._clients().call_options
            try:
                for what, begin in ((f"VNet {vnet}", lambda: clients.network.virtual_networks.begin_delete(
                        group, vnet, polling_interval=self.polling_interval_s, **opts)),
                                    (f"NSG {nsg}", lambda: clients.network.network_security_groups.begin_delete(
                                        group, nsg, polling_interval=self.polling_interval_s, **opts))):
                    self._wait(begin(), f"deleting {what}", self.delete_timeout_s)
            except Exception as exc:  # noqa: BLE001 - best effort
                log.warning("Azure: could not delete the network of run %s in %s (%s); it stays in resource group %s",
                            run_id, region, exc, group)
                return
            with self._store.transaction() as state:
                state["runs"][run_id]["networks"].pop(region, None)

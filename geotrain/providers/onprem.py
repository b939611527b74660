"""The on-prem provider: the user's own machines, reached over SSH, run nodes as node agents.

A node is one machine of the inventory (``geotrain.pricing.inventory``: cloud ``onprem``, region =
site) running one node agent (``geotrain.node.agent``) for one run. The machines are never started,
shut down or changed otherwise: launching a node *claims* a free machine of the offer's kind and
starts an agent on it; terminating it stops the agent and *releases* the machine.

The inventory lists the machines of each kind under ``hosts:`` (read here by :func:`load_hosts`)::

    machines:
      - instance_type: rtx8000-ws
        count: 2                        # must equal the number of hosts once hosts are listed
        hosts:
          - {host: 10.0.0.11, user: alice}
          - host: gpu2.lab.example      # the address the launcher reaches the agent on; it binds there
            user: alice
            port: 22                    # sshd's port (default 22)
            key: ~/.ssh/id_lab          # optional: else ssh's own choice (ssh-agent, ~/.ssh/id_*)
            python: python3             # the host's Python (3.11+, with torch; words: "env X=1 /opt/py")
            root: ~/.geotrain-node      # where node directories go on the host

SSH is the system's OpenSSH client (``ssh``), with ``BatchMode=yes`` (never a prompt) and
``StrictHostKeyChecking=yes`` against ``known_hosts`` (default ``~/.ssh/known_hosts``): a host
whose key is unknown or has changed is refused, never trusted on first use. It is the only channel
(``geotrain.providers.sshlink``): the launcher dials the host, nothing dials the launcher. The run's
token goes to the host on ssh's stdin, into a 0600 file of the node directory; it is on no command
line.

The host needs no geotrain: a launch ships a wheel of the geotrain the launcher runs
(``geotrain.providers.shipping``) over SSH and installs it, once per version, into a virtual
environment under ``~/.geotrain-node/`` that sees the host Python's own packages (its torch). The
node agent listens on the host's loopback; the launcher reaches it through a Unix socket that ssh
forwards, and the nodes reach the launcher's rendezvous store through a port that ssh forwards back
(:meth:`OnPremProvider.store_address`). The task's workdir and file mounts travel the same way
(:meth:`OnPremProvider.ship`).

Claims are records in ``GEOTRAIN_HOME/providers/onprem/state.json`` (under an ``flock`` on
``state.lock``, written atomically, 0600), so that launchers and ``geotrain stop`` in other
processes share them. A machine is free when no node that has not ended holds it (nor one whose
agent could not yet be stopped). SSH runs outside the lock: a launch first records its node as
pending with its owner (pid and start time), then starts the agent; a second launch of the same
request waits for the first, or takes over if its owner died (the start script finds an agent
that already runs and reuses it). Liveness is the agent's health (``AgentChannel.health``): a node
whose agent does not answer is terminated, end reason ``lost`` (and its agent is stopped over SSH,
best effort, should it only hang).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from geotrain.domain import CLOUD_ONPREM, Offer
from geotrain.errors import (CapacityError, CatalogError, CredentialsError, NotFoundError, ProviderError,
                             ProviderTimeoutError)
from geotrain.procs import proc_stat
from geotrain.specfile import Fields, load_yaml_mapping
from geotrain.providers.base import Capabilities, LaunchRequest, LoginCommand, NodeInfo, NodeState
from geotrain.providers.sshlink import SSHFailure, SshLink, SshTarget
from geotrain.providers.sshnode import (AGENT_MODULE, DEFAULT_ROOT, WHEELS, agent_endpoint, install, install_dry_run,
                                       start_agent, start_script, stop_script)
from geotrain.providers.statefile import JsonState, location_of, node_info, provider_root

ENV_INVENTORY = "GEOTRAIN_ONPREM_INVENTORY"  # the inventory file, when no setting names it
STATE_VERSION = 1
HostsKey = tuple[str, str]  # (site, instance_type): the offer's region and instance type


@dataclass(frozen=True, slots=True)
class Host:
    """One machine: how to log into it, and where the node agent runs on it."""

    host: str
    user: str
    port: int = 22
    key: str | None = None  # private key file (absolute); None: ssh-agent / default keys
    python: str = "python3"
    root: str = DEFAULT_ROOT

    @property
    def claim(self) -> str:
        return f"{self.host}:{self.port}"

    def describe(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"


def load_hosts(path: str | Path) -> dict[HostsKey, list[Host]]:
    """The ``hosts:`` of every machine kind of an inventory file, by (site, instance_type).

    A kind without ``hosts:`` maps to ``[]`` (launching it is an error that says to add them). Only
    the host entries are validated here; :func:`geotrain.pricing.inventory.load_inventory` checks
    the rest. A ``key`` is relative to the inventory's folder unless absolute or ``~``.
    """
    path = Path(path)
    top = Fields(load_yaml_mapping(path, CatalogError), origin=str(path), error=CatalogError)
    out: dict[HostsKey, list[Host]] = {}
    seen: dict[str, str] = {}
    for site_fields in top.sections("sites"):
        site = site_fields.text("site")
        for machine in site_fields.sections("machines"):
            kind = machine.text("instance_type")
            count = machine.whole("count", minimum=1)
            hosts = []
            if "hosts" in machine.keys():
                for entry in machine.sections("hosts"):
                    host = _host(entry, path.parent)
                    where = f"{site}/{kind}"
                    if host.claim in seen:
                        raise entry.fail("host", f"{host.claim} is listed twice ({seen[host.claim]} and {where}); "
                                                 "a machine is of one kind at one site")
                    seen[host.claim] = where
                    hosts.append(host)
                if len(hosts) != count:
                    raise machine.fail("hosts", f"{len(hosts)} hosts are listed but count is {count}; "
                                                "make count the number of hosts")
            out[(site, kind)] = hosts
    return out


def _host(fields: Fields, base: Path) -> Host:
    def word(key: str, *default: Any) -> Any:
        value = fields.text(key, *default)
        if isinstance(value, str) and (any(c.isspace() for c in value) or value.startswith("-")):
            raise fields.fail(key, f"{value!r} must be one word that does not start with '-'")
        return value

    key = fields.text("key", None)
    if key is not None:
        key = str(Path(key).expanduser() if key.startswith("~") else (base / key))
    python = fields.text("python", "python3")
    root = fields.text("root", DEFAULT_ROOT)
    for name, value in (("python", python), ("root", root)):
        if "\n" in value or "\0" in value:
            raise fields.fail(name, "must be one line")
    try:
        shlex.split(python)
    except ValueError as exc:
        raise fields.fail("python", f"{python!r} is not a command line ({exc})") from exc
    host = Host(host=word("host"), user=word("user"), port=fields.whole("port", 22, minimum=1, maximum=65535),
                key=key, python=python, root=root)
    fields.finish()
    return host


class OnPremProvider:
    """Nodes on the user's own machines over SSH. See the module docstring.

    ``hosts``: the machines by (site, instance_type) (:func:`load_hosts`). ``channel``: the
    :class:`~geotrain.providers.remote.AgentChannel` (default: a new one); ``token_for``: the run's
    token (default :func:`~geotrain.providers.remote.run_token`). ``known_hosts``: the known_hosts
    file ssh checks host keys against; ``ssh_config``: ssh's ``-F`` (None: the user's own config,
    ``"none"``: no config file).
    """

    name = CLOUD_ONPREM
    capabilities = Capabilities(spot=False, notice_s=None, preemption_injection=False, shared_host=False)

    def __init__(self, hosts: Mapping[HostsKey, Sequence[Host]], *, home: Path | None = None,
                 known_hosts: str | Path | None = None, ssh_config: str | None = None,
                 connect_timeout_s: float = 10.0, agent_ready_timeout_s: float = 60.0, stop_wait_s: float = 5.0,
                 ssh: str = "ssh", channel: Any = None, token_for: Callable[[str], str] | None = None,
                 agent_module: str = AGENT_MODULE, inventory: str | None = None,
                 launch_timeout_s: float | None = None, torch_index: str | None = None) -> None:
        self.hosts = {k: list(v) for k, v in hosts.items()}
        self._home = Path(home) if home is not None else None
        self.known_hosts = str(Path(known_hosts or "~/.ssh/known_hosts").expanduser())
        self.ssh_config = ssh_config
        self.connect_timeout_s = connect_timeout_s
        self.agent_ready_timeout_s = agent_ready_timeout_s
        self.stop_wait_s = stop_wait_s
        self.ssh = ssh
        self._channel = channel
        self._token_for = token_for
        self.agent_module = agent_module
        self.inventory = inventory  # for messages
        self.torch_index = torch_index  # where a host without torch gets it (None: chosen on the host)
        self.notes: list[str] = []  # what a launch did that the user should hear of (torch installed)
        # How long the ssh call that starts an agent may take before the launch's outcome is unknown.
        self.launch_timeout_s = launch_timeout_s or connect_timeout_s + agent_ready_timeout_s + 30

    @classmethod
    def from_environment(cls, *, inventory: str | Path | None = None, **settings: Any) -> OnPremProvider:
        """The machines of ``inventory`` (else $GEOTRAIN_ONPREM_INVENTORY); none if neither is set."""
        path = inventory or os.environ.get(ENV_INVENTORY)
        hosts = load_hosts(path) if path else {}
        return cls(hosts, inventory=str(path) if path else None, **settings)

    @classmethod
    def for_dry_run(cls, **settings: Any) -> OnPremProvider:
        """For :meth:`dry_run` only: the same as :meth:`from_environment`, which contacts nothing."""
        return cls.from_environment(**settings)

    # -- Provider protocol ---------------------------------------------------------------------

    def check_credentials(self) -> None:
        """Log into every listed machine over SSH and check that its Python has the node agent.
        CredentialsError (a key refused, a host key unknown or changed) names what to fix; a machine
        that cannot be reached, or lacks geotrain, is a ProviderError."""
        hosts = list({h.claim: h for hs in self.hosts.values() for h in hs}.values())
        if not hosts:
            raise CredentialsError(f"no on-prem machines are listed{self._inventory_hint()}: add hosts: "
                                   "({host, user, key}) under each machine kind of the inventory")
        with ThreadPoolExecutor(max_workers=min(8, len(hosts))) as pool:
            errors = [e for e in pool.map(self._try_login, hosts) if e is not None]
        if errors:
            kind = CredentialsError if any(isinstance(e, CredentialsError) for e in errors) else ProviderError
            raise kind(" ".join(str(e) for e in errors)) from errors[0]

    def launch(self, request: LaunchRequest) -> NodeInfo:
        """Claim a free machine of the offer's kind and start a node agent on it (or return the node
        this request made before). CapacityError when every machine of the kind is taken."""
        offer = request.offer
        me = _owner()
        deadline = time.monotonic() + self.launch_timeout_s + 30
        stuck: list[dict[str, Any]] | None = None
        while True:
            if stuck:  # ended nodes whose agents could not be stopped hold the machines: try once more
                for old in stuck:
                    self._stop(old, raise_errors=False, ask_agent=False)
            with self._locked() as paths:
                state = self._load(paths)
                rec = _by_request(state, request)
                if rec is None:
                    hosts = self._hosts_for(offer)
                    host = self._free_host(state, hosts)
                    if host is None and stuck is None:
                        stuck = _stuck(state, hosts)
                        if stuck:
                            continue
                    if host is None:
                        raise self._no_capacity(state, offer, hosts)
                    rec = _new_record(state, request, host, me)
                    self._save(paths, state)
                    resumed = False
                    break
                if rec["state"] != NodeState.PENDING.value:
                    return _info(rec)
                owner = rec.get("owner")
                if owner is None or not _owner_alive(owner):
                    rec["owner"] = me  # its launcher died (or timed out): finish its launch
                    self._save(paths, state)
                    resumed = True
                    break
            if time.monotonic() > deadline:
                raise ProviderTimeoutError(f"another launch of {request.request_id} is still starting node "
                                           f"{rec['node_id']}; list the run's nodes and retry",
                                           scope=offer.location.zone_scope)
            time.sleep(0.1)
        return self._finish_launch(rec, me, resumed=resumed)

    def list(self, run_id: str | None = None) -> list[NodeInfo]:
        """Every node of ``run_id`` (or of all runs), ended ones included, oldest first. A running
        node whose agent does not answer ends as lost."""
        with self._locked() as paths:
            recs = [r for r in self._load(paths)["nodes"].values() if run_id is None or r["run_id"] == run_id]
        self._reconcile([r for r in recs if r["state"] == NodeState.RUNNING.value])
        with self._locked() as paths:
            nodes = self._load(paths)["nodes"]
            recs = [nodes[r["node_id"]] for r in recs if r["node_id"] in nodes]
        recs.sort(key=lambda r: (r["launched_at"], r["node_id"]))
        return [_info(r) for r in recs]

    def terminate(self, node_id: str, *, reason: str = "terminated") -> None:
        """Stop the node's agent (and every command it ran) and release the machine. Idempotent; the
        machine itself is left as it is. ProviderError if the host cannot be reached to stop the
        agent: the node stays ended, the machine stays claimed, and terminating again retries."""
        with self._locked() as paths:
            state = self._load(paths)
            rec = _get(state, node_id)
            if NodeState(rec["state"]).ended and not rec.get("stop_pending"):
                return
            if not NodeState(rec["state"]).ended:
                _end(rec, NodeState.TERMINATED, reason)
                rec["stop_pending"] = True
                self._save(paths, state)
        self._stop(rec, raise_errors=True)

    def start(self, node_id: str, argv: list[str], env: dict[str, str], log_path: Path,
              cwd: Path | str | None = None, files: Mapping[str, str] | None = None) -> Any:
        """Run ``argv`` on the node through its agent (see :class:`~geotrain.providers.remote.AgentChannel`);
        ``cwd`` is a path on the host (``~``: the host user's home), ``files`` go into the node's directory."""
        rec = self._record(node_id)
        state = NodeState(rec["state"])
        if state.ended:
            raise ProviderError(f"cannot start a command on node {node_id}: it is {state.value} "
                                f"({rec['end_reason']}); launch another node", scope=location_of(rec).zone_scope)
        if state is NodeState.PENDING:
            raise ProviderError(f"node {node_id} on {rec['host']['host']} is still being launched; wait for its "
                                "launch to return", scope=location_of(rec).zone_scope)
        return self.channel().start(self._endpoint(rec, fresh=True), argv, env, Path(log_path), cwd,
                                    alive=lambda: self._node_alive(node_id), files=files)

    def dry_run(self, request: LaunchRequest) -> list[dict[str, Any]]:
        """The ssh commands ``launch`` would run (on the first machine free now), token hidden: ship this
        geotrain's wheel, install it, start the agent. Runs nothing."""
        hosts = self._hosts_for(request.offer)
        with self._locked() as paths:
            host = self._free_host(self._load(paths), hosts) or hosts[0]
        install = install_dry_run(host.python, self.torch_index)
        script = start_script(host.root, "<node id>", "<python of the installed geotrain>",
                              agent_module=self.agent_module, ready_timeout_s=self.agent_ready_timeout_s)
        argv = self._ssh_argv(host, script)
        return [{"call": "ssh", "params": {"host": host.describe(), "argv": argv[:argv.index("--")] + ["--", "tar -x"],
                                           "stdin": "<tar of this geotrain's wheel>", "what": f"copy the wheel to {WHEELS}"}},
                {"call": "ssh", "params": {"host": host.describe(), "argv": self._ssh_argv(host, install),
                                           "stdin": "", "script": install}},
                {"call": "ssh", "params": {"host": host.describe(), "argv": argv,
                                           "stdin": "<run token>", "script": script}}]

    def close(self) -> None:
        """Nothing to release: nodes outlive the provider."""

    # -- nodes reached over SSH (``geotrain.providers.base.NodeLink``) ----------------------------

    def ship(self, node_id: str, sources: Sequence[tuple[Path, str]]) -> None:
        """Copy local files and folders onto the node's host (destinations under its user's home)."""
        rec = self._running(node_id)
        self._link(_host_of(rec), location_of(rec).zone_scope).upload(sources, timeout_s=self.launch_timeout_s + 600)

    def store_address(self, node_id: str, local_port: int) -> tuple[str, int]:
        """Where the node reaches ``127.0.0.1:local_port`` of this machine: a port on the host's loopback
        that its SSH link forwards back here."""
        rec = self._running(node_id)
        return "127.0.0.1", self._link(_host_of(rec), location_of(rec).zone_scope).forward_remote(local_port)

    def _running(self, node_id: str) -> dict[str, Any]:
        rec = self._record(node_id)
        if rec["state"] != NodeState.RUNNING.value:
            raise ProviderError(f"node {node_id} on {rec['host']['host']} is {rec['state']}", scope=location_of(rec).zone_scope)
        return rec

    # -- on-prem only --------------------------------------------------------------------------

    def agent_of(self, node_id: str) -> dict[str, Any]:
        """Where the node's agent runs: host, node_dir, pid, pgid, port (None until launched)."""
        rec = self._record(node_id)
        agent = rec.get("agent") or {}
        return {"host": rec["host"]["host"], "node_dir": rec.get("node_dir"), "pid": agent.get("pid"),
                "pgid": agent.get("pgid"), "port": agent.get("port")}

    def login_command(self, node_id: str, command: Sequence[str] = ()) -> LoginCommand:
        """``ssh`` to the node's machine with the options the provider uses (host keys checked against
        ``known_hosts``; prompts allowed), into the node's directory with ``GEOTRAIN_RUN_ID``,
        ``GEOTRAIN_NODE_ID`` and ``GEOTRAIN_NODE_DIR`` set: the user's login shell, or ``command`` run
        by it. The session is not one of the node's commands: stopping the node does not end it."""
        rec = self._record(node_id)
        if rec["state"] != NodeState.RUNNING.value or not rec.get("node_dir"):
            why = f" ({rec['end_reason']})" if rec.get("end_reason") else ""
            raise ProviderError(f"node {node_id} on {rec['host']['host']} is {rec['state']}{why}; only a running "
                                "node can be logged into", scope=location_of(rec).zone_scope)
        node_dir = rec["node_dir"]
        variables = " ".join(f"{k}={shlex.quote(v)}" for k, v in (
            ("GEOTRAIN_RUN_ID", rec["run_id"]), ("GEOTRAIN_NODE_ID", node_id), ("GEOTRAIN_NODE_DIR", node_dir)))
        then = " ".join(command) if command else 'exec "${SHELL:-/bin/sh}" -l'
        script = f"cd {shlex.quote(node_dir)} && export {variables} && {then}"
        tty = [] if command else ["-t"]  # a login shell needs a terminal there; a command runs as ssh runs it
        return LoginCommand(tuple(self._ssh_options(_host_of(rec), batch=False) + tty + ["--", script]))

    def channel(self) -> Any:
        if self._channel is None:
            from geotrain.providers.remote import AgentChannel

            self._channel = AgentChannel()
        return self._channel

    # -- launch --------------------------------------------------------------------------------

    def _hosts_for(self, offer: Offer) -> list[Host]:
        loc = offer.location
        key = (loc.region, offer.shape.instance_type)
        if key not in self.hosts:
            raise ProviderError(f"site {loc.region!r} has no machine kind {offer.shape.instance_type!r}"
                                f"{self._inventory_hint()}; plan with the inventory the provider reads",
                                scope=loc.zone_scope)
        if not self.hosts[key]:
            raise ProviderError(f"machine kind {offer.shape.instance_type!r} of site {loc.region!r} lists no hosts"
                                f"{self._inventory_hint()}: add hosts: ({{host, user, key}}, one per machine) "
                                "under it", scope=loc.zone_scope)
        return self.hosts[key]

    @staticmethod
    def _free_host(state: dict[str, Any], hosts: list[Host]) -> Host | None:
        held = {r["host_claim"] for r in state["nodes"].values() if _holds_host(r)}
        return next((h for h in hosts if h.claim not in held), None)

    def _no_capacity(self, state: dict[str, Any], offer: Offer, hosts: list[Host]) -> ProviderError:
        stuck = [r["node_id"] for r in _stuck(state, hosts)]
        hint = (f"; nodes {', '.join(stuck)} have ended but their agents could not be stopped: terminate them "
                "again to release their machines") if stuck else ""
        return CapacityError(f"all {len(hosts)} machines of kind {offer.shape.instance_type!r} at site "
                             f"{offer.location.region!r} are taken by live nodes{hint}",
                             scope=offer.location.zone_scope)

    def _finish_launch(self, rec: dict[str, Any], me: dict[str, Any], *, resumed: bool) -> NodeInfo:
        node_id, host = rec["node_id"], _host_of(rec)
        scope = location_of(rec).zone_scope
        try:
            python = self._install(host, scope)
            started = self._start_agent(host, node_id, self._token(rec["run_id"]), scope, python)
            self._check_reachable(rec, host, started)
        except subprocess.TimeoutExpired as exc:
            self._disown(node_id, me)
            raise ProviderTimeoutError(
                f"starting the node agent on {host.describe()} did not finish within {exc.timeout:.0f} s; "
                f"node {node_id} may be running: launch the same request again to find or finish it",
                scope=scope) from exc
        except ProviderError as exc:
            ssh = exc.__cause__ if isinstance(exc.__cause__, SSHFailure) and exc.__cause__.returncode == 255 else None
            if ssh is not None and not ssh.before_command:  # the connection broke while the script ran
                self._disown(node_id, me)
                raise ProviderTimeoutError(
                    f"the SSH connection to {host.describe()} broke while the node agent was being started "
                    f"({ssh.last_line}); node {node_id} may be running: launch the same request again to find "
                    "or finish it", scope=scope) from exc
            if resumed and ssh is not None:  # an earlier attempt's agent may run there: keep the claim
                self._disown(node_id, me)
                raise
            with self._locked() as paths:
                state = self._load(paths)
                now = state["nodes"].get(node_id)
                if now is not None and not NodeState(now["state"]).ended:
                    del state["nodes"][node_id]  # the claim is released; nothing runs
                    self._save(paths, state)
            raise
        except BaseException:
            self._disown(node_id, me)
            raise
        with self._locked() as paths:
            state = self._load(paths)
            now = state["nodes"].get(node_id)
            if now is None:  # cannot happen: records are deleted only by their own failed launch
                raise ProviderError(f"node {node_id} vanished from {paths.path} while it was launched")
            now["node_dir"] = started["node_dir"]
            now["agent"] = {k: started[k] for k in ("pid", "pgid", "port")}
            now["owner"] = None
            ended = NodeState(now["state"]).ended  # terminated while its agent started
            if not ended:
                now["state"] = NodeState.RUNNING.value
            self._save(paths, state)
        if ended:
            self._stop(now, raise_errors=False)
        return _info(now)

    def _disown(self, node_id: str, me: dict[str, Any]) -> None:
        """Leave a pending node for a retry of its request to take over at once."""
        with self._locked() as paths:
            state = self._load(paths)
            rec = state["nodes"].get(node_id)
            if rec is not None and rec.get("owner") == me:
                rec["owner"] = None
                self._save(paths, state)

    def _check_reachable(self, rec: dict[str, Any], host: Host, started: dict[str, Any]) -> None:
        """The agent answers the launcher (not only the host): else stop it and fail the launch."""
        rec = {**rec, "node_dir": started["node_dir"], "agent": started}
        deadline = time.monotonic() + 5.0
        while not self._healthy(rec):
            if time.monotonic() > deadline:
                self._stop(rec, raise_errors=False, ask_agent=False)
                raise ProviderError(
                    f"the node agent on {host.describe()} listens on {host.host}:{started['port']} but does not "
                    "answer from here: let this machine reach that port (firewall), and make host: an address "
                    "the machine has", scope=location_of(rec).zone_scope)
            time.sleep(0.2)

    def _start_agent(self, host: Host, node_id: str, token: str, scope: str, python: str) -> dict[str, Any]:
        return start_agent(self._link(host, scope), node_id, token, python, root=host.root,
                           agent_module=self.agent_module, ready_timeout_s=self.agent_ready_timeout_s,
                           timeout_s=self.launch_timeout_s, cloud="none", hint=self._install_hint(host))

    def _install_hint(self, host: Host) -> str:
        return (f"set python: for this host to a Python 3.11 or newer that has torch (the launcher installs "
                f"geotrain itself), or install one there (python: is now {host.python!r})")

    def _install(self, host: Host, scope: str) -> str:
        """Ship this geotrain to the host and install it (once per version); the Python that has it."""
        installed = install(self._link(host, scope), host.python, torch_index=self.torch_index,
                            timeout_s=self.launch_timeout_s, hint=self._install_hint(host))
        if installed.torch_installed:
            self.notes.append(f"{host.describe()}: torch {installed.torch_installed} was installed (the host's "
                              f"Python {host.python} had none)")
        return installed.python

    # -- stop and liveness ---------------------------------------------------------------------

    def _stop_script(self, rec: dict[str, Any]) -> str:
        return stop_script(rec.get("node_dir"), _host_of(rec).root, rec["node_id"], (rec.get("agent") or {}).get("pid"),
                           self.stop_wait_s)

    def _stop(self, rec: dict[str, Any], *, raise_errors: bool, ask_agent: bool = True) -> bool:
        """Stop the node's agent and commands over SSH (``ask_agent``: first ask the agent to kill its
        commands); clear ``stop_pending`` once done."""
        host = _host_of(rec)
        if ask_agent and rec.get("agent"):
            with contextlib.suppress(Exception):  # best effort: the SSH kill below does it anyway
                self.channel().stop_all(self._endpoint(rec))
        try:
            result = self._run_ssh(host, self._stop_script(rec), stdin="", scope=location_of(rec).zone_scope,
                                   timeout_s=self.connect_timeout_s + self.stop_wait_s + 30)
            if result.returncode != 0:
                raise ProviderError(f"stopping the node agent on {host.describe()} failed (exit "
                                    f"{result.returncode}): {result.stderr.strip()[-500:]}",
                                    scope=location_of(rec).zone_scope)
        except (ProviderError, subprocess.TimeoutExpired) as exc:
            if not raise_errors:
                return False
            agent = rec.get("agent") or {}
            raise ProviderError(
                f"node {rec['node_id']} is recorded as ended, but its agent on {host.describe()} could not be "
                f"stopped ({exc}); terminate it again once the machine is reachable, or kill it there "
                f"(kill -TERM -- -{agent.get('pgid', '<pgid>')})", scope=location_of(rec).zone_scope) from exc
        with self._locked() as paths:
            state = self._load(paths)
            now = state["nodes"].get(rec["node_id"])
            if now is not None and now.get("stop_pending") and NodeState(now["state"]).ended:
                now["stop_pending"] = False
                self._save(paths, state)
        with contextlib.suppress(OSError, subprocess.SubprocessError):  # the node's forwards go with its link
            self._link(host).close()
        return True

    def _endpoint(self, rec: dict[str, Any], *, fresh: bool = False) -> Any:
        """The agent's endpoint, through the host's SSH link (``sshnode.agent_endpoint``)."""
        return agent_endpoint(self._link(_host_of(rec), location_of(rec).zone_scope), rec["node_id"],
                              int(rec["agent"]["port"]), self._token(rec["run_id"]), fresh=fresh)

    def _token(self, run_id: str) -> str:
        if self._token_for is None:
            from geotrain.providers.remote import run_token

            self._token_for = run_token
        return self._token_for(run_id)

    def _healthy(self, rec: dict[str, Any]) -> bool:
        """The agent answers for this node (through the host's SSH link, opened again if it broke)."""
        for fresh in (False, True):
            try:
                health = self.channel().health(self._endpoint(rec, fresh=fresh))
            except ProviderError:
                return False  # the host cannot be reached over SSH at all
            if health is not None:
                node_dir = health.get("node_dir") if isinstance(health, dict) else None
                return node_dir is None or node_dir == rec.get("node_dir")  # not another agent on a reused port
        return False

    def _reconcile(self, running: list[dict[str, Any]]) -> None:
        """End the given running nodes whose agents do not answer as lost, and stop what is left of them."""
        if not running:
            return
        with ThreadPoolExecutor(max_workers=min(8, len(running))) as pool:
            alive = list(pool.map(self._healthy, running))
        dead = {r["node_id"]: r for r, ok in zip(running, alive, strict=True) if not ok}
        if not dead:
            return
        lost = []
        with self._locked() as paths:
            state = self._load(paths)
            for node_id, seen in dead.items():
                rec = state["nodes"].get(node_id)
                if rec is not None and rec["state"] == NodeState.RUNNING.value and rec["agent"] == seen["agent"]:
                    _end(rec, NodeState.TERMINATED, "lost")
                    rec["stop_pending"] = True
                    lost.append(rec)
            if lost:
                self._save(paths, state)
        for rec in lost:  # a hung agent, or commands that outlived a dead one, must not keep the machine busy
            self._stop(rec, raise_errors=False, ask_agent=False)

    def _node_alive(self, node_id: str) -> bool:
        rec = self._record(node_id)
        if rec["state"] == NodeState.RUNNING.value:
            self._reconcile([rec])
            rec = self._record(node_id)
        return not NodeState(rec["state"]).ended

    # -- ssh -----------------------------------------------------------------------------------

    def _link(self, host: Host, scope: str | None = None) -> SshLink:
        return SshLink(SshTarget(host.host, host.user, host.port, host.key, self.known_hosts, self.ssh_config,
                                 self.connect_timeout_s), ssh=self.ssh, scope=scope)

    def _ssh_argv(self, host: Host, script: str) -> list[str]:
        return self._link(host).argv(script)

    def _ssh_options(self, host: Host, *, batch: bool = True) -> list[str]:
        """ssh and its options up to the host (``batch``: never a prompt; a login may ask for a passphrase)."""
        return self._link(host).options(batch=batch)

    def _run_ssh(self, host: Host, script: str, *, stdin: str, timeout_s: float,
                 scope: str | None) -> subprocess.CompletedProcess[str]:
        """Run ``script`` on ``host``; ssh's own failures (exit 255) become geotrain errors. A timeout
        (subprocess.TimeoutExpired) is the caller's to map: the script may have run."""
        try:
            return self._link(host, scope).run(script, stdin=stdin, timeout_s=timeout_s)
        except FileNotFoundError as exc:
            raise ProviderError(f"the ssh client ({self.ssh}) is not installed; install OpenSSH's client "
                                "(apt-get install openssh-client)", scope=scope) from exc

    def _try_login(self, host: Host) -> ProviderError | None:
        python = " ".join(shlex.quote(w) for w in shlex.split(host.python))
        script = f"{python} -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>&1 || exit 3"
        try:
            result = self._run_ssh(host, script, stdin="", timeout_s=self.connect_timeout_s + 30, scope=None)
        except ProviderError as exc:
            return exc
        except subprocess.TimeoutExpired as exc:
            return ProviderError(f"SSH to {host.describe()} did not finish within {exc.timeout:.0f} s")
        if result.returncode == 3:
            said = (result.stdout.strip().splitlines() or ["it is older than 3.11"])[-1][-300:]
            return ProviderError(f"{host.describe()} has no Python 3.11 or newer as {host.python!r} ({said}); "
                                 f"{self._install_hint(host)}")
        if result.returncode != 0:
            return ProviderError(f"SSH to {host.describe()} exited {result.returncode}: "
                                 f"{result.stderr.strip()[-300:]}; check the login shell of {host.user}")
        return None

    # -- state ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[JsonState]:
        state = JsonState(provider_root(self._home, "onprem"), lambda: {"version": STATE_VERSION, "nodes": {}},
                          corrupt_hint=f"agents it started may still run on your machines (look for '{AGENT_MODULE}' "
                                       "processes there), stop them")
        with state.lock():
            yield state

    @staticmethod
    def _load(paths: JsonState) -> dict[str, Any]:
        return paths.load()

    @staticmethod
    def _save(paths: JsonState, state: dict[str, Any]) -> None:
        paths.save(state)

    def _record(self, node_id: str) -> dict[str, Any]:
        with self._locked() as paths:
            return _get(self._load(paths), node_id)

    def _inventory_hint(self) -> str:
        if self.inventory:
            return f" in {self.inventory}"
        return f" (no inventory: set {ENV_INVENTORY} or the job spec's onprem.inventory)"


def _owner() -> dict[str, Any]:
    stat = proc_stat(os.getpid())
    return {"pid": os.getpid(), "start_ticks": stat[2] if stat else None, "call": uuid.uuid4().hex}


def _owner_alive(owner: Mapping[str, Any]) -> bool:
    stat = proc_stat(int(owner["pid"]))
    if stat is None:
        return False
    return stat[0] not in "ZX" and (owner.get("start_ticks") is None or stat[2] == owner["start_ticks"])


def _stuck(state: dict[str, Any], hosts: list[Host]) -> list[dict[str, Any]]:
    """The ended nodes on ``hosts`` whose agents could not be stopped (they keep their machines)."""
    claims = {h.claim for h in hosts}
    return [r for r in state["nodes"].values()
            if r["host_claim"] in claims and NodeState(r["state"]).ended and r.get("stop_pending")]


def _holds_host(rec: Mapping[str, Any]) -> bool:
    return not NodeState(rec["state"]).ended or bool(rec.get("stop_pending"))


def _by_request(state: dict[str, Any], request: LaunchRequest) -> dict[str, Any] | None:
    for rec in state["nodes"].values():
        if rec["request_id"] == request.request_id:
            if rec["run_id"] != request.run_id or rec["offer_id"] != request.offer.offer_id:
                raise ValueError(f"request id {request.request_id!r} was used for run {rec['run_id']} and offer "
                                 f"{rec['offer_id']}, not run {request.run_id} and offer {request.offer.offer_id}")
            return rec
    return None


def _new_record(state: dict[str, Any], request: LaunchRequest, host: Host, owner: dict[str, Any]) -> dict[str, Any]:
    while (node_id := f"op-{secrets.token_hex(4)}") in state["nodes"]:
        pass
    loc = request.offer.location
    rec = {
        "node_id": node_id, "request_id": request.request_id, "run_id": request.run_id,
        "offer_id": request.offer.offer_id,
        "location": {"cloud": loc.cloud, "region": loc.region, "zone": loc.zone, "continent": loc.continent.value},
        "host": asdict(host), "host_claim": host.claim, "node_dir": None, "agent": None,
        "state": NodeState.PENDING.value, "launched_at": _now().isoformat(), "ended_at": None,
        "end_reason": None, "owner": owner, "stop_pending": False,
    }
    state["nodes"][node_id] = rec
    return rec


def _get(state: dict[str, Any], node_id: str) -> dict[str, Any]:
    rec = state["nodes"].get(node_id)
    if rec is None:
        raise NotFoundError(f"no on-prem node {node_id}; `geotrain` lists the nodes of a run by its run id")
    return rec


def _end(rec: dict[str, Any], state: NodeState, reason: str) -> None:
    rec["state"] = state.value
    rec["end_reason"] = reason
    rec["ended_at"] = _now().isoformat()


def _host_of(rec: Mapping[str, Any]) -> Host:
    return Host(**rec["host"])


def _info(rec: Mapping[str, Any]) -> NodeInfo:
    return node_info(rec, rec["host"]["host"])


def _now() -> datetime:
    return datetime.now(timezone.utc)

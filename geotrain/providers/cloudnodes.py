"""The SSH side of a cloud provider's nodes: what a VM's first boot prepares, and how the launcher
then reaches it, ships geotrain to it and starts its agent.

A VM gets, through its cloud's startup script (``geotrain.providers.startup.ssh_startup_script``),
only an SSH server of its own on :data:`SSH_PORT`, with the node's host key and the run's login key
(``geotrain.providers.runkeys``), for an unprivileged user (:data:`NODE_USER`, made if the image
lacks it). The run's firewall opens that port to the launcher's address alone. Everything else comes
over the launcher's SSH link, as on the user's own machines (``geotrain.providers.sshnode``): this
geotrain's wheel, its install into a venv that sees the image's torch, the node agent on the VM's
loopback, the task's files, the rendezvous store's port forwarded back.

:class:`CloudNodes` holds what a provider needs for that; the provider keeps the agent's whereabouts
(``{"node_dir", "pid", "pgid", "port"}``) in its own node record.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from geotrain.errors import CredentialsError, ProviderError
from geotrain.providers.base import LoginCommand, NodeInfo, NodeState
from geotrain.providers.runkeys import host_key, known_hosts, login_key
from geotrain.providers.sshlink import SshLink, SshTarget
from geotrain.providers.sshnode import AGENT_MODULE, DEFAULT_ROOT, agent_endpoint, install, start_agent, stop_script

SSH_PORT = 7422  # geotrain's own sshd on a VM (the image's sshd on 22 is left alone)
NODE_USER = "geotrain"  # the unprivileged user a VM's commands run as


@dataclass(frozen=True, slots=True)
class CloudNodes:
    """How a cloud provider reaches its VMs over SSH (see the module docstring)."""

    cloud: str
    ssh_port: int = SSH_PORT
    node_user: str = NODE_USER
    ssh: str = "ssh"
    connect_timeout_s: float = 10.0
    agent_ready_timeout_s: float = 60.0
    torch_index: str | None = None  # where a VM whose image lacks torch gets it (None: chosen on the VM)
    agent_module: str = AGENT_MODULE

    def link(self, run_id: str, request_id: str, address: str, scope: str | None = None) -> SshLink:
        key, _ = login_key(run_id)
        alias = host_key(run_id, request_id).alias
        return SshLink(SshTarget(address, self.node_user, self.ssh_port, str(key), str(known_hosts(run_id)), "none",
                                 self.connect_timeout_s, alias), ssh=self.ssh, scope=scope)

    def prepare(self, link: SshLink, node_id: str, token: str) -> dict:
        """Install this geotrain on the VM and start its agent; the agent's whereabouts."""
        hint = (f"use an image with Python 3.11 or newer (and torch) for {self.node_user}, or give the provider "
                "torch_index so that a VM can install torch")
        python = install(link, None, torch_index=self.torch_index, timeout_s=self.connect_timeout_s + 600,
                         hint=hint).python
        return start_agent(link, node_id, token, python, root=DEFAULT_ROOT, agent_module=self.agent_module,
                           ready_timeout_s=self.agent_ready_timeout_s, timeout_s=self.connect_timeout_s + 120,
                           cloud=self.cloud, hint=hint)

    def endpoint(self, link: SshLink, node_id: str, agent: dict, token: str, *, fresh: bool = False):  # noqa: ANN201
        return agent_endpoint(link, node_id, int(agent["port"]), token, fresh=fresh)

    def stop(self, link: SshLink, node_id: str, agent: dict | None) -> None:
        """Stop the agent and its commands (best effort: a VM that is going away takes them anyway) and
        end the link."""
        agent = agent or {}
        try:
            link.run(stop_script(agent.get("node_dir"), DEFAULT_ROOT, node_id, agent.get("pid"), 2.0), timeout_s=20)
        except Exception:  # noqa: BLE001 - the VM is terminated either way
            pass
        link.close()

    @staticmethod
    def key_files(run_id: str) -> tuple[Path, Path]:
        """The run's login key and known_hosts (for ``geotrain ssh``)."""
        return login_key(run_id)[0], known_hosts(run_id)


class SshNodes:
    """What a cloud provider's nodes do over SSH, the same on every cloud: ``booted`` (the set-up the
    first time), ``start``, ``ship``, ``store_address`` and ``login_command`` (``providers.base``'s
    ``BootWatch``, ``NodeLink`` and ``NodeLogin``). A provider mixes it in and gives ``nodes``
    (:class:`CloudNodes`), ``channel`` (``providers.remote.AgentChannel``) and four hooks: the node as
    the cloud shows it now (``_ssh_node``), its record (``_ssh_record``: ``run_id``, ``request_id``,
    ``address`` and, once set up, ``agent``), where to keep the agent's whereabouts
    (``_ssh_save_agent``) and the scope of its errors (``_ssh_scope``)."""

    nodes: CloudNodes
    channel: Any

    def _ssh_node(self, node_id: str) -> NodeInfo: ...

    def _ssh_record(self, node_id: str) -> dict: ...

    def _ssh_save_agent(self, node_id: str, agent: dict) -> None: ...

    def _ssh_scope(self, record: dict) -> str: ...

    def _ssh_alive(self, node_id: str) -> bool:
        try:
            return not self._ssh_node(node_id).ended
        except ProviderError:
            return True  # the cloud did not answer: do not take the node for dead

    def _link(self, record: dict) -> SshLink:
        return self.nodes.link(record["run_id"], record["request_id"], record.get("address") or "",
                               scope=self._ssh_scope(record))

    def booted(self, node_id: str) -> bool | None:
        """:class:`~geotrain.providers.bootwatch.BootWatch`: the node as its cloud shows it; once it runs
        with an address, its set-up over SSH the first time (this geotrain installed, its agent started:
        tens of seconds), then one look at the agent (False: ended, or a host key that is not the
        node's; None: not yet)."""
        from geotrain.providers.remote import run_token

        node = self._ssh_node(node_id)
        if node.ended:
            return False
        if node.state != NodeState.RUNNING or not node.address:
            return None
        record = self._ssh_record(node_id)
        link = self._link(record)
        token = run_token(record["run_id"])
        try:
            agent = record.get("agent")
            if not agent:
                agent = self.nodes.prepare(link, node_id, token)
                self._ssh_save_agent(node_id, agent)
            return self.channel.health(self.nodes.endpoint(link, node_id, agent, token, fresh=True)) is not None
        except CredentialsError:
            return False  # not the node's host key (or login refused): never this node
        except ProviderError:
            return None  # its sshd does not answer yet

    def start(self, node_id: str, argv: list[str], env: dict[str, str], log_path: Path,
              cwd: Path | str | None = None, files: Mapping[str, str] | None = None) -> Any:
        """Run ``argv`` through the node's agent, reached over the launcher's SSH link (the node is set up
        first if it is not yet)."""
        from geotrain.providers.remote import run_token

        wait_s = float(getattr(self.channel, "ready_timeout_s", 600.0))
        deadline = time.monotonic() + wait_s
        while (ready := self.booted(node_id)) is None and time.monotonic() < deadline:
            time.sleep(1.0)
        node = self._ssh_node(node_id)
        if node.ended or ready is False:
            what = f"it is {node.state.value} ({node.end_reason})" if node.ended else "its host key is not the node's"
            raise ProviderError(f"cannot start a command on node {node_id}: {what}; launch another node",
                                scope=node.location.zone_scope)
        if ready is None:
            raise ProviderError(f"node {node_id} did not answer over SSH within {wait_s:.0f} s",
                                scope=node.location.zone_scope)
        record = self._ssh_record(node_id)
        endpoint = self.nodes.endpoint(self._link(record), node_id, record["agent"], run_token(record["run_id"]),
                                       fresh=True)
        return self.channel.start(endpoint, list(argv), dict(env), Path(log_path), cwd,
                                  alive=lambda: self._ssh_alive(node_id), files=files)

    def ship(self, node_id: str, sources: Sequence[tuple[Path, str]]) -> None:
        """Copy local files and folders onto the VM (destinations under its user's home)."""
        self._link(self._ssh_record(node_id)).upload(sources)

    def store_address(self, node_id: str, local_port: int) -> tuple[str, int]:
        """Where the VM reaches ``127.0.0.1:local_port`` here: a port of its loopback that the SSH link
        forwards back."""
        return "127.0.0.1", self._link(self._ssh_record(node_id)).forward_remote(local_port)

    def login_command(self, node_id: str, command: Sequence[str] = ()) -> LoginCommand:
        """``ssh`` into the VM as its node user with the run's login key, the node's host key checked, in
        the node's directory (``geotrain ssh``): a login shell, or ``command`` run by it."""
        record = self._ssh_record(node_id)
        if self._ssh_node(node_id).ended or not record.get("agent"):
            raise ProviderError(f"node {node_id} is not running and set up; only a running node can be logged into",
                                scope=self._ssh_scope(record))
        node_dir = record["agent"]["node_dir"]
        then = " ".join(command) if command else 'exec "${SHELL:-/bin/sh}" -l'
        script = (f"cd {shlex.quote(node_dir)} && export GEOTRAIN_RUN_ID={shlex.quote(record['run_id'])} "
                  f"GEOTRAIN_NODE_ID={shlex.quote(node_id)} GEOTRAIN_NODE_DIR={shlex.quote(node_dir)} && {then}")
        tty = [] if command else ["-t"]
        return LoginCommand(tuple(self._link(record).options(batch=False) + tty + ["--", script]))

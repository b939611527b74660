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

from dataclasses import dataclass
from pathlib import Path

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

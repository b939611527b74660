"""The Provider protocol: the one seam between geotrain and a place that runs nodes.

Small on purpose, like Ray v2's ``ICloudInstanceProvider``: launch by offer with a caller-chosen
``request_id``, list by run, terminate, and run a command on a node. A provider keeps no offer
records of its own (it needs the offer's id and location; prices live in ``geotrain.pricing``). Pricing, capacity hints and
planning live elsewhere (``geotrain.pricing``, ``geotrain.planning``); a provider only buys, lists
and releases nodes.

Contract shared by every provider (``tests/contract`` checks it):

- **Idempotent launch.** ``launch`` with a ``request_id`` that was seen before returns the node
  that request made, never a second one, whatever state that node is in now. A launcher that
  crashed after sending a request retries it with the same id and cannot leak a node.
- **Idempotent terminate.** Terminating an ended node does nothing and keeps its first end reason.
  An unknown node id raises :class:`~geotrain.errors.NotFoundError`.
- **Tagged by run.** Every node carries its ``run_id``; ``list(run_id)`` finds all of them,
  including ended ones, so ``geotrain stop`` and a restarted launcher need nothing but the run id.
- **Eventually consistent.** A cloud may not show a node in ``list`` at once after ``launch``, and
  may report a terminated node as running for a while. Callers reconcile by ``request_id`` and
  ``node_id``, never by counting. A node a cloud no longer lists at all counts as ended.
- **Errors are geotrain's.** SDK errors are translated inside each provider, with the original as
  ``__cause__``:

  ========================  ========================================================================
  CredentialsError          missing or rejected credentials; the message says how to provide them
  CapacityError             no capacity for this offer now; ``scope`` is the offer's zone scope
                            (``Location.zone_scope``), which the launcher blocks for a while
  QuotaError                an account quota would be exceeded; ``scope`` is the cloud or region
  ConfigurationError        the request can never succeed as configured, whatever the capacity: no such
                            image or image parameter in the region, an instance type / VM size the zone,
                            region or subscription does not offer, an invalid parameter; the message
                            says what to change. ``offer_id`` is set when only that offer is refused
                            (its type or size where it is), None when the request itself is wrong. Not
                            capacity: the launcher neither blocks a zone for it nor fails over
  ThrottledError            the API asked us to slow down; retry later with the same request id
  ProviderTimeoutError      the call timed out and its outcome is unknown: the node may exist; list
                            the run's nodes (by request id) before sending the request again
  NotFoundError             the node id is unknown to this provider
  ProviderError             anything else the provider refused or failed at (e.g. ``start`` on an
                            ended node)
  ========================  ========================================================================
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Protocol, runtime_checkable

from geotrain.domain import BootDisk, Location, Offer

LOCAL_PROVIDER = "local"  # the embedded default: nodes are processes on this machine (providers/local.py)


class NodeState(StrEnum):
    """A node's life: pending → running → preempted | terminated. The last two are final."""

    PENDING = "pending"  # asked for, not yet running (clouds only; the local provider skips it)
    RUNNING = "running"
    PREEMPTED = "preempted"  # taken back by the provider (spot reclaim, injected preemption)
    TERMINATED = "terminated"  # ended by geotrain, or lost (end_reason says which)

    @property
    def ended(self) -> bool:
        return self in (NodeState.PREEMPTED, NodeState.TERMINATED)


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """One node to launch.

    ``request_id`` is the idempotency key chosen by the caller, e.g. ``f"{run_id}/{offer_id}/{n}"``:
    the same key always names the same node. Reusing a key for another run or offer is a
    programming error (``ValueError``).
    """

    request_id: str
    run_id: str  # every node is tagged with its run; list(run_id) finds them all
    offer: Offer  # where and what to launch
    image: str | None = None  # the boot image (the offer's cloud's form, geotrain.domain.image_cloud); None: the provider's
    disk: BootDisk | None = None  # the boot disk's size and tier; None: the provider's default


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What a provider knows about one node at the time of the call. Times are UTC."""

    node_id: str
    request_id: str
    run_id: str
    offer_id: str
    location: Location
    state: NodeState
    launched_at: datetime
    ended_at: datetime | None
    end_reason: str | None  # "preempted", "terminated", "lost", or the reason given to terminate
    address: str  # where to reach it (127.0.0.1 for local nodes; a VM's public address)
    private_address: str = ""  # a VM's address inside its network (VPC), where its peers there reach it

    @property
    def ended(self) -> bool:
        return self.state.ended


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a provider can do, so that the launcher and the tests need not ask its name."""

    spot: bool  # it sells spot nodes
    notice_s: float | None  # warning before a spot preemption (AWS 120, GCP/Azure ~30); None = none
    preemption_injection: bool  # it can preempt its own nodes on request (local provider)
    shared_host: bool = False  # every node is a process on this machine (they share its GPUs)


@dataclass(frozen=True, slots=True)
class LoginCommand:
    """How to open a shell on a node from this machine: run ``argv`` (in place of the caller: it gets the
    terminal) in ``cwd`` (None: the caller's), with ``env`` added to the caller's environment."""

    argv: tuple[str, ...]
    cwd: Path | None = None
    env: dict[str, str] = field(default_factory=dict)


@runtime_checkable
class NodeLogin(Protocol):
    """Optional, beside :class:`Provider`: a provider whose nodes one can log into (the on-prem and cloud
    providers over SSH; the local provider: a shell on this machine)."""

    def login_command(self, node_id: str, command: Sequence[str] = ()) -> LoginCommand | None:
        """The command that logs into a running node: an interactive shell in the node's directory, or,
        with ``command``, that command line run by the node's shell there (its words joined by spaces,
        as ``ssh`` does). None: this node has no login (a router's node on a cloud). Unknown
        ``node_id`` → NotFoundError; an ended node → ProviderError."""
        ...


@runtime_checkable
class NodeProcess(Protocol):
    """A process started on a node (``subprocess.Popen`` satisfies it)."""

    pid: int

    def poll(self) -> int | None:
        """The exit code, or None while it runs."""
        ...

    def wait(self, timeout: float | None = None) -> int:
        """Block until it exits (``subprocess.TimeoutExpired`` after ``timeout`` seconds)."""
        ...

    def kill(self) -> None:
        """End it now (SIGKILL), with what it started where the node can tell."""
        ...


@runtime_checkable
class NodeDirs(Protocol):
    """Optional: a provider whose nodes' directories are folders of this machine (the local provider)."""

    def node_dir(self, node_id: str) -> Path | None:
        """The node's directory here (None: not on this machine)."""
        ...


@runtime_checkable
class Preempting(Protocol):
    """Optional: a provider that can preempt its own nodes on request (injected preemptions)."""

    def preempt(self, node_id: str, *, notice_s: float = 0.0) -> None:
        """Take the node away as a spot market would, with ``notice_s`` seconds of notice."""
        ...


@runtime_checkable
class Networked(Protocol):
    """Optional: a provider whose nodes talk over emulated links (``geotrain.providers.netns``); its
    ``network`` is None when they do not."""

    network: object | None


@runtime_checkable
class PeerRules(Protocol):
    """Optional: a provider that admits the run's nodes of other networks to its own nodes, by their public
    addresses (a run across regions or clouds: ``Location.network_scope``)."""

    def admit_peers(self, run_id: str, addresses: Sequence[str]) -> None:
        """Let ``addresses`` (the run's nodes now, at their public addresses) reach the run's nodes on any
        TCP port, and no address it admitted before that is not among them."""
        ...


@runtime_checkable
class ServesClouds(Protocol):
    """Optional: a provider that stands for several clouds (a router) or wraps another."""

    def served_clouds(self) -> frozenset[str]:
        """The clouds whose offers it can launch."""
        ...


@runtime_checkable
class Closing(Protocol):
    """Optional: a provider that holds something to release when the launch is done (clients)."""

    def close(self) -> None: ...


class ProviderFactory(Protocol):
    """A provider class as the registry uses it: made from the environment's credentials and settings,
    or for a dry run (no credentials, no call)."""

    def from_environment(self, **settings: object) -> Provider: ...

    def for_dry_run(self, **settings: object) -> Provider: ...


@runtime_checkable
class NodeLink(Protocol):
    """Optional, beside :class:`Provider`: a provider whose nodes are other machines that the launcher
    reaches over a connection it opens itself (SSH: ``geotrain.providers.sshlink``). Nothing on the
    nodes connects to the launcher's machine; what they need of it comes through that connection."""

    def ship(self, node_id: str, sources: Sequence[tuple[Path, str]]) -> None:
        """Copy local files and folders onto a running node: each ``(source, destination)``, the
        destination under the node user's home (``~/x`` or ``x``). A folder replaces what was there."""
        ...

    def store_address(self, node_id: str, local_port: int) -> tuple[str, int]:
        """Where processes on the node reach ``127.0.0.1:local_port`` of the launcher's machine (the
        rendezvous store): an address and port on the node that the connection forwards here."""
        ...


@runtime_checkable
class Provider(Protocol):
    """Where nodes come from. See the module docstring for the contract every method keeps."""

    name: str
    capabilities: Capabilities

    def check_credentials(self) -> None:
        """Return if the provider can be used; else raise CredentialsError saying what to do."""
        ...

    def launch(self, request: LaunchRequest) -> NodeInfo:
        """Launch one node for ``request.offer``, or return the node this ``request_id`` made before.

        Raises CapacityError (scope = the offer's zone scope), QuotaError, ConfigurationError,
        ThrottledError or CredentialsError; after any of them no node exists for the request (or, where a cloud
        cannot tell, a retry with the same ``request_id`` finds it).
        """
        ...

    def list(self, run_id: str | None = None) -> list[NodeInfo]:
        """The nodes of ``run_id`` (or of every run), ended ones included, in their current state.

        Ordered by launch time. Eventually consistent on clouds (see the module docstring).
        """
        ...

    def terminate(self, node_id: str, *, reason: str = "terminated") -> None:
        """End a node and everything running on it. Idempotent; unknown ``node_id`` → NotFoundError.

        ``reason`` becomes the node's ``end_reason`` unless it had already ended (a preempted node
        stays preempted).
        """
        ...

    def start(self, node_id: str, argv: list[str], env: dict[str, str], log_path: Path,
              cwd: Path | str | None = None, files: Mapping[str, str] | None = None) -> NodeProcess:
        """Run ``argv`` on a running node, stdout and stderr appended to ``log_path``.

        ``env`` is the command's whole environment (as with ``subprocess.Popen``: nothing else is
        inherited); ``cwd`` its working directory on the node (default: the node's directory; a leading
        ``~`` is the node user's home); ``files`` (name → text) are written into the node's directory
        before it starts (``GEOTRAIN_NODE_DIR`` names that directory to the command). Unknown
        ``node_id`` → NotFoundError; a node that has ended → ProviderError. The process ends when the
        node ends. It starts with SIGUSR1 (the preemption notice) ignored, so a notice never ends a
        process that has not installed a handler yet. Any process of the user may call this for any
        live node of the provider (a launcher resumed in another session starts workers on the nodes
        of the one that died).
        """
        ...

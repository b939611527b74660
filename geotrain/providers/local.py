"""The local provider: nodes are process groups on this machine (the embedded default).

A node is an agent process (``geotrain.providers.local_agent``, standard library only) that leads
its own session and process group. The agent starts every command run on the node with
:meth:`start` (it is handed the command as a file, ``geotrain.providers.local_commands``), so every
command is in the node's group and ending the node is one ``killpg(pgid, SIGKILL)``: nothing started
on a node can outlive it. A command's children in sessions of their own (torchrun starts its workers
so) are out of the group's reach: the agent, a child subreaper, kills its descendants too, and where
the agent itself died, the provider kills what carries the node's mark (``GEOTRAIN_NODE_ID``) in its
environment; the "VM" and its workers go together. Since no caller puts processes into the group
itself, a launcher in another session — resumed from a new terminal — can start commands on nodes
an earlier launcher made.

State is a JSON file, ``GEOTRAIN_HOME/providers/local/state.json``, read and written under an
``fcntl.flock`` on ``state.lock`` beside it, so that a launcher, a restarted launcher and
``geotrain stop`` in other processes share one view of the nodes. Each node has a directory
``GEOTRAIN_HOME/providers/local/nodes/<node_id>/`` (its agent's pid file and log, the preemption
notice, and the working directory of the commands it runs).

Liveness is checked on every call: a running node whose agent has died (or is a zombie) is
reported as terminated with end reason ``lost``, and whatever was left of its process group is
killed, as a VM that dies takes its processes with it. An agent is identified by pid *and* start
time (``/proc/<pid>/stat``), so a recycled pid is never mistaken for a node, nor killed.

Preemptions can be injected (:meth:`LocalProvider.preempt`), with or without notice. The notice is
a file ``<node_dir>/preemption-notice.json`` (``{"deadline": <unix time>, "notice_s": ...}``) and a
SIGUSR1 to the node's process group; the agent ignores the signal, training workers use it as their
hook to checkpoint. Every command inherits the agent's "ignore" from the moment it is forked, so the
notice never ends a process that has not installed a handler (one still starting, or a script that
does not listen). The node is killed at the deadline by a timer in this process, or, should this
process be gone by then, by the next call of any LocalProvider on the same state.

Nodes outlive the LocalProvider object and the process that made them, as VMs outlive a launcher:
:meth:`LocalProvider.close` terminates nothing.

With a ``network`` (``geotrain launch --emulate-wan``: :class:`geotrain.providers.netns.EmulatedNetwork`)
every node is a network namespace of its own: the agent starts inside it, so everything the node
runs talks over the emulated links, and ending the node also kills whatever is left in its namespace;
the network may hold the agent, and so all the node runs, to a share of the cores (``hold``).
Such nodes live only as long as the network's owner (the launcher) does.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from geotrain.domain import Location
from geotrain.errors import NotFoundError, ProviderError
from geotrain.files import atomic_write_text, geotrain_home
from geotrain.node.tree import signal_outside_group
from geotrain.procs import HAS_PROC, group_alive, pid_alive, proc_stat, processes_with
from geotrain.providers.statefile import location_of, node_info
from geotrain.providers.base import LOCAL_PROVIDER, Capabilities, LaunchRequest, LoginCommand, NodeInfo, NodeState
from geotrain.providers.local_commands import AgentProcess, run_on_node

STATE_VERSION = 1
NOTICE_FILE = "preemption-notice.json"
AGENT_PID_FILE = "agent.pid"  # local_agent.PID_FILE; not imported, to keep the agent module apart
AGENT_MODULE = "geotrain.providers.local_agent"
ADDRESS = "127.0.0.1"
AGENT_READY_TIMEOUT_S = 30.0  # python start-up on a loaded 2-core machine, with margin
KILL_WAIT_S = 5.0  # how long terminate waits for a killed group to disappear
AGENT_STOP_WAIT_S = 2.5  # how long the agent may take to kill and reap its node (local_agent.STOP_S + margin)

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the directory that holds geotrain/


@dataclass(frozen=True, slots=True)
class _Paths:
    root: Path

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def lock(self) -> Path:
        return self.root / "state.lock"

    def node_dir(self, node_id: str) -> Path:
        return self.root / "nodes" / node_id


class NodeNetwork(Protocol):
    """Where the local provider's nodes talk to each other (``geotrain.providers.netns.EmulatedNetwork``)."""

    def attach(self, node_id: str, location: Location) -> object: ...
    def hold(self, node_id: str, pid: int) -> None: ...
    def prefix(self, node_id: str) -> list[str]: ...
    def env(self, node_id: str) -> dict[str, str]: ...
    def has(self, node_id: str) -> bool: ...
    def kill(self, node_id: str) -> None: ...
    def detach(self, node_id: str) -> None: ...


class LocalProvider:
    """Nodes as process groups on this machine. See the module docstring.

    ``home`` is the GEOTRAIN_HOME to keep state in; None means :func:`geotrain_home` at each call.
    """

    name = LOCAL_PROVIDER
    capabilities = Capabilities(spot=True, notice_s=None, preemption_injection=True, shared_host=True)

    def __init__(self, home: Path | None = None, network: NodeNetwork | None = None) -> None:
        self._home = Path(home) if home is not None else None
        self.network = network
        # Agents this instance started, polled so that they never linger as zombies (a zombie
        # still counts as a member of its process group, and as alive to kill(pid, 0)).
        self._agents: dict[str, subprocess.Popen[bytes]] = {}
        self._timers: dict[str, threading.Timer] = {}

    # -- Provider protocol ---------------------------------------------------------------------

    def check_credentials(self) -> None:
        """The local provider needs none."""

    def launch(self, request: LaunchRequest) -> NodeInfo:
        """Start an agent for ``request``, or return the node this ``request_id`` made before.

        The node is running when this returns (its agent has its signal handlers in place).
        Raises ProviderError if the agent does not start; no node is recorded then.
        """
        paths = self._paths()
        offer_id = request.offer.offer_id
        with self._locked(paths):
            state = self._load(paths)
            nodes = state["nodes"]
            for rec in nodes.values():
                if rec["request_id"] != request.request_id:
                    continue
                if rec["run_id"] != request.run_id or rec["offer_id"] != offer_id:
                    raise ValueError(
                        f"request id {request.request_id!r} was used for run {rec['run_id']} and offer "
                        f"{rec['offer_id']}, not run {request.run_id} and offer {offer_id}"
                    )
                if self._reconcile(rec):
                    self._save(paths, state)
                return _info(rec)

            node_id = _new_node_id(nodes)
            node_dir = paths.node_dir(node_id)
            node_dir.mkdir(parents=True, exist_ok=True)
            loc = request.offer.location
            prefix: list[str] = []
            if self.network is not None:
                self.network.attach(node_id, loc)
                prefix = self.network.prefix(node_id)
            try:
                agent = self._spawn_agent(node_dir, prefix)
                if self.network is not None:
                    try:  # before "go": the agent has started nothing yet, all it starts inherits the group
                        self.network.hold(node_id, agent.pid)
                    except ProviderError:
                        agent.kill()
                        agent.wait()
                        raise
            except ProviderError:
                if self.network is not None:
                    self.network.detach(node_id)
                raise
            rec = {
                "node_id": node_id, "request_id": request.request_id, "run_id": request.run_id,
                "offer_id": offer_id,
                "location": {"cloud": loc.cloud, "region": loc.region, "zone": loc.zone,
                             "continent": loc.continent.value},
                "pid": agent.pid, "pgid": agent.pid, "start_ticks": _start_ticks(agent.pid),
                "node_dir": str(node_dir), "state": NodeState.RUNNING.value,
                "launched_at": _now().isoformat(), "ended_at": None, "end_reason": None,
                "notice_deadline": None,
            }
            # Recorded before the agent may go on, so that a crash at any point leaves a node that the
            # next call finds (and reports lost if its agent died), never an untracked process: the
            # agent waits for "go" on its stdin and exits if the pipe closes first (this process died).
            nodes[node_id] = rec
            self._agents[node_id] = agent
            self._save(paths, state)
            try:
                with contextlib.suppress(OSError):
                    agent.stdin.write(b"go\n")
                    agent.stdin.close()
                self._wait_ready(agent, node_dir)
            except ProviderError:
                self._kill_group(rec)
                self._wait_gone(node_id, rec["pgid"])
                del nodes[node_id]
                self._agents.pop(node_id, None)
                self._save(paths, state)
                raise
            return _info(rec)

    def list(self, run_id: str | None = None) -> list[NodeInfo]:
        """Every node of ``run_id`` (or of all runs), ended ones included, oldest first."""
        paths = self._paths()
        with self._locked(paths):
            self._reap_all()  # zombies of nodes that ended through another process
            state = self._load(paths)
            changed = False
            for rec in state["nodes"].values():
                if run_id is None or rec["run_id"] == run_id:
                    changed |= self._reconcile(rec)
            if changed:
                self._save(paths, state)
            recs = [r for r in state["nodes"].values() if run_id is None or r["run_id"] == run_id]
        recs.sort(key=lambda r: (r["launched_at"], r["node_id"]))
        return [_info(r) for r in recs]

    def terminate(self, node_id: str, *, reason: str = "terminated") -> None:
        """Kill the node's process group and wait (briefly) until it is gone. Idempotent.

        A node under a preemption notice ends as preempted: the provider was taking it anyway.
        """
        paths = self._paths()
        with self._locked(paths):
            state = self._load(paths)
            rec = _get(state, node_id)
            self._cancel_timer(node_id)
            if NodeState(rec["state"]).ended:
                self._kill_group(rec)  # normally a no-op: whatever ended the node killed its group
                self._reap(node_id)
                return
            if rec["notice_deadline"] is not None:
                self._end(rec, NodeState.PREEMPTED, "preempted")
            else:
                self._end(rec, NodeState.TERMINATED, reason)
            self._save(paths, state)

    def start(self, node_id: str, argv: list[str], env: dict[str, str], log_path: Path,
              cwd: Path | str | None = None, files: Mapping[str, str] | None = None) -> AgentProcess:
        """Have the node's agent run ``argv`` in the node's process group; it dies with the node.

        ``env`` is the command's whole environment, as with ``subprocess.Popen`` (pass
        ``os.environ`` plus your variables to inherit). The working directory is ``cwd``, else the
        node's directory; stdout and stderr are appended to ``log_path``. Works from any process of
        this user. NotFoundError for an unknown node, ProviderError for an ended one or if the command
        cannot be started.
        """
        paths = self._paths()
        with self._locked(paths):
            state = self._load(paths)
            rec = _get(state, node_id)
            if self._reconcile(rec):
                self._save(paths, state)
        if NodeState(rec["state"]).ended:
            raise ProviderError(
                f"cannot start a command on node {node_id}: it is {rec['state']} ({rec['end_reason']}); "
                "launch another node", scope=_location(rec).zone_scope)
        if self.network is not None and self.network.has(node_id):
            env = {**env, **self.network.env(node_id)}
        for name, text in (files or {}).items():  # this machine: the node's directory is a folder here
            atomic_write_text(Path(rec["node_dir"]) / name, text)
        if isinstance(cwd, str) and cwd.startswith("~"):  # a node's home is its directory
            cwd = Path(rec["node_dir"]) / cwd[1:].lstrip("/")
        try:
            return run_on_node(Path(rec["node_dir"]), rec["pid"], argv, env, Path(log_path),
                               Path(cwd) if cwd is not None else None,
                               alive=lambda: self._agent_alive(rec))
        except ProviderError as exc:
            raise ProviderError(f"node {node_id}: {exc}", scope=_location(rec).zone_scope) from exc

    # -- local only ----------------------------------------------------------------------------

    def preempt(self, node_id: str, *, notice_s: float = 0.0) -> None:
        """Take a node away as a spot market would. Does nothing to a node that has ended.

        With ``notice_s`` > 0: write the notice file, send SIGUSR1 to the node's process group (and to
        its processes in sessions of their own), and kill the group ``notice_s`` seconds later. Without: kill it now. Either way the node ends
        as preempted. A second notice for the same node does not move its deadline.
        """
        paths = self._paths()
        with self._locked(paths):
            state = self._load(paths)
            rec = _get(state, node_id)
            changed = self._reconcile(rec)
            if NodeState(rec["state"]).ended:
                pass
            elif notice_s <= 0:
                self._cancel_timer(node_id)
                self._end(rec, NodeState.PREEMPTED, "preempted")
                changed = True
            elif rec["notice_deadline"] is None:
                rec["notice_deadline"] = deadline = time.time() + notice_s
                atomic_write_text(Path(rec["node_dir"]) / NOTICE_FILE,
                                  json.dumps({"deadline": deadline, "notice_s": notice_s}))
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(rec["pgid"], signal.SIGUSR1)
                signal_outside_group(rec["pid"], signal.SIGUSR1)  # torchrun's workers, in sessions of their own
                timer = threading.Timer(notice_s, self._notice_expired, args=(paths, node_id))
                timer.daemon = True
                self._timers[node_id] = timer
                timer.start()  # it waits for the lock we hold, so it sees the saved deadline
                changed = True
            if changed:
                self._save(paths, state)

    def node_dir(self, node_id: str) -> Path:
        """The node's directory (its commands' working directory). NotFoundError if unknown."""
        return Path(self._record(node_id)["node_dir"])

    def login_command(self, node_id: str, command: Sequence[str] = ()) -> LoginCommand:
        """A shell here (``$SHELL``, else /bin/sh) in the node's directory, with ``GEOTRAIN_RUN_ID``,
        ``GEOTRAIN_NODE_ID``, ``GEOTRAIN_NODE_DIR`` and ``GEOTRAIN_HOME`` set; with ``command``, that
        command line run by the shell. The shell is not one of the node's processes (it needs the
        caller's terminal, which the agent's commands do not get): ending the node does not end it."""
        rec = self._record(node_id)
        if NodeState(rec["state"]).ended or not self._agent_alive(rec):
            raise ProviderError(f"node {node_id} has ended ({rec['end_reason'] or 'its agent is gone'}); only a "
                                "running node can be logged into")
        shell = os.environ.get("SHELL") or "/bin/sh"
        argv = (shell, "-c", " ".join(command)) if command else (shell,)
        home = self._home if self._home is not None else geotrain_home()
        env = {"GEOTRAIN_RUN_ID": rec["run_id"], "GEOTRAIN_NODE_ID": node_id, "GEOTRAIN_NODE_DIR": rec["node_dir"],
               "GEOTRAIN_HOME": str(home)}
        return LoginCommand(argv, Path(rec["node_dir"]), env)

    def notice_path(self, node_id: str) -> Path:
        """Where the node's preemption notice appears (the file exists only once notice is given)."""
        return self.node_dir(node_id) / NOTICE_FILE

    def close(self) -> None:
        """Reap what has exited; terminates nothing (nodes outlive the provider, like VMs).

        Pending preemption timers keep running: an injected preemption still happens.
        """
        self._reap_all()

    def __enter__(self) -> LocalProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------------

    def _paths(self) -> _Paths:
        return _Paths((self._home if self._home is not None else geotrain_home()) / "providers" / "local")

    @staticmethod
    @contextlib.contextmanager
    def _locked(paths: _Paths) -> Iterator[None]:
        # A fresh open file description per use: flock excludes other processes *and* other
        # threads of this one (the notice timer). Files are opened close-on-exec, so no node
        # process ever inherits the lock.
        paths.root.mkdir(parents=True, exist_ok=True)
        with open(paths.lock, "a+b") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    @staticmethod
    def _load(paths: _Paths) -> dict[str, Any]:
        try:
            text = paths.state.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {"version": STATE_VERSION, "nodes": {}}
        try:
            state = json.loads(text)
            if not isinstance(state, dict) or state.get("version") != STATE_VERSION \
                    or not isinstance(state.get("nodes"), dict):
                raise ValueError(f"expected version {STATE_VERSION} with a nodes object")
        except ValueError as exc:
            raise ProviderError(
                f"{paths.state} is corrupt ({exc}); its nodes may still run (look for "
                f"'{AGENT_MODULE}' processes), stop them and move the file away") from exc
        return state

    @staticmethod
    def _save(paths: _Paths, state: dict[str, Any]) -> None:
        atomic_write_text(paths.state, json.dumps(state, indent=1, sort_keys=True) + "\n")

    def _record(self, node_id: str) -> dict[str, Any]:
        paths = self._paths()
        with self._locked(paths):
            return _get(self._load(paths), node_id)

    def _spawn_agent(self, node_dir: Path, prefix: Sequence[str] = ()) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        # The agent must import geotrain.providers.local_agent wherever the caller runs from.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        with open(node_dir / "agent.log", "ab") as log:
            try:
                return subprocess.Popen(
                    [*prefix, sys.executable, "-m", AGENT_MODULE, str(node_dir)], env=env, cwd=node_dir,
                    stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True)  # leads its own session and group: the node's
            except OSError as exc:
                raise ProviderError(f"cannot start a local node agent: {exc}") from exc

    @staticmethod
    def _wait_ready(agent: subprocess.Popen[bytes], node_dir: Path) -> None:
        pid_file = node_dir / AGENT_PID_FILE
        deadline = time.monotonic() + AGENT_READY_TIMEOUT_S
        delay = 0.002
        while True:
            with contextlib.suppress(FileNotFoundError):
                if pid_file.read_text().strip() == str(agent.pid):
                    return
            code = agent.poll()
            if code is not None or time.monotonic() > deadline:
                log = _tail(node_dir / "agent.log")
                what = f"exited with code {code}" if code is not None else \
                    f"did not start within {AGENT_READY_TIMEOUT_S:.0f} s"
                raise ProviderError(f"local node agent {what}; its log ({node_dir / 'agent.log'}) says: {log}")
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def _reconcile(self, rec: dict[str, Any]) -> bool:
        """Bring a record up to date with reality; True if it changed."""
        if NodeState(rec["state"]).ended:
            return False
        deadline = rec["notice_deadline"]
        if (deadline is not None and time.time() >= deadline) or not self._agent_alive(rec):
            # Under notice, whatever ends a node is the preemption it was warned of.
            if deadline is not None:
                self._end(rec, NodeState.PREEMPTED, "preempted")
            else:
                self._end(rec, NodeState.TERMINATED, "lost")
            return True
        return False

    def _end(self, rec: dict[str, Any], state: NodeState, reason: str) -> None:
        """Kill the node's group, wait until it is gone, and record how it ended."""
        self._kill_group(rec)
        self._wait_gone(rec["node_id"], rec["pgid"])
        rec["state"] = state.value
        rec["end_reason"] = reason
        rec["ended_at"] = _now().isoformat()
        if self.network is not None:
            self.network.detach(rec["node_id"])  # the node's namespace and links go; its bytes stay counted

    def _agent_alive(self, rec: dict[str, Any]) -> bool:
        agent = self._agents.get(rec["node_id"])
        if agent is not None:
            return agent.poll() is None
        pid = rec["pid"]
        if HAS_PROC:
            stat = proc_stat(pid)
            if stat is None:
                return False
            proc_state, pgrp, start = stat
            return proc_state not in "ZX" and pgrp == rec["pgid"] and start == rec["start_ticks"]
        return pid_alive(pid)

    def _kill_group(self, rec: dict[str, Any]) -> None:
        pgid = rec["pgid"]
        if HAS_PROC and not self._agent_alive(rec):
            # While any member of our group lives, the kernel keeps the number pgid allocated, so
            # a *different* process with pid == pgid means our group is empty and the number was
            # recycled: signalling the group would hit a stranger's processes.
            stat = proc_stat(pgid)
            if stat is not None and stat[2] != rec["start_ticks"]:
                return
        if self._agent_alive(rec):  # the agent ends the node: it kills and reaps everything on it
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(rec["pid"], signal.SIGTERM)
            deadline = time.monotonic() + AGENT_STOP_WAIT_S
            while self._agent_alive(rec) and time.monotonic() < deadline:
                time.sleep(0.002)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)  # whatever is left: a wedged agent, stragglers
        # and what left the group with an agent that died (a session of its own: torchrun's workers), by the
        # node's mark in its environment
        for pid in processes_with("GEOTRAIN_NODE_ID", rec["node_id"]):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if self.network is not None:
            self.network.kill(rec["node_id"])  # and everything else in its namespace

    def _wait_gone(self, node_id: str, pgid: int) -> bool:
        deadline = time.monotonic() + KILL_WAIT_S
        while True:
            if not group_alive(pgid):
                self._reap(node_id)  # dead by now: reaping leaves no zombie of ours in the group
                return True
            if time.monotonic() > deadline:
                return False  # SIGKILL was sent; a process stuck in the kernel dies when it leaves
            time.sleep(0.005)

    def _reap(self, node_id: str) -> None:
        agent = self._agents.get(node_id)
        if agent is not None:
            agent.poll()

    def _reap_all(self) -> None:
        for node_id in set(self._agents):
            self._reap(node_id)

    def _cancel_timer(self, node_id: str) -> None:
        timer = self._timers.pop(node_id, None)
        if timer is not None and timer is not threading.current_thread():
            timer.cancel()

    def _notice_expired(self, paths: _Paths, node_id: str) -> None:
        # ``paths`` was fixed when the notice was given: GEOTRAIN_HOME may differ by now.
        with self._locked(paths):
            self._timers.pop(node_id, None)
            state = self._load(paths)
            rec = state["nodes"].get(node_id)
            if rec is None or NodeState(rec["state"]).ended:
                return
            self._end(rec, NodeState.PREEMPTED, "preempted")
            self._save(paths, state)


def _get(state: dict[str, Any], node_id: str) -> dict[str, Any]:
    rec = state["nodes"].get(node_id)
    if rec is None:
        raise NotFoundError(f"no local node {node_id}; `geotrain` lists the nodes of a run by its run id")
    return rec


def _location(rec: dict[str, Any]) -> Location:
    return location_of(rec)


def _info(rec: dict[str, Any]) -> NodeInfo:
    return node_info(rec, ADDRESS)


def _new_node_id(nodes: dict[str, Any]) -> str:
    while True:
        node_id = f"ln-{secrets.token_hex(4)}"
        if node_id not in nodes:
            return node_id


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _start_ticks(pid: int) -> int | None:
    stat = proc_stat(pid) if HAS_PROC else None
    return stat[2] if stat else None


def _tail(path: Path, limit: int = 2000) -> str:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return "(no log)"
    return text[-limit:] if text else "(nothing)"

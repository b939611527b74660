"""``geotrain logs``: a run's output, each line labelled by where it came from.

Sources, in this order:

- the launcher: the run's events in the ledger (what the launcher did: launches, preemptions,
  generations, checkpoints), one line each, labelled ``launcher``;
- the node agents' logs where they are on this machine (a local node's ``agent.log`` in its
  directory), labelled ``<node> agent``; a remote node's agent keeps its own log on the node;
- the workers' output, ``GEOTRAIN_HOME/runs/<run>/logs/gen<G>-rank<R>-<node>.log`` (a remote
  worker's is copied there by the launcher as it runs), by generation and rank, labelled
  ``<node> gen<G> rank<R>``.

With a node, only that node's lines (and the launcher's events about it). Following, new lines are
given as they are written, new generations' logs included, until the run is no longer running.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from geotrain.app.nodes import RunNodes, LogTail, run_nodes, run_provider
from geotrain.errors import GeotrainError
from geotrain.files import geotrain_home
from geotrain.launcher.workers import node_dir
from geotrain.ledger import Event, Ledger, RunStatus
from geotrain.procs import pid_alive

FOLLOW_POLL_S = 0.25
WORKER_LOG = re.compile(r"gen(\d+)-rank(\d+)-(.+)\.log")
LAUNCHER = "launcher"


@dataclass
class _Source:
    label: str
    order: tuple
    tail: LogTail


@dataclass
class RunLogs:
    """The log sources of one run (or one node of it), read incrementally."""

    found: RunNodes
    node_id: str | None = None
    _sources: dict[Path, _Source] = field(default_factory=dict)
    _last_event: int = 0
    _agents: dict[str, Path | None] | None = None
    _ledger: Ledger | None = None

    @property
    def run_id(self) -> str:
        return self.found.run.run_id

    @property
    def ledger(self) -> Ledger:
        if self._ledger is None:
            self._ledger = Ledger(create=False)
        return self._ledger

    def new_lines(self, *, final: bool = False) -> list[tuple[str, str]]:
        """(label, line) pairs written since the last call: the launcher's events first, then each
        source in order. ``final``: a last line without its newline too."""
        out = [(LAUNCHER, line) for line in self._events()]
        self._discover()
        for source in sorted(self._sources.values(), key=lambda s: s.order):
            out += [(source.label, line) for line in source.tail.lines(final=final)]
        return out

    def running(self) -> bool:
        """Whether the run may still write: running in the ledger, with its launcher alive."""
        run = self.ledger.run(self.run_id)
        return run.status == RunStatus.RUNNING and bool(run.launcher_pid) and pid_alive(run.launcher_pid)

    def _events(self) -> list[str]:
        events = self.ledger.events(self.run_id, after_id=self._last_event)
        if events:
            self._last_event = events[-1].id
        return [_event_line(e) for e in events if self.node_id is None or e.node_id in (None, self.node_id)]

    def _discover(self) -> None:
        wanted = {self.node_id} if self.node_id else {n.node_id for n in self.found.nodes}
        index = {n.node_id: i for i, n in enumerate(self.found.nodes)}
        for node_id, path in self._agent_logs().items():
            if node_id in wanted and path is not None and path not in self._sources and path.exists():
                self._sources[path] = _Source(f"{node_id} agent", (0, index.get(node_id, 0), 0), LogTail(path))
        folder = geotrain_home() / "runs" / self.run_id / "logs"
        for path in sorted(folder.glob("gen*-rank*-*.log")) if folder.is_dir() else ():
            match = WORKER_LOG.fullmatch(path.name)
            if match is None or path in self._sources or match[3] not in wanted:
                continue
            generation, rank = int(match[1]), int(match[2])
            self._sources[path] = _Source(f"{match[3]} gen{generation} rank{rank}", (1, generation, rank),
                                          LogTail(path))

    def _agent_logs(self) -> dict[str, Path | None]:
        """A node's agent log where it is on this machine (the local provider's node directories)."""
        if self._agents is None:
            self._agents = {}
            try:
                provider = run_provider(self.found.run)
            except GeotrainError:  # a cloud SDK missing here: its agents' logs are on the nodes anyway
                return self._agents
            for node in self.found.nodes:
                try:
                    where = node_dir(provider, node.node_id)
                except GeotrainError:  # a node its provider no longer knows
                    where = None
                self._agents[node.node_id] = where / "agent.log" if where is not None else None
        return self._agents


@dataclass
class WorkerOutput:
    """The workers' output of one run as it is written, every node and generation, labelled
    ``<node> rank<R>``: what ``launch`` streams of a task (its setup and run), as ``sky launch`` does."""

    run_id: str
    _tails: dict[Path, tuple[str, LogTail]] = field(default_factory=dict)

    def new_lines(self, *, final: bool = False) -> list[tuple[str, str]]:
        folder = geotrain_home() / "runs" / self.run_id / "logs"
        for path in sorted(folder.glob("gen*-rank*-*.log")) if folder.is_dir() else ():
            match = WORKER_LOG.fullmatch(path.name)
            if match is not None and path not in self._tails:
                self._tails[path] = (f"{match[3]} rank{int(match[2])}", LogTail(path))
        out: list[tuple[str, str]] = []
        for label, tail in self._tails.values():
            out += [(label, line) for line in tail.lines(final=final)]
        return out


def follow_output(run_id: str, emit: Callable[[str, str], None], done: Callable[[], bool],
                  poll_s: float = FOLLOW_POLL_S) -> None:
    """Give each new line of the run's workers to ``emit`` until ``done()`` (then the rest)."""
    output = WorkerOutput(run_id)
    while not done():
        for label, line in output.new_lines():
            emit(label, line)
        time.sleep(poll_s)
    for label, line in output.new_lines(final=True):
        emit(label, line)


def run_logs(run_id: str | None, node: str | None = None) -> RunLogs:
    """The logs of ``run_id`` (None: the latest run), of one node if given (id or index in the run's
    node list). InputError naming the known runs or nodes."""
    found = run_nodes(run_id)
    return RunLogs(found, found.pick(node).node_id if node is not None else None)


def stream(logs: RunLogs, emit: Callable[[str, str], None], *, follow: bool = False,
           poll_s: float = FOLLOW_POLL_S, sleep: Callable[[float], None] = time.sleep) -> None:
    """Give every line so far to ``emit(label, line)``; following, go on until the run stops running
    (then the lines written meanwhile, and any last partial line)."""
    if not follow:
        for label, line in logs.new_lines(final=True):
            emit(label, line)
        return
    while True:
        running = logs.running()  # asked first: what it wrote before it ended is read below
        for label, line in logs.new_lines(final=not running):
            emit(label, line)
        if not running:
            return
        sleep(poll_s)


def _event_line(event: Event) -> str:
    when = time.strftime("%H:%M:%S", time.localtime(event.at))
    detail = ", ".join(f"{k}={_short(v)}" for k, v in sorted(event.detail.items()) if k not in _QUIET)
    return f"{when} {event.kind}" + (f" {event.node_id}" if event.node_id else "") + (f" ({detail})" if detail else "")


_QUIET = {"offers", "preemptions", "pids", "sync", "said"}  # long structures, kept in the ledger


def _short(value: object, limit: int = 80) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"

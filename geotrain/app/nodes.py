"""``geotrain exec`` and ``geotrain ssh``: a run's nodes, a command on them, a shell on one.

A run's nodes are the ledger's, in launch order (``--node`` takes a node id or its index in that
list, from 0); whether one is up is its provider's word. The provider is made from the ledger as
``launch --resume`` makes it, without the launch's injected faults. Commands run through the
provider's own ``start`` (the local node agent, or the remote node agent's channel), so a command
is one of the node's processes and ends with the node; a login is the provider's optional
:class:`~geotrain.providers.base.NodeLogin`.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from geotrain.app.status import run_named
from geotrain.errors import InputError, NotFoundError
from geotrain.files import geotrain_home
from geotrain.launcher.options import LaunchOptions
from geotrain.launcher.preemptions import PreemptionSchedule
from geotrain.launcher.workers import node_dir
from geotrain.ledger import Ledger, NodeRow, RunRow
from geotrain.providers.base import LoginCommand, NodeInfo, NodeLogin, NodeProcess, NodeState, Provider
from geotrain.train.worker_env import node_env, worker_env

POLL_S = 0.1
KNOWN_SHOWN = 10  # runs named in an "unknown run" message


@dataclass(frozen=True, slots=True)
class RunNodes:
    """A run, its nodes in launch order, and its provider's view of them."""

    run: RunRow
    nodes: tuple[NodeRow, ...]

    def pick(self, key: str) -> NodeRow:
        """The node ``key`` names: its id, or its index in :attr:`nodes`. InputError naming the known ones."""
        for node in self.nodes:
            if node.node_id == key:
                return node
        if key.isdigit() and int(key) < len(self.nodes):
            return self.nodes[int(key)]
        known = "; ".join(f"{i} {n.node_id} ({n.end_reason or 'running'})" for i, n in enumerate(self.nodes))
        raise InputError(f"--node: run {self.run.run_id} has no node {key!r}; its nodes: {known or 'none'} "
                         "(give a node id or its index)")


def run_nodes(run_id: str | None) -> RunNodes:
    """The run ``run_id`` (an id or a run's name; None: the latest), or InputError naming the known runs."""
    try:
        ledger = Ledger(create=False)
    except NotFoundError:
        raise InputError("no run yet (geotrain has no ledger here); start one with `geotrain launch`") from None
    if run_id is None:
        run_id = ledger.latest_run_id()
        if run_id is None:
            raise InputError("no run yet; start one with `geotrain launch`")
    try:
        row = run_named(ledger, run_id)
    except NotFoundError:
        runs = [r.run_id for r in ledger.runs()][::-1]
        more = f" and {len(runs) - KNOWN_SHOWN} older (see `geotrain status`)" if len(runs) > KNOWN_SHOWN else ""
        raise InputError(f"no run {run_id!r}; known runs, newest first: {', '.join(runs[:KNOWN_SHOWN]) or 'none'}"
                         f"{more}") from None
    return RunNodes(row, tuple(ledger.nodes(row.run_id)))


def run_provider(run: RunRow) -> Provider:
    """The run's provider, made as ``launch --resume`` makes it, without the launch's injected faults."""
    from geotrain.app.launch import get_provider
    from geotrain.planning.planfile import plan_from_dict

    options = replace(LaunchOptions.from_dict(run.options), preemptions=PreemptionSchedule())
    plan = plan_from_dict(json.loads(run.plan_json), f"ledger run {run.run_id}")
    return get_provider(run.provider, options, plan.job.onprem_inventory)


# -- exec ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExecResult:
    node_id: str
    exit_code: int  # the command's; a signal N is 128 + N, as a shell says it
    log: Path  # the command's whole output


def exec_argv(args: Sequence[str], base: Path | None = None) -> tuple[list[str], dict[str, str]]:
    """What ``geotrain exec RUN ARGS`` runs, as ``sky exec`` reads it: one argument is a shell string
    (``'echo a; ls'``: ``bash -c``), or a task file (``task.yaml``: its ``run`` with its ``envs``; setup is not
    run, as with ``sky exec``); several (after ``--``) are the command's argv. Also the envs to add."""
    if not args:
        raise InputError("give the command: geotrain exec RUN 'nvidia-smi; ls', geotrain exec RUN task.yaml, or "
                         "geotrain exec RUN -- CMD ARGS")
    if len(args) > 1:
        return list(args), {}
    only = args[0]
    path = Path(only) if base is None else base / only
    if only.endswith((".yaml", ".yml")) and path.is_file():
        from geotrain.app.plan import task_of

        task = task_of(path)
        if task is None or not task.run:
            raise InputError(f"{only}: a task file with a run: is needed to exec it on a run's nodes")
        return ["bash", "-c", task.run], dict(task.envs)
    return ["bash", "-c", only], {}


def exec_on_nodes(run_id: str | None, node: str | None, argv: Sequence[str], *,
                  emit: Callable[[str, str], None], skipped: Callable[[str, str], None],
                  envs: dict[str, str] | None = None) -> list[ExecResult]:
    """Run ``argv`` on every node of the run that is up (or on ``node``) and give each line of output to
    ``emit(node_id, line)`` as it comes; ``skipped(node_id, why)`` for each node not up. It starts where the
    run's task runs (``~/sky_workdir`` when the task has a workdir, else the node's directory), with the
    task's environment as a task's run gets it (``SKYPILOT_NODE_RANK``, ``SKYPILOT_NUM_NODES``,
    ``SKYPILOT_NODE_IPS``, ``SKYPILOT_NUM_GPUS_PER_NODE``, ``SKYPILOT_TASK_ID``, the task's envs, then
    ``envs``), ``GEOTRAIN_RUN_ID``, ``GEOTRAIN_NODE_ID`` and ``GEOTRAIN_NODE_DIR``. Ctrl-C kills the commands."""
    if not argv:
        raise InputError("give the command after `--`, e.g. geotrain exec RUN -- nvidia-smi")
    found = run_nodes(run_id)
    chosen = [found.pick(node)] if node is not None else list(found.nodes)
    provider = run_provider(found.run)
    live = {n.node_id: n for n in provider.list(found.run.run_id)}
    up = []
    for row in chosen:
        info = live.get(row.node_id)
        if info is not None and info.state == NodeState.RUNNING:
            up.append(info)
        else:
            skipped(row.node_id, _not_up(info, row))
    if not up:
        raise InputError(f"no node of run {found.run.run_id} is up ({found.run.status}): nothing to run "
                         + ("that node on" if node is not None else "the command on"))
    from geotrain.domain import TaskRun
    from geotrain.launcher.task import WORKDIR_NAME, task_env
    from geotrain.planning.planfile import plan_from_dict

    plan = plan_from_dict(json.loads(found.run.plan_json), f"ledger run {found.run.run_id}")
    task = plan.job.task or TaskRun()
    shared = provider.capabilities.shared_host
    order = {row.node_id: i for i, row in enumerate(found.nodes)}
    members = sorted((n for n in live.values() if n.state == NodeState.RUNNING), key=lambda n: order.get(n.node_id, 0))
    addresses = [m.private_address or m.address for m in members]
    offers = {item.offer.offer_id: item.offer for item in plan.items}
    stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    folder = geotrain_home() / "runs" / found.run.run_id / "exec"
    started: list[tuple[NodeInfo, NodeProcess, LogTail]] = []
    try:
        for info in up:
            log = folder / f"{stamp}-{info.node_id}.log"
            make_env = worker_env if provider.capabilities.shared_host else node_env
            env = make_env({"GEOTRAIN_RUN_ID": found.run.run_id, "GEOTRAIN_NODE_ID": info.node_id})
            where = node_dir(provider, info.node_id)
            if where is not None:
                env["GEOTRAIN_NODE_DIR"] = str(where)
            offer = offers.get(info.offer_id)
            env.update(task_env(task, rank=members.index(info) if info in members else 0, addresses=addresses,
                                accelerators=offer.shape.accelerator_count if offer else 0, shared_host=shared,
                                run_id=found.run.run_id, node_home=where if shared else None))
            for key in ("GEOTRAIN_TASK_RUN", "GEOTRAIN_TASK_SETUP", "GEOTRAIN_TASK_FETCH"):
                env.pop(key, None)
            env.update(envs or {})
            cwd = None
            if task.workdir:
                cwd = (where / WORKDIR_NAME) if shared and where is not None else f"~/{WORKDIR_NAME}"
                if shared and not (where / WORKDIR_NAME).is_dir():
                    cwd = None
            started.append((info, provider.start(info.node_id, list(argv), env, log, cwd=cwd), LogTail(log)))
        codes: dict[str, int] = {}
        while len(codes) < len(started):
            time.sleep(POLL_S)
            for info, proc, tail in started:
                if info.node_id in codes:
                    continue
                code = proc.poll()  # a remote node's poll also copies its new output into the log
                for line in tail.lines(final=code is not None):
                    emit(info.node_id, line)
                if code is not None:
                    codes[info.node_id] = 128 - code if code < 0 else code
    except BaseException:
        for _, proc, _ in started:
            if proc.poll() is None:
                try:
                    proc.kill()
                except (ProcessLookupError, OSError):
                    pass
        raise
    return [ExecResult(info.node_id, codes[info.node_id], tail.path) for info, _, tail in started]


def first_failure(results: Sequence[ExecResult]) -> int:
    """The exit code of ``geotrain exec``: the first non-zero one, in node order, else 0."""
    return next((r.exit_code for r in results if r.exit_code != 0), 0)


def _not_up(info: NodeInfo | None, row: NodeRow) -> str:
    if info is None:
        return f"not up ({row.end_reason or 'unknown to its provider'})"
    return f"not up ({info.state.value}{f': {info.end_reason}' if info.end_reason else ''})"


class LogTail:
    """The new complete lines of a growing file (the last, partial one too when ``final``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""

    def lines(self, *, final: bool = False) -> list[str]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            data = b""
        self.offset += len(data)
        data = self.partial + data
        *whole, self.partial = data.split(b"\n")
        if final and self.partial:
            whole.append(self.partial)
            self.partial = b""
        return [line.decode("utf-8", errors="replace").rstrip("\r") for line in whole]


# -- ssh ----------------------------------------------------------------------------------------


def login(run_id: str, node: str, command: Sequence[str] = ()) -> LoginCommand:
    """How to log into ``node`` of the run (see :class:`~geotrain.providers.base.NodeLogin`): InputError
    for a node whose provider has no login."""
    found = run_nodes(run_id)
    row = found.pick(node)
    provider = run_provider(found.run)
    cmd = provider.login_command(row.node_id, tuple(command)) if isinstance(provider, NodeLogin) else None
    if cmd is None:
        raise InputError(f"node {row.node_id} ({row.cloud}, {found.run.provider} provider) has no login: its "
                         "provider gives none; run commands on it "
                         f"with `geotrain exec {found.run.run_id} --node {row.node_id} -- CMD`")
    return cmd

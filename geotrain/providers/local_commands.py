"""Running a command on a local node: the caller's side of the agent's command files.

The node's agent (``geotrain.providers.local_agent``) starts every command, so any process of the
same user can start one, from any session. :func:`run_on_node` hands the agent a command and waits
until it has started; :class:`AgentProcess` follows it from outside (it is the agent's child, not the
caller's): its exit code comes from the agent's ``.exit`` file, and a command that vanished without one
died with its node.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from geotrain.errors import ProviderError
from geotrain.files import atomic_write_text
from geotrain.procs import HAS_PROC, pid_alive, proc_stat
from geotrain.providers.local_agent import COMMANDS

START_TIMEOUT_S = 30.0  # the agent starts a command within milliseconds; a loaded machine, with margin
KILLED = -signal.SIGKILL  # the exit code of a command that died with its node


class AgentProcess:
    """A command the node's agent started (satisfies ``geotrain.providers.base.NodeProcess``)."""

    def __init__(self, pid: int, start_ticks: int | None, exit_path: Path, argv: list[str],
                 agent_alive: Callable[[], bool]) -> None:
        self.pid = pid
        self.start_ticks = start_ticks
        self.exit_path = exit_path
        self.args = argv
        self.agent_alive = agent_alive
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            code = self._exit_code()
            if code is None and not self._exists():
                code = self._exit_code()  # it may have been reaped just now
                if code is None:
                    code = KILLED  # gone without the agent seeing it end: the node went with it
            self.returncode = code
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.002
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        return code

    def kill(self) -> None:
        """SIGKILL, unless it has ended (its pid may be another process's by now)."""
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)

    def _exit_code(self) -> int | None:
        try:
            return int(self.exit_path.read_text())
        except (FileNotFoundError, ValueError):
            return None

    def _exists(self) -> bool:
        """The process still runs, or is a zombie its agent is about to reap (with the agent gone, a
        zombie is dead: it waits for whoever adopted it)."""
        if not HAS_PROC:
            return pid_alive(self.pid)
        stat = proc_stat(self.pid)
        if stat is None or (self.start_ticks is not None and stat[2] != self.start_ticks):
            return False
        return stat[0] not in "ZX" or self.agent_alive()


def run_on_node(node_dir: Path, agent_pid: int, argv: list[str], env: dict[str, str], log_path: Path,
                cwd: Path | None, *, alive: Callable[[], bool]) -> AgentProcess:
    """Have the agent start ``argv``; ProviderError if it cannot or the node ends first."""
    commands = node_dir / COMMANDS
    command_id = secrets.token_hex(8)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(commands / f"{command_id}.json", json.dumps(
        {"argv": list(argv), "env": dict(env), "cwd": str(cwd) if cwd else None, "log": str(log_path)}))
    started = commands / f"{command_id}.started"
    deadline = time.monotonic() + START_TIMEOUT_S
    delay = 0.002
    with contextlib.suppress(ProcessLookupError):
        os.kill(agent_pid, signal.SIGUSR2)
    while True:
        with contextlib.suppress(FileNotFoundError, ValueError):
            result = json.loads(started.read_text())
            break
        if not alive() or time.monotonic() > deadline:
            with contextlib.suppress(FileNotFoundError):
                (commands / f"{command_id}.json").unlink()
            why = "the node ended" if not alive() else f"its agent did not start it within {START_TIMEOUT_S:.0f} s"
            raise ProviderError(f"cannot start {argv[0] if argv else '(empty command)'} on the node: {why}")
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    started.unlink(missing_ok=True)
    if "error" in result:
        raise ProviderError(f"cannot start {argv[0] if argv else '(empty command)'} on the node: {result['error']}")
    return AgentProcess(int(result["pid"]), result.get("start_ticks"), commands / f"{command_id}.exit", list(argv),
                        alive)

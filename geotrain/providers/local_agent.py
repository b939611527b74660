"""The "VM" of a local node: the process that owns everything that runs on it. Standard library only
(and ``geotrain.node.tree``).

``python -m geotrain.providers.local_agent <node_dir>``. The local provider starts it in a session of
its own, as the leader of the node's process group; the agent starts every command run on the node,
so every one of them is in that group, and killing the group is pulling the plug on the whole node.
Because the agent, not the caller, starts them, any process of the same user — a launcher resumed in
another terminal, ``geotrain stop`` — can start commands on the node.

Commands arrive as files: a caller writes ``commands/<id>.json`` (``{"argv", "env", "cwd", "log"}``,
atomically) and sends the agent SIGUSR2; the agent starts the command with stdin from /dev/null and
stdout and stderr appended to ``log``, then writes ``commands/<id>.started`` (``{"pid", "start_ticks"}``,
or ``{"error"}`` if it could not start it), and ``commands/<id>.exit`` (the exit code; negative: the
signal that ended it) once the command has ended, before it is reaped: no caller sees a command gone
without its exit code. Files appear whole (written to a
temporary name and renamed).

Signals: SIGUSR1 (the preemption notice, meant for the training workers in its group) is ignored, and
that disposition is inherited by every command from the moment it is forked, so a notice that arrives
while a worker is still starting cannot end it (the worker installs its own handler when it listens);
SIGHUP is ignored (the node outlives the terminal of the launcher that started it, as a VM would);
SIGTERM and SIGINT end the node: the agent kills every process of its group, reaps them, and exits.

The agent is a child subreaper (Linux): a process on the node whose parent dies is reparented to the
agent, which reaps it, so a node that ends leaves no zombie behind. It starts only once the provider
has recorded the node and says "go" on the agent's stdin (a provider that dies first closes the pipe,
and the agent exits: no node runs that the state file does not know). It writes its pid to
``<node_dir>/agent.pid`` once it is ready; the provider waits for that file before it calls the node
running.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from geotrain.node.tree import become_subreaper, descendants

PID_FILE = "agent.pid"
COMMANDS = "commands"
IDLE_WAKE_S = 1.0  # the agent also looks for commands and exited children this often
STOP_S = 2.0  # how long ending the node may take to reap what it killed
# fault injection (tests): a pause before each exit file is written, as a loaded machine may make
EXIT_WRITE_DELAY_S = float(os.environ.get("GEOTRAIN_FAULT_EXIT_WRITE_DELAY_S", "0"))


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(0)


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def _start_ticks(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2:].split()[19])


def _group_members(pgid: int) -> list[int]:
    """Processes of group ``pgid`` other than this one (zombies included)."""
    me, out = os.getpid(), []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me:
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[2]) == pgid:
                out.append(int(name))
    return out


def _ended_child() -> tuple[int, int]:
    """A child that has ended, left unreaped where the platform can (``waitid`` with ``WNOWAIT``), and
    its exit code (negative: the signal); (0, 0) when none has. ChildProcessError: no child at all."""
    if hasattr(os, "waitid"):
        info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if info is None:
            return 0, 0
        return info.si_pid, info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
    pid, status = os.waitpid(-1, os.WNOHANG)  # reaped at once: the caller's waitpid finds nothing left
    return pid, os.waitstatus_to_exitcode(status) if pid else 0


class Agent:
    def __init__(self, node_dir: Path) -> None:
        self.node_dir = node_dir
        self.commands = node_dir / COMMANDS
        self.running: dict[int, tuple[str, subprocess.Popen[bytes]]] = {}  # pid -> (command id, process)

    def start_pending(self) -> None:
        for request in sorted(self.commands.glob("*.json")):
            command_id = request.stem
            try:
                spec = json.loads(request.read_text())
                with open(spec["log"], "ab") as log:
                    proc = subprocess.Popen(
                        spec["argv"], env=dict(spec["env"]), cwd=spec.get("cwd") or str(self.node_dir),
                        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, close_fds=True)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                _write(self.commands / f"{command_id}.started", json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
            else:
                self.running[proc.pid] = (command_id, proc)
                _write(self.commands / f"{command_id}.started",
                       json.dumps({"pid": proc.pid, "start_ticks": _start_ticks(proc.pid)}))
            with contextlib.suppress(FileNotFoundError):
                request.unlink()

    def reap(self) -> bool:
        """Reap every child that has ended (commands, and processes reparented to the agent); write the
        exit codes of commands. False when the agent has no child left.

        A command's exit code is written while it is still a zombie, and only then is it reaped: a
        caller that finds the command gone finds its exit file too (one that looked between the reaping
        and the write would have taken a clean exit for the node's death, ``KILLED``)."""
        while True:
            try:
                pid, code = _ended_child()
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            entry = self.running.pop(pid, None)
            if entry is not None:
                command_id, proc = entry
                proc.returncode = code  # reaped here, not by Popen
                if EXIT_WRITE_DELAY_S:
                    time.sleep(EXIT_WRITE_DELAY_S)
                _write(self.commands / f"{command_id}.exit", str(code))
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)

    def stop(self) -> None:
        """End the node: kill every process of the group, reap them, within STOP_S."""
        deadline = time.monotonic() + STOP_S
        while time.monotonic() < deadline:
            members = _group_members(os.getpid()) if Path("/proc/self/stat").exists() else []
            # and what left the group (torchrun's workers start sessions of their own): our descendants
            members = sorted(set(members) | set(descendants(os.getpid())))
            for pid in members:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if not self.reap() and not members:
                return
            time.sleep(0.005)

    def serve(self) -> None:
        wake_r, wake_w = os.pipe()
        for fd in (wake_r, wake_w):
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        signal.set_wakeup_fd(wake_w)
        for sig in (signal.SIGUSR2, signal.SIGCHLD):
            signal.signal(sig, lambda signum, frame: None)  # only to wake the select below
        while True:
            select.select([wake_r], [], [], IDLE_WAKE_S)
            with contextlib.suppress(BlockingIOError):
                while os.read(wake_r, 512):
                    pass
            self.start_pending()
            self.reap()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m geotrain.providers.local_agent <node_dir>", file=sys.stderr)
        return 2
    node_dir = Path(argv[0])
    if sys.stdin.readline().strip() != "go":  # the provider died before it recorded this node: leave no trace
        return 0
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit)
    signal.signal(signal.SIGINT, _exit)
    become_subreaper()  # orphans on the node are reparented to us
    (node_dir / COMMANDS).mkdir(parents=True, exist_ok=True, mode=0o700)
    agent = Agent(node_dir)
    tmp = node_dir / f".{PID_FILE}.tmp"
    tmp.write_text(f"{os.getpid()}\n")
    os.replace(tmp, node_dir / PID_FILE)  # readers see no file or a whole one
    try:
        agent.serve()
    finally:
        agent.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

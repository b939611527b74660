"""The owner's side of the delay line: start the process, send it commands, stop it; find stray ones.

The delay line reads its commands from a pipe that only the owner holds. It starts in a session of its
own (a Ctrl-C in the owner's terminal does not reach it): it stops when told to, or when the pipe
closes because the owner exited or died.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

from geotrain.procs import pid_alive
from geotrain.wan.system import WanError

MODULE = "geotrain.wan.delayline"
REPLY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


class DelayLineClient:
    """A running delay line of run ``tag`` and the pipe to it."""

    def __init__(self, tag: str, *, mtu_bytes: int) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        self.tag = tag
        self.process = subprocess.Popen(
            [sys.executable, "-m", MODULE, "--tag", tag, "--mtu-bytes", str(mtu_bytes)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, start_new_session=True)
        self._buffer = b""
        ready = self._read_reply(REPLY_TIMEOUT_S)
        if not ready.get("ready"):
            self.kill()
            raise WanError(f"the delay line of run {tag} did not start: {ready}.", scope=tag)

    @property
    def pid(self) -> int:
        """The delay line's process id."""
        return self.process.pid

    def request(self, command: dict, *, timeout_s: float = REPLY_TIMEOUT_S) -> dict:
        """Send one command and return its reply; a reply with ``ok: false`` raises :class:`WanError`."""
        if self.process.poll() is not None:
            raise WanError(f"the delay line of run {self.tag} has exited (code {self.process.returncode}).",
                           scope=self.tag)
        try:
            assert self.process.stdin is not None
            self.process.stdin.write((json.dumps(command) + "\n").encode())
            self.process.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise WanError(f"the delay line of run {self.tag} is gone.", scope=self.tag) from exc
        reply = self._read_reply(timeout_s)
        if not reply.get("ok"):
            raise WanError(f"the delay line refused {command.get('op')}: {reply.get('error')}.", scope=self.tag)
        return reply

    def _read_reply(self, timeout_s: float) -> dict:
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left_s = deadline - time.monotonic()
                if left_s <= 0 or not selector.select(left_s):
                    raise WanError(f"the delay line of run {self.tag} did not answer in {timeout_s:g} s.",
                                   scope=self.tag)
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise WanError(f"the delay line of run {self.tag} exited.", scope=self.tag)
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            return json.loads(line)
        except ValueError as exc:
            raise WanError(f"the delay line of run {self.tag} answered {line[:200]!r}.", scope=self.tag) from exc

    def stop(self) -> None:
        """Ask the delay line to tear down and exit; kill it if it does not within a while."""
        if self.process.poll() is None:
            try:
                self.request({"op": "quit"}, timeout_s=STOP_TIMEOUT_S)
            except WanError:
                pass
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
        self._close_pipes()

    def kill(self) -> None:
        """SIGKILL the delay line and reap it (its devices vanish with it; namespaces stay)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self._close_pipes()

    def _close_pipes(self) -> None:
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass


def find_delaylines(tag: str | None = None) -> list[int]:
    """Pids of running delay-line processes (of run ``tag`` only, when given), from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if MODULE.encode() not in argv or b"--tag" not in argv:
            continue
        at = argv.index(b"--tag")
        if tag is None or (at + 1 < len(argv) and argv[at + 1] == tag.encode()):
            found.append(int(entry.name))
    return sorted(found)


def kill_process(pid: int, *, wait_s: float = STOP_TIMEOUT_S) -> bool:
    """SIGTERM ``pid`` (a delay line tears down on it), SIGKILL it if still there after ``wait_s``;
    True when it is gone."""
    for signum, patience_s in ((signal.SIGTERM, wait_s), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + patience_s
        while time.monotonic() < deadline:
            if not pid_alive(pid):
                return True
            time.sleep(0.02)
    return not pid_alive(pid)

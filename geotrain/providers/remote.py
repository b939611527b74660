"""The launcher's side of a remote node: the run's token, and the channel to the node agent
(``geotrain.node.agent``) that runs commands on a cloud VM or an on-prem host.

Every provider whose nodes are other machines starts commands through :class:`AgentChannel`; the
process handle it gives (:class:`RemoteProcess`) is a :class:`~geotrain.providers.base.NodeProcess`
whose ``poll`` also copies the command's new output into the launcher's log file.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from geotrain.errors import ProviderError
from geotrain.files import PRIVATE_FILE, geotrain_home

AGENT_PORT = 7470  # the node agent's TCP port on a VM (the run's firewall opens it to the launcher only)
TOKEN_BYTES = 32
UNREACHABLE_S = 30.0  # an agent silent this long while its node is gone: the command ended with the node


def _token_path(run_id: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in run_id)
    return geotrain_home() / "providers" / "tokens" / safe


def run_token(run_id: str) -> str:
    """The run's secret: the node agents of the run accept only requests that carry it. Made on first
    use, kept 0600 under GEOTRAIN_HOME, the same for every process of the user (a resumed launcher)."""
    path = _token_path(run_id)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    except FileExistsError:
        for _ in range(100):  # another process is writing it
            token = path.read_text().strip()
            if token:
                return token
            time.sleep(0.01)
        raise ProviderError(f"{path} is empty; delete it (the run's nodes will not accept a new one)") from None
    token = secrets.token_urlsafe(TOKEN_BYTES)
    with os.fdopen(fd, "w") as handle:
        handle.write(token)
        handle.flush()
        os.fsync(handle.fileno())
    return token


def hide_token(text: str, token: str) -> str:
    """``text`` (a startup script, a command line) with the run token replaced, for dry runs and logs."""
    return text.replace(token, "<run token>") if token else text


@dataclass(frozen=True, slots=True)
class AgentEndpoint:
    """Where a node agent answers: ``host:port``, or ``socket``, a Unix socket on this machine that
    ssh forwards to the agent's loopback port on the node (``geotrain.providers.sshlink``)."""

    host: str
    port: int
    token: str
    socket: str | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def describe(self) -> str:
        return f"{self.host} (through {self.socket})" if self.socket else f"{self.host}:{self.port}"


class AgentError(OSError):
    """The agent could not be reached, or answered an error (status 0: no answer)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _call(endpoint: AgentEndpoint, method: str, path: str, body: dict[str, Any] | None, timeout_s: float) -> bytes:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {endpoint.token}", "Content-Type": "application/json"}
    if endpoint.socket is not None:
        connection = _UnixConnection(endpoint.socket, timeout_s)
    else:
        connection = http.client.HTTPConnection(endpoint.host, endpoint.port, timeout=timeout_s)
    try:
        connection.request(method, path, body=data, headers=headers)
        answer = connection.getresponse()
        payload = answer.read()
    except (OSError, http.client.HTTPException) as exc:
        raise AgentError(0, f"node agent at {endpoint.describe()} not reachable: {exc}") from exc
    finally:
        connection.close()
    if answer.status >= 400:
        detail = payload.decode(errors="replace")[:300]
        raise AgentError(answer.status, f"node agent at {endpoint.describe()} answered {answer.status}: {detail}")
    return payload


class RemoteProcess:
    """A command the node agent runs. ``poll`` answers its exit (None while it runs) and appends the
    output it has made since the last call to ``log_path``."""

    def __init__(self, endpoint: AgentEndpoint, command_id: str, pid: int, log_path: Path,
                 alive: Callable[[], bool], timeout_s: float) -> None:
        self.endpoint = endpoint
        self.command_id = command_id
        self.pid = pid
        self.log_path = log_path
        self.alive = alive
        self.timeout_s = timeout_s
        self.returncode: int | None = None
        self._offset = log_path.stat().st_size if log_path.exists() else 0
        self._offset_base = self._offset
        self._silent_since: float | None = None

    def _copy_log(self) -> None:
        while True:
            chunk = _call(self.endpoint, "GET", f"/v1/commands/{self.command_id}/log?offset="
                          f"{self._offset - self._offset_base}", None, self.timeout_s)
            if not chunk:
                return
            with open(self.log_path, "ab") as log:
                log.write(chunk)
            self._offset += len(chunk)

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        try:
            status = json.loads(_call(self.endpoint, "GET", f"/v1/commands/{self.command_id}", None, self.timeout_s))
            self._copy_log()
            self._silent_since = None
        except (AgentError, ValueError):
            now = time.monotonic()
            self._silent_since = self._silent_since or now
            if not self.alive() or now - self._silent_since > UNREACHABLE_S:
                self.returncode = -signal.SIGKILL  # it ended with its node
            return self.returncode
        if status.get("exit") is not None:
            self.returncode = int(status["exit"])
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.command_id, timeout or 0.0)
            time.sleep(0.1)
        return code

    def send_signal(self, signum: int) -> None:
        with contextlib.suppress(AgentError):
            _call(self.endpoint, "POST", f"/v1/commands/{self.command_id}/signal", {"signal": int(signum)},
                  self.timeout_s)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class AgentChannel:
    """Runs commands on remote nodes through their agents (HTTP, the run's bearer token)."""

    def __init__(self, timeout_s: float = 10.0, ready_timeout_s: float = 600.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.timeout_s = timeout_s
        self.ready_timeout_s = ready_timeout_s
        self.sleep = sleep

    def health(self, endpoint: AgentEndpoint) -> dict[str, Any] | None:
        """What the agent says of its node, or None if it does not answer."""
        try:
            return json.loads(_call(endpoint, "GET", "/v1/health", None, self.timeout_s))
        except (AgentError, ValueError):
            return None

    def wait_ready(self, endpoint: AgentEndpoint, alive: Callable[[], bool],
                   stop: Callable[[], bool] = lambda: False) -> dict[str, Any]:
        """Wait until the agent answers (a VM's startup script may still be installing geotrain);
        ProviderError as soon as ``stop()`` says the caller gave up."""
        deadline = time.monotonic() + self.ready_timeout_s
        delay = 0.05
        while True:
            try:
                return json.loads(_call(endpoint, "GET", "/v1/health", None, self.timeout_s))
            except AgentError as exc:
                if exc.status == 401:
                    raise ProviderError(f"{exc}: the node holds another run's token") from exc
                last = exc
            if stop():
                raise ProviderError(f"stopped while waiting for the node agent ({last})")
            if not alive():
                raise ProviderError(f"the node ended before its agent answered ({last})")
            if time.monotonic() > deadline:
                raise ProviderError(f"{last} after {self.ready_timeout_s:.0f} s; the VM's startup script may have "
                                    "failed (see its serial console / system log)")
            self.sleep(delay)
            delay = min(delay * 2, 2.0)

    def start(self, endpoint: AgentEndpoint, argv: list[str], env: dict[str, str], log_path: Path,
              cwd: Path | str | None = None, *, alive: Callable[[], bool],
              files: Mapping[str, str] | None = None) -> RemoteProcess:
        """Run ``argv`` on the node (``env`` is its whole environment; ``files``: name → text, written
        0600 into the node's directory before it starts); ProviderError if the agent never answers
        while the node lives."""
        self.wait_ready(endpoint, alive)
        command_id = secrets.token_hex(8)
        body = {"id": command_id, "argv": list(argv), "env": dict(env), "cwd": str(cwd) if cwd else None,
                "files": dict(files or {})}
        try:
            answer = json.loads(_call(endpoint, "POST", "/v1/commands", body, self.timeout_s))
        except (AgentError, ValueError) as exc:
            raise ProviderError(f"could not start {argv[0]} on the node: {exc}") from exc
        log_path.parent.mkdir(parents=True, exist_ok=True)
        return RemoteProcess(endpoint, command_id, int(answer["pid"]), log_path, alive, self.timeout_s)

    def stop_all(self, endpoint: AgentEndpoint) -> None:
        """Kill every command the agent runs (the node itself stays)."""
        with contextlib.suppress(AgentError):
            _call(endpoint, "POST", "/v1/stop", {}, self.timeout_s)

"""The node agent: what a VM or on-prem host runs so that a launcher can run commands on it. Standard
library only (a VM's startup script runs it before anything else is installed).

``python -m geotrain.node.agent --bind HOST --port PORT --root DIR --token-file FILE [--cloud CLOUD]
[--metadata-url URL]``

An HTTP server on ``HOST:PORT`` (port 0: any; the one it got is in ``DIR/agent.json``, written once
it listens, with its pid). Every request must carry ``Authorization: Bearer <token>`` (the run's
secret, read from ``FILE``, which the startup script wrote 0600); any other gets 401. The run's
firewall opens the port only to the launcher's address.

==========================================  =======================================================
``GET  /v1/health``                         ``{"node_dir", "home", "python", "version", "cloud",
                                            "commands", "notice"}``
``POST /v1/commands``                       ``{"id", "argv", "env", "cwd", "files"}`` → ``{"pid"}``;
                                            the same id again answers the first command's pid
                                            (idempotent)
``GET  /v1/commands/<id>``                  ``{"pid", "exit"}`` (exit: null while it runs; negative:
                                            the signal that ended it)
``GET  /v1/commands/<id>/log?offset=N``     the command's output from byte N (at most 1 MiB)
``POST /v1/commands/<id>/signal``           ``{"signal": N}`` to the command's process group
``POST /v1/stop``                           kill every command's process group
==========================================  =======================================================

Commands start in a session of their own (so a kill takes what they started too), with stdin from
/dev/null, stdout and stderr appended to ``DIR/logs/<id>.log``, SIGUSR1 ignored until they install a
handler (a notice that arrives while a worker starts must not end it), ``GEOTRAIN_NODE_DIR`` =
``DIR``, and the directory of the agent's own Python first on ``PATH`` (so ``python`` is the Python
that has this geotrain); the node user's ``HOME``, ``USER``, ``LOGNAME``, ``SHELL``, ``PATH``, ``LANG``
and ``TMPDIR`` fill in what the command's environment lacks. ``cwd`` may start with ``~`` (the node user's home); default ``DIR``.
``files`` (name → text) are written 0600 into ``DIR`` before the command starts: what the launcher
sends with a command (a generation's config), never a path on the launcher's machine. A preemption notice seen in the cloud's metadata (``geotrain.node.notices``, polled every
``POLL_S``) is written to ``DIR/preemption-notice.json`` (``{"deadline", "notice_s", "source"}``,
the file the training runtime watches) and sent as SIGUSR1 to every command's group, once. SIGTERM
(the VM shutting down) kills every command and ends the agent.
"""

from __future__ import annotations

import argparse
import contextlib
import hmac
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from geotrain.node.notices import Notice, NoticeSource, notice_source
from geotrain.node.tree import kill_descendants, signal_outside_group

AGENT_FILE = "agent.json"
NODE_OWN = ("HOME", "USER", "LOGNAME", "SHELL", "PATH", "LANG", "TMPDIR")  # the node user's, unless the command sets them
NOTICE_FILE = "preemption-notice.json"  # the file geotrain.train.runtime and geotrain.train.api watch
POLL_S = 1.0
LOG_CHUNK_BYTES = 1 << 20
MAX_BODY_BYTES = 4 << 20


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


class Node:
    """The commands of this node, their exits and the notice: the agent's whole state."""

    def __init__(self, root: Path, cloud: str, notices: NoticeSource | None) -> None:
        self.root = root
        self.cloud = cloud
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.notices = notices
        self.notice: Notice | None = None
        self.commands: dict[str, subprocess.Popen[bytes]] = {}
        self.exits: dict[str, int] = {}
        self.lock = threading.Lock()

    def start(self, command_id: str, argv: list[str], env: dict[str, str], cwd: str | None,
              files: dict[str, str] | None = None) -> int:
        with self.lock:
            if command_id in self.commands:
                return self.commands[command_id].pid
            for name, text in (files or {}).items():
                if not name or name != _safe(name) or name.startswith("."):
                    raise ValueError(f"file name {name!r}: a plain name is expected")
                _write(self.root / name, text)
            here = os.path.dirname(sys.executable)
            env = {**{k: os.environ[k] for k in NODE_OWN if k in os.environ}, **env}
            path = [p for p in env.get("PATH", os.defpath).split(os.pathsep) if p and p != here]
            env = {**env, "GEOTRAIN_NODE_DIR": str(self.root), "PATH": os.pathsep.join([here, *path])}
            where = os.path.expanduser(cwd) if cwd else str(self.root)
            with open(self.logs / f"{_safe(command_id)}.log", "ab") as log:
                proc = subprocess.Popen(argv, env=env, cwd=where, stdin=subprocess.DEVNULL,
                                        stdout=log, stderr=subprocess.STDOUT, close_fds=True,
                                        start_new_session=True)
            self.commands[command_id] = proc
            threading.Thread(target=self._reap, args=(command_id, proc), daemon=True).start()
            if self.notice is not None:  # a command started under notice hears of it at once
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGUSR1)
            return proc.pid

    def _reap(self, command_id: str, proc: subprocess.Popen[bytes]) -> None:
        code = proc.wait()
        with self.lock:
            self.exits[command_id] = code

    def status(self, command_id: str) -> dict[str, Any] | None:
        with self.lock:
            proc = self.commands.get(command_id)
            return None if proc is None else {"pid": proc.pid, "exit": self.exits.get(command_id)}

    def log(self, command_id: str, offset: int) -> bytes | None:
        if command_id not in self.commands:
            return None
        try:
            with open(self.logs / f"{_safe(command_id)}.log", "rb") as handle:
                handle.seek(max(0, offset))
                return handle.read(LOG_CHUNK_BYTES)
        except FileNotFoundError:
            return b""

    def signal(self, command_id: str, signum: int) -> bool:
        proc = self.commands.get(command_id)
        if proc is None:
            return False
        if self.exits.get(command_id) is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signum)
        return True

    def stop(self) -> None:
        # first what left the commands' groups (torchrun's workers have sessions of their own), while their
        # parents still live and they are found as our descendants; then the groups
        kill_descendants(os.getpid())
        for command_id in list(self.commands):
            self.signal(command_id, signal.SIGKILL)

    def watch(self, halt: threading.Event) -> None:
        """Poll the metadata for a notice until one comes (or the agent ends)."""
        while self.notices is not None and self.notice is None and not halt.wait(POLL_S):
            try:
                notice = self.notices.poll()
            except (OSError, ValueError) as exc:
                print(f"geotrain node agent: metadata not answering: {exc}", file=sys.stderr, flush=True)
                continue
            if notice is not None:
                self.warn(notice)

    def warn(self, notice: Notice) -> None:
        with self.lock:
            if self.notice is not None:
                return
            self.notice = notice
            _write(self.root / NOTICE_FILE, json.dumps({"deadline": notice.deadline, "notice_s": notice.notice_s,
                                                        "source": notice.source}))
            running = [p for cid, p in self.commands.items() if cid not in self.exits]
        print(f"geotrain node agent: preemption notice ({notice.source}); telling {len(running)} command(s)",
              file=sys.stderr, flush=True)
        for proc in running:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGUSR1)
            signal_outside_group(proc.pid, signal.SIGUSR1)  # torchrun's workers, in sessions of their own

    def health(self) -> dict[str, Any]:
        notice = self.notice
        from geotrain import __version__

        return {"node_dir": str(self.root), "home": os.path.expanduser("~"), "python": sys.executable,
                "version": __version__, "cloud": self.cloud, "commands": len(self.commands),
                "notice": None if notice is None else {"source": notice.source, "deadline": notice.deadline}}


def _safe(command_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in command_id)[:120]


def make_handler(node: Node, token: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *args: object) -> None:  # quiet: the agent's log is for events
            pass

        def _reply(self, status: int, body: bytes | dict[str, Any], kind: str = "application/json") -> None:
            data = json.dumps(body).encode() if isinstance(body, dict) else body
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _authorized(self) -> bool:
            given = self.headers.get("Authorization", "")
            if hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                return True
            self._reply(401, {"error": "a valid run token is required"})
            return False

        def _body(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                raise ValueError("request body too large")
            data = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(data, dict):
                raise ValueError("a JSON object is expected")
            return data

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if not self._authorized():
                return
            url = urlparse(self.path)
            parts = url.path.strip("/").split("/")
            if parts == ["v1", "health"]:
                return self._reply(200, node.health())
            if len(parts) == 3 and parts[:2] == ["v1", "commands"]:
                status = node.status(parts[2])
                return self._reply(200, status) if status else self._reply(404, {"error": "no such command"})
            if len(parts) == 4 and parts[:2] == ["v1", "commands"] and parts[3] == "log":
                offset = int(parse_qs(url.query).get("offset", ["0"])[0])
                data = node.log(parts[2], offset)
                if data is None:
                    return self._reply(404, {"error": "no such command"})
                return self._reply(200, data, "application/octet-stream")
            self._reply(404, {"error": f"no such path {url.path}"})

        def do_POST(self) -> None:  # noqa: N802
            if not self._authorized():
                return
            parts = urlparse(self.path).path.strip("/").split("/")
            try:
                body = self._body()
                if parts == ["v1", "commands"]:
                    argv, env = body["argv"], body.get("env") or {}
                    if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
                        raise ValueError("argv must be a non-empty list of strings")
                    files = body.get("files") or {}
                    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
                        raise ValueError("files must map names to text")
                    pid = node.start(str(body["id"]), argv, {str(k): str(v) for k, v in env.items()},
                                     body.get("cwd"), {str(k): v for k, v in files.items()})
                    return self._reply(200, {"pid": pid})
                if len(parts) == 4 and parts[:2] == ["v1", "commands"] and parts[3] == "signal":
                    found = node.signal(parts[2], int(body["signal"]))
                    return self._reply(200 if found else 404, {"ok": found})
                if parts == ["v1", "stop"]:
                    node.stop()
                    return self._reply(200, {"ok": True})
            except (KeyError, ValueError, TypeError) as exc:
                return self._reply(400, {"error": f"bad request: {exc}"})
            except OSError as exc:  # the command could not start (no such program, bad cwd)
                return self._reply(422, {"error": f"{type(exc).__name__}: {exc}"})
            self._reply(404, {"error": "no such path"})

    return Handler


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m geotrain.node.agent")
    parser.add_argument("--bind", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--token-file", type=Path, required=True)
    parser.add_argument("--cloud", default="none")
    parser.add_argument("--metadata-url", default=os.environ.get("GEOTRAIN_METADATA_URL") or None)
    args = parser.parse_args(argv)
    token = args.token_file.read_text().strip()
    if len(token) < 16:
        print(f"geotrain node agent: {args.token_file} holds no run token", file=sys.stderr)
        return 2
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # inherited by every command until it installs a handler
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    args.root.mkdir(parents=True, exist_ok=True, mode=0o700)
    node = Node(args.root, args.cloud, notice_source(args.cloud, args.metadata_url))
    server = ThreadingHTTPServer((args.bind, args.port), make_handler(node, token))
    server.daemon_threads = True
    halt = threading.Event()

    def end(signum: int, frame: object) -> None:
        halt.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, end)
    signal.signal(signal.SIGINT, end)
    threading.Thread(target=node.watch, args=(halt,), daemon=True).start()
    host, port = server.server_address[:2]
    _write(args.root / AGENT_FILE, json.dumps({"pid": os.getpid(), "host": host, "port": port, "started_at": time.time()}))
    print(f"geotrain node agent: listening on {host}:{port}, cloud {args.cloud}", file=sys.stderr, flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        node.stop()
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

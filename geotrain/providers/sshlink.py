"""The launcher's one channel to a node on another machine: an OpenSSH connection it opens itself.

Nothing connects to the launcher's machine: the launcher dials the node's sshd (outbound, as a laptop
behind NAT can), and everything else rides on that connection, authenticated by SSH keys and
encrypted by SSH:

- **commands** (:meth:`SshLink.run`): a shell script run by the node user's ``/bin/sh``;
- **files** (:meth:`SshLink.upload`): a tar stream to ``tar -x`` on the node (no rsync or scp needed);
- **the node agent** (:meth:`SshLink.forward_local`): the agent listens on the node's loopback only;
  the launcher reaches it through a Unix socket on its own machine that ssh forwards there
  (``-L SOCKET:127.0.0.1:PORT``), private to the launcher's user (0600 in a 0700 folder);
- **the rendezvous store** (:meth:`SshLink.forward_remote`): the launcher's store listens on its own
  loopback; each node reaches it at ``127.0.0.1:PORT`` *on the node*, a port ssh forwards back
  (``-R 127.0.0.1:0:127.0.0.1:STORE``).

One connection per node is shared by every process of the user (an OpenSSH ControlMaster, kept
running in the background with ``ControlPersist``): a launcher resumed from another terminal,
``geotrain logs`` and ``geotrain exec`` find it by its control socket, or open it again. The master
ends when the node stops answering (``ServerAlive*``: 15 s) or when :meth:`SshLink.close` asks it to.

Control sockets live in ``$XDG_RUNTIME_DIR/geotrain-ssh`` (else ``/tmp/geotrain-ssh-UID``), 0700,
because a Unix socket's path must be short (108 bytes) and GEOTRAIN_HOME may be deep; each is named by
a hash of the target and GEOTRAIN_HOME, so two homes never share one.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import tarfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from geotrain.errors import CredentialsError, ProviderError

SERVER_ALIVE_S = 5  # the master sends a keep-alive this often; 3 unanswered end it
# What ssh says when it fails before running anything (its exit status is 255 either way).
BEFORE_COMMAND = ("Permission denied", "Host key verification failed", "host key is known",
                  "REMOTE HOST IDENTIFICATION HAS CHANGED", "Connection refused", "Connection timed out",
                  "timed out during banner exchange", "No route to host", "Could not resolve hostname",
                  "Network is unreachable", "kex_exchange_identification", "Connection closed by",
                  "Connection reset by", "Too many authentication failures", "Bad configuration option",
                  "no such identity", "Load key")
IN_SESSION = ("client_loop", "Read from remote host", "Broken pipe", "Write failed", "closed by remote host",
              "Timeout, server")


@dataclass(frozen=True, slots=True)
class SshTarget:
    """How to log into one node: ``user@host:port`` with ``key`` (None: ssh-agent and ssh's default
    keys), host keys checked against ``known_hosts`` (never trusted on first use)."""

    host: str
    user: str
    port: int = 22
    key: str | None = None
    known_hosts: str = "~/.ssh/known_hosts"
    config: str | None = None  # ssh's -F (None: the user's own; "none": no config file)
    connect_timeout_s: float = 10.0
    host_key_alias: str | None = None  # the name its host key is under in known_hosts (a VM's: its own)

    def describe(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"


class SSHFailure(RuntimeError):
    """An ssh command that failed (the __cause__ of the geotrain error it is mapped to)."""

    def __init__(self, argv: list[str], returncode: int | None, stderr: str) -> None:
        super().__init__(f"{shlex.join(argv[:-1])} <script> exited {returncode}: {stderr.strip()[-800:]}")
        self.returncode = returncode
        self.stderr = stderr

    @property
    def last_line(self) -> str:
        lines = self.stderr.strip().splitlines()
        return lines[-1] if lines else "no message"

    @property
    def before_command(self) -> bool:
        """Whether ssh failed before the remote command could start (login refused, no connection)."""
        return any(s in self.stderr for s in BEFORE_COMMAND) and not any(s in self.stderr for s in IN_SESSION)


def control_dir() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) / "geotrain-ssh" if runtime and os.path.isdir(runtime) else \
        Path(f"/tmp/geotrain-ssh-{os.getuid()}")
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = base.lstat()
    if st.st_uid != os.getuid() or st.st_mode & 0o077 or not base.is_dir() or base.is_symlink():
        raise ProviderError(f"{base} is not a private folder of yours; remove it (ssh's control sockets go there)")
    return base


def ssh_error(target: SshTarget, stderr: str, scope: str | None) -> ProviderError:
    """ssh's own failure (exit 255) in geotrain's words, saying what to fix."""
    text = stderr.strip()
    last = text.splitlines()[-1] if text else "no message"
    key = target.key or "ssh's default keys (ssh-agent, ~/.ssh/id_*)"
    known = str(Path(target.known_hosts).expanduser())
    if "Permission denied" in text:
        return CredentialsError(
            f"SSH login to {target.describe()} was refused ({last}) with {key}: add that key's public half to "
            f"~{target.user}/.ssh/authorized_keys on {target.host}, or set the key to use", scope=scope)
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in text or "has changed" in text:
        return CredentialsError(
            f"the host key of {target.host}:{target.port} does not match the one in {known}: if the machine was "
            f"reinstalled, remove the old entry (ssh-keygen -R '[{target.host}]:{target.port}' -f {known}) and add "
            "the new one after checking its fingerprint; otherwise someone may be intercepting the connection",
            scope=scope)
    if "Host key verification failed" in text or "host key is known" in text:
        return CredentialsError(
            f"the host key of {target.host}:{target.port} is not in {known}: add it with `ssh-keyscan -p "
            f"{target.port} {target.host} >> {known}` and check its fingerprint (ssh-keygen -lf {known}) against the "
            "machine's own (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub, run there)", scope=scope)
    return ProviderError(f"cannot reach {target.describe()} over SSH ({last}); check that the machine is up, that "
                         "sshd runs on it and that this machine can reach its port", scope=scope)


class SshLink:
    """The shared SSH connection to one node (see the module docstring). ``ssh``: the client program."""

    _locks: dict[str, threading.Lock] = {}
    _locks_lock = threading.Lock()

    def __init__(self, target: SshTarget, *, ssh: str = "ssh", scope: str | None = None) -> None:
        self.target = target
        self.ssh = ssh
        self.scope = scope
        home = os.environ.get("GEOTRAIN_HOME", "")
        digest = hashlib.sha256(f"{home}\0{target.describe()}\0{target.key}".encode()).hexdigest()[:16]
        self.name = digest
        self.control_path = control_dir() / f"{digest}.ctl"

    # -- options ---------------------------------------------------------------------------------

    def options(self, *, batch: bool = True, master: bool = False) -> list[str]:
        """ssh and its options up to the host (``batch``: never a prompt; ``master``: this call is the
        connection's master)."""
        t = self.target
        argv = [self.ssh]
        if t.config is not None:
            argv += ["-F", t.config]
        known = str(Path(t.known_hosts).expanduser())
        known = f'"{known}"' if " " in known else known
        argv += (["-o", "BatchMode=yes"] if batch else []) + [
            "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known}",
            "-o", f"ConnectTimeout={max(1, round(t.connect_timeout_s))}",
            "-o", f"ServerAliveInterval={SERVER_ALIVE_S}", "-o", "ServerAliveCountMax=3",
            "-o", f"ControlPath={self.control_path}",
            "-o", "ControlMaster=yes" if master else "ControlMaster=no",
            "-p", str(t.port)]
        if t.host_key_alias:
            argv += ["-o", f"HostKeyAlias={t.host_key_alias}"]
        if master:
            argv += ["-o", "ControlPersist=yes", "-o", "ExitOnForwardFailure=yes"]
        if t.key:
            argv += ["-i", t.key, "-o", "IdentitiesOnly=yes"]
        return argv + ["-l", t.user, t.host]

    # -- the connection --------------------------------------------------------------------------

    def up(self) -> bool:
        """Whether the shared connection runs (a quick ``-O check``)."""
        if not self.control_path.exists():
            return False
        result = subprocess.run(self.options()[:-1] + ["-O", "check", self.target.host], capture_output=True,
                                text=True, timeout=10, stdin=subprocess.DEVNULL)
        return result.returncode == 0

    def ensure(self) -> None:
        """Open the shared connection unless it runs; ssh's failure becomes a geotrain error."""
        with self._locks_lock:
            lock = self._locks.setdefault(str(self.control_path), threading.Lock())
        with lock:
            if self.up():
                return
            self.control_path.unlink(missing_ok=True)  # a stale socket of a master that died
            for stale in self.control_path.parent.glob(f"{self.name}-*.sock"):  # and its forwards
                stale.unlink(missing_ok=True)
            argv = self.options(master=True)[:-1] + ["-N", "-f", self.target.host]
            result = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                                    timeout=self.target.connect_timeout_s + 30)
            if result.returncode != 0 and not self.up():  # (another process's master won the race: fine)
                raise ssh_error(self.target, result.stderr, self.scope) from SSHFailure(argv, result.returncode,
                                                                                        result.stderr)

    def close(self) -> None:
        """End the shared connection and its forwards (nothing on the node is stopped)."""
        if self.control_path.exists():
            subprocess.run(self.options()[:-1] + ["-O", "exit", self.target.host], capture_output=True,
                           timeout=10, stdin=subprocess.DEVNULL)
        self.control_path.unlink(missing_ok=True)

    # -- what rides on it ------------------------------------------------------------------------

    def argv(self, script: str) -> list[str]:
        return self.options() + ["--", f"exec /bin/sh -c {shlex.quote(script)}"]

    def run(self, script: str, *, stdin: str | bytes = "", timeout_s: float) -> subprocess.CompletedProcess[str]:
        """Run ``script`` with the node user's ``/bin/sh``; ssh's own failure (exit 255 before the
        command ran) becomes a geotrain error. A timeout (``subprocess.TimeoutExpired``) is the
        caller's to map: the script may have run."""
        self.ensure()
        argv = self.argv(script)
        data = stdin.encode() if isinstance(stdin, str) else stdin
        result = subprocess.run(argv, input=data, capture_output=True, timeout=timeout_s)
        done = subprocess.CompletedProcess(argv, result.returncode, result.stdout.decode(errors="replace"),
                                           result.stderr.decode(errors="replace"))
        if done.returncode == 255:
            failure = SSHFailure(argv, 255, done.stderr)
            if failure.before_command:
                raise ssh_error(self.target, done.stderr, self.scope) from failure
            raise ProviderError(f"the SSH connection to {self.target.describe()} broke ({failure.last_line})",
                                scope=self.scope) from failure
        return done

    def upload(self, sources: Iterable[tuple[Path, str]], *, timeout_s: float = 600.0) -> None:
        """Copy local files and folders onto the node: each ``(source, destination)``, the destination
        relative to the node user's home (``~/x`` or ``x``) or absolute. One tar stream; a folder's
        content replaces what is at its destination, atomically per destination (unpacked beside it,
        then renamed)."""
        import io

        items = list(sources)
        if not items:
            return
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for n, (source, _) in enumerate(items):
                tar.add(str(source), arcname=f"item{n}", filter=_portable)
        moves = []
        for n, (source, dest) in enumerate(items):
            target = remote_path(dest)
            moves.append(f'mkdir -p "$(dirname {target})" && rm -rf {target} && mv "$t/item{n}" {target}')
        script = ('set -e; umask 077; t=$(mktemp -d "$HOME/.geotrain-upload.XXXXXX"); trap \'rm -rf "$t"\' EXIT; '
                  'tar -x -f - -C "$t"; ' + "; ".join(moves))
        result = self.run(script, stdin=buffer.getvalue(), timeout_s=timeout_s)
        if result.returncode != 0:
            raise ProviderError(f"copying files to {self.target.describe()} failed (exit {result.returncode}): "
                                f"{result.stderr.strip()[-400:]}", scope=self.scope)

    def forward_local(self, socket_path: Path, remote_port: int) -> Path:
        """A Unix socket here that reaches ``127.0.0.1:remote_port`` on the node (made if missing). Name
        it ``<self.name>-….sock`` in :func:`control_dir`: a new connection clears its link's old ones."""
        self.ensure()
        if socket_path.exists():
            return socket_path
        argv = self.options()[:-1] + ["-O", "forward", "-L", f"{socket_path}:127.0.0.1:{int(remote_port)}",
                                      self.target.host]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=15, stdin=subprocess.DEVNULL)
        if result.returncode != 0 and not socket_path.exists():
            raise ProviderError(f"could not forward {socket_path} to port {remote_port} of {self.target.describe()}: "
                                f"{result.stderr.strip()[-300:]}", scope=self.scope)
        return socket_path

    def forward_remote(self, local_port: int) -> int:
        """A port on the node's loopback that reaches ``127.0.0.1:local_port`` here; its number."""
        self.ensure()
        argv = self.options()[:-1] + ["-O", "forward", "-R", f"127.0.0.1:0:127.0.0.1:{int(local_port)}",
                                      self.target.host]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=15, stdin=subprocess.DEVNULL)
        words = result.stdout.split()
        if result.returncode != 0 or not words or not words[0].isdigit():
            raise ProviderError(f"could not forward a port of {self.target.describe()} back to this machine's port "
                                f"{local_port}: {result.stderr.strip()[-300:] or result.stdout.strip()[-300:]}",
                                scope=self.scope)
        return int(words[0])


def remote_path(path: str) -> str:
    """``path`` for the node's shell, quoted, with a leading ``~`` as the node user's $HOME and a
    relative path under it."""
    if path in ("~", ""):
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    if not path.startswith("/"):
        return '"$HOME"/' + shlex.quote(path)
    return shlex.quote(path)


def _portable(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """Leave out caches and version control, and the sender's owner names."""
    parts = Path(info.name).parts
    if any(p in (".git", ".venv", "__pycache__", ".mypy_cache", ".pytest_cache", "node_modules") for p in parts):
        return None
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info

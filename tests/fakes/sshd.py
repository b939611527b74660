"""A real OpenSSH server on loopback, for the on-prem provider's tests.

:func:`start_sshd` runs ``/usr/sbin/sshd -D -e -f <config>`` as a child process, listening on one
port of one or more loopback addresses (127.0.0.2, 127.0.0.3, ...: Linux routes all of 127/8 to lo,
so each address can stand for one on-prem "host" while they all are this machine). Everything it
needs lives in a temporary directory: a generated ed25519 host key, an ``authorized_keys`` with a
generated client key, a second client key that is *not* authorized (for "Permission denied"), a
``known_hosts`` holding the host key under every address, a ``known_hosts`` with a *different* key
(for "host key verification failed"), the config, the pid file and sshd's log. Only public-key
login is allowed (no password, no keyboard-interactive, no PAM), for the user the tests run as
(root here, hence ``PermitRootLogin prohibit-password``). :meth:`FakeSSHD.stop` kills the server.

If ``/usr/sbin/sshd`` is missing, :func:`start_sshd` raises :class:`SSHDMissing`, which says to run
``scripts/ensure_sshd.sh``.

:func:`silent_listener` gives an address that accepts TCP connections and never says a word, for
connection timeouts ("Connection timed out during banner exchange").
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

SSHD = "/usr/sbin/sshd"
PRIVSEP_DIR = Path("/run/sshd")  # sshd refuses to start without its privilege separation directory
READY_TIMEOUT_S = 15.0


class SSHDMissing(RuntimeError):
    """OpenSSH's server (or client) is not installed here."""


@dataclass
class FakeSSHD:
    root: Path  # the temporary directory with keys, config and log
    addresses: tuple[str, ...]
    port: int
    user: str
    client_key: Path  # authorized (private key; the public one is beside it, .pub)
    unauthorized_key: Path  # a key sshd does not accept
    known_hosts: Path  # the host key under every address and port
    wrong_known_hosts: Path  # another key under every address: host key verification fails
    host_key: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, limit: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-limit:]
        except OSError:
            return "(no sshd log)"

    def ssh_argv(self, address: str | None = None, *, key: Path | None = None) -> list[str]:
        """An ssh command line (without the remote command) that logs into this server."""
        return ["ssh", "-F", "none", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "IdentitiesOnly=yes",
                "-i", str(key or self.client_key), "-p", str(self.port), "-l", self.user,
                address or self.addresses[0]]

    def restart(self) -> None:
        """Start the stopped server again: same port, keys and config."""
        if self.alive():
            return
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.root / "sshd_config")],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not all(_banner(a, self.port) for a in self.addresses):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sshd did not start again; its log says: {self.log_tail()}")
            time.sleep(0.02)

    def logins(self) -> int:
        """How many logins the server has accepted so far."""
        return self.log_tail(10**9).count("Accepted publickey")

    def stop(self) -> None:
        """The server goes away with every connection it holds (a machine that became unreachable)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            from tests.fakes.vms import descendants

            for pid in descendants(proc.pid)[1:]:  # the connections' own sshd processes
                with contextlib.suppress(ProcessLookupError, PermissionError, FileNotFoundError):
                    if Path(f"/proc/{pid}/comm").read_text().strip() == "sshd":
                        os.kill(pid, signal.SIGKILL)
            # sshd leads its own session: the group holds it and any session process it forked.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)

    def close(self) -> None:
        """Stop the server and delete its directory."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> FakeSSHD:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _need(program: str) -> str:
    path = shutil.which(program) if "/" not in program else (program if os.access(program, os.X_OK) else None)
    if path is None:
        raise SSHDMissing(f"{program} is not installed; run scripts/ensure_sshd.sh (it installs openssh-server "
                          "and openssh-client with apt-get)")
    return path


def _keygen(path: Path, comment: str) -> None:
    subprocess.run([_need("ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _free_port(addresses: tuple[str, ...]) -> int:
    """A TCP port free on every address (sshd may still lose it to a race: start_sshd retries)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind((addresses[0], 0))
            port = probe.getsockname()[1]
        try:
            for address in addresses[1:]:
                with socket.socket() as other:
                    other.bind((address, port))
        except OSError:
            continue
        return port
    raise RuntimeError(f"no TCP port is free on all of {', '.join(addresses)}")


def _banner(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1.0) as conn:
            return conn.recv(64).startswith(b"SSH-")
    except OSError:
        return False


def _config(root: Path, addresses: tuple[str, ...], port: int) -> str:
    listen = "\n".join(f"ListenAddress {a}" for a in addresses)
    return f"""# geotrain tests: a throw-away sshd (tests/fakes/sshd.py)
Port {port}
{listen}
HostKey {root / "host_ed25519"}
PidFile {root / "sshd.pid"}
AuthorizedKeysFile {root / "authorized_keys"}
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PermitRootLogin prohibit-password
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
AllowTcpForwarding yes
AllowAgentForwarding no
PermitTunnel no
MaxStartups 64:30:128
MaxSessions 64
LogLevel VERBOSE
"""


def start_sshd(addresses: tuple[str, ...] = ("127.0.0.1",), *, root: Path | None = None) -> FakeSSHD:
    """Start sshd on ``addresses`` (loopback) on one free port; return once every address answers."""
    if not os.access(SSHD, os.X_OK):
        raise SSHDMissing(f"{SSHD} is not installed; run scripts/ensure_sshd.sh (it installs openssh-server "
                          "with apt-get)")
    _need("ssh")
    addresses = tuple(addresses)
    root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="geotrain-sshd-"))
    root.mkdir(parents=True, exist_ok=True)
    if not PRIVSEP_DIR.is_dir():  # normally made by the system service's unit, which never ran here
        PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    _keygen(root / "host_ed25519", "geotrain-test-host")
    _keygen(root / "other_host_ed25519", "geotrain-test-other-host")
    _keygen(root / "client_ed25519", "geotrain-test-client")
    _keygen(root / "stranger_ed25519", "geotrain-test-stranger")
    (root / "authorized_keys").write_text((root / "client_ed25519.pub").read_text())
    user = getpass.getuser()
    log_path = root / "sshd.log"
    last_error = ""
    for _ in range(5):
        port = _free_port(addresses)
        host_pub = (root / "host_ed25519.pub").read_text().split()[:2]
        other_pub = (root / "other_host_ed25519.pub").read_text().split()[:2]
        (root / "known_hosts").write_text("".join(f"[{a}]:{port} {' '.join(host_pub)}\n" for a in addresses))
        (root / "wrong_known_hosts").write_text("".join(f"[{a}]:{port} {' '.join(other_pub)}\n" for a in addresses))
        config = root / "sshd_config"
        config.write_text(_config(root, addresses, port))
        with open(log_path, "ab") as log:
            proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        server = FakeSSHD(root=root, addresses=addresses, port=port, user=user,
                          client_key=root / "client_ed25519", unauthorized_key=root / "stranger_ed25519",
                          known_hosts=root / "known_hosts", wrong_known_hosts=root / "wrong_known_hosts",
                          host_key=root / "host_ed25519", log_path=log_path, proc=proc)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while proc.poll() is None and time.monotonic() < deadline:
            if all(_banner(a, port) for a in addresses):
                return server
            time.sleep(0.02)
        last_error = server.log_tail()
        server.stop()
        if "Address already in use" not in last_error:
            break
    raise RuntimeError(f"sshd did not start on {', '.join(addresses)}; its log says: {last_error}")


@contextlib.contextmanager
def silent_listener(address: str = "127.0.0.1") -> Iterator[int]:
    """A port on ``address`` whose connections are accepted by the kernel and never answered."""
    with socket.socket() as sock:
        sock.bind((address, 0))
        sock.listen(16)
        yield sock.getsockname()[1]


def node_processes(root: Path) -> dict[int, str]:
    """Live processes of the on-prem nodes at or under ``root`` (a node directory, or the hosts' node
    root): pid → "agent" for a node agent (its ``--root`` there), "command" for what one started
    (its GEOTRAIN_NODE_DIR there). Zombies do not count."""
    exact = str(root).rstrip("/")
    prefix = exact + "/"
    found: dict[int, str] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
            args = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
            environ = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if stat[stat.rindex(")") + 2] in "ZX":
            continue
        text = [a.decode(errors="replace") for a in args]
        if "geotrain.node.agent" in text and any(a == exact or a.startswith(prefix) for a in text):
            found[int(name)] = "agent"
        elif any(e == f"GEOTRAIN_NODE_DIR={exact}".encode() or e.startswith(f"GEOTRAIN_NODE_DIR={prefix}".encode())
                 for e in environ):
            found[int(name)] = "command"
    return found


def closed_port(address: str = "127.0.0.1") -> int:
    """A port on ``address`` that nothing listens on (connections are refused)."""
    with socket.socket() as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]

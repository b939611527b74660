"""The launcher's SSH link to a node, against a real OpenSSH server (tests.fakes.sshd): commands,
uploads, the agent's socket forwarded here, the store's port forwarded back, one shared connection."""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from geotrain.errors import CredentialsError, ProviderError
from geotrain.providers.sshlink import SshLink, SshTarget, control_dir
from tests.fakes.sshd import FakeSSHD, SSHDMissing, start_sshd


@pytest.fixture(scope="module")
def sshd() -> Iterator[FakeSSHD]:
    try:
        server = start_sshd(("127.0.0.9",))
    except SSHDMissing as exc:
        pytest.fail(str(exc))
    yield server
    server.close()


@pytest.fixture
def link(sshd: FakeSSHD) -> Iterator[SshLink]:
    made = SshLink(SshTarget("127.0.0.9", sshd.user, sshd.port, str(sshd.client_key), str(sshd.known_hosts), "none",
                             5.0))
    yield made
    made.close()


def test_commands_share_one_connection_and_close_ends_it(link: SshLink, sshd: FakeSSHD) -> None:
    logins = sshd.logins()
    for n in range(3):
        result = link.run(f"echo {n}; cat", stdin=f"in{n}", timeout_s=20)
        assert (result.returncode, result.stdout) == (0, f"{n}\nin{n}")
    assert sshd.logins() == logins + 1  # one login: the master's
    assert link.up()
    link.close()
    assert not link.up() and not link.control_path.exists()


def test_upload_puts_folders_and_files_under_the_node_users_home(link: SshLink, tmp_path: Path) -> None:
    src = tmp_path / "code"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "train.py").write_text("print('hi')\n")
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref\n")
    data = tmp_path / "data.txt"
    data.write_text("42\n")
    home = Path(link.run('printf %s "$HOME"', timeout_s=20).stdout)
    dest = f"geotrain-test-{tmp_path.name}"
    try:
        link.upload([(src, f"~/{dest}/work"), (data, f"{dest}/mounts/data.txt")])
        assert (home / dest / "work" / "pkg" / "train.py").read_text() == "print('hi')\n"
        assert not (home / dest / "work" / ".git").exists()  # version control stays here
        assert (home / dest / "mounts" / "data.txt").read_text() == "42\n"
        (src / "pkg" / "train.py").write_text("print('v2')\n")
        link.upload([(src, f"~/{dest}/work")])  # a folder replaces what was there
        assert (home / dest / "work" / "pkg" / "train.py").read_text() == "print('v2')\n"
    finally:
        subprocess.run(["rm", "-rf", str(home / dest)], check=False)


def test_a_local_socket_reaches_a_loopback_port_of_the_node_and_a_port_there_reaches_back(link: SshLink) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        port = server.getsockname()[1]

        def answer() -> None:
            for _ in range(2):
                conn, _ = server.accept()
                with conn:
                    conn.sendall(b"pong:" + conn.recv(16))

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        path = control_dir() / f"{link.name}-test.sock"
        assert link.forward_local(path, port) == path
        assert oct(path.stat().st_mode & 0o777) == "0o600"
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(path))
            client.sendall(b"a")
            assert client.recv(16) == b"pong:a"
        back = link.forward_remote(port)  # the node's loopback port back to this one
        probe = (f"import socket; s = socket.create_connection(('127.0.0.1', {back})); s.sendall(b'b'); "
                 "print(s.recv(16).decode(), end='')")
        said = link.run(f"python3 -c \"{probe}\"", timeout_s=20)
        assert said.stdout == "pong:b", said.stderr
        thread.join(timeout=10)


def test_a_refused_key_and_an_unknown_host_key_say_what_to_fix(sshd: FakeSSHD, tmp_path: Path) -> None:
    bad_key = SshLink(SshTarget("127.0.0.9", sshd.user, sshd.port, str(sshd.unauthorized_key), str(sshd.known_hosts),
                                "none", 5.0))
    with pytest.raises(CredentialsError, match="was refused"):
        bad_key.run("true", timeout_s=20)
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    unknown = SshLink(SshTarget("127.0.0.9", sshd.user, sshd.port, str(sshd.client_key), str(empty), "none", 5.0))
    with pytest.raises(CredentialsError, match="is not in .*ssh-keyscan"):
        unknown.run("true", timeout_s=20)
    closed = SshLink(SshTarget("127.0.0.9", sshd.user, 1, str(sshd.client_key), str(sshd.known_hosts), "none", 5.0))
    with pytest.raises(ProviderError, match="cannot reach .*Connection refused"):
        closed.run("true", timeout_s=20)

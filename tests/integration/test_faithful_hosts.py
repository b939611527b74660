"""The test hosts of tests/fakes/hosts.py are "another machine": the launcher's files are out of reach,
geotrain is not installed, the network lets through only what a real one would, and the launcher is
behind NAT. Needs root (CI runs as root) and nft (scripts/ensure_hosts.sh)."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes import hosts as H

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
REFUSE_S = 1.5  # how long a probe waits for a connection that must not happen

PROBE = r"""
import concurrent.futures, json, socket, sys
def one(target):
    address, port = target.rsplit(":", 1)
    try:
        with socket.create_connection((address, int(port)), timeout=float(sys.argv[1])) as conn:
            conn.settimeout(float(sys.argv[1]))
            try:
                data = conn.recv(200).decode(errors="replace").strip()
            except OSError:
                data = ""
            return "ok " + data
    except OSError as exc:
        return f"fail {type(exc).__name__}: {exc}"
targets = sys.argv[2:]
with concurrent.futures.ThreadPoolExecutor(len(targets)) as pool:
    print(json.dumps(dict(zip(targets, pool.map(one, targets)))))
"""

SERVER = r"""
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(16)
print("listening", flush=True)
while True:
    conn, peer = s.accept()
    conn.sendall(f"peer {peer[0]}\n".encode())
    conn.close()
"""


def _require_hosts() -> None:
    if os.geteuid() != 0:
        pytest.skip("test hosts need root (CI runs as root)")
    H.require()  # raises (fails the test) when nft & co. are missing: run scripts/ensure_hosts.sh


def probe(host: H.Host, *targets: str, timeout: float = REFUSE_S) -> dict[str, str]:
    """Try TCP connections from inside ``host`` (as its user), all at once."""
    proc = host.run(["python3", "-c", PROBE, str(timeout), *targets], timeout=30)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def launcher_connect(address: str, port: int, timeout: float = REFUSE_S) -> str:
    try:
        with socket.create_connection((address, port), timeout=timeout) as conn:
            conn.settimeout(timeout)
            try:
                return "ok " + conn.recv(200).decode(errors="replace").strip()
            except OSError:
                return "ok "
    except OSError as exc:
        return f"fail {type(exc).__name__}: {exc}"


def serve(host: H.Host, port: int) -> subprocess.Popen:
    proc = host.popen(["python3", "-u", "-c", SERVER, str(port)], stdout=subprocess.PIPE, text=True)
    ready, _, _ = select.select([proc.stdout], [], [], 20)
    assert ready and proc.stdout.readline().strip() == "listening"
    return proc


@pytest.fixture(scope="module")
def world() -> Iterator[H.World]:
    _require_hosts()
    with H.World() as w:
        site = w.lan("site")
        site.host("node-a")
        site.host("node-b")
        w.lan("aws", public=True).host("vm-1")
        w.lan("gcp", public=True).host("vm-2")
        yield w


def host(world: H.World, name: str) -> H.Host:
    return next(h for h in world.hosts if h.name == name)


@pytest.fixture(scope="module")
def client_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    key = tmp_path_factory.mktemp("ssh-client") / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key


def ssh(access: H.SSHAccess, address: str, key: Path, command: str) -> subprocess.CompletedProcess[str]:
    known = key.parent / f"known_hosts_{address}"
    known.write_text(access.known_hosts_line(address))
    return subprocess.run(["ssh", "-F", "none", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                           "-o", f"UserKnownHostsFile={known}", "-o", "IdentitiesOnly=yes", "-o", "ConnectTimeout=5",
                           "-i", str(key), "-p", str(access.port), "-l", access.user, address, command],
                          capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


def test_host_cannot_see_the_launchers_files(world: H.World, tmp_path: Path) -> None:
    geotrain_home = Path(os.environ["GEOTRAIN_HOME"])
    geotrain_home.mkdir(parents=True, exist_ok=True)
    (geotrain_home / "ledger.db").write_text("secret")
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    (workdir / "train.py").write_text("print('hi')")
    for p in (geotrain_home, workdir):
        p.chmod(0o755)
    (workdir / "train.py").chmod(0o644)
    targets = [geotrain_home / "ledger.db", REPO / "README.md", workdir / "train.py"]
    assert all(t.exists() for t in targets)
    a = host(world, "node-a")
    for target in targets:
        read = a.run(["cat", str(target)])
        assert read.returncode != 0 and "secret" not in read.stdout, (target, read)
        # hidden, not merely unreadable: not even root inside the host sees them
        assert a.run(["test", "-e", str(target)], root=True).returncode == 1, target
    # its own /proc: none of the launcher's processes (pytest) shows there
    ps = a.run("cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
    assert ps.returncode == 0 and "pytest" not in ps.stdout
    assert len(a.run("ls -d /proc/[0-9]*").stdout.split()) <= 4  # its init, the shell (and nsenter's child)
    # its own home and /tmp, on the launcher's disk (Host.path)
    assert a.run("echo hello > ~/note && echo there > /tmp/t && id -un").stdout.strip() == a.user
    assert a.path(f"{a.home}/note").read_text() == "hello\n" and a.path("/tmp/t").read_text() == "there\n"
    assert a.run(["cat", str(host(world, "node-b").path("/tmp"))]).returncode != 0


def test_image_has_torch_not_geotrain(world: H.World) -> None:
    a = host(world, "node-a")
    which = a.run("command -v python3").stdout.strip()
    assert which == f"{world.image}/bin/python3"
    ok = a.run("cd / && python3 -c 'import torch, numpy, fsspec; print(torch.__version__)'")
    assert ok.returncode == 0 and ok.stdout.startswith("2.13.0"), ok.stderr
    for python in ("python3", "/usr/bin/python3"):
        no = a.run(f"cd / && {python} -c 'import geotrain'")
        assert no.returncode != 0 and "No module named 'geotrain'" in no.stderr, no
    env = a.run("env").stdout
    assert "GEOTRAIN_HOME" not in env and "PYTHONPATH" not in env and f"HOME={a.home}" in env


def test_hostname_resolves_to_the_private_address(world: H.World) -> None:
    for h in world.hosts:
        out = h.run(["python3", "-c", "import socket; n = socket.gethostname(); print(n, socket.gethostbyname(n))"])
        assert out.stdout.split() == [h.name, h.private_address], out
        addrs = h.run(["ip", "-4", "-o", "addr"], root=True).stdout
        assert h.private_address in addrs and (h.public_address or "none") not in addrs  # knows only its private one


def test_hosts_cannot_connect_to_the_launcher(world: H.World) -> None:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    assert launcher_connect("127.0.0.1", port).startswith("ok")  # the listener works
    listener.accept()[0].close()
    listener.setblocking(False)
    try:
        for h in (host(world, "node-a"), host(world, "vm-1")):
            results = probe(h, f"{world.launcher_address}:{port}", f"{world.launcher_public}:{port}",
                            f"127.0.0.1:{port}")
            assert all(r.startswith("fail") for r in results.values()), (h, results)
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()


def test_launcher_reaches_an_onprem_host_on_its_private_address(world: H.World, client_key: Path) -> None:
    a = host(world, "node-a")
    access = a.start_sshd(client_key.with_suffix(".pub").read_text())
    out = ssh(access, a.private_address, client_key, "echo $SSH_CLIENT; hostname; command -v python3; "
              "cd / && python3 -c 'import torch; print(torch.__version__)'")
    assert out.returncode == 0, (out.stderr, a.sshd_log())
    client, name, python, torch = out.stdout.split("\n")[:4]
    assert client.split()[0] == world.launcher_public  # behind NAT
    assert (name, python, torch[:6]) == (a.name, f"{world.image}/bin/python3", "2.13.0")


def test_public_host_reachable_only_once_allowed(world: H.World, client_key: Path) -> None:
    c = host(world, "vm-1")
    vpc = c.lan
    access = c.start_sshd(client_key.with_suffix(".pub").read_text())
    assert c.public_address and launcher_connect(c.public_address, 22).startswith("fail")
    assert launcher_connect(c.private_address, 22).startswith("fail")  # a VPC's private address: unroutable
    rule = vpc.allow(c, f"{world.launcher_public}/32", "tcp", (22, 22))
    assert rule in vpc.rules
    assert launcher_connect(c.public_address, 22).startswith("ok SSH-2.0")
    out = ssh(access, c.public_address, client_key, "echo $SSH_CLIENT; hostname")
    assert out.returncode == 0, (out.stderr, c.sshd_log())
    assert out.stdout.split()[0] == world.launcher_public and out.stdout.split()[-1] == c.name
    vpc.revoke(c, f"{world.launcher_public}/32", "tcp", (22, 22))
    assert rule not in vpc.rules
    assert launcher_connect(c.public_address, 22).startswith("fail")


def test_hosts_of_one_lan_talk_on_private_addresses(world: H.World) -> None:
    a, b = host(world, "node-a"), host(world, "node-b")
    server = serve(b, 5000)
    try:
        result = probe(a, f"{b.private_address}:5000", timeout=5)
        assert result == {f"{b.private_address}:5000": f"ok peer {a.private_address}"}
    finally:
        server.kill()
        server.wait()


def test_public_lans_meet_only_through_allowed_public_addresses(world: H.World) -> None:
    a, c, d = host(world, "node-a"), host(world, "vm-1"), host(world, "vm-2")
    server = serve(d, 6000)
    try:
        before = probe(c, f"{d.private_address}:6000", f"{d.public_address}:6000")
        assert all(r.startswith("fail") for r in before.values()), before
        d.lan.allow(d, f"{c.public_address}/32", "tcp", (6000, 6010))
        after = probe(c, f"{d.private_address}:6000", f"{d.public_address}:6000", timeout=5)
        assert after[f"{d.public_address}:6000"] == f"ok peer {c.public_address}"  # seen by its public address
        assert after[f"{d.private_address}:6000"].startswith("fail")
        # the rule admits vm-1 only: not the on-prem host, and vm-2 cannot reach the on-prem site
        assert probe(a, f"{d.public_address}:6000")[f"{d.public_address}:6000"].startswith("fail")
        assert probe(d, f"{a.private_address}:22")[f"{a.private_address}:22"].startswith("fail")
    finally:
        d.lan.revoke(d, f"{c.public_address}/32", "tcp", (6000, 6010))
        server.kill()
        server.wait()


def test_kill_all_pulls_the_plug(world: H.World) -> None:
    doomed = world._lans[0].host("doomed")
    sleeper = doomed.popen(["sleep", "600"])
    doomed.run("setsid sleep 700 >/dev/null 2>&1 < /dev/null & disown")
    server = serve(doomed, 7000)
    assert launcher_connect(doomed.private_address, 7000, timeout=5).startswith("ok")
    assert len(doomed.pids()) >= 4  # init, sleep, setsid'd sleep, server
    doomed.kill_all()
    assert doomed.closed and doomed.pids() == []
    assert sleeper.wait(5) != 0 and server.wait(5) != 0
    with pytest.raises(H.HostClosed):
        doomed.run("true")
    # gone like a VM: a connection to its address times out
    assert "timed out" in launcher_connect(doomed.private_address, 7000)


def _leftovers(idx: int) -> list[str]:
    out = [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
           if n.startswith(f"gt{idx}-")]
    out += [u for u in Path("/etc/passwd").read_text().split() if u.startswith(f"gt{idx}u")]
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    out += [t for t in tables.splitlines() if t.strip().endswith(f" gt{idx}")]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    out += [line for line in links.splitlines() if f" gt{idx}l" in line]
    routes = subprocess.run(["ip", "route"], capture_output=True, text=True).stdout
    out += [line for line in routes.splitlines() if f"10.{160 + idx}." in line]
    if (H.HOSTS_DIR / f"gt{idx}").exists():
        out.append(str(H.HOSTS_DIR / f"gt{idx}"))
    return out


def test_a_world_builds_fast_and_leaves_nothing(world: H.World) -> None:
    # a second world beside the module's: its own index, names and addresses
    start = time.monotonic()
    w = H.World()
    try:
        assert w.index != world.index and w.launcher_public != world.launcher_public
        w.lan("site").host("n1")
        w.lan("cloud", public=True).host("n2")
        built = time.monotonic() - start
        assert all(h.run("true").returncode == 0 for h in w.hosts)
        assert _leftovers(w.index)
    finally:
        t = time.monotonic()
        w.close()
        closed = time.monotonic() - t
    print(f"\na world with 2 hosts: built in {built:.2f} s, closed in {closed:.2f} s")
    assert _leftovers(w.index) == []
    # cleaning up after crashed runs never touches a world that is held (this module's, other workers')
    H.cleanup_stale()
    assert all(h.run("true").returncode == 0 for h in world.hosts if not h.closed)


def test_an_isolated_lan_admits_only_allowed_neighbours(world: H.World) -> None:
    lan = world.lan("isolated", intra_lan=False)
    a, b = lan.host("iso-a"), lan.host("iso-b")
    server = serve(b, 5001)
    try:
        target = f"{b.private_address}:5001"
        assert probe(a, target)[target].startswith("fail")
        lan.allow(b, f"{a.private_address}/32", "tcp", (5001, 5001))
        assert probe(a, target, timeout=5)[target] == f"ok peer {a.private_address}"
    finally:
        server.kill()
        server.wait()

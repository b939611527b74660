"""The on-prem provider against a real OpenSSH server on loopback (tests.fakes.sshd), with the real
node agent (geotrain.node.agent) started on the "hosts" 127.0.0.2..4 over SSH.

Every test checks at teardown that no node agent and no command of a node is left running.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import pytest

from geotrain.domain import Continent, InstanceShape, InterruptionSignal, Location, Market, Offer
from geotrain.errors import (CapacityError, CatalogError, CredentialsError, NotFoundError, ProviderError,
                             ProviderTimeoutError)
from geotrain.providers.base import LaunchRequest, NodeState, Provider
from geotrain.providers.onprem import Host, OnPremProvider, SSHFailure, load_hosts
from geotrain.providers.remote import run_token
from tests.fakes.sshd import FakeSSHD, SSHDMissing, closed_port, node_processes, silent_listener, start_sshd

pytestmark = pytest.mark.slow

ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
SITE = Location("onprem", "munich-lab", "", Continent.EUROPE)
KIND = "rtx-ws"


def onprem_offer(kind: str = KIND) -> Offer:
    return Offer(SITE, InstanceShape(kind, 16, 128, "RTX8000", 1), Market.OWNED, 0.0, 2,
                 InterruptionSignal("none", 0.0), datetime(2026, 1, 1, tzinfo=timezone.utc), "inventory test")


def request(run: str, n: int = 0, kind: str = KIND) -> LaunchRequest:
    offer = onprem_offer(kind)
    return LaunchRequest(f"{run}/{offer.offer_id}/{n}", run, offer)


@pytest.fixture(scope="module")
def sshd() -> Iterator[FakeSSHD]:
    try:
        server = start_sshd(ADDRESSES)
    except SSHDMissing as exc:
        pytest.fail(str(exc))
    yield server
    server.close()


@pytest.fixture
def node_root(tmp_path: Path) -> Path:
    return tmp_path / "hosts"


@pytest.fixture
def hosts(sshd: FakeSSHD, node_root: Path) -> Callable[..., list[Host]]:
    def make(n: int = 2, **overrides: object) -> list[Host]:
        base = {"user": sshd.user, "port": sshd.port, "key": str(sshd.client_key), "python": sys.executable,
                "root": str(node_root)}
        return [Host(**{"host": a, **base, **overrides}) for a in ADDRESSES[:n]]  # type: ignore[arg-type]
    return make


@pytest.fixture
def make(sshd: FakeSSHD, hosts: Callable[..., list[Host]], node_root: Path) -> Iterator[Callable[..., OnPremProvider]]:
    """A factory of providers on the test's state; at teardown every node is terminated and nothing of
    any node may still run."""
    def factory(host_list: list[Host] | None = None, **settings: object) -> OnPremProvider:
        options = {"known_hosts": sshd.known_hosts, "ssh_config": "none", "connect_timeout_s": 5.0,
                   "agent_ready_timeout_s": 30.0, **settings}
        return OnPremProvider({(SITE.region, KIND): host_list if host_list is not None else hosts(2)},
                              **options)  # type: ignore[arg-type]

    yield factory
    if not sshd.alive():
        sshd.restart()
    cleaner = factory(hosts(3))
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(cleaner.terminate, [n.node_id for n in cleaner.list()]))
    deadline = time.monotonic() + 5
    while node_processes(node_root) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = node_processes(node_root)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"node processes left behind: {left}"


def _state_file(home: Path) -> Path:
    return home / "providers" / "onprem" / "state.json"


def _listening(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1):
            return True
    except OSError:
        return False


# -- the inventory's hosts ------------------------------------------------------------------------

INVENTORY = """
sites:
  - site: munich-lab
    continent: europe
    uplink_gbps: 0.5
    machines:
      - instance_type: rtx-ws
        accelerator: RTX8000
        count: 2
        vcpus: 16
        memory_gib: 128
        hosts:
          - {host: 10.0.0.11, user: alice}
          - {host: gpu2.lab, user: bob, port: 2222, key: keys/lab, python: "env X=1 /opt/py/bin/python",
             root: /srv/geotrain}
      - instance_type: cpu-box
        count: 3
        vcpus: 8
        memory_gib: 32
"""


def test_load_hosts_reads_each_kinds_hosts_with_defaults(tmp_path: Path) -> None:
    path = tmp_path / "sites.yaml"
    path.write_text(INVENTORY)
    hosts = load_hosts(path)
    assert hosts[("munich-lab", "rtx-ws")] == [
        Host("10.0.0.11", "alice", 22, None, "python3", "~/.geotrain-node"),
        Host("gpu2.lab", "bob", 2222, str(tmp_path / "keys" / "lab"), "env X=1 /opt/py/bin/python", "/srv/geotrain"),
    ]
    assert hosts[("munich-lab", "cpu-box")] == []


@pytest.mark.parametrize(("change", "message"), [
    (("count: 2", "count: 3"), "2 hosts are listed but count is 3"),
    (("host: gpu2.lab, user: bob, port: 2222", "host: 10.0.0.11, user: bob, port: 22"), "listed twice"),
    (("user: alice}", "user: alice, pyhton: py}"), "pyhton: unknown field.*did you mean 'python'"),
    (("port: 2222", "port: 70000"), "port: must be a whole number <= 65535"),
    (("{host: 10.0.0.11, user: alice}", "{host: 10.0.0.11}"), "user: required field is missing"),
    (("host: 10.0.0.11", "host: -oProxyCommand=x"), "must be one word that does not start with '-'"),
])
def test_load_hosts_names_what_is_wrong(tmp_path: Path, change: tuple[str, str], message: str) -> None:
    path = tmp_path / "sites.yaml"
    path.write_text(INVENTORY.replace(*change))
    with pytest.raises(CatalogError, match=message):
        load_hosts(path)


def test_from_environment_reads_the_inventory_named_by_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "sites.yaml"
    path.write_text(INVENTORY)
    monkeypatch.setenv("GEOTRAIN_ONPREM_INVENTORY", str(path))
    provider = OnPremProvider.from_environment(known_hosts=tmp_path / "known_hosts")
    assert isinstance(provider, Provider)
    assert provider.hosts == load_hosts(path)
    assert (provider.capabilities.spot, provider.capabilities.notice_s, provider.capabilities.preemption_injection,
            provider.capabilities.shared_host) == (False, None, False, False)
    with pytest.raises(ProviderError, match=r"lists no hosts in .*sites.yaml: add hosts:") as info:
        provider.launch(request("run-x", kind="cpu-box"))
    assert info.value.scope == SITE.zone_scope
    steps = OnPremProvider.for_dry_run(inventory=path).dry_run(request("run-x"))
    assert [step["params"]["host"] for step in steps] == ["alice@10.0.0.11:22"] * 3
    monkeypatch.delenv("GEOTRAIN_ONPREM_INVENTORY")
    with pytest.raises(CredentialsError, match="no on-prem machines are listed.*GEOTRAIN_ONPREM_INVENTORY"):
        OnPremProvider.from_environment().check_credentials()


# -- launch ---------------------------------------------------------------------------------------


def test_launch_claims_a_free_machine_and_starts_the_agent_on_it(
        make: Callable[..., OnPremProvider], node_root: Path, geotrain_home: Path) -> None:
    provider = make()
    first = provider.launch(request("run-a"))
    assert (first.state, first.address, first.location) == (NodeState.RUNNING, ADDRESSES[0], SITE)
    assert first.launched_at.tzinfo == timezone.utc and first.end_reason is None
    agent = provider.agent_of(first.node_id)
    assert agent["node_dir"] == str(node_root / first.node_id)
    assert node_processes(node_root) == {agent["pid"]: "agent"}
    assert _listening("127.0.0.1", agent["port"]) and not _listening(ADDRESSES[0], agent["port"])  # loopback only
    # The token travelled on stdin into a 0600 file; it is on no command line and not in the state.
    token_file = Path(agent["node_dir"]) / "token"
    assert token_file.read_text().strip() == run_token("run-a")
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert run_token("run-a").encode() not in Path(f"/proc/{agent['pid']}/cmdline").read_bytes()
    state_file = _state_file(geotrain_home)
    assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
    assert run_token("run-a") not in state_file.read_text()
    # Another run's node takes the next free machine.
    second = provider.launch(request("run-b"))
    assert second.address == ADDRESSES[1]
    assert provider.channel().health(provider._endpoint(provider._record(second.node_id)))  # noqa: SLF001


def test_launch_is_idempotent_and_the_claims_are_shared_through_the_state_file(
        make: Callable[..., OnPremProvider], sshd: FakeSSHD, node_root: Path) -> None:
    req = request("run-a")
    first = make().launch(req)
    logins = sshd.logins()
    again, from_another_instance = make().launch(req), make().launch(req)
    assert first.node_id == again.node_id == from_another_instance.node_id
    assert sshd.logins() == logins  # found in the state file: no SSH at all
    assert list(node_processes(node_root).values()) == ["agent"]
    with pytest.raises(ValueError, match="request id"):
        make().launch(LaunchRequest(req.request_id, "run-other", req.offer))


def test_concurrent_launches_of_one_request_make_one_node(make: Callable[..., OnPremProvider],
                                                          node_root: Path) -> None:
    req = request("run-a")
    providers = [make() for _ in range(4)]
    ids: list[str] = []
    threads = [threading.Thread(target=lambda p=p: ids.append(p.launch(req).node_id)) for p in providers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ids) == 4 and len(set(ids)) == 1
    assert list(node_processes(node_root).values()) == ["agent"]


def test_no_free_machine_is_a_capacity_error_until_one_is_released(make: Callable[..., OnPremProvider]) -> None:
    provider = make()
    a = provider.launch(request("run-a"))
    b = provider.launch(request("run-b"))  # a machine is free only when no live node of *any* run holds it
    with pytest.raises(CapacityError, match="all 2 machines of kind 'rtx-ws' at site 'munich-lab' are taken") as info:
        provider.launch(request("run-a", 1))
    assert info.value.scope == SITE.zone_scope == "onprem/munich-lab"
    assert [n.node_id for n in provider.list("run-a")] == [a.node_id]  # the failed launch left no node
    provider.terminate(a.node_id)
    c = provider.launch(request("run-a", 1))
    assert c.address == a.address and c.node_id not in (a.node_id, b.node_id)


# -- SSH failures ---------------------------------------------------------------------------------


def _assert_nothing_claimed(provider: OnPremProvider, run: str) -> None:
    assert provider.list(run) == []


def test_a_refused_key_is_a_credentials_error_naming_host_user_and_key(
        make: Callable[..., OnPremProvider], hosts: Callable[..., list[Host]], sshd: FakeSSHD) -> None:
    provider = make(hosts(1, key=str(sshd.unauthorized_key)))
    with pytest.raises(CredentialsError) as info:
        provider.launch(request("run-a"))
    text = str(info.value)
    assert f"{sshd.user}@{ADDRESSES[0]}:{sshd.port}" in text and str(sshd.unauthorized_key) in text
    assert "Permission denied" in text and "authorized_keys" in text
    assert info.value.scope == SITE.zone_scope
    assert isinstance(info.value.__cause__, SSHFailure) and info.value.__cause__.returncode == 255
    _assert_nothing_claimed(provider, "run-a")
    with pytest.raises(CredentialsError, match="Permission denied"):
        provider.check_credentials()
    assert make(hosts(1)).launch(request("run-a")).address == ADDRESSES[0]  # the claim was released


def test_an_unknown_host_key_is_a_credentials_error_saying_to_add_it(
        make: Callable[..., OnPremProvider], tmp_path: Path, sshd: FakeSSHD) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    provider = make(known_hosts=empty)
    with pytest.raises(CredentialsError) as info:
        provider.launch(request("run-a"))
    assert f"ssh-keyscan -p {sshd.port} {ADDRESSES[0]} >> {empty}" in str(info.value)
    assert "fingerprint" in str(info.value)
    _assert_nothing_claimed(provider, "run-a")


def test_a_changed_host_key_is_a_credentials_error(make: Callable[..., OnPremProvider], sshd: FakeSSHD) -> None:
    provider = make(known_hosts=sshd.wrong_known_hosts)
    with pytest.raises(CredentialsError, match="does not match the one in .*wrong_known_hosts.*ssh-keygen -R"):
        provider.launch(request("run-a"))
    _assert_nothing_claimed(provider, "run-a")


def test_a_refused_connection_is_a_provider_error_and_releases_the_claim(
        make: Callable[..., OnPremProvider], hosts: Callable[..., list[Host]]) -> None:
    provider = make(hosts(1, port=closed_port(ADDRESSES[0])))
    with pytest.raises(ProviderError, match="cannot reach .*Connection refused.*sshd runs") as info:
        provider.launch(request("run-a"))
    assert not isinstance(info.value, CredentialsError) and info.value.scope == SITE.zone_scope
    _assert_nothing_claimed(provider, "run-a")


def test_a_connection_timeout_is_a_provider_error_and_releases_the_claim(
        make: Callable[..., OnPremProvider], hosts: Callable[..., list[Host]]) -> None:
    with silent_listener(ADDRESSES[0]) as port:
        provider = make(hosts(1, port=port), connect_timeout_s=1.0)
        started = time.monotonic()
        with pytest.raises(ProviderError, match="cannot reach .*timed out") as info:
            provider.launch(request("run-a"))
        assert time.monotonic() - started < 10
    assert type(info.value) is ProviderError
    _assert_nothing_claimed(provider, "run-a")


def test_an_agent_that_cannot_start_fails_the_launch_with_its_log(
        make: Callable[..., OnPremProvider], node_root: Path) -> None:
    provider = make(agent_module="geotrain.no_such_agent")
    with pytest.raises(ProviderError, match="exited at once; its log says: .*No module named geotrain.no_such_agent"):
        provider.launch(request("run-a"))
    _assert_nothing_claimed(provider, "run-a")
    assert node_processes(node_root) == {}


def slow_ssh(folder: Path) -> str:
    """An ssh client whose agent start script waits 2 s on the host after starting the agent (a slow
    host), before it reports."""
    path = folder / "slow-ssh"
    path.write_text(f"""#!{sys.executable}
import os, sys
argv = [a.replace("i=0\\nwhile [ ! -s agent.json ]", "sleep 2\\ni=0\\nwhile [ ! -s agent.json ]")
        if "GEOTRAIN-AGENT" in a else a for a in sys.argv[1:]]
os.execvp("ssh", ["ssh", *argv])
""")
    path.chmod(0o700)
    return str(path)


def test_a_launch_that_times_out_is_found_by_its_retry(
        make: Callable[..., OnPremProvider], hosts: Callable[..., list[Host]], node_root: Path, tmp_path: Path) -> None:
    # The host takes 2 s to report its agent: the launcher gives up after 1 s, not knowing the outcome.
    warm = make()
    warm.terminate(warm.launch(request("warm-up")).node_id)  # installed on the host: only the agent's start is timed
    req = request("run-a")
    with pytest.raises(ProviderTimeoutError, match="may be running: launch the same request again") as info:
        make(hosts(1), ssh=slow_ssh(tmp_path), launch_timeout_s=1.0).launch(req)
    assert info.value.scope == SITE.zone_scope
    [pending] = make().list("run-a")
    assert pending.state is NodeState.PENDING
    node = make(ssh=slow_ssh(tmp_path)).launch(req)  # takes the launch over: the agent started meanwhile
    assert (node.node_id, node.state) == (pending.node_id, NodeState.RUNNING)
    assert list(node_processes(node_root).values()) == ["agent"]  # no second agent


def test_a_connection_that_breaks_while_the_agent_starts_is_a_timeout_and_the_retry_finds_the_node(
        make: Callable[..., OnPremProvider], hosts: Callable[..., list[Host]], sshd: FakeSSHD, node_root: Path,
        tmp_path: Path) -> None:
    warm = make(hosts(1))
    warm.terminate(warm.launch(request("warm-up")).node_id)  # installed: what follows is the agent's start
    req = request("run-a")
    errors: list[BaseException] = []

    def launch() -> None:
        try:
            make(hosts(1), ssh=slow_ssh(tmp_path)).launch(req)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            errors.append(exc)

    thread = threading.Thread(target=launch)
    thread.start()
    deadline = time.monotonic() + 10
    while not node_processes(node_root) and time.monotonic() < deadline:
        time.sleep(0.02)  # the start script has started the (slow) agent
    from tests.fakes.vms import descendants

    for pid in descendants(sshd.proc.pid)[1:]:  # the session's sshd processes, not the listener
        try:  # a short-lived process of the session may have ended since it was listed
            if Path(f"/proc/{pid}/comm").read_text().strip() == "sshd":
                os.kill(pid, signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError):
            continue
    thread.join(timeout=30)
    [error] = errors
    assert isinstance(error, ProviderTimeoutError), error
    assert "broke while the node agent was being started" in str(error)
    node = make(hosts(1), ssh=slow_ssh(tmp_path)).launch(req)
    assert node.state is NodeState.RUNNING
    assert list(node_processes(node_root).values()) == ["agent"]


# -- list, lost nodes, terminate ------------------------------------------------------------------


def test_list_from_a_new_instance_and_a_node_lost_behind_the_providers_back(
        make: Callable[..., OnPremProvider], node_root: Path, tmp_path: Path) -> None:
    provider = make()
    nodes = [provider.launch(request("run-a", n)) for n in range(2)]
    assert [(n.node_id, n.state) for n in make().list("run-a")] == [(n.node_id, NodeState.RUNNING) for n in nodes]
    proc = provider.start(nodes[0].node_id, ["sleep", "600"], {}, tmp_path / "sleep.log")
    agent = provider.agent_of(nodes[0].node_id)
    os.kill(agent["pid"], signal.SIGKILL)  # only the agent: its command runs on, orphaned
    [lost, alive] = make().list("run-a")
    assert (lost.state, lost.end_reason, alive.state) == (NodeState.TERMINATED, "lost", NodeState.RUNNING)
    assert lost.ended_at is not None
    assert node_processes(Path(agent["node_dir"])) == {}  # what the lost node ran is stopped too
    assert proc.wait(timeout=10) == -9
    assert make().launch(request("run-b")).address == lost.address  # the machine is free again
    assert make().list("run-a")[0].end_reason == "lost"  # persisted


def test_terminate_stops_the_agent_releases_the_machine_and_keeps_the_first_reason(
        make: Callable[..., OnPremProvider], sshd: FakeSSHD, node_root: Path, tmp_path: Path) -> None:
    provider = make()
    node = provider.launch(request("run-a"))
    proc = provider.start(node.node_id, ["sleep", "600"], {}, tmp_path / "sleep.log")
    node_dir = Path(provider.agent_of(node.node_id)["node_dir"])
    assert set(node_processes(node_dir).values()) == {"agent", "command"}
    provider.terminate(node.node_id, reason="stopped")
    assert node_processes(node_dir) == {}
    assert proc.poll() == -9
    provider.terminate(node.node_id)
    make().terminate(node.node_id, reason="again")
    [ended] = provider.list("run-a")
    assert (ended.state, ended.end_reason) == (NodeState.TERMINATED, "stopped")
    assert ended.ended_at is not None and ended.ended_at >= ended.launched_at
    # The machine is left as it was, less the token: sshd answers, the node's logs stay.
    assert sshd.alive() and not (node_dir / "token").exists() and (node_dir / "agent.log").exists()
    assert provider.launch(request("run-a", 1)).address == node.address
    with pytest.raises(NotFoundError):
        provider.terminate("no-such-node")


def test_terminate_while_the_machine_is_unreachable_keeps_it_claimed_until_its_agent_is_stopped(
        make: Callable[..., OnPremProvider], hosts: Callable[..., list[Host]], sshd: FakeSSHD,
        node_root: Path) -> None:
    provider = make(hosts(1))
    node = provider.launch(request("run-a"))
    sshd.stop()
    try:
        with pytest.raises(ProviderError, match="recorded as ended, but its agent on .* could not be stopped"):
            provider.terminate(node.node_id, reason="stopped")
        assert provider.list("run-a")[0].end_reason == "stopped"
        with pytest.raises(CapacityError, match=f"{node.node_id} have ended but their agents could not be stopped"):
            provider.launch(request("run-b"))
    finally:
        sshd.restart()
    assert list(node_processes(node_root).values()) == ["agent"]
    provider.terminate(node.node_id)  # the retry stops the agent
    assert node_processes(node_root) == {}
    assert provider.list("run-a")[0].end_reason == "stopped"
    second = provider.launch(request("run-b"))
    assert second.address == node.address
    # A launch that finds the machine held only by such a node tries to stop its agent itself.
    sshd.stop()
    try:
        with pytest.raises(ProviderError, match="could not be stopped"):
            provider.terminate(second.node_id)
    finally:
        sshd.restart()
    third = provider.launch(request("run-c"))
    assert third.address == node.address
    assert list(node_processes(node_root)) == [provider.agent_of(third.node_id)["pid"]]


# -- start, dry run, credentials ------------------------------------------------------------------


def test_start_runs_commands_through_the_agent(make: Callable[..., OnPremProvider], tmp_path: Path) -> None:
    provider = make()
    node = provider.launch(request("run-a"))
    log = tmp_path / "echo.log"
    log.write_text("before\n")
    argv = ["python", "-c", "import os, sys, importlib.metadata as m; print(os.environ['V'], os.environ.get('HOME'), "
            "m.version('geotrain'), sys.prefix.startswith(os.path.expanduser('~/.geotrain-node/venv-')))"]
    assert provider.start(node.node_id, argv, {"V": "hello"}, log).wait(timeout=30) == 0
    home = os.path.expanduser(f"~{provider.hosts[(SITE.region, KIND)][0].user}")  # the node user's, not ours
    from geotrain.providers.shipping import wheel_name
    version = wheel_name().split("-")[1]
    assert log.read_text() == f"before\nhello {home} {version} True\n"  # the shipped geotrain, in its venv
    with pytest.raises(NotFoundError):
        provider.start("no-such-node", argv, {}, log)
    provider.terminate(node.node_id)
    with pytest.raises(ProviderError, match="it is terminated") as info:
        provider.start(node.node_id, argv, {}, log)
    assert info.value.scope == SITE.zone_scope


def test_dry_run_shows_the_ssh_commands_runs_nothing_and_hides_the_token(
        make: Callable[..., OnPremProvider], sshd: FakeSSHD, geotrain_home: Path) -> None:
    provider = make()
    logins = sshd.logins()
    ship, install, start = provider.dry_run(request("run-a"))
    assert sshd.logins() == logins and provider.list() == []
    assert not (geotrain_home / "providers" / "tokens" / "run-a").exists()  # no token was even made
    assert not (geotrain_home / "wheels").exists()  # nor a wheel built
    for step in (ship, install, start):
        params = step["params"]
        assert step["call"] == "ssh" and params["host"] == f"{sshd.user}@{ADDRESSES[0]}:{sshd.port}"
        argv = params["argv"]
        for option in ("BatchMode=yes", "StrictHostKeyChecking=yes", f"UserKnownHostsFile={sshd.known_hosts}"):
            assert argv[argv.index(option) - 1] == "-o"
        assert argv[argv.index("-p") + 1] == str(sshd.port) and argv[argv.index("-i") + 1] == str(sshd.client_key)
        assert argv[argv.index("--") - 1] == ADDRESSES[0] and argv[argv.index("--") - 3:argv.index("--") - 1] == \
            ["-l", sshd.user]
    from geotrain.providers.shipping import wheel_name
    assert wheel_name() in install["params"]["script"] and "--no-index" in install["params"]["script"]
    script = start["params"]["script"]
    assert start["params"]["stdin"] == "<run token>" and "cat > token.new" in script and "<node id>" in script
    assert "-m geotrain.node.agent --bind 127.0.0.1 --port 0" in script and "--cloud none" in script  # loopback only
    assert json.dumps([ship, install, start]).count("<run token>") == 1


def test_check_credentials_logs_into_every_machine(make: Callable[..., OnPremProvider], sshd: FakeSSHD) -> None:
    logins = sshd.logins()
    make().check_credentials()
    assert sshd.logins() == logins + 2
    with pytest.raises(CredentialsError, match="no on-prem machines are listed"):
        OnPremProvider({}).check_credentials()


def test_a_machine_without_python_3_11_is_named_with_what_to_set(
        make: Callable[..., OnPremProvider], hosts: Callable[..., list[Host]]) -> None:
    provider = make(hosts(1, python="/no/such/python3"))
    with pytest.raises(ProviderError, match=r"has no Python 3.11 or newer as '/no/such/python3'.*set python:") \
            as info:
        provider.check_credentials()
    assert not isinstance(info.value, CredentialsError)

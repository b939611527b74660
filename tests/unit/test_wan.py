"""Emulated WAN links between network namespaces (``geotrain.wan``), measured with a small TCP probe
run inside the namespaces: round-trip times, throughput, tc byte counters, endpoints joining while
traffic flows, preemption, and teardown after close() and after the owner's SIGKILL.

Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN), /dev/net/tun and iproute2; the module skips otherwise.
"""

from __future__ import annotations

import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from geotrain.procs import pid_alive
from geotrain.wan import EmulatedWan, Link, cleanup, privileges
from geotrain.wan import namespaces, state
from geotrain.wan.delayline_client import find_delaylines

REASON = privileges()
if REASON is not None:
    pytest.skip(f"no emulated WAN here: {REASON}", allow_module_level=True)

PORT = 5201
MB = 1 << 20
SKIP_BYTES = 512 * 1024
"""The receiver times a transfer from this many bytes on, past slow start and the first burst."""

PROBE = r'''
import json, socket, statistics, sys, time

def listen(address, port):
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((address, port))
    server.listen(1)
    print("listening", flush=True)
    return server.accept()[0]

def connect(address, port):
    deadline = time.monotonic() + 10
    while True:
        try:
            return socket.create_connection((address, port), timeout=10)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)

mode, address, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "echo":
    conn = listen(address, port)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while data := conn.recv(65536):
        conn.sendall(data)
elif mode == "rtt":
    conn = connect(address, port)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    samples = []
    for _ in range(int(sys.argv[4]) + 1):
        start = time.monotonic()
        conn.sendall(b"x")
        conn.recv(1)
        samples.append((time.monotonic() - start) * 1000)
    print(json.dumps({"median_ms": statistics.median(samples[1:]), "samples_ms": samples[1:]}))
elif mode == "sink":
    skip = int(sys.argv[4])
    conn = listen(address, port)
    got, since = 0, None
    while data := conn.recv(1 << 20):
        got += len(data)
        if since is None and got >= skip:
            since, counted_from = time.monotonic(), got
    seconds = time.monotonic() - since
    conn.close()
    print(json.dumps({"bytes": got, "mbit": (got - counted_from) * 8 / seconds / 1e6, "seconds": seconds}))
elif mode == "send":
    conn = connect(address, port)
    block = b"\0" * (1 << 16)
    left = int(sys.argv[4])
    while left > 0:
        conn.sendall(block[:min(left, len(block))])
        left -= min(left, len(block))
    conn.shutdown(socket.SHUT_WR)
    conn.recv(1)
    print(json.dumps({"sent": int(sys.argv[4])}))
'''


@pytest.fixture
def probe(tmp_path: Path) -> Path:
    path = tmp_path / "probe.py"
    path.write_text(PROBE)
    return path


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "wan-state"


@pytest.fixture
def wan(state_dir: Path):  # noqa: ANN201
    emulation = EmulatedWan(tag=namespaces.new_tag(), state_dir=state_dir)
    try:
        yield emulation
    finally:
        emulation.close()


def uniform(rtt_ms: float, rate_mbit: float):  # noqa: ANN201
    """link_to / link_from that give every pair the same link."""
    return lambda other: Link(rtt_ms, rate_mbit)


def start(wan: EmulatedWan, name: str, probe: Path, *args: object) -> subprocess.Popen:
    """Run the probe inside endpoint ``name``; a server's first line ("listening") is awaited."""
    argv = [*wan.exec_prefix(name), sys.executable, str(probe), *map(str, args)]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    if args[0] in ("echo", "sink"):
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "listening"
    return process


def result(process: subprocess.Popen, timeout_s: float = 20) -> dict:
    out, _ = process.communicate(timeout=timeout_s)
    assert process.returncode == 0, out
    return json.loads(out.strip().splitlines()[-1])


def rtt_ms(wan: EmulatedWan, client: str, server: str, probe: Path, rounds: int = 10) -> float:
    """Median TCP round trip (1-byte echo) from ``client`` to ``server``."""
    echo = start(wan, server, probe, "echo", wan.endpoint(server).address, PORT)
    try:
        return result(start(wan, client, probe, "rtt", wan.endpoint(server).address, PORT, rounds))["median_ms"]
    finally:
        echo.kill()
        echo.wait()


def transfer(wan: EmulatedWan, sender: str, receiver: str, probe: Path, size_bytes: int) -> dict:
    """Send ``size_bytes`` from ``sender`` to ``receiver``; the receiver's count and rate (Mbit/s
    after the first :data:`SKIP_BYTES`)."""
    sink = start(wan, receiver, probe, "sink", wan.endpoint(receiver).address, PORT, SKIP_BYTES)
    sent = start(wan, sender, probe, "send", wan.endpoint(receiver).address, PORT, size_bytes)
    out = result(sink)
    result(sent)
    return out


def assert_rtt(measured_ms: float, configured_ms: float) -> None:
    assert abs(measured_ms - configured_ms) <= 0.10 * configured_ms + 2, (measured_ms, configured_ms)


def assert_rate(measured_mbit: float, configured_mbit: float) -> None:
    assert abs(measured_mbit - configured_mbit) <= 0.15 * configured_mbit, (measured_mbit, configured_mbit)


def leftovers(tag: str) -> dict[str, list]:
    """What of run ``tag`` is still there: namespaces, delay lines, devices in the root namespace."""
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    return {"namespaces": namespaces.list_namespaces(tag), "delaylines": find_delaylines(tag),
            "devices": [line for line in links.splitlines() if f"gt{tag}" in line]}


def alive(pid: int) -> bool:
    return pid_alive(pid)


@pytest.mark.parametrize("configured_ms", [40.0, 100.0])
def test_round_trip_time_is_the_configured_one(wan: EmulatedWan, probe: Path, configured_ms: float) -> None:
    wan.add("a", uniform(configured_ms, 50), uniform(configured_ms, 50))
    wan.add("b", uniform(configured_ms, 50), uniform(configured_ms, 50))
    assert_rtt(rtt_ms(wan, "a", "b", probe), configured_ms)


@pytest.mark.parametrize("rate_mbit", [20.0, 50.0])
def test_throughput_and_tc_counters_follow_the_rate(wan: EmulatedWan, probe: Path, rate_mbit: float) -> None:
    """3 MB at the link's rate (±15 %, timed after the first 512 kB); the directed link's tc class
    counted the payload plus headers (≤ 10 %), the reverse direction only acknowledgements."""
    wan.add("a", uniform(20, rate_mbit), uniform(20, rate_mbit))
    wan.add("b", uniform(20, rate_mbit), uniform(20, rate_mbit))
    payload = 3 * MB
    before = wan.bytes_sent()
    measured = transfer(wan, "a", "b", probe, payload)
    assert measured["bytes"] == payload
    assert_rate(measured["mbit"], rate_mbit)
    after = wan.bytes_sent()
    forward = after[("a", "b")] - before.get(("a", "b"), 0)
    reverse = after[("b", "a")] - before.get(("b", "a"), 0)
    assert payload <= forward <= payload * 1.1
    assert reverse <= payload * 0.05
    assert wan.device_bytes("a").tx_bytes >= forward
    # the connection's last packet (its FIN, 52 bytes) may still be in the delay line (10 ms one way)
    # when the transfer returns: what htb counted reaches b's device a one-way trip later
    deadline = time.monotonic() + 2.0
    while wan.device_bytes("b").rx_bytes < forward and time.monotonic() < deadline:
        time.sleep(0.01)
    assert wan.device_bytes("b").rx_bytes >= forward


def test_three_endpoints_each_get_their_own_links(wan: EmulatedWan, probe: Path) -> None:
    """a–b 30 ms at 40 Mbit/s; a→c 80 ms at 20 Mbit/s, c→a at 10 Mbit/s; b and c in one zone (rtt 0,
    unshaped)."""
    wan.add("a", uniform(0, math.inf), uniform(0, math.inf))
    wan.add("b", uniform(30, 40), uniform(30, 40))
    to_c = {"a": Link(80, 10), "b": Link(0, math.inf)}      # c → other
    from_c = {"a": Link(80, 20), "b": Link(0, math.inf)}    # other → c
    wan.add("c", to_c.__getitem__, from_c.__getitem__)
    assert_rtt(rtt_ms(wan, "a", "b", probe), 30)
    assert_rtt(rtt_ms(wan, "c", "a", probe), 80)
    assert rtt_ms(wan, "b", "c", probe) < 3
    assert_rate(transfer(wan, "a", "b", probe, 2 * MB)["mbit"], 40)
    assert_rate(transfer(wan, "a", "c", probe, 2 * MB)["mbit"], 20)
    assert_rate(transfer(wan, "c", "a", probe, 2 * MB)["mbit"], 10)
    sent = wan.bytes_sent()
    for pair in [("a", "b"), ("a", "c"), ("c", "a")]:
        assert 2 * MB <= sent[pair] <= 2.2 * MB, (pair, sent)
    assert sent[("b", "c")] < 0.05 * MB


def test_egress_cap_binds_below_the_link_rate(wan: EmulatedWan, probe: Path) -> None:
    wan.add("a", uniform(10, 50), uniform(10, 50), egress_mbit=20)
    wan.add("b", uniform(10, 50), uniform(10, 50))
    assert_rate(transfer(wan, "a", "b", probe, 2 * MB)["mbit"], 20)
    assert_rate(transfer(wan, "b", "a", probe, 2 * MB)["mbit"], 50)


def test_an_endpoint_joins_while_traffic_flows_and_kill_empties_it(wan: EmulatedWan, probe: Path) -> None:
    wan.add("a", uniform(40, 20), uniform(40, 20))
    wan.add("b", uniform(40, 20), uniform(40, 20))
    payload = 4 * MB
    sink = start(wan, "b", probe, "sink", wan.endpoint("b").address, PORT, SKIP_BYTES)
    sender = start(wan, "a", probe, "send", wan.endpoint("b").address, PORT, payload)
    time.sleep(0.5)
    wan.add("d", uniform(60, 20), uniform(60, 20))
    assert sink.poll() is None, "the transfer ended before the new endpoint joined"
    assert_rtt(rtt_ms(wan, "d", "a", probe), 60)
    measured = result(sink)
    result(sender)
    assert measured["bytes"] == payload
    assert_rate(measured["mbit"], 20)
    # a preemption: everything in d's namespace dies, the namespace stays
    sleepers = [subprocess.Popen([*wan.exec_prefix("d"), "sleep", "60"]) for _ in range(2)]
    shell = subprocess.Popen([*wan.exec_prefix("d"), "sh", "-c", "sleep 60 & sleep 60 & wait"],
                             start_new_session=True)
    deadline = time.monotonic() + 5
    while len(namespaces.pids(wan.endpoint("d").namespace)) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    inside = namespaces.pids(wan.endpoint("d").namespace)
    assert len(inside) >= 5
    wan.kill("d")
    for process in [*sleepers, shell]:
        assert process.wait(timeout=5) == -signal.SIGKILL
    assert not any(alive(pid) for pid in inside)
    assert namespaces.pids(wan.endpoint("d").namespace) == []
    assert namespaces.exists(wan.endpoint("d").namespace)
    assert_rtt(rtt_ms(wan, "a", "d", probe), 60)
    counted = wan.bytes_sent()[("d", "a")]
    wan.remove("d")
    assert not namespaces.exists(namespaces.namespace_name(wan.tag, "d"))
    final = wan.bytes_sent()[("d", "a")]  # the last reading stays, and no longer moves
    assert final >= counted > 0
    wan.add("e", uniform(10, 50), uniform(10, 50))
    assert wan.bytes_sent()[("d", "a")] == final


def test_close_leaves_nothing_behind(state_dir: Path) -> None:
    wan = EmulatedWan(tag=namespaces.new_tag(), state_dir=state_dir)
    try:
        wan.add("a", uniform(10, 50), uniform(10, 50))
        wan.add("b", uniform(10, 50), uniform(10, 50))
        sleeper = subprocess.Popen([*wan.exec_prefix("a"), "sleep", "60"])
        record = state.record_path(state_dir, wan.tag)
        assert record.stat().st_mode & 0o777 == 0o600
        assert state_dir.stat().st_mode & 0o777 == 0o700
        assert leftovers(wan.tag)["namespaces"] == [f"gt-{wan.tag}-a", f"gt-{wan.tag}-b"]
    finally:
        wan.close()
    assert sleeper.wait(timeout=5) == -signal.SIGKILL
    assert leftovers(wan.tag) == {"namespaces": [], "delaylines": [], "devices": []}
    assert not record.exists()
    wan.close()  # idempotent


OWNER = r'''
import json, subprocess, sys, time
from pathlib import Path
from geotrain.procs import pid_alive
from geotrain.wan import EmulatedWan, Link
wan = EmulatedWan(tag=sys.argv[1], state_dir=Path(sys.argv[2]))
for name in ("a", "b"):
    wan.add(name, lambda other: Link(20, 50), lambda other: Link(20, 50))
sleeper = subprocess.Popen([*wan.exec_prefix("a"), "sleep", "60"], start_new_session=True)
print(json.dumps({"delayline": wan.delayline_pid, "sleeper": sleeper.pid}), flush=True)
time.sleep(60)
'''


def test_sigkill_of_the_owner_tears_everything_down(state_dir: Path) -> None:
    tag = namespaces.new_tag()
    owner = subprocess.Popen([sys.executable, "-c", OWNER, tag, str(state_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        started = json.loads(owner.stdout.readline())
        assert len(leftovers(tag)["namespaces"]) == 2
        owner.kill()
        owner.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (any(leftovers(tag).values()) or alive(started["delayline"])):
            time.sleep(0.05)
        assert leftovers(tag) == {"namespaces": [], "delaylines": [], "devices": []}
        assert not alive(started["delayline"]) and not alive(started["sleeper"])
        assert cleanup(state_dir) == []  # nothing left but the dead owner's record,
        assert state.read_all(state_dir) == []  # which cleanup() forgets
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        for namespace in namespaces.list_namespaces(tag):
            namespaces.kill_all(namespace)
            namespaces.delete(namespace)


def test_cleanup_removes_dead_owners_leftovers_only(wan: EmulatedWan, state_dir: Path) -> None:
    wan.add("a", uniform(10, 50), uniform(10, 50))
    gone = subprocess.Popen(["true"])
    gone.wait()
    me = state.ProcessId.of(os.getpid())
    assert me is not None
    dead_owners = {namespaces.new_tag(): state.ProcessId(gone.pid, 0),                    # exited
                   namespaces.new_tag(): state.ProcessId(me.pid, me.start_ticks + 1)}    # pid recycled
    made = []
    try:
        for tag, owner in dead_owners.items():
            namespace = namespaces.namespace_name(tag, "x")
            namespaces.create(namespace)
            made.append(namespace)
            state.write(state_dir, state.RunRecord(tag, owner, None, (namespace,)))
        assert sorted(cleanup(state_dir)) == sorted(made)
        assert not any(namespaces.exists(namespace) for namespace in made)
        assert [record.tag for record in state.read_all(state_dir)] == [wan.tag]
        assert namespaces.exists(wan.endpoint("a").namespace)
    finally:
        for namespace in made:
            namespaces.delete(namespace)


def test_geotrain_cleanup_removes_a_crashed_runs_namespaces(monkeypatch, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from geotrain.cli import app

    monkeypatch.setenv("GEOTRAIN_HOME", str(tmp_path / "home"))
    gone = subprocess.Popen(["true"])
    gone.wait()
    tag = namespaces.new_tag()
    namespace = namespaces.namespace_name(tag, "n0")
    namespaces.create(namespace)
    try:
        state.write(state.default_state_dir(), state.RunRecord(tag, state.ProcessId(gone.pid, 0), None, (namespace,)))
        result = CliRunner().invoke(app, ["cleanup"])
        assert result.exit_code == 0, result.output
        assert namespace in result.output and not namespaces.exists(namespace)
        again = CliRunner().invoke(app, ["cleanup"])
        assert again.exit_code == 0 and "nothing to remove" in again.output
    finally:
        namespaces.delete(namespace)

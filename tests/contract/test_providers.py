"""The contract every Provider keeps (see ``geotrain.providers.base``), run against each harness."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from datetime import timezone
from pathlib import Path

import pytest

from geotrain.errors import NotFoundError, ProviderError
from geotrain.providers.base import NodeState, Provider
from geotrain.providers.local import LocalProvider
from tests.contract.conftest import Harness, wait_until
from tests.perf_helpers import US

SLEEP = ["sleep", "600"]

# Writes <dir>/ready once its SIGUSR1 handler is in place, and <dir>/usr1 when the signal comes.
USR1_SCRIPT = """
import pathlib, signal, sys, time
out = pathlib.Path(sys.argv[1])
signal.signal(signal.SIGUSR1, lambda *_: (out / "usr1").write_text(repr(time.time())))
(out / "ready").write_text("1")
while True:
    time.sleep(0.05)
"""


def _local(harness: Harness) -> LocalProvider:
    """The local provider under the harness (a FakeProvider wraps one)."""
    assert harness.provider.capabilities.preemption_injection, harness.name
    provider = getattr(harness.provider, "inner", harness.provider)
    assert isinstance(provider, LocalProvider)
    return provider


# -- launch and list -----------------------------------------------------------------------------


def test_provider_satisfies_protocol(harness: Harness) -> None:
    assert isinstance(harness.provider, Provider)
    harness.provider.check_credentials()


def test_launch_returns_a_running_node(harness: Harness) -> None:
    run = harness.new_run()
    req = harness.request(run)
    node = harness.provider.launch(req)
    # a cloud answers while the VM still boots (pending); the local provider's node runs at once
    assert node.state in ((NodeState.RUNNING,) if harness.name in ("local", "fake") else
                          (NodeState.PENDING, NodeState.RUNNING)) and not node.ended
    assert (node.request_id, node.run_id, node.offer_id) == (req.request_id, run, req.offer.offer_id)
    assert node.location == harness.location
    assert node.launched_at.tzinfo == timezone.utc
    assert node.ended_at is None and node.end_reason is None
    assert node.address
    assert harness.backend_nodes() == 1


def test_launch_is_idempotent_per_request_id(harness: Harness) -> None:
    run = harness.new_run()
    req = harness.request(run)
    first = harness.provider.launch(req)
    again = harness.provider.launch(req)
    from_another_instance = harness.new_instance().launch(req)
    assert first.node_id == again.node_id == from_another_instance.node_id
    assert harness.backend_nodes() == 1
    assert [n.node_id for n in harness.provider.list(run)] == [first.node_id]


def test_launch_after_the_node_ended_returns_the_ended_node(harness: Harness) -> None:
    req = harness.request(harness.new_run())
    node = harness.provider.launch(req)
    harness.provider.terminate(node.node_id)
    again = harness.provider.launch(req)
    assert again.node_id == node.node_id and again.state is NodeState.TERMINATED
    assert harness.backend_nodes() == 0


def test_concurrent_launches_of_one_request_make_one_node(harness: Harness) -> None:
    req = harness.request(harness.new_run())
    instances = [harness.new_instance() for _ in range(4)]
    ids: list[str] = []
    threads = [threading.Thread(target=lambda p=p: ids.append(p.launch(req).node_id)) for p in instances]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ids) == 4 and len(set(ids)) == 1
    assert harness.backend_nodes() == 1


def test_reusing_a_request_id_for_another_run_is_an_error(harness: Harness) -> None:
    run = harness.new_run()
    req = harness.request(run)
    harness.provider.launch(req)
    with pytest.raises(ValueError, match="request id"):
        harness.provider.launch(type(req)(req.request_id, harness.new_run(), req.offer))


def test_list_finds_exactly_the_runs_nodes(harness: Harness) -> None:
    run_a, run_b = harness.new_run(), harness.new_run()
    a = [harness.provider.launch(harness.request(run_a, n)).node_id for n in range(2)]
    b = harness.provider.launch(harness.request(run_b)).node_id
    assert [n.node_id for n in harness.provider.list(run_a)] == a  # oldest first
    assert [n.node_id for n in harness.provider.list(run_b)] == [b]
    assert harness.provider.list(harness.new_run()) == []
    assert {n.node_id for n in harness.provider.list()} >= {*a, b}


# -- terminate -----------------------------------------------------------------------------------


def test_terminate_kills_the_node_and_what_runs_on_it(harness: Harness, tmp_path: Path) -> None:
    run = harness.new_run()
    node = harness.provider.launch(harness.request(run))
    proc = harness.provider.start(node.node_id, SLEEP, {}, tmp_path / "sleep.log")
    assert proc.poll() is None
    harness.provider.terminate(node.node_id)
    assert proc.poll() is not None
    assert harness.node_gone(harness.provider, node)
    [ended] = harness.provider.list(run)
    assert (ended.state, ended.end_reason) == (NodeState.TERMINATED, "terminated")
    assert ended.ended_at is not None and ended.ended_at >= ended.launched_at
    assert harness.backend_nodes() == 0


def test_terminate_is_idempotent_and_keeps_the_first_reason(harness: Harness) -> None:
    run = harness.new_run()
    node = harness.provider.launch(harness.request(run))
    harness.provider.terminate(node.node_id, reason="stopped")
    harness.provider.terminate(node.node_id)
    harness.new_instance().terminate(node.node_id, reason="again")
    [ended] = harness.provider.list(run)
    assert (ended.state, ended.end_reason) == (NodeState.TERMINATED, "stopped")


def test_unknown_node_ids_are_not_found(harness: Harness, tmp_path: Path) -> None:
    with pytest.raises(NotFoundError):
        harness.provider.terminate("no-such-node")
    with pytest.raises(NotFoundError):
        harness.provider.start("no-such-node", SLEEP, {}, tmp_path / "x.log")


def test_start_on_an_ended_node_is_refused(harness: Harness, tmp_path: Path) -> None:
    node = harness.provider.launch(harness.request(harness.new_run()))
    harness.provider.terminate(node.node_id)
    with pytest.raises(ProviderError, match="terminated") as info:
        harness.provider.start(node.node_id, SLEEP, {}, tmp_path / "x.log")
    assert info.value.scope == harness.location.zone_scope


def test_start_gives_exactly_env_and_appends_output_to_the_log(
        harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEOTRAIN_NOT_PASSED", "leaked")
    node = harness.provider.launch(harness.request(harness.new_run()))
    log = tmp_path / "logs" / "echo.log"
    log.parent.mkdir()
    log.write_text("before\n")
    argv = [sys.executable, "-c", "import os; print(os.environ['GEOTRAIN_TEST_VAR'], os.environ.get('GEOTRAIN_NOT_PASSED'))"]
    env = {k: v for k, v in os.environ.items() if k != "GEOTRAIN_NOT_PASSED"}
    proc = harness.provider.start(node.node_id, argv, {**env, "GEOTRAIN_TEST_VAR": "hello"}, log)
    assert proc.wait(timeout=30) == 0
    assert log.read_text() == "before\nhello None\n"


def test_a_command_that_exits_is_never_taken_for_one_its_node_killed(
        process_harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The node's agent writes a command's exit code before it reaps the command: a caller that polls
    while that write is slow (a loaded machine) sees the command running, then its exit code; never
    gone without one, which reads as the node's death (-9)."""
    monkeypatch.setenv("GEOTRAIN_FAULT_EXIT_WRITE_DELAY_S", "0.5")  # the agent, started below, inherits it
    node = process_harness.provider.launch(process_harness.request(process_harness.new_run()))
    proc = process_harness.provider.start(node.node_id, ["true"], dict(os.environ), tmp_path / "true.log")
    deadline = time.monotonic() + 30
    while (code := proc.poll()) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert code == 0


# -- failures behind the provider's back -----------------------------------------------------------


def test_a_node_that_dies_behind_the_providers_back_is_lost(harness: Harness) -> None:
    run = harness.new_run()
    node = harness.provider.launch(harness.request(run))
    harness.kill_behind_back(harness.provider, node)
    wait_until(lambda: harness.provider.list(run)[0].ended, 5, "the dead node to be seen")
    [lost] = harness.provider.list(run)
    assert (lost.state, lost.end_reason) == (NodeState.TERMINATED, "lost")
    assert lost.ended_at is not None
    assert harness.new_instance().list(run)[0].state is NodeState.TERMINATED  # persisted


def test_another_instance_sees_a_dead_node_as_lost(harness: Harness) -> None:
    # The first instance started the node, so its dead agent stays a zombie until that instance
    # polls it: the second must not take the zombie for a live node.
    run = harness.new_run()
    node = harness.provider.launch(harness.request(run))
    harness.kill_behind_back(harness.provider, node)
    other = harness.new_instance()
    wait_until(lambda: other.list(run)[0].ended, 5, "the dead node to be seen")
    [lost] = other.list(run)
    assert (lost.state, lost.end_reason) == (NodeState.TERMINATED, "lost")


def test_a_lost_local_node_takes_its_processes_with_it(process_harness: Harness, tmp_path: Path) -> None:
    provider = _local(process_harness)
    run = process_harness.new_run()
    node = provider.launch(process_harness.request(run))
    proc = provider.start(node.node_id, SLEEP, {}, tmp_path / "sleep.log")
    agent_pid = int((provider.node_dir(node.node_id) / "agent.pid").read_text())
    os.kill(agent_pid, 9)  # only the agent: the sleep on the node survives it for now
    wait_until(lambda: provider.list(run)[0].ended, 5, "the dead node to be seen")
    [lost] = provider.list(run)
    assert lost.end_reason == "lost"
    assert proc.wait(timeout=5) == -9
    assert process_harness.node_gone(provider, node)


# -- adoption: state is shared through the file ---------------------------------------------------


def test_another_instance_sees_and_terminates_the_nodes(harness: Harness, tmp_path: Path) -> None:
    run = harness.new_run()
    nodes = [harness.provider.launch(harness.request(run, n)) for n in range(2)]
    proc = harness.provider.start(nodes[0].node_id, SLEEP, {}, tmp_path / "sleep.log")
    other = harness.new_instance()
    seen = other.list(run)
    assert [n.node_id for n in seen] == [n.node_id for n in nodes]
    assert all(n.state in (NodeState.PENDING, NodeState.RUNNING) for n in seen)
    for n in seen:
        other.terminate(n.node_id, reason="stopped")
    assert proc.wait(timeout=5) == -9
    listed = harness.provider.list(run)  # reaps the agents this instance started
    assert {(n.state, n.end_reason) for n in listed} == {(NodeState.TERMINATED, "stopped")}
    assert all(harness.node_gone(harness.provider, n) for n in nodes)
    assert harness.backend_nodes() == 0


# -- injected preemptions (local only) ------------------------------------------------------------


def test_preempt_without_notice_kills_the_node_now(process_harness: Harness, tmp_path: Path) -> None:
    provider = _local(process_harness)
    run = process_harness.new_run()
    node = provider.launch(process_harness.request(run))
    proc = provider.start(node.node_id, SLEEP, {}, tmp_path / "sleep.log")
    provider.preempt(node.node_id)
    assert proc.poll() == -9
    assert process_harness.node_gone(provider, node)
    [ended] = provider.list(run)
    assert (ended.state, ended.end_reason) == (NodeState.PREEMPTED, "preempted")
    provider.terminate(node.node_id)  # a preempted node stays preempted
    assert provider.list(run)[0].state is NodeState.PREEMPTED


def _start_usr1_listener(provider: LocalProvider, node_id: str, tmp_path: Path) -> subprocess.Popen[bytes]:
    proc = provider.start(node_id, [sys.executable, "-c", USR1_SCRIPT, str(tmp_path)], {}, tmp_path / "w.log")
    wait_until(lambda: (tmp_path / "ready").exists(), 30, "the listener's SIGUSR1 handler")
    return proc


def test_preempt_with_notice_signals_then_kills(process_harness: Harness, tmp_path: Path) -> None:
    provider = _local(process_harness)
    run = process_harness.new_run()
    node = provider.launch(process_harness.request(run))
    proc = _start_usr1_listener(provider, node.node_id, tmp_path)
    given_at = time.time()
    provider.preempt(node.node_id, notice_s=0.5)
    notice = json.loads(provider.notice_path(node.node_id).read_text())
    assert notice["notice_s"] == 0.5 and notice["deadline"] == pytest.approx(given_at + 0.5, abs=0.2)
    wait_until(lambda: (tmp_path / "usr1").exists(), 5, "SIGUSR1 on the node")
    assert float((tmp_path / "usr1").read_text()) < notice["deadline"]
    if proc.poll() is None:  # still inside the notice period: the node runs on
        assert provider.list(run)[0].state is NodeState.RUNNING
    assert proc.wait(timeout=5) == -9
    wait_until(lambda: provider.list(run)[0].ended, 5, "the node to end")
    [ended] = provider.list(run)
    assert (ended.state, ended.end_reason) == (NodeState.PREEMPTED, "preempted")
    assert time.time() >= notice["deadline"]
    assert process_harness.node_gone(provider, node)


def test_terminating_during_the_notice_ends_the_node_as_preempted(process_harness: Harness) -> None:
    provider = _local(process_harness)
    run = process_harness.new_run()
    node = provider.launch(process_harness.request(run))
    provider.preempt(node.node_id, notice_s=30)
    provider.terminate(node.node_id)
    [ended] = provider.list(run)
    assert (ended.state, ended.end_reason) == (NodeState.PREEMPTED, "preempted")
    assert process_harness.node_gone(provider, node)


def test_the_notice_deadline_holds_when_the_process_that_gave_it_is_gone(process_harness: Harness) -> None:
    provider = _local(process_harness)
    run = process_harness.new_run()
    node = provider.launch(process_harness.request(run))
    code = "import sys; from geotrain.providers.local import LocalProvider; " \
           "LocalProvider().preempt(sys.argv[1], notice_s=0.3)"
    subprocess.run([sys.executable, "-c", code, node.node_id], check=True, timeout=60)
    assert provider.notice_path(node.node_id).exists()
    wait_until(lambda: provider.list(run)[0].ended, 5, "the node to end at its deadline")
    assert provider.list(run)[0].state is NodeState.PREEMPTED
    assert process_harness.node_gone(provider, node)


def test_a_corrupt_state_file_is_named(process_harness: Harness) -> None:
    provider = _local(process_harness)
    provider.list()
    state = provider._paths().state  # noqa: SLF001 - the file is the local provider's contract
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text("{not json")
    with pytest.raises(ProviderError, match="state.json is corrupt"):
        provider.list()
    state.unlink()


def test_an_agent_that_cannot_start_leaves_no_node(process_harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    _local(process_harness)
    from geotrain.providers import local

    monkeypatch.setattr(local, "AGENT_MODULE", "geotrain.providers.no_such_agent")
    run = process_harness.new_run()
    with pytest.raises(ProviderError, match="agent exited with code 1.*no_such_agent"):
        process_harness.provider.launch(process_harness.request(run))
    assert process_harness.provider.list(run) == []

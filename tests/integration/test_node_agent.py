"""The node agent of a remote node, through the launcher's channel, on a fake VM (a process group of this
machine, tests/fakes/vms.py): commands with their logs and exits, the run token, and preemption notices
from each cloud's metadata shape. (How an agent gets onto a real VM, over SSH, is
tests/integration/test_remote_launch_*.py's.)"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from geotrain.errors import ProviderError
from geotrain.providers.remote import AGENT_PORT, AgentChannel, AgentEndpoint, hide_token, run_token
import shlex
from tests.fakes.metadata import FakeMetadata
from tests.fakes.vms import Hypervisor

pytestmark = pytest.mark.slow  # `make test-all` runs the integration suite

# Writes <out>/ready once its SIGUSR1 handler is in place, <out>/usr1 when the signal comes.
LISTENER = """
import pathlib, signal, sys, time
out = pathlib.Path(sys.argv[1])
signal.signal(signal.SIGUSR1, lambda *_: (out / "usr1").write_text(repr(time.time())))
(out / "ready").write_text("1")
while True:
    time.sleep(0.02)
"""


@pytest.fixture
def vm_world(tmp_path: Path, geotrain_home: Path):  # noqa: ANN201
    with FakeMetadata() as metadata:
        hv = Hypervisor(tmp_path / "vms", metadata)
        try:
            yield hv, metadata
        finally:
            hv.close()


def agent_script(cloud: str, token: str) -> str:
    """A fake VM's boot: the node agent on the VM's address, with the run's token in a 0600 file."""
    return f"""#!/bin/bash
set -eu
umask 077
mkdir -p "$GEOTRAIN_NODE_ROOT"
printf '%s' {shlex.quote(token)} > "$GEOTRAIN_NODE_ROOT/token"
exec {shlex.quote(sys.executable)} -m geotrain.node.agent --bind "$GEOTRAIN_AGENT_BIND" --port {AGENT_PORT} \\
  --root "$GEOTRAIN_NODE_ROOT" --token-file "$GEOTRAIN_NODE_ROOT/token" --cloud {cloud} \\
  --metadata-url "$GEOTRAIN_METADATA_URL"
"""


def boot(hv: Hypervisor, cloud: str, run_id: str = "run-agent") -> tuple[str, AgentEndpoint]:
    vm_id = f"vm-{cloud}-{time.monotonic_ns()}"
    address = hv.new_address()
    token = run_token(run_id)
    hv.boot(vm_id, cloud, agent_script(cloud, token), address)
    return vm_id, AgentEndpoint(address, AGENT_PORT, token)


def wait_for(predicate, timeout_s: float = 10.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_the_run_token_is_private_stable_and_hidden_in_dry_runs(geotrain_home: Path) -> None:
    token = run_token("run-x")
    assert token == run_token("run-x") != run_token("run-y") and len(token) >= 32
    path = next((geotrain_home / "providers" / "tokens").glob("run-x"))
    assert path.stat().st_mode & 0o777 == 0o600
    script = agent_script("aws", token)
    assert token in script and token not in hide_token(script, token) and "<run token>" in hide_token(script, token)


def test_a_command_runs_with_exactly_its_env_and_its_output_reaches_the_log(vm_world, tmp_path: Path) -> None:
    hv, _ = vm_world
    vm_id, endpoint = boot(hv, "gcp")
    channel = AgentChannel(ready_timeout_s=30)
    log = tmp_path / "logs" / "w.log"
    argv = [sys.executable, "-c", "import os, json; print(json.dumps(dict(os.environ))); raise SystemExit(3)"]
    proc = channel.start(endpoint, argv, {"ONLY": "this"}, log, alive=lambda: hv.alive(vm_id))
    assert proc.wait(timeout=20) == 3
    env = json.loads(log.read_text().strip().splitlines()[-1])
    assert env["ONLY"] == "this" and env["GEOTRAIN_NODE_DIR"] == str(hv.node_dir(vm_id))
    assert "GEOTRAIN_AGENT_BIND" not in env  # nothing of the agent's own environment leaks in
    assert channel.health(endpoint)["cloud"] == "gcp"


def test_a_request_without_the_run_token_is_refused(vm_world, tmp_path: Path) -> None:
    hv, _ = vm_world
    vm_id, endpoint = boot(hv, "aws")
    channel = AgentChannel(ready_timeout_s=30)
    channel.wait_ready(endpoint, alive=lambda: hv.alive(vm_id))
    wrong = AgentEndpoint(endpoint.host, endpoint.port, "x" * 43)
    assert channel.health(wrong) is None
    with pytest.raises(ProviderError, match="another run's token"):
        channel.start(wrong, ["true"], {}, tmp_path / "x.log", alive=lambda: True)


@pytest.mark.parametrize("cloud", ["aws", "gcp", "azure"])
def test_a_notice_in_the_metadata_reaches_every_command(vm_world, tmp_path: Path, cloud: str) -> None:
    hv, metadata = vm_world
    vm_id, endpoint = boot(hv, cloud)
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "listen.py"
    script.write_text(LISTENER)
    channel = AgentChannel(ready_timeout_s=30)
    channel.start(endpoint, [sys.executable, str(script), str(out)], {}, tmp_path / "l.log",
                  alive=lambda: hv.alive(vm_id))
    wait_for(lambda: (out / "ready").exists())
    assert not (hv.node_dir(vm_id) / "preemption-notice.json").exists()
    metadata.notify(vm_id)
    wait_for(lambda: (out / "usr1").exists(), timeout_s=5)
    notice = json.loads((hv.node_dir(vm_id) / "preemption-notice.json").read_text())
    assert notice["source"].startswith(cloud) and notice["deadline"] > time.time()
    assert channel.health(endpoint)["notice"]["source"] == notice["source"]


def test_an_aws_rebalance_recommendation_starts_the_checkpoint_too(vm_world, tmp_path: Path) -> None:
    hv, metadata = vm_world
    vm_id, endpoint = boot(hv, "aws")
    AgentChannel(ready_timeout_s=30).wait_ready(endpoint, alive=lambda: hv.alive(vm_id))
    metadata.notify(vm_id, "rebalance")
    wait_for(lambda: (hv.node_dir(vm_id) / "preemption-notice.json").exists(), timeout_s=5)
    notice = json.loads((hv.node_dir(vm_id) / "preemption-notice.json").read_text())
    assert notice == {"deadline": None, "notice_s": None, "source": "aws rebalance recommendation"}


def test_a_vm_that_vanishes_ends_its_commands(vm_world, tmp_path: Path) -> None:
    hv, _ = vm_world
    vm_id, endpoint = boot(hv, "azure")
    channel = AgentChannel(ready_timeout_s=30)
    proc = channel.start(endpoint, ["sleep", "600"], {"PATH": "/usr/bin:/bin"}, tmp_path / "s.log",
                         alive=lambda: hv.alive(vm_id))
    assert proc.poll() is None
    hv.kill(vm_id)
    assert proc.wait(timeout=10) < 0
    with pytest.raises(ProviderError, match="ended before its agent answered"):
        channel.start(endpoint, ["true"], {}, tmp_path / "t.log", alive=lambda: hv.alive(vm_id))


def test_kill_and_stop_all_end_the_command_and_what_it_started(vm_world, tmp_path: Path) -> None:
    hv, _ = vm_world
    vm_id, endpoint = boot(hv, "gcp")
    channel = AgentChannel(ready_timeout_s=30)
    env = {"PATH": "/usr/bin:/bin"}
    first = channel.start(endpoint, ["bash", "-c", "sleep 600 & wait"], env, tmp_path / "a.log", alive=lambda: True)
    second = channel.start(endpoint, ["sleep", "600"], env, tmp_path / "b.log", alive=lambda: True)
    first.kill()
    assert first.wait(timeout=10) < 0 and second.poll() is None
    escaped = tmp_path / "escaped.pid"  # a child in a session of its own, as torchrun starts its workers
    child = (f"import os, time; os.setsid(); open({str(escaped)!r}, 'w').write(str(os.getpid())); time.sleep(600)")
    third = channel.start(endpoint, ["bash", "-c", f"{sys.executable} -c \"{child}\" & wait"], env,
                          tmp_path / "c.log", alive=lambda: True)
    wait_for(lambda: escaped.exists() and escaped.read_text().strip())
    pid = int(escaped.read_text())
    assert os.getsid(pid) == pid
    channel.stop_all(endpoint)
    assert second.wait(timeout=10) < 0 and third.wait(timeout=10) < 0
    wait_for(lambda: not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[-1][:3])
    assert hv.alive(vm_id)  # the node stays

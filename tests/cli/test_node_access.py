"""``geotrain logs``, ``exec`` and ``ssh`` on a run's nodes, and a user script's progress in the ledger.

One small local launch (two nodes, a script that reports four steps and then waits) serves every
test that needs live nodes: while it waits, exec and ssh run on its nodes and ``logs --follow`` is
started; then the script is released, and the follow must end with the run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from geotrain.cli import app
from geotrain.ledger import Ledger

runner = CliRunner()
NODES = "aws/usw2-az1/g4dn.xlarge=1,aws/usw2-az2/g4dn.xlarge=1"
SCRIPT = textwrap.dedent("""
    import os, pathlib, time
    from geotrain.train import api
    info = api.run_info()
    out = pathlib.Path(os.environ["NODE_ACCESS_OUT"])
    for step in range(1, 5):
        api.report_progress(samples=8)  # the global batch of one step (every rank reports; rank 0 counts)
        print(f"rank {info['rank']} step {step}", flush=True)
        time.sleep(0.05)
    (out / f"ready-{info['rank']}").write_text("")
    deadline = time.time() + 120
    while not (out / "release").exists() and time.time() < deadline:
        time.sleep(0.05)
    print(f"rank {info['rank']} done", flush=True)
""")


def _geotrain(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "geotrain", *args], capture_output=True, text=True, timeout=120, **kw)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from geotrain.domain import JobSpec, Objective
    from geotrain.planning.planfile import save_plan
    from geotrain.planning.planner import PlanOptions, plan_for_nodes
    from geotrain.pricing.snapshot import bundled_snapshot
    from geotrain.providers.local import LocalProvider

    tmp = tmp_path_factory.mktemp("node-access")
    home, out = tmp / "home", tmp / "out"
    out.mkdir()
    with pytest.MonkeyPatch.context() as mp:  # one home for the whole module: each test sets it again
        mp.setenv("GEOTRAIN_HOME", str(home))
        mp.setenv("NODE_ACCESS_OUT", str(out))
        script = tmp / "train.py"
        script.write_text(SCRIPT)
        job = JobSpec("node-access", "tiny-cnn", Objective.MIN_COST, target_samples_per_s=10)
        plan = plan_for_nodes(job, bundled_snapshot(), NODES, options=PlanOptions(frontier_points=0, provider="local"))
        save_plan(plan, tmp / "plan.json")
        launch = subprocess.Popen([sys.executable, "-m", "geotrain", "launch", str(tmp / "plan.json"), "--provider",
                                   "local", "--", sys.executable, str(script)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp)
        follow = None
        try:
            deadline = time.time() + 120
            while not all((out / f"ready-{r}").exists() for r in (0, 1)):
                assert launch.poll() is None and time.time() < deadline, launch.communicate()
                time.sleep(0.1)
            run_id = Ledger().latest_run_id()
            follow = subprocess.Popen([sys.executable, "-m", "geotrain", "logs", run_id, "--follow"],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            node_ids = [n.node_id for n in Ledger().nodes(run_id)]
            node_dirs = [str(LocalProvider().node_dir(n)) for n in node_ids]
            exec_all = runner.invoke(app, ["exec", run_id, "--", "sh", "-c", 'echo "at $PWD on $GEOTRAIN_NODE_ID"'])
            exec_one = runner.invoke(app, ["exec", run_id, "--node", "1", "--", "sh", "-c", "echo one; exit 3"])
            ssh = _geotrain("ssh", run_id, "0", input='echo "pwd=$(pwd -P) node=$GEOTRAIN_NODE_ID"; exit 4\n')
            following = follow.poll() is None
        finally:
            (out / "release").write_text("")
            launched = launch.communicate(timeout=120)
        followed = follow.communicate(timeout=60)
        yield SimpleNamespace(home=home, run_id=run_id, node_ids=node_ids, node_dirs=node_dirs, launch=launch,
                              launched=launched, exec_all=exec_all, exec_one=exec_one, ssh=ssh, follow=follow,
                              followed=followed, following=following)


@pytest.fixture
def at_run(run, monkeypatch):
    monkeypatch.setenv("GEOTRAIN_HOME", str(run.home))
    return run


def _lines(output: str, label: str) -> list[str]:
    return [line.split(" | ", 1)[1] for line in output.splitlines() if line.split(" | ", 1)[0].strip() == label]


def test_the_launch_counts_the_steps_and_samples_rank_0_reported(at_run):
    assert at_run.launch.returncode == 0, at_run.launched
    assert "completed: the script reported 4 steps, 32 samples;" in " ".join(at_run.launched[0].split())
    last = Ledger().last_progress(at_run.run_id)
    assert (last.step, last.samples, last.world_size) == (4, 32, 2)  # rank 1's reports are not counted
    status = json.loads(runner.invoke(app, ["status", at_run.run_id, "--json"]).stdout)
    assert [(r["step"], r["samples"]) for r in status["runs"]] == [(4, 32)]
    report = json.loads(runner.invoke(app, ["cost-report", at_run.run_id, "--json"]).stdout)
    assert [r["samples"] for r in report["runs"]] == [32]


def test_logs_show_every_node_prefixed_and_one_node_by_id_or_index(at_run):
    first, second = at_run.node_ids
    result = runner.invoke(app, ["logs"])  # the latest run
    assert result.exit_code == 0, result.output
    for rank, node in enumerate(at_run.node_ids):
        assert _lines(result.stdout, f"{node} gen1 rank{rank}") == [
            *(f"rank {rank} step {s}" for s in range(1, 5)), f"rank {rank} done"]
    assert any("generation_started" in line for line in _lines(result.stdout, "launcher"))
    by_index = runner.invoke(app, ["logs", at_run.run_id, "--node", "1"])
    by_id = runner.invoke(app, ["logs", at_run.run_id, "--node", second])
    assert by_index.exit_code == 0 and by_index.stdout == by_id.stdout
    assert _lines(by_id.stdout, f"{second} gen1 rank1")[-1] == "rank 1 done"
    assert not any(line.startswith(first) for line in by_id.stdout.splitlines())  # no line of the other node


def test_unknown_runs_and_nodes_are_input_errors_naming_the_known_ones(at_run):
    result = runner.invoke(app, ["logs", "run-nope"])
    assert result.exit_code == 2 and at_run.run_id in result.stderr
    result = runner.invoke(app, ["exec", at_run.run_id, "--node", "7", "--", "true"])
    assert result.exit_code == 2 and all(n in result.stderr for n in at_run.node_ids)
    result = runner.invoke(app, ["exec", at_run.run_id, "--", "true"])  # the run has ended: no node is up
    assert result.exit_code == 2 and "no node of run" in result.stderr
    assert [line.split(":")[0] for line in result.stderr.splitlines() if "not up" in line] == at_run.node_ids


def test_logs_follow_prints_until_the_run_ends(at_run):
    assert at_run.following, "the follow ended while the run was still running"
    assert at_run.follow.returncode == 0, at_run.followed
    for rank, node in enumerate(at_run.node_ids):
        assert _lines(at_run.followed[0], f"{node} gen1 rank{rank}")[-1] == f"rank {rank} done"
    assert any("completed" in line for line in _lines(at_run.followed[0], "launcher"))


def test_exec_runs_on_every_node_or_one_with_its_exit_code(at_run):
    result = at_run.exec_all
    assert result.exit_code == 0, result.output
    for node, where in zip(at_run.node_ids, at_run.node_dirs, strict=True):
        assert _lines(result.stdout, node) == [f"at {where} on {node}"]
    result = at_run.exec_one
    assert result.exit_code == 3
    assert result.stdout.splitlines() == [f"{at_run.node_ids[1]} | one"]


def test_ssh_on_a_local_node_is_a_shell_in_its_directory(at_run):
    result = at_run.ssh
    assert result.returncode == 4, result.stderr
    where = Path(at_run.node_dirs[0]).resolve()
    assert f"pwd={where} node={at_run.node_ids[0]}" in result.stdout


def test_ssh_to_a_cloud_vm_goes_through_its_provider_which_names_a_node_it_does_not_know(run):
    plan_json = Ledger(run.home / "ledger.sqlite").run(run.run_id).plan_json
    ledger = Ledger()  # this test's own home
    ledger.create_run(run_id="run-aws", plan_id="p", plan_json=plan_json, workload="w", provider="aws",
                      checkpoint_url="s3://b/p", launcher_pid=0, target_steps=1, options={})
    ledger.add_node(run_id="run-aws", node_id="i-0abc", request_id="r", offer_id="o", offer_json="{}", cloud="aws",
                    region="us-east-1", zone="us-east-1a", market="spot", price_usd_per_hour=1.0, launched_at=0.0)
    result = runner.invoke(app, ["ssh", "run-aws", "0"])
    assert result.exit_code == 2
    message = " ".join(result.stderr.split())
    assert "no AWS node i-0abc" in message  # this machine holds no key or record of it: nothing to log in with


def test_onprem_login_is_ssh_with_the_inventory_host_and_the_provider_checks(tmp_path):
    from geotrain.providers.onprem import OnPremProvider, _new_record, load_hosts

    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(textwrap.dedent("""
        sites:
          - site: lab
            machines:
              - instance_type: ws
                count: 1
                hosts:
                  - {host: gpu1.lab.example, user: alice, port: 2222, key: keys/id_lab}
    """))
    hosts = load_hosts(inventory)
    provider = OnPremProvider(hosts, home=tmp_path / "home", known_hosts=tmp_path / "known_hosts")
    host = hosts[("lab", "ws")][0]
    request = SimpleNamespace(request_id="r1", run_id="run-1", offer=SimpleNamespace(
        offer_id="onprem/lab/ws", location=SimpleNamespace(cloud="onprem", region="lab", zone="lab",
                                                            continent=SimpleNamespace(value="europe"))))
    with provider._locked() as paths:
        state = provider._load(paths)
        rec = _new_record(state, request, host, owner={})
        rec.update(state="running", node_dir="/home/alice/.geotrain-node/n1", agent={"pid": 1, "pgid": 1, "port": 1})
        provider._save(paths, state)
    argv = list(provider.login_command(rec["node_id"]).argv)
    assert argv[0] == "ssh" and "BatchMode=yes" not in argv
    assert {"StrictHostKeyChecking=yes", f"UserKnownHostsFile={tmp_path / 'known_hosts'}"} <= set(argv)
    assert argv[argv.index("-p") + 1] == "2222" and argv[argv.index("-i") + 1] == str(tmp_path / "keys/id_lab")
    assert argv[argv.index("-l") + 1 :][:2] == ["alice", "gpu1.lab.example"] and "-t" in argv
    assert argv[-1].startswith("cd /home/alice/.geotrain-node/n1 && export GEOTRAIN_RUN_ID=run-1 ")
    command = provider.login_command(rec["node_id"], ["nvidia-smi", "-L"]).argv
    assert command[-1].endswith("&& nvidia-smi -L") and "-t" not in command


def test_a_script_that_reports_nothing_says_so_and_remote_reports_reach_the_ledger_through_the_store():
    from geotrain.train.ledger_relay import STORE_ENV, STORE_PREFIX_ENV, drain
    from geotrain.train.progress import ProgressReporter, completed_reason

    assert "reported no progress" in completed_reason(None, script=True) and "0 steps" not in \
        completed_reason(None, script=True)
    assert completed_reason(None, script=False) == "trained 0 steps"

    class Store:  # what StoreLedger and drain use of a torch.distributed store
        def __init__(self) -> None:
            self.keys: dict[str, object] = {}

        def add(self, key, n):
            self.keys[key] = int(self.keys.get(key, 0)) + n
            return self.keys[key]

        def set(self, key, value):
            self.keys[key] = value

        def get(self, key):
            return self.keys[key].encode()

        def check(self, keys):
            return all(k in self.keys for k in keys)

        def delete_key(self, key):
            return self.keys.pop(key, None) is not None

    from geotrain.train.ledger_relay import StoreLedger

    store, clock = Store(), iter([100.0, 100.5, 100.7, 103.0])
    env = {"GEOTRAIN_RUN_ID": "run-r", "GEOTRAIN_GENERATION": "2", "RANK": "0", "WORLD_SIZE": "3",
           "GEOTRAIN_LEDGER": "store", STORE_ENV: "10.0.0.1:29500", STORE_PREFIX_ENV: "secret/gen2/"}
    reporter = ProgressReporter(env, clock=lambda: next(clock), connect=lambda e, rank: StoreLedger(store, rank))
    for _ in range(3):
        reporter.report(24)  # the first is written at once, the next two wait for the flush
    reporter.flush()
    other = ProgressReporter({**env, "RANK": "1"}, connect=lambda e, rank: pytest.fail("rank 1 never writes"))
    other.report(24)
    ledger = Ledger()
    assert drain(store, ledger, range(3), {}) == 2
    rows = ledger.progress_rows("run-r")
    assert [(r.step, r.samples, r.generation, r.world_size) for r in rows] == [(1, 24, 2, 3), (3, 72, 2, 3)]
    assert rows[1].samples_per_s == pytest.approx(48 / 3.0)
    with pytest.raises(ValueError):
        reporter.report(-1)

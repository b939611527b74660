"""``geotrain launch PLAN --data LOCATION``: the built-in runtime trains the plan's workload on the
user's data. The referee is what the workers say in their own logs and what the launcher refuses:
data that the workload cannot train on is refused before any node boots where the launcher can see
it, and where only the nodes can (a URL), the run stops at the first worker's reason instead of
spending its restart budget."""

from __future__ import annotations

import numpy as np
import pytest

from geotrain.files import geotrain_home
from geotrain.ledger import Ledger, RunStatus
from tests.integration.test_launch import assert_no_orphans
from tests.integration.test_user_training_api import geotrain
from tests.unit.test_userdata import image_folder

NODES = "aws/usw2-az1/g4dn.xlarge,aws/usw2-az2/g4dn.xlarge"


def plan(tmp_path, workload: str):
    out = tmp_path / "plan.json"
    geotrain("plan", "--workload", workload, "--strategy", "allreduce", "--provider", "local", "--target-sps", "1",
             "--nodes", NODES, "-o", str(out))
    return out


@pytest.mark.slow
def test_a_plan_trains_on_the_users_image_folder(tmp_path):
    images = image_folder(tmp_path / "images", classes=3, per_class=4)
    geotrain("launch", str(plan(tmp_path, "tiny-cnn")), "--yes", "--steps", "4", "--checkpoint-every", "4",
             "--data", str(images))
    run_id = Ledger().latest_run_id()
    assert Ledger().run(run_id).status == RunStatus.COMPLETED
    logs = sorted((geotrain_home() / "runs" / run_id / "logs").glob("gen001-rank*.log"))
    assert len(logs) == 2
    for log in logs:
        assert f"tiny-cnn on the image folder {images}: 12 images of 3 classes at 32x32" in log.read_text(), log
    assert_no_orphans(run_id)


@pytest.mark.parametrize("data, message", [
    ("missing", "--data: {tmp}/missing does not exist on this machine"),
    ("eleven", "--data: {tmp}/eleven has 11 classes; the model predicts 10"),
])
def test_data_the_workload_cannot_train_on_is_refused_before_a_node_boots(tmp_path, data, message):
    if data == "eleven":
        image_folder(tmp_path / "eleven", classes=11, per_class=1)
    result = geotrain("launch", str(plan(tmp_path, "tiny-cnn")), "--yes", "--steps", "2",
                      "--data", str(tmp_path / data), check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    said = " ".join((result.stdout + result.stderr).split())
    assert message.format(tmp=tmp_path) in said, said
    assert "Traceback" not in said
    assert not (geotrain_home() / "runs").exists() or not list((geotrain_home() / "runs").iterdir())


def test_a_command_reads_its_own_data(tmp_path):
    result = geotrain("launch", str(plan(tmp_path, "tiny-cnn")), "--yes", "--data", str(tmp_path), "--",
                      "python", "train.py", check=False)
    assert result.returncode == 2 and "--data is the built-in runtime's" in " ".join(result.stderr.split())


@pytest.mark.slow
def test_data_only_the_nodes_can_read_stops_the_run_at_the_first_workers_reason(tmp_path):
    np.save(tmp_path / "tokens.npy", np.arange(64))  # never copied where the URL points
    result = geotrain("launch", str(plan(tmp_path, "tiny-lm")), "--yes", "--steps", "2",
                      "--data", "memory://nowhere/tokens.npy", check=False)
    said = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 5, said
    assert "cannot train on the data given with --data: cannot copy memory://nowhere/tokens.npy" in said, said
    assert "Fix --data and launch again" in said and "Traceback" not in said
    run_id = Ledger().latest_run_id()
    assert Ledger().run(run_id).status == RunStatus.FAILED
    restarts = [e for e in Ledger().events(run_id) if e.kind == "worker_failed"]
    assert len(restarts) == 1, restarts  # not retried
    assert_no_orphans(run_id)

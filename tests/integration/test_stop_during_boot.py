"""Stop means stop, during boot too: a 2-node AWS run (boto3 against the moto-based fake) whose VMs never
answer (no hypervisor boots them: nothing listens on their agent port) is sent SIGINT while the launcher
waits for them; every instance is terminated in moto well within a minute, not after 600 s per node.

The launcher's boot wait is :func:`geotrain.launcher.boot.boot_generation`, which
``Launcher._start_generation`` calls first.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import boto3
import pytest

from geotrain.domain import JobSpec, Objective, SyncSettings, SyncStrategyName
from geotrain.launcher.loop import Launcher
from geotrain.launcher.options import LaunchOptions
from geotrain.ledger import Ledger
from geotrain.planning.planner import PlanOptions, plan_for_nodes
from geotrain.pricing.snapshot import bundled_snapshot
from geotrain.providers.remote import AgentChannel
from tests.contract.harness_aws import aws_provider
from tests.fakes.aws import FakeAws

pytestmark = pytest.mark.slow

STOP_TO_RELEASED_S = 60.0  # the target, whatever the number of nodes


def two_node_plan():  # noqa: ANN201
    job = JobSpec("stop-in-boot", "convnext-large", Objective.MIN_COST, target_samples_per_s=10,
                  sync=SyncSettings(SyncStrategyName.LOCAL_SGD, local_steps=8))
    return plan_for_nodes(job, bundled_snapshot(), "aws/usw2-az1/g4dn.xlarge=2", options=PlanOptions(frontier_points=0))


def test_ctrl_c_during_boot_releases_every_instance_within_a_minute(tmp_path: Path, geotrain_home: Path) -> None:
    with FakeAws() as fake:  # no hypervisor: the instances run in moto, their agents never answer
        provider = aws_provider(fake, None, channel=AgentChannel())  # the real 600 s ready timeout
        options = LaunchOptions(train_workload="tiny-cnn", steps=10, checkpoint_url=str(tmp_path / "ckpt"),
                                control_address="127.0.0.1", backoff_s=0.05)
        launcher = Launcher(two_node_plan(), provider, options=options)
        run_id = launcher.start()
        running = threading.Event()
        marks: dict[str, float] = {}

        def interrupt() -> None:  # Ctrl-C once both instances run and the launcher waits for their agents
            deadline = time.monotonic() + 60
            while fake.vms.live() < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1.5)  # well inside the boot wait
            if running.is_set():
                marks["stop"] = time.monotonic()
                os.kill(os.getpid(), signal.SIGINT)
                while fake.vms.live() > 0 and time.monotonic() - marks["stop"] < 120:
                    time.sleep(0.02)
                marks["released"] = time.monotonic()

        sender = threading.Thread(target=interrupt, daemon=True)
        sender.start()
        running.set()
        try:
            outcome = launcher.run()
        finally:
            running.clear()
        sender.join(timeout=130)
        assert "stop" in marks, "the run ended before it was interrupted"
        assert (outcome.status, outcome.reason) == ("stopped", "interrupted"), outcome
        took = marks["released"] - marks["stop"]
        print(f"\nSIGINT during boot (2 nodes, agents silent) -> both instances terminated in moto: {took:.2f} s")
        assert fake.vms.live() == 0
        assert len(fake.vms.made) == 2
        assert took <= STOP_TO_RELEASED_S, f"{took:.1f} s from SIGINT to released"
        assert all(n.ended for n in provider.list(run_id))
        assert all(row.ended_at is not None for row in Ledger().nodes(run_id))
        ec2 = boto3.client("ec2", region_name="us-west-2", endpoint_url=fake.endpoint_url,
                           aws_access_key_id="testing", aws_secret_access_key="testing")
        states = {i["State"]["Name"] for r in ec2.describe_instances(
            Filters=[{"Name": "tag:geotrain-run", "Values": [run_id]}])["Reservations"] for i in r["Instances"]}
        assert states == {"terminated"}

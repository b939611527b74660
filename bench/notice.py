"""A cloud's preemption notice → the node's emergency checkpoint (target: within 5 s).

For each cloud (aws, gcp, azure): a 2-node run through the real provider and SDK against the local
fake (moto server, the Compute Engine fake, the ARM fake), each instance booted as a local VM running
its startup script and the node agent, the training runtime on them. Once training is under way, the
fake metadata service of one VM starts answering a spot notice (AWS IMDSv2 instance-action, GCP
``preempted``, Azure Scheduled Events ``Preempt``); measured from that moment:

- ``agent_s``: until the VM's agent first read the notice (its metadata poll, every POLL_S = 1 s);
- ``saved_s``: until the emergency checkpoint was committed (the ledger's checkpoint_saved).

    .venv/bin/python bench/notice.py [--clouds aws,gcp,azure] [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGET_S = 5.0
NODES = {"aws": "aws/usw2-az1/g4dn.xlarge=2", "gcp": "gcp/us-west1-b/n1-standard-8+T4=2",
         "azure": "azure/eastus/Standard_NC4as_T4_v3=2"}


def provider_for(cloud: str, hypervisor, stack: list):  # noqa: ANN001, ANN201
    from geotrain.providers.remote import AgentChannel

    channel = AgentChannel(ready_timeout_s=60)
    if cloud == "aws":
        from tests.contract.harness_aws import aws_provider
        from tests.fakes.aws import FakeAws

        fake = FakeAws(hypervisor=hypervisor)
        stack.append(fake.stop)
        return aws_provider(fake, None, channel=channel)
    if cloud == "gcp":
        from google.auth.credentials import AnonymousCredentials

        from geotrain.providers.gcp import ComputeClients, GcpProvider
        from tests.fakes.gcp import PROJECT, GcpComputeFake

        fake = GcpComputeFake(hypervisor=hypervisor).start()
        stack.append(fake.stop)
        return GcpProvider(PROJECT, clients=ComputeClients.build(AnonymousCredentials(), api_endpoint=fake.url),
                           control_cidr="127.0.0.0/8", channel=channel, poll_s=0.05)
    from tests.contract.harness_azure import azure_provider
    from tests.fakes.azure_vms import AzureVmFake

    fake = AzureVmFake(regions=set(), hypervisor=hypervisor).start()
    stack.append(fake.stop)
    return azure_provider(fake, None, channel=channel)


def one(cloud: str, root: Path) -> dict:
    import threading

    from geotrain.domain import JobSpec, Objective, SyncSettings, SyncStrategyName
    from geotrain.launcher.loop import Launcher
    from geotrain.launcher.options import LaunchOptions
    from geotrain.ledger import EventKind, Ledger
    from geotrain.planning.planner import PlanOptions, plan_for_nodes
    from geotrain.pricing.snapshot import bundled_snapshot
    from tests.fakes.metadata import FakeMetadata
    from tests.fakes.vms import Hypervisor

    os.environ["GEOTRAIN_HOME"] = str(root / "home")
    stack: list = []
    metadata = FakeMetadata().start()
    hypervisor = Hypervisor(root / "vms", metadata)
    try:
        provider = provider_for(cloud, hypervisor, stack)
        job = JobSpec("notice", "convnext-large", Objective.MIN_COST, target_samples_per_s=1,
                      sync=SyncSettings(SyncStrategyName.ALLREDUCE))
        plan = plan_for_nodes(job, bundled_snapshot(), NODES[cloud], options=PlanOptions(frontier_points=0))
        options = LaunchOptions(train_workload="tiny-cnn", steps=100_000, checkpoint_every=100_000, progress_every=2,
                                checkpoint_url=str(root / "ckpt"), control_address="127.0.0.1")
        launcher = Launcher(plan, provider, options=options)
        run_id = launcher.start()
        result: dict = {}

        def watch() -> None:
            ledger = Ledger()
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and not (ledger.last_progress(run_id) and
                                                       ledger.last_progress(run_id).step >= 6):
                time.sleep(0.05)
            node = launcher.members[0]
            vm = next(vm for vm, address in hypervisor.addresses.items() if address == node.address)
            given = time.time()
            metadata.notify(vm)
            while time.monotonic() < deadline:
                saved = [e for e in ledger.events(run_id, kinds=(EventKind.CHECKPOINT_SAVED,))
                         if e.detail.get("purpose") == "emergency"]
                if saved:
                    result.update(agent_s=metadata.first_served.get(vm, float("nan")) - given,
                                  saved_s=saved[0].at - given)
                    break
                time.sleep(0.02)
            launcher.request_stop("bench done")

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        launcher.run()
        thread.join(timeout=10)
        return result
    finally:
        hypervisor.close()
        for stop in reversed(stack):
            stop()
        metadata.stop()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clouds", default="aws,gcp,azure")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    worst = 0.0
    for cloud in args.clouds.split(","):
        runs = []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as tmp:
                runs.append(one(cloud, Path(tmp)))
        agent = [r["agent_s"] for r in runs if r]
        saved = [r["saved_s"] for r in runs if r]
        missing = sum(1 for r in runs if not r)
        worst = max([worst, *saved]) if saved else float("inf")
        print(f"{cloud:6s} notice → agent read it: median {statistics.median(agent):.2f} s (max {max(agent):.2f}); "
              f"→ emergency checkpoint committed: median {statistics.median(saved):.2f} s (max {max(saved):.2f}) "
              f"over {len(saved)} runs" + (f"; {missing} run(s) saw no checkpoint" if missing else ""))
    print(f"worst notice → checkpoint: {worst:.2f} s; target ≤ {TARGET_S:.0f} s: "
          f"{'met' if worst <= TARGET_S else 'MISSED'} (ratio {worst / TARGET_S:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

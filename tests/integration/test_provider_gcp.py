"""The GCP provider through the real google-cloud-compute clients (REST) against the local Compute Engine fake
(tests/fakes/gcp/compute.py): what launch sends, idempotency, every error mapping, half-way failures,
timeouts, list / terminate / preemption, the firewall rules, dry runs, and one node agent end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials, Credentials

from geotrain.domain import Continent, InstanceShape, InterruptionSignal, Location, Market, Offer
from geotrain.errors import (
    CapacityError,
    ConfigurationError,
    CredentialsError,
    NotFoundError,
    ProviderError,
    ProviderTimeoutError,
    QuotaError,
    ThrottledError,
)
from geotrain.providers.base import LaunchRequest, NodeState, Provider
from geotrain.providers.gcp import ComputeClients, GcpProvider
from geotrain.providers.gcp.shapes import DEFAULT_IMAGE, gce_request_id, instance_name, run_tag
from geotrain.providers.cloudnodes import SSH_PORT
from tests.contract.harness_gcp import LOOPBACK_NODES
from tests.fakes.gcp import PROJECT, GcpComputeFake

US = Location("gcp", "us-central1", "us-central1-a", Continent.NORTH_AMERICA)
US_B = Location("gcp", "us-central1", "us-central1-b", Continent.NORTH_AMERICA)
US_REGION = Location("gcp", "us-central1", "", Continent.NORTH_AMERICA)
REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # about 25 s


def offer(location: Location = US, instance_type: str = "n1-standard-8+T4", market: Market = Market.SPOT,
          accelerator: str | None = "T4", count: int = 1) -> Offer:
    return Offer(location, InstanceShape(instance_type, 8, 30, accelerator, count), market, 0.2, None,
                 InterruptionSignal(None, None), datetime(2026, 1, 1, tzinfo=timezone.utc), "test")


def req(run: str, n: int = 0, o: Offer | None = None) -> LaunchRequest:
    o = o or offer()
    return LaunchRequest(f"{run}/{o.offer_id}/{n}", run, o)


def new_run() -> str:
    return f"run-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def server() -> Iterator[GcpComputeFake]:
    with GcpComputeFake() as fake:
        yield fake


@pytest.fixture
def fake(server: GcpComputeFake) -> Iterator[GcpComputeFake]:
    server.reset()
    yield server
    server.reset()


def gcp(fake: GcpComputeFake, **kw) -> GcpProvider:  # noqa: ANN003
    kw.setdefault("control_cidr", "127.0.0.0/8")
    kw.setdefault("sleep", lambda s: None)
    kw.setdefault("poll_s", 0.01)
    kw.setdefault("nodes", LOOPBACK_NODES)
    clients = kw.pop("clients", None) or ComputeClients.build(AnonymousCredentials(), api_endpoint=fake.url)
    return GcpProvider(PROJECT, clients=clients, **kw)


def items(metadata: dict) -> dict[str, str]:
    return {i["key"]: i["value"] for i in metadata["items"]}


# -- what launch sends ---------------------------------------------------------------------------------


def test_a_spot_launch_makes_a_spot_vm_in_the_planned_zone_with_the_script_labels_and_tags(fake) -> None:
    provider = gcp(fake)
    assert isinstance(provider, Provider)
    run = new_run()
    request = req(run)
    node = provider.launch(request)
    assert node.node_id == instance_name(request.request_id)
    assert (node.state, node.location, node.offer_id, node.run_id) == \
        (NodeState.RUNNING, US, request.offer.offer_id, run)
    assert node.address.startswith("127.0.1.") and node.launched_at.tzinfo == timezone.utc
    zone, inst = fake.find(node.node_id)
    assert zone == "us-central1-a"
    assert inst["machineType"].endswith("/zones/us-central1-a/machineTypes/n1-standard-8")
    gpus = [(g["acceleratorType"].split("/projects/")[1], g["acceleratorCount"]) for g in inst["guestAccelerators"]]
    assert gpus == [(f"{PROJECT}/zones/us-central1-a/acceleratorTypes/nvidia-tesla-t4", 1)]
    assert inst["scheduling"] == {"provisioningModel": "SPOT", "instanceTerminationAction": "DELETE",
                                  "onHostMaintenance": "TERMINATE", "automaticRestart": False}
    meta = items(inst["metadata"])
    script = meta["startup-script"]
    # the VM gets an sshd of geotrain's own with this node's host key and the run's login key, nothing else
    from geotrain.providers.remote import run_token
    from geotrain.providers.runkeys import host_key, login_key

    assert script.startswith("#!/bin/bash") and f"Port {SSH_PORT}" in script and "geotrain.node.agent" not in script
    assert host_key(run, request.request_id).private.strip() in script and login_key(run)[1] in script
    assert run_token(run) not in script
    assert (meta["geotrain-run"], meta["geotrain-request"], meta["geotrain-offer"]) == \
        (run, request.request_id, request.offer.offer_id)
    assert inst["labels"]["geotrain-run"] == run and len(inst["labels"]["geotrain-request"]) == 32
    assert inst["tags"]["items"] == [f"gt-{run}"] == [run_tag(run)]
    disk = inst["disks"][0]
    assert disk["boot"] and disk["autoDelete"] and disk["initializeParams"]["sourceImage"] == DEFAULT_IMAGE
    assert DEFAULT_IMAGE.startswith("projects/deeplearning-platform-release/global/images/family/")
    nic = inst["networkInterfaces"][0]
    assert nic["network"].endswith("/global/networks/default")
    assert nic["accessConfigs"][0]["type"] == "ONE_TO_ONE_NAT" and nic["accessConfigs"][0]["natIP"] == node.address
    assert node.private_address == nic["networkIP"] and node.private_address.startswith("10.128.")
    [insert] = [q for m, e, p, q, b in fake.compute_log if e == "instances.insert"]
    assert insert["requestId"] == str(uuid.UUID(insert["requestId"])) == gce_request_id(request.request_id)


def test_the_run_firewall_opens_only_the_ssh_port_to_the_launcher_and_tcp_between_its_nodes(fake) -> None:
    provider = gcp(fake, control_cidr="203.0.113.7")
    run = new_run()
    provider.launch(req(run, 0))
    provider.launch(req(run, 1))
    assert sorted(fake.firewalls) == [f"gt-{run}-agent", f"gt-{run}-peers"]
    assert fake.compute_calls()["firewalls.insert"] == 2  # once per run
    agent, peers = fake.firewalls[f"gt-{run}-agent"], fake.firewalls[f"gt-{run}-peers"]
    for rule in (agent, peers):
        assert rule["direction"] == "INGRESS" and rule["network"].endswith("/global/networks/default")
        assert rule["targetTags"] == [f"gt-{run}"]
    assert agent["sourceRanges"] == ["203.0.113.7/32"] and "sourceTags" not in agent
    assert agent["allowed"] == [{"IPProtocol": "tcp", "ports": [str(SSH_PORT)]}]
    assert peers["sourceTags"] == [f"gt-{run}"] and "sourceRanges" not in peers
    assert peers["allowed"] == [{"IPProtocol": "tcp"}]
    nodes = provider.list(run)
    provider.terminate(nodes[0].node_id)
    assert sorted(fake.firewalls) == [f"gt-{run}-agent", f"gt-{run}-peers"]  # a node of the run is left
    provider.terminate(nodes[1].node_id)
    assert fake.firewalls == {}  # the run's last node is gone


def test_on_demand_has_no_spot_options_and_bundled_gpu_types_no_attached_gpus(fake) -> None:
    provider = gcp(fake)
    run = new_run()
    provider.launch(req(run, 0, offer(market=Market.ON_DEMAND)))
    a2 = provider.launch(req(run, 1, offer(instance_type="a2-highgpu-1g", accelerator="A100")))
    g2 = provider.launch(req(run, 2, offer(instance_type="g2-standard-4", accelerator="L4",
                                           market=Market.ON_DEMAND)))
    n1 = provider.launch(req(run, 3, offer(instance_type="n1-standard-16+2xV100", accelerator="V100", count=2)))
    by_type = {i["machineType"].rsplit("/", 1)[1]: i for i in fake.live_instances()}
    on_demand = by_type["n1-standard-8"]
    assert on_demand["scheduling"] == {"provisioningModel": "STANDARD", "onHostMaintenance": "TERMINATE",
                                       "automaticRestart": True}
    assert "instanceTerminationAction" not in on_demand["scheduling"]
    assert "guestAccelerators" not in by_type["a2-highgpu-1g"] and "guestAccelerators" not in by_type["g2-standard-4"]
    assert by_type["a2-highgpu-1g"]["scheduling"]["provisioningModel"] == "SPOT"
    assert by_type["g2-standard-4"]["scheduling"]["provisioningModel"] == "STANDARD"
    [gpus] = by_type["n1-standard-16"]["guestAccelerators"]
    assert gpus["acceleratorType"].endswith("/acceleratorTypes/nvidia-tesla-v100") and gpus["acceleratorCount"] == 2
    assert {a2.state, g2.state, n1.state} == {NodeState.RUNNING}


def test_an_offer_geotrain_cannot_name_in_gce_is_refused_before_any_call(fake) -> None:
    with pytest.raises(ProviderError, match="no N1-attachable GCE accelerator"):
        gcp(fake).launch(req(new_run(), o=offer(instance_type="n1-standard-8+X9", accelerator="X9")))
    assert fake.compute_log == []


def test_a_region_wide_offer_tries_the_regions_zones_until_one_can_make_it(fake) -> None:
    fake.stockout["us-central1-a"] = "ZONE_RESOURCE_POOL_EXHAUSTED"
    provider = gcp(fake)
    run = new_run()
    h100 = offer(US_REGION, "a3-highgpu-1g", accelerator="H100")
    node = provider.launch(req(run, 0, h100))
    assert node.location == US_REGION and node.state is NodeState.RUNNING
    assert fake.find(node.node_id)[0] == "us-central1-b"
    assert [n.node_id for n in provider.list(run)] == [node.node_id]
    # b and c out of stock too, and us-central1-f does not sell a3-highgpu-1g
    fake.stockout.update({"us-central1-b": "ZONE_RESOURCE_POOL_EXHAUSTED", "us-central1-c": "STOCKOUT"})
    refused = "no zone of us-central1 .*us-central1-c: no capacity, us-central1-f: not sold there"
    with pytest.raises(CapacityError, match=refused) as info:
        provider.launch(req(run, 1, h100))
    assert info.value.scope == "gcp/us-central1"
    assert len(fake.live_instances()) == 1 and len(provider.list(run)) == 1


def test_a_machine_type_the_zone_does_not_sell_is_a_configuration_error_of_that_offer(fake) -> None:
    provider = gcp(fake)
    run = new_run()
    us_f = Location("gcp", "us-central1", "us-central1-f", Continent.NORTH_AMERICA)
    h100 = offer(us_f, "a3-highgpu-1g", accelerator="H100")
    with pytest.raises(ConfigurationError, match="a3-highgpu-1g.*us-central1-f does not sell it") as info:
        provider.launch(req(run, o=h100))
    assert not isinstance(info.value, CapacityError) and info.value.offer_id == h100.offer_id
    assert info.value.scope == "gcp/us-central1/us-central1-f" and type(info.value.__cause__).__name__ == "BadRequest"
    assert provider.list(run) == [] and fake.instances == {} and fake.firewalls == {}


def test_an_image_that_does_not_exist_is_a_configuration_error_of_the_request_and_no_other_zone_is_tried(fake):
    provider = gcp(fake)
    fake.missing_images.add(provider.image)
    run = new_run()
    with pytest.raises(ConfigurationError, match="no such image.*was not found.*image") as info:
        provider.launch(req(run, o=offer(US_REGION, "a3-highgpu-1g", accelerator="H100")))  # region-wide
    assert info.value.offer_id is None and type(info.value.__cause__).__name__ == "NotFound"
    inserts = [e for e in fake.compute_log if e[1] == "instances.insert"]
    assert len(inserts) == 1, "another zone was tried for a missing image"
    assert provider.list(run) == [] and fake.instances == {} and fake.firewalls == {}


def test_a_zone_out_of_stock_is_still_capacity(fake) -> None:
    fake.stockout["us-central1-a"] = "ZONE_RESOURCE_POOL_EXHAUSTED"
    us_a = Location("gcp", "us-central1", "us-central1-a", Continent.NORTH_AMERICA)
    with pytest.raises(CapacityError, match="ZONE_RESOURCE_POOL_EXHAUSTED") as info:
        gcp(fake).launch(req(new_run(), o=offer(us_a, "a3-highgpu-1g", accelerator="H100")))
    assert not isinstance(info.value, ConfigurationError) and info.value.scope == "gcp/us-central1/us-central1-a"


# -- idempotency ---------------------------------------------------------------------------------------


def test_launch_is_idempotent_per_request_id_across_instances(fake, geotrain_home: Path) -> None:
    run = new_run()
    request = req(run)
    first = gcp(fake).launch(request)
    again = gcp(fake).launch(request)
    assert first.node_id == again.node_id and len(fake.live_instances()) == 1
    assert fake.compute_calls()["instances.insert"] == 1
    with pytest.raises(ValueError, match="request id"):
        gcp(fake).launch(LaunchRequest(request.request_id, new_run(), request.offer))
    gcp(fake).terminate(first.node_id)
    ended = gcp(fake).launch(request)  # an ended node is still the request's node
    assert ended.node_id == first.node_id and ended.state is NodeState.TERMINATED
    assert fake.live_instances() == []


def test_gce_deduplicates_a_resent_request_id(fake) -> None:
    # two processes that both missed the other's record send the same insert: one VM, one operation
    clients = ComputeClients.build(AnonymousCredentials(), api_endpoint=fake.url)
    from google.cloud import compute_v1

    from geotrain.providers.gcp.shapes import instance_body

    request = req(new_run())
    body = instance_body(name="gt-dedup", zone="us-central1-a", request_id=request.request_id, run_id=request.run_id,
                         offer=request.offer, script="#!/bin/bash\n")
    resource = compute_v1.Instance.from_json(json.dumps(body))
    ops = [clients.instances.insert_unary(request={"project": PROJECT, "zone": "us-central1-a", "request_id": "r-1",
                                                   "instance_resource": resource}) for _ in range(2)]
    assert ops[0].name == ops[1].name and len(fake.live_instances()) == 1


# -- errors --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", ["ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"])
def test_a_stockout_is_a_capacity_error_of_the_zone_and_leaves_nothing(fake, code: str) -> None:
    fake.stockout["us-central1-a"] = code
    provider = gcp(fake)
    run = new_run()
    with pytest.raises(CapacityError, match=code) as info:
        provider.launch(req(run))
    assert info.value.scope == "gcp/us-central1/us-central1-a"
    assert provider.list(run) == [] and fake.live_instances() == [] and fake.firewalls == {}
    fake.stockout.clear()
    node = provider.launch(req(run))  # the retry is a new attempt: GCE would answer the old id with the old failure
    assert node.state is NodeState.RUNNING
    inserts = [q["requestId"] for m, e, p, q, b in fake.compute_log if e == "instances.insert"]
    assert len(inserts) == 2 and len(set(inserts)) == 2


def test_a_failed_launch_half_way_deletes_the_vm_it_left_and_the_runs_firewall(fake) -> None:
    fake.stockout["us-central1-a"] = "ZONE_RESOURCE_POOL_EXHAUSTED"
    fake.leave_on_error = True  # the operation fails, but a stopped instance is left behind
    with pytest.raises(CapacityError):
        gcp(fake).launch(req(new_run()))
    assert fake.instances == {} and fake.firewalls == {}
    assert fake.compute_calls()["instances.delete"] == 1 and fake.compute_calls()["firewalls.delete"] == 2


def test_a_firewall_rule_refused_half_way_leaves_no_rule(fake) -> None:
    fake.http_errors["firewalls.insert"] = [None, (403, "forbidden")]  # the first rule is made, the second refused
    with pytest.raises(CredentialsError, match="roles/compute.securityAdmin"):
        gcp(fake).launch(req(new_run()))
    assert fake.compute_calls()["firewalls.insert"] == 2
    assert fake.firewalls == {} and fake.instances == {}


def test_quota_exceeded_is_a_quota_error_of_the_region_naming_the_metric(fake) -> None:
    fake.quota["us-central1"] = ("NVIDIA_T4_GPUS", 0.0)
    provider = gcp(fake)
    run = new_run()
    with pytest.raises(QuotaError, match="nvidia_t4_gpus") as info:
        provider.launch(req(run))
    assert info.value.scope == "gcp/us-central1"
    assert provider.list(run) == [] and fake.live_instances() == [] and fake.firewalls == {}


def test_a_403_quota_exceeded_answer_is_a_quota_error(fake) -> None:
    fake.fail_next("instances.insert", 403, "quotaExceeded")
    with pytest.raises(QuotaError, match="CPUS") as info:
        gcp(fake).launch(req(new_run()))
    assert info.value.scope == "gcp/us-central1"
    assert type(info.value.__cause__).__name__ == "Forbidden"


class RefreshableCredentials(Credentials):
    """Credentials that can renew their token, as a user's or a service account's do."""

    def refresh(self, request) -> None:  # noqa: ANN001
        self.token = "fake-token"

    def before_request(self, request, method, url, headers) -> None:  # noqa: ANN001
        if not self.valid:
            self.refresh(request)
        headers["authorization"] = f"Bearer {self.token}"


@pytest.mark.parametrize(("status", "reason", "hint"), [
    (401, "authError", "gcloud auth application-default login"),
    (403, "forbidden", "roles/compute.instanceAdmin.v1"),
])
def test_rejected_credentials_say_what_to_do(fake, status: int, reason: str, hint: str) -> None:
    fake.fail_next("instances.insert", status, reason, times=3)  # a 401 makes google-auth refresh and resend
    run = new_run()
    provider = gcp(fake, clients=ComputeClients.build(RefreshableCredentials(), api_endpoint=fake.url))
    with pytest.raises(CredentialsError, match=hint) as info:
        provider.launch(req(run))
    assert getattr(info.value.__cause__, "code", None) == status
    if status == 401:
        assert "GOOGLE_APPLICATION_CREDENTIALS" in str(info.value) and "GOOGLE_CLOUD_PROJECT" in str(info.value)
    assert provider.list(run) == [] and fake.firewalls == {} and fake.instances == {}


def test_a_401_that_anonymous_credentials_cannot_mend_is_a_credentials_error(fake) -> None:
    fake.fail_next("instances.insert", 401, "authError")
    with pytest.raises(CredentialsError, match="rejected the credentials") as info:
        gcp(fake).launch(req(new_run()))
    assert type(info.value.__cause__).__name__ == "InvalidOperation"


def test_check_credentials(fake, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    gcp(fake).check_credentials()
    fake.fail_next("instances.aggregatedList", 401, "authError")
    with pytest.raises(CredentialsError, match="application-default login"):
        gcp(fake).check_credentials()
    fake.fail_next("firewalls.list", 403, "forbidden")
    with pytest.raises(CredentialsError, match="roles/compute.securityAdmin"):
        gcp(fake).check_credentials()
    # no credentials at all: google.auth's DefaultCredentialsError
    monkeypatch.delenv("GEOTRAIN_GCP_ENDPOINT", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-such-key.json"))
    with pytest.raises(CredentialsError, match="GOOGLE_APPLICATION_CREDENTIALS.*GOOGLE_CLOUD_PROJECT") as info:
        GcpProvider.from_environment(project="p").check_credentials()
    assert type(info.value.__cause__).__name__ == "DefaultCredentialsError"
    assert fake.compute_calls()["instances.aggregatedList"] == 3


def test_throttling_is_retried_then_a_throttled_error(fake) -> None:
    fake.fail_next("instances.insert", 429, "rateLimitExceeded", times=2)
    pauses: list[float] = []
    node = gcp(fake, sleep=pauses.append).launch(req(new_run()))
    assert node.state is NodeState.RUNNING and pauses == [1.0, 2.0]  # retried with the same request id
    assert len({q["requestId"] for m, e, p, q, b in fake.compute_log if e == "instances.insert"}) == 1
    for status, reason in ((429, "rateLimitExceeded"), (403, "rateLimitExceeded")):
        fake.fail_next("instances.insert", status, reason, times=5)
        run = new_run()
        with pytest.raises(ThrottledError, match="slow down"):
            gcp(fake, attempts=5).launch(req(run))
        assert gcp(fake).list(run) == []


def test_an_insert_that_times_out_is_found_by_the_retry_never_made_twice(fake) -> None:
    fake.hang["instances.insert"] = [1.5]  # GCE makes the VM, the answer comes too late
    run = new_run()
    request = req(run)
    with pytest.raises(ProviderTimeoutError, match="same request id") as info:
        gcp(fake, call_timeout_s=0.3).launch(request)
    assert info.value.scope == "gcp/us-central1/us-central1-a"
    assert len(fake.live_instances()) == 1
    retry = gcp(fake).launch(request)  # a new process: the state file says where to look
    assert retry.node_id == instance_name(request.request_id) and retry.state is NodeState.RUNNING
    assert len(fake.live_instances()) == 1 and fake.compute_calls()["instances.insert"] == 1
    assert [n.node_id for n in gcp(fake).list(run)] == [retry.node_id]


def test_an_operation_still_running_is_waited_for(fake) -> None:
    fake.op_delay_s = 0.3
    node = gcp(fake).launch(req(new_run()))
    assert node.state is NodeState.RUNNING and fake.compute_calls()["zoneOperations.wait"] >= 1


def test_a_vm_still_booting_is_pending_then_running(fake) -> None:
    import time

    fake.boot_s = 0.6
    run = new_run()
    node = gcp(fake, running_timeout_s=0).launch(req(run))
    assert node.state is NodeState.PENDING
    time.sleep(0.7)
    assert gcp(fake).list(run)[0].state is NodeState.RUNNING


# -- list, terminate, preemption -----------------------------------------------------------------------


def test_list_from_another_process_and_terminate_keeps_the_first_reason(fake, geotrain_home: Path) -> None:
    provider = gcp(fake)
    run = new_run()
    nodes = [provider.launch(req(run, n)) for n in range(2)]
    other = req(new_run())
    provider.launch(other)
    env = dict(os.environ, GEOTRAIN_GCP_ENDPOINT=fake.url, GOOGLE_CLOUD_PROJECT=PROJECT,
               GEOTRAIN_HOME=str(geotrain_home))
    code = ("import json, sys; from geotrain.providers.gcp import GcpProvider; "
            "print(json.dumps([[n.node_id, n.state.value, n.address] for n in "
            "GcpProvider.from_environment().list(sys.argv[1])]))")
    out = subprocess.run([sys.executable, "-c", code, run], env=env, cwd=REPO, capture_output=True, text=True,
                         timeout=120, check=True)
    assert json.loads(out.stdout) == [[n.node_id, "running", n.address] for n in nodes]
    provider.terminate(nodes[0].node_id, reason="stopped")
    provider.terminate(nodes[0].node_id)
    gcp(fake).terminate(nodes[0].node_id, reason="again")
    listed = gcp(fake).list(run)
    assert [(n.node_id, n.state, n.end_reason) for n in listed] == [
        (nodes[0].node_id, NodeState.TERMINATED, "stopped"), (nodes[1].node_id, NodeState.RUNNING, None)]
    assert listed[0].ended_at is not None and listed[0].ended_at >= listed[0].launched_at
    assert fake.find(nodes[0].node_id) is None and fake.compute_calls()["instances.delete"] == 1
    everything = {n.node_id for n in gcp(fake).list()}
    assert everything == {nodes[0].node_id, nodes[1].node_id, instance_name(other.request_id)}
    with pytest.raises(NotFoundError):
        provider.terminate("gt-no-such-node")


def test_a_vm_deleted_behind_our_back_is_lost(fake) -> None:
    provider = gcp(fake)
    run = new_run()
    node = provider.launch(req(run))
    fake.delete_behind_back("us-central1-a", node.node_id)
    [lost] = gcp(fake).list(run)
    assert (lost.state, lost.end_reason) == (NodeState.TERMINATED, "lost") and lost.ended_at is not None
    provider.terminate(node.node_id, reason="stopped")
    assert provider.list(run)[0].end_reason == "lost"
    assert fake.firewalls == {}


def test_a_vm_stopped_behind_our_back_is_lost_and_terminate_deletes_it(fake) -> None:
    provider = gcp(fake)
    run = new_run()
    node = provider.launch(req(run))
    fake.stop_behind_back("us-central1-a", node.node_id)
    [lost] = provider.list(run)
    assert (lost.state, lost.end_reason) == (NodeState.TERMINATED, "lost")
    assert fake.find(node.node_id) is not None  # the stopped VM still holds its disk
    provider.terminate(node.node_id)
    assert fake.instances == {} and provider.list(run)[0].end_reason == "lost"


def test_a_spot_reclaim_by_gce_is_preempted(fake) -> None:
    provider = gcp(fake)
    run = new_run()
    node = provider.launch(req(run))
    keep = provider.launch(req(run, 1))
    fake.preempt("us-central1-a", node.node_id)
    listed = gcp(fake).list(run)
    assert [(n.node_id, n.state, n.end_reason) for n in listed] == [
        (node.node_id, NodeState.PREEMPTED, "preempted"), (keep.node_id, NodeState.RUNNING, None)]
    provider.terminate(node.node_id)
    assert provider.list(run)[0].state is NodeState.PREEMPTED  # stays preempted
    assert [e for m, e, p, q, b in fake.compute_log if e == "zoneOperations.list"]
    assert any('operationType = "compute.instances.preempted"' in q.get("filter", "")
               for m, e, p, q, b in fake.compute_log if e == "zoneOperations.list")


def test_a_vm_under_preemption_notice_is_preempted_while_it_stops(fake) -> None:
    provider = gcp(fake)
    run = new_run()
    node = provider.launch(req(run))
    fake.preempt("us-central1-a", node.node_id, notice_s=30)
    assert fake.find(node.node_id)[1]["status"] == "STOPPING"
    [ended] = provider.list(run)
    assert ended.state is NodeState.PREEMPTED
    provider.terminate(node.node_id)
    assert fake.instances == {} and provider.list(run)[0].state is NodeState.PREEMPTED


def test_a_run_id_that_breaks_gce_label_rules_is_sanitised_and_still_listed(fake) -> None:
    provider = gcp(fake)
    run = "Run_ABC/" + "x" * 70
    node = provider.launch(req(run))
    inst = fake.find(node.node_id)[1]
    label, tag = inst["labels"]["geotrain-run"], inst["tags"]["items"][0]
    assert len(label) <= 63 and label == label.lower() and "/" not in label
    assert len(tag) <= 63 and tag.startswith("gt-run-abc-")
    assert [n.node_id for n in gcp(fake).list(run)] == [node.node_id]
    assert gcp(fake).list("Run_ABC/" + "x" * 69) == []


def test_vms_of_the_run_launched_from_another_home_are_adopted(fake, tmp_path: Path) -> None:
    run = new_run()
    theirs = gcp(fake, home=tmp_path / "other-home").launch(req(run, 0))
    mine = gcp(fake).launch(req(run, 1))
    listed = gcp(fake).list(run)
    assert {n.node_id for n in listed} == {theirs.node_id, mine.node_id}
    adopted = next(n for n in listed if n.node_id == theirs.node_id)
    assert (adopted.request_id, adopted.offer_id, adopted.location) == (theirs.request_id, theirs.offer_id, US)


# -- dry run -------------------------------------------------------------------------------------------


def test_dry_run_makes_no_call_and_no_key(fake, geotrain_home: Path) -> None:
    provider = gcp(fake)
    run = new_run()
    calls = provider.dry_run(req(run))
    assert fake.requests == [] and fake.compute_log == []
    assert not (geotrain_home / "providers" / "tokens").exists()  # no token was made for it
    assert not (geotrain_home / "providers" / "keys").exists()  # nor a key
    assert [c["call"] for c in calls] == [
        "compute.firewalls.get", "compute.firewalls.insert", "compute.globalOperations.wait",
        "compute.firewalls.get", "compute.firewalls.insert", "compute.globalOperations.wait",
        "compute.instances.get", "compute.instances.insert", "compute.zoneOperations.wait", "compute.instances.get"]
    insert = calls[7]["params"]
    assert insert["zone"] == "us-central1-a" and insert["project"] == PROJECT
    body = insert["instance_resource"]
    script = items(body["metadata"])["startup-script"]
    assert "<this node's host key>" in script and "BEGIN OPENSSH PRIVATE KEY" not in script
    assert calls[1]["params"]["firewall_resource"]["allowed"] == [{"IPProtocol": "tcp", "ports": [str(SSH_PORT)]}]
    assert body["scheduling"]["provisioningModel"] == "SPOT"
    assert calls[1]["params"]["firewall_resource"]["sourceRanges"] == ["127.0.0.0/8"]
    request = req(run)
    provider.launch(request)  # what the dry run showed is what launch sends, the keys aside
    from geotrain.providers.runkeys import host_key, login_key

    [sent] = [b for m, e, p, q, b in fake.compute_log if e == "instances.insert"]
    shown = json.loads(json.dumps(body).replace(json.dumps("<this node's host key>")[1:-1], json.dumps(
        host_key(run, request.request_id).private.strip())[1:-1]).replace("ssh-ed25519 <run-login-key>",
                                                                          login_key(run)[1]))
    assert sent == shown
    assert GcpProvider.from_environment().dry_run(req(run))  # no credentials needed either


def test_a_provider_without_control_cidr_refuses_to_launch(fake) -> None:
    with pytest.raises(ProviderError, match="control_cidr"):
        gcp(fake, control_cidr=None).launch(req(new_run()))
    assert fake.compute_log == []


# -- the node agent end to end -------------------------------------------------------------------------


def test_start_sets_the_vm_up_over_ssh_runs_a_command_through_its_agent_and_a_preemption_ends_it(
        fake, tmp_path: Path) -> None:
    import time

    from geotrain.providers.base import NodeLink, NodeLogin
    from geotrain.providers.remote import AgentChannel
    from tests.fakes.metadata import FakeMetadata
    from tests.fakes.vms import Hypervisor

    import pwd

    node_home = Path(pwd.getpwuid(os.getuid()).pw_dir)  # the loopback VM's node user is this machine's user
    with FakeMetadata() as metadata:
        hv = Hypervisor(tmp_path / "vms", metadata)
        fake.hypervisor = hv
        try:
            provider = gcp(fake, channel=AgentChannel(ready_timeout_s=60))
            assert isinstance(provider, NodeLink) and isinstance(provider, NodeLogin)
            run = new_run()
            node = provider.launch(req(run))
            vm = fake.vm_id("us-central1-a", node.node_id)
            assert hv.alive(vm) and node.address == hv.addresses[vm] == node.private_address
            log = tmp_path / "echo.log"
            proc = provider.start(node.node_id, [sys.executable, "-c", "print('hello from gcp')"], dict(os.environ),
                                  log)
            assert proc.wait(timeout=60) == 0 and "hello from gcp" in log.read_text()
            assert provider.login_command(node.node_id, ["true"]).argv[0] == "ssh"
            (tmp_path / "shipped.txt").write_text("over ssh\n")
            provider.ship(node.node_id, [(tmp_path / "shipped.txt", "gcp-shipped/shipped.txt")])
            shipped = tmp_path / "cat.log"
            proc = provider.start(node.node_id, ["cat", "gcp-shipped/shipped.txt"], {"PATH": "/usr/bin:/bin"}, shipped,
                                  cwd=node_home)
            assert proc.wait(timeout=60) == 0 and "over ssh" in shipped.read_text(), shipped.read_text()
            fake.preempt("us-central1-a", node.node_id, notice_s=30)  # GCE's 30 s: metadata says preempted
            assert vm in metadata.notices and hv.alive(vm)
            assert provider.list(run)[0].state is NodeState.PREEMPTED  # the preempted operation is there at once
            provider.terminate(node.node_id)  # deletes the stopping VM now
            deadline = time.monotonic() + 10
            while hv.alive(vm) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not hv.alive(vm) and fake.instances == {}
            with pytest.raises(ProviderError, match="preempted") as info:
                provider.start(node.node_id, ["true"], {}, tmp_path / "x.log")
            assert info.value.scope == US.zone_scope
        finally:
            fake.hypervisor = None
            hv.close()
            import shutil

            shutil.rmtree(node_home / "gcp-shipped", ignore_errors=True)


def test_the_nodes_get_the_service_account_the_launch_names(fake) -> None:
    email = f"trainer@{PROJECT}.iam.gserviceaccount.com"
    node = gcp(fake, instance_role=email).launch(req(new_run()))
    _, inst = fake.find(node.node_id)
    assert inst["serviceAccounts"] == [{"email": email, "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}]
    plain = gcp(fake).launch(req(new_run()))
    assert "serviceAccounts" not in fake.find(plain.node_id)[1]  # no identity unless one is named


def test_a_request_with_its_own_image_boots_it(fake) -> None:
    image = "projects/my-project/global/images/family/my-trainer"
    base = req(new_run())
    node = gcp(fake).launch(LaunchRequest(base.request_id, base.run_id, base.offer, image=image))
    assert fake.find(node.node_id)[1]["disks"][0]["initializeParams"]["sourceImage"] == image


def test_peer_rules_admit_the_runs_nodes_public_addresses_and_go_with_the_run(fake) -> None:
    from geotrain.providers.base import PeerRules

    provider = gcp(fake)
    assert isinstance(provider, PeerRules)
    run = new_run()
    node = provider.launch(req(run))
    name = f"{run_tag(run)}-public"
    provider.admit_peers(run, ["198.51.100.7", "203.0.113.9"])
    assert fake.firewalls[name]["sourceRanges"] == ["198.51.100.7/32", "203.0.113.9/32"]
    assert fake.firewalls[name]["targetTags"] == [run_tag(run)]
    provider.admit_peers(run, ["203.0.113.9"])  # patched: a node gone
    assert fake.firewalls[name]["sourceRanges"] == ["203.0.113.9/32"]
    provider.terminate(node.node_id)
    assert name not in fake.firewalls  # the run's rules go with its last node


def test_a_task_s_boot_disk_size_and_tier_go_to_the_boot_disk(fake) -> None:
    from geotrain.domain import BootDisk

    base = req(new_run())
    node = gcp(fake).launch(LaunchRequest(base.request_id, base.run_id, base.offer, disk=BootDisk(500, "high")))
    params = fake.find(node.node_id)[1]["disks"][0]["initializeParams"]
    assert params["diskSizeGb"] == "500" and params["diskType"].endswith("/diskTypes/pd-ssd")

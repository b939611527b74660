"""The Azure provider through the real Azure SDK (azure-mgmt-compute, -network, -resource, azure-core's
bearer policy) against the ARM fake of ``tests/fakes/azure_vms.py`` on 127.0.0.1 over http.

No VM processes here (the fake runs without a hypervisor); ``start`` end to end is the contract suite's
(``tests/contract/harness_azure.py``). Throttling is not retried by the provider: ThrottledError.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

pytest.importorskip("azure.mgmt.compute")
pytest.importorskip("azure.mgmt.network")
pytest.importorskip("azure.mgmt.resource")

from azure.core.credentials import AccessToken  # noqa: E402
from azure.core.exceptions import HttpResponseError  # noqa: E402
from azure.identity import CredentialUnavailableError  # noqa: E402

from geotrain.domain import Continent, InstanceShape, InterruptionSignal, Location, Market, Offer  # noqa: E402
from geotrain.errors import (  # noqa: E402
    CapacityError,
    ConfigurationError,
    CredentialsError,
    NotFoundError,
    ProviderError,
    ProviderTimeoutError,
    QuotaError,
    ThrottledError,
)
from geotrain.providers.azure import AzureProvider, arm  # noqa: E402
from geotrain.providers.base import LaunchRequest, NodeState, Provider  # noqa: E402
from geotrain.providers.cloudnodes import SSH_PORT  # noqa: E402
from geotrain.providers.remote import run_token  # noqa: E402
from geotrain.providers.runkeys import host_key, login_key  # noqa: E402
from tests.contract.harness_azure import LOOPBACK_NODES, azure_provider  # noqa: E402
from tests.fakes.azure_server import SUBSCRIPTION_ID  # noqa: E402
from tests.fakes.azure_vms import ArmFailure, AzureVmFake  # noqa: E402

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SIZE = "Standard_NC4as_T4_v3"
EAST_1 = Location("azure", "eastus", "1", Continent.NORTH_AMERICA)
EAST = Location("azure", "eastus", "", Continent.NORTH_AMERICA)
WEST_EU = Location("azure", "westeurope", "", Continent.EUROPE)
PER_VM = ("virtualMachines", "networkInterfaces", "publicIPAddresses", "disks")


def azure_offer(location: Location = EAST_1, market: Market = Market.SPOT) -> Offer:
    return Offer(location, InstanceShape(SIZE, 4, 28, "T4", 1), market, 0.16, None, InterruptionSignal(None, None),
                 datetime(2026, 12, 1, tzinfo=timezone.utc), "test")


def request(run: str, n: int = 0, **kwargs: object) -> LaunchRequest:
    offer = azure_offer(**kwargs)  # type: ignore[arg-type]
    return LaunchRequest(f"{run}/{offer.offer_id}/{n}", run, offer)


@pytest.fixture
def fake():
    with AzureVmFake(regions=set()) as server:
        yield server


@pytest.fixture
def provider(fake: AzureVmFake) -> AzureProvider:
    return azure_provider(fake, None)


def count(fake: AzureVmFake, method: str, kind: str) -> int:
    return sum(1 for m, path, _ in fake.requests if m == method and path.split("/")[-2] == kind)


def leftovers(fake: AzureVmFake) -> dict[str, list[str]]:
    return {kind: [r["name"] for r in fake.resources(kind)] for kind in PER_VM if fake.resources(kind)}


# -- launch ---------------------------------------------------------------------------------------


def test_a_spot_launch_makes_a_spot_vm_in_the_zone_with_the_script_and_tags(fake, provider) -> None:
    req = request("run-spot")
    node = provider.launch(req)
    assert node.state is NodeState.RUNNING and node.location == EAST_1 and node.node_id == arm.vm_name(req.request_id)
    assert node.launched_at.tzinfo is not None and node.ended_at is None
    [vm] = fake.vms()
    p = vm["properties"]
    assert vm["location"] == "eastus" and vm["zones"] == ["1"]
    assert (p["priority"], p["evictionPolicy"], p["billingProfile"]) == ("Spot", "Delete", {"maxPrice": -1})
    assert p["hardwareProfile"] == {"vmSize": SIZE}
    assert vm["tags"] == {"geotrain-run": "run-spot", "geotrain-request": req.request_id,
                          "geotrain-offer": req.offer.offer_id}
    script = base64.b64decode(p["osProfile"]["customData"]).decode()
    # the VM gets an sshd of geotrain's own with this node's host key and the run's login key, nothing else
    assert script.startswith("#!/bin/bash") and f"Port {SSH_PORT}" in script and "--cloud" not in script
    assert host_key("run-spot", req.request_id).private.strip() in script and login_key("run-spot")[1] in script
    assert run_token("run-spot") not in script
    linux = p["osProfile"]["linuxConfiguration"]
    assert linux["disablePasswordAuthentication"] is True and "adminPassword" not in p["osProfile"]
    [key] = linux["ssh"]["publicKeys"]  # Azure's own channel gets the run's login key too
    assert key["keyData"] == login_key("run-spot")[1] and p["osProfile"]["adminUsername"] == "geotrain"
    assert p["storageProfile"]["imageReference"] == arm.DEFAULT_IMAGE
    assert p["storageProfile"]["osDisk"]["deleteOption"] == "Delete"
    assert [n["properties"]["deleteOption"] for n in p["networkProfile"]["networkInterfaces"]] == ["Delete"]
    [ip] = fake.resources("publicIPAddresses")
    assert ip["sku"]["name"] == "Standard" and ip["properties"]["publicIPAllocationMethod"] == "Static"
    assert ip["zones"] == ["1"] and node.address == ip["properties"]["ipAddress"]
    [nic] = fake.resources("networkInterfaces")
    assert nic["properties"]["ipConfigurations"][0]["properties"]["publicIPAddress"]["id"] == ip["id"]
    assert node.private_address == nic["properties"]["ipConfigurations"][0]["properties"]["privateIPAddress"]
    assert fake.groups() == ["geotrain-run-spot"]


def test_an_on_demand_launch_has_no_spot_options_and_a_region_wide_one_no_zone(fake, provider) -> None:
    node = provider.launch(request("run-od", location=EAST, market=Market.ON_DEMAND))
    assert node.state is NodeState.RUNNING
    [vm] = fake.vms()
    assert vm["properties"]["priority"] == "Regular" and "zones" not in vm
    assert "evictionPolicy" not in vm["properties"] and "billingProfile" not in vm["properties"]
    assert "zones" not in fake.resources("publicIPAddresses")[0]


def test_the_firewall_opens_the_ssh_port_to_the_launcher_and_tcp_within_the_vnet(fake, provider) -> None:
    provider.launch(request("run-fw", 0))
    provider.launch(request("run-fw", 1))
    [nsg] = fake.resources("networkSecurityGroups")
    rules = [(r["name"], r["properties"]["priority"], r["properties"]["access"], r["properties"]["protocol"],
              r["properties"]["sourceAddressPrefix"], r["properties"]["destinationAddressPrefix"],
              r["properties"]["destinationPortRange"], r["properties"]["direction"])
             for r in nsg["properties"]["securityRules"]]
    assert rules == [
        ("geotrain-ssh", 100, "Allow", "Tcp", "127.0.0.0/8", "*", str(SSH_PORT), "Inbound"),
        ("geotrain-run-tcp", 110, "Allow", "Tcp", "VirtualNetwork", "VirtualNetwork", "*", "Inbound"),
        ("geotrain-deny-inbound", 4096, "Deny", "*", "*", "*", "*", "Inbound"),
    ]
    ports = {r["properties"]["destinationPortRange"] for r in nsg["properties"]["securityRules"]}
    assert "22" not in ports  # the image's own sshd stays closed
    [vnet] = fake.resources("virtualNetworks")
    assert vnet["properties"]["addressSpace"]["addressPrefixes"] == ["10.77.0.0/16"]
    [subnet] = vnet["properties"]["subnets"]
    assert subnet["properties"]["networkSecurityGroup"]["id"] == nsg["id"]
    assert count(fake, "PUT", "networkSecurityGroups") == count(fake, "PUT", "virtualNetworks") == 1  # once a region
    provider.launch(request("run-fw", 2, location=WEST_EU))
    assert sorted(n["location"] for n in fake.resources("networkSecurityGroups")) == ["eastus", "westeurope"]
    assert fake.groups() == ["geotrain-run-fw"]  # one group a run, in its first region
    assert {r["location"] for r in fake.resources("virtualMachines")} == {"eastus", "westeurope"}


def test_a_launch_is_idempotent_by_request_id(fake, provider, geotrain_home, tmp_path) -> None:
    req = request("run-idem")
    first = provider.launch(req)
    again = provider.launch(req)
    other = azure_provider(fake, geotrain_home).launch(req)
    assert first.node_id == again.node_id == other.node_id and len(fake.vms()) == 1
    # a launcher that lost its state (another machine) finds the VM by name: no second create
    lost_state = azure_provider(fake, tmp_path / "elsewhere").launch(req)
    assert lost_state.node_id == first.node_id and lost_state.state is NodeState.RUNNING
    assert count(fake, "PUT", "virtualMachines") == 1 and len(fake.vms()) == 1
    with pytest.raises(ValueError, match="request id"):
        provider.launch(LaunchRequest(req.request_id, "another-run", req.offer))
    gcp = Offer(Location("gcp", "us-central1", "us-central1-a", Continent.NORTH_AMERICA), req.offer.shape,
                Market.SPOT, 0.1, None, InterruptionSignal(None, None), req.offer.observed_at, "test")
    with pytest.raises(ValueError, match="not an Azure"):
        provider.launch(LaunchRequest("run-idem/gcp/0", "run-idem", gcp))


# -- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("code", "during", "wrapper"), [
    ("AllocationFailed", "operation", None), ("ZonalAllocationFailed", "operation", None),
    ("OverconstrainedAllocationRequest", "operation", None), ("OverconstrainedZonalAllocationRequest", "request", None),
    ("AllocationFailed", "operation", "Conflict")])
def test_no_capacity_is_a_capacity_error_of_the_zone_and_leaves_nothing(fake, provider, code, during,
                                                                         wrapper) -> None:
    failure = ArmFailure(code, f"{code}: not enough capacity.", during=during) if wrapper is None else \
        ArmFailure(wrapper, "The operation failed.", during=during, details=((code, "Allocation failed."),))
    fake.failures["virtualMachines"] = [failure]
    with pytest.raises(CapacityError) as info:
        provider.launch(request("run-cap"))
    assert info.value.scope == "azure/eastus/1" and code in str(info.value)
    assert isinstance(info.value.__cause__, HttpResponseError)
    assert leftovers(fake) == {} and provider.list("run-cap") == []
    if code == "AllocationFailed" and wrapper is None:
        assert provider.launch(request("run-cap")).state is NodeState.RUNNING  # the retry makes it


SKU_TEXT = ("The requested size for resource '/subscriptions/x/resourceGroups/g/providers/Microsoft.Compute/"
            "virtualMachines/gt-1' is currently not available in location 'eastus' zones '1' for subscription 'x'. "
            "Please try another size or deploy to a different location or zones.")


@pytest.mark.parametrize(("code", "text", "wrapper", "of_offer"), [
    ("SkuNotAvailable", SKU_TEXT, None, True),
    ("SkuNotAvailable", SKU_TEXT, "InvalidTemplateDeployment", True),
    ("PlatformImageNotFound", "The platform image 'microsoft-dsvm:ubuntu-hpc:2204:latest' is not available.", None,
     False),
    ("ImageNotFound", "The image does not exist.", None, False),
    ("InvalidTemplate", "Deployment template validation failed.", None, False),
    ("InvalidParameter", "The following list of images referenced from the deployment template are not found.", None,
     False)])
def test_a_size_or_image_azure_does_not_offer_is_a_configuration_error_and_leaves_nothing(
        fake, provider, code, text, wrapper, of_offer) -> None:
    failure = ArmFailure(code, text) if wrapper is None else \
        ArmFailure(wrapper, "The template deployment failed.", details=((code, text),))
    fake.failures["virtualMachines"] = [failure]
    req = request("run-config")
    with pytest.raises(ConfigurationError) as info:
        provider.launch(req)
    assert not isinstance(info.value, CapacityError) and code in str(info.value)
    assert info.value.offer_id == (req.offer.offer_id if of_offer else None)
    assert ("size" if of_offer else "image") in str(info.value)
    assert leftovers(fake) == {} and provider.list("run-config") == []


QUOTA_TEXT = ("Operation could not be completed as it results in exceeding approved standardNCASv3_T4Family Cores "
              "quota. Additional details - Deployment Model: Resource Manager, Location: eastus, Current Limit: 0, "
              "Current Usage: 0, Additional Required: 4, (Minimum) New Limit Required: 4.")


@pytest.mark.parametrize("code", ["OperationNotAllowed", "QuotaExceeded"])
def test_an_exceeded_quota_is_a_quota_error_of_the_region_naming_the_family(fake, provider, code) -> None:
    fake.failures["virtualMachines"] = [ArmFailure(code, QUOTA_TEXT)]
    with pytest.raises(QuotaError, match="standardNCASv3_T4Family Cores quota") as info:
        provider.launch(request("run-quota"))
    assert info.value.scope == "azure/eastus" and leftovers(fake) == {}


class WrongToken:
    def get_token(self, *scopes, **kwargs):
        return AccessToken("someone-elses-token", int(time.time()) + 3600)


class NoCredential:
    def get_token(self, *scopes, **kwargs):
        raise CredentialUnavailableError("EnvironmentCredential: environment variables are not fully configured.")


@pytest.mark.parametrize("credential", [WrongToken(), NoCredential()], ids=["rejected", "unavailable"])
def test_bad_credentials_are_a_credentials_error_saying_what_to_set(fake, credential) -> None:
    provider = azure_provider(fake, None, credential=credential)
    with pytest.raises(CredentialsError, match="az login.*AZURE_CLIENT_ID.*AZURE_SUBSCRIPTION_ID"):
        provider.check_credentials()
    with pytest.raises(CredentialsError):
        provider.launch(request("run-cred"))
    assert fake.vms() == []


def test_a_missing_subscription_or_role_is_a_credentials_error(fake, provider) -> None:
    provider.check_credentials()  # the fake's token and subscription: fine
    with pytest.raises(CredentialsError, match="AZURE_SUBSCRIPTION_ID"):
        azure_provider(fake, None, subscription_id=None, environ={}).check_credentials()
    fake.arm_forbidden.add("PUT virtualMachines")
    with pytest.raises(CredentialsError, match="AuthorizationFailed.*Contributor"):
        provider.launch(request("run-role"))
    assert leftovers(fake) == {}


def test_throttling_is_a_throttled_error_and_the_retry_goes_through(fake, provider) -> None:
    fake.arm_throttle["PUT virtualMachines"] = 1
    with pytest.raises(ThrottledError) as info:
        provider.launch(request("run-429"))
    assert info.value.scope == "azure/eastus" and leftovers(fake) == {}
    assert provider.launch(request("run-429")).state is NodeState.RUNNING


def test_a_launch_failing_half_way_deletes_what_it_made(fake, provider) -> None:
    fake.failures["networkInterfaces"] = [ArmFailure("InternalServerError", "Something went wrong.", status=500)]
    with pytest.raises(ProviderError, match="HTTP 500"):
        provider.launch(request("run-half"))
    assert count(fake, "PUT", "publicIPAddresses") == 1 and leftovers(fake) == {}
    fake.failures["virtualMachines"] = [ArmFailure("AllocationFailed", "Allocation failed.", during="operation")]
    with pytest.raises(CapacityError):
        provider.launch(request("run-half"))
    assert count(fake, "DELETE", "virtualMachines") == 1  # the VM the failed create left (Failed) went too
    assert leftovers(fake) == {} and provider.list("run-half") == []


def test_a_create_that_times_out_is_found_by_the_retry(fake) -> None:
    provider = azure_provider(fake, None, request_timeout_s=0.5)
    fake.vm_put_delay_s = 1.5  # the fake makes the VM, then answers too late
    with pytest.raises(ProviderTimeoutError, match="outcome is unknown"):
        provider.launch(request("run-slow"))
    assert len(fake.vms()) == 1  # it was made
    fake.vm_put_delay_s = 0.0
    node = provider.launch(request("run-slow"))
    assert node.state is NodeState.RUNNING and node.address
    assert count(fake, "PUT", "virtualMachines") == 1 and len(fake.vms()) == 1


def test_a_vm_still_creating_lists_as_pending(fake) -> None:
    provider = azure_provider(fake, None, launch_timeout_s=0.3, polling_interval_s=0.05)
    fake.lro_delays["virtualMachines"] = 60.0
    with pytest.raises(ProviderTimeoutError):
        provider.launch(request("run-pending"))
    [pending] = provider.list("run-pending")
    assert pending.state is NodeState.PENDING
    fake.lro_delays.clear()
    assert provider.launch(request("run-pending")).state is NodeState.RUNNING
    assert [n.state for n in provider.list("run-pending")] == [NodeState.RUNNING]


# -- list, terminate ------------------------------------------------------------------------------

LIST_SCRIPT = """
import json, sys
from tests.contract.harness_azure import azure_provider
from tests.fakes.azure_vms import AzureVmFake

class Fake:  # only the URL of the fake in the parent process
    url = sys.argv[1]

out = []
for home in (None, sys.argv[2]):  # this GEOTRAIN_HOME's state, then a home without state
    nodes = azure_provider(Fake, home).list(sys.argv[3])
    out.append([[n.node_id, n.state.value, n.end_reason, n.request_id, n.address] for n in nodes])
print(json.dumps(out))
"""


def test_another_process_lists_the_run(fake, provider, tmp_path) -> None:
    nodes = [provider.launch(request("run-proc", n)) for n in range(2)]
    provider.terminate(nodes[0].node_id, reason="stopped")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", LIST_SCRIPT, fake.url, str(tmp_path / "fresh"), "run-proc"],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    same_state, no_state = json.loads(done.stdout)
    assert same_state == [[nodes[0].node_id, "terminated", "stopped", nodes[0].request_id, nodes[0].address],
                          [nodes[1].node_id, "running", None, nodes[1].request_id, nodes[1].address]]
    assert no_state == [[nodes[1].node_id, "running", None, nodes[1].request_id, nodes[1].address]]  # by tags


def test_terminate_deletes_the_vm_its_nic_ip_and_disk_and_keeps_the_first_reason(fake, provider) -> None:
    a, b = provider.launch(request("run-end", 0)), provider.launch(request("run-end", 1))
    provider.terminate(a.node_id, reason="stopped")
    assert {r["name"] for r in fake.vms()} == {b.node_id}
    assert fake.resources("virtualNetworks") and fake.resources("networkSecurityGroups")  # b still needs them
    calls = len(fake.requests)
    provider.terminate(a.node_id, reason="again")
    assert len(fake.requests) == calls  # an ended, cleaned node: nothing to do
    provider.terminate(b.node_id)
    assert leftovers(fake) == {}
    assert fake.resources("virtualNetworks") == [] and fake.resources("networkSecurityGroups") == []
    assert fake.groups() == ["geotrain-run-end"]  # the empty group stays (see the provider docstring)
    listed = {n.node_id: (n.state, n.end_reason) for n in azure_provider(fake, None).list("run-end")}
    assert listed == {a.node_id: (NodeState.TERMINATED, "stopped"), b.node_id: (NodeState.TERMINATED, "terminated")}
    with pytest.raises(NotFoundError):
        provider.terminate("gt-no-such-node")


def test_a_vm_deleted_behind_our_back_is_lost(fake, provider) -> None:
    spot = provider.launch(request("run-lost", 0))
    on_demand = provider.launch(request("run-lost", 1, market=Market.ON_DEMAND))
    fake.delete_behind_back(spot.node_id)  # the activity log shows someone deleting it: not an eviction
    assert [n.end_reason for n in provider.list("run-lost")] == ["lost", None]
    fake.arm_forbidden.add("GET activityLog")
    fake.delete_behind_back(on_demand.node_id)  # no log to read: an on-demand VM that vanished is lost
    ended = {n.node_id: (n.state, n.end_reason, n.ended_at is not None) for n in provider.list("run-lost")}
    assert ended == {spot.node_id: (NodeState.TERMINATED, "lost", True),
                     on_demand.node_id: (NodeState.TERMINATED, "lost", True)}


def test_a_spot_eviction_is_a_preemption(fake, provider) -> None:
    deleted, deallocated, unlogged = (provider.launch(request("run-evict", n)) for n in range(3))
    fake.evict(deleted.node_id)  # eviction policy Delete: the VM, its disk and NIC go
    fake.evict(deallocated.node_id, policy="Deallocate")  # the VM stays, PowerState/deallocated
    assert [n.state for n in provider.list("run-evict")] == [NodeState.PREEMPTED] * 2 + [NodeState.RUNNING]
    fake.arm_forbidden.add("GET activityLog")
    fake.evict(unlogged.node_id)  # no log to read: a vanished spot VM counts as evicted
    assert fake.evictions == [deleted.node_id, deallocated.node_id, unlogged.node_id]
    assert fake.power_state(deallocated.node_id) == "deallocated"
    states = {n.node_id: (n.state, n.end_reason) for n in provider.list("run-evict")}
    assert set(states.values()) == {(NodeState.PREEMPTED, "preempted")} and len(states) == 3
    for node in (deleted, deallocated, unlogged):
        provider.terminate(node.node_id)  # stays preempted; what is left of it goes
    assert {n.state for n in provider.list("run-evict")} == {NodeState.PREEMPTED} and leftovers(fake) == {}


# -- dry run --------------------------------------------------------------------------------------


def test_dry_run_makes_no_call_and_no_key(fake, provider, geotrain_home) -> None:
    req = request("run-dry")
    for made in (provider, AzureProvider.for_dry_run(control_cidr="203.0.113.7/32", nodes=LOOPBACK_NODES)):
        calls = made.dry_run(req)
        assert [c["call"] for c in calls] == [
            "resources.resource_groups.get", "resources.resource_groups.create_or_update",
            "network.network_security_groups.begin_create_or_update", "network.virtual_networks.begin_create_or_update",
            "compute.virtual_machines.get", "network.public_ip_addresses.begin_create_or_update",
            "network.network_interfaces.begin_create_or_update", "compute.virtual_machines.begin_create_or_update",
            "compute.virtual_machines.get"]
        create = calls[7]["params"]
        script = create["startup_script"]
        assert script.startswith("#!/bin/bash") and "<this node's host key>" in script and f"Port {SSH_PORT}" in script
        assert "ssh-ed25519 <run-login-key>" in script and "BEGIN OPENSSH PRIVATE KEY" not in script
        keys = create["parameters"]["properties"]["osProfile"]["linuxConfiguration"]["ssh"]["publicKeys"]
        assert [k["keyData"] for k in keys] == ["ssh-ed25519 <run-login-key>"]
        assert create["parameters"]["properties"]["priority"] == "Spot"
        assert create["vm_name"] == arm.vm_name(req.request_id)
    assert fake.requests == []  # no call at all
    assert not (geotrain_home / "providers" / "tokens").exists()  # nor a run token made
    assert not (geotrain_home / "providers" / "keys").exists()  # nor a key
    assert isinstance(provider, Provider) and provider.capabilities.notice_s == 30 and provider.capabilities.spot
    assert SUBSCRIPTION_ID not in json.dumps(AzureProvider.for_dry_run().dry_run(req))


def test_the_nodes_get_the_managed_identity_the_launch_names(fake) -> None:
    from azure.mgmt.compute.models import ResourceIdentityType, VirtualMachine

    identity = ("/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/ml/providers/"
                "Microsoft.ManagedIdentity/userAssignedIdentities/trainer")
    azure_provider(fake, None, instance_role=identity).launch(request("run-identity"))
    [vm] = fake.vms()
    model = VirtualMachine(vm)  # read by the SDK's own model of a VM (REST JSON)
    assert model.identity.type == ResourceIdentityType.USER_ASSIGNED
    assert list(model.identity.user_assigned_identities) == [identity]


@pytest.mark.parametrize(("image", "reference"), [
    ("microsoft-dsvm:ubuntu-2004:2004-gen2:21.11.04",
     {"publisher": "microsoft-dsvm", "offer": "ubuntu-2004", "sku": "2004-gen2", "version": "21.11.04"}),
    ("/subscriptions/0/resourceGroups/ml/providers/Microsoft.Compute/galleries/g/images/trainer/versions/1.0.0",
     {"id": "/subscriptions/0/resourceGroups/ml/providers/Microsoft.Compute/galleries/g/images/trainer/versions/1.0.0"}),
])
def test_a_request_with_its_own_image_boots_it(fake, provider, image, reference) -> None:
    from azure.mgmt.compute.models import VirtualMachine

    base = request("run-image")
    provider.launch(LaunchRequest(base.request_id, base.run_id, base.offer, image=image))
    [vm] = fake.vms()
    assert vm["properties"]["storageProfile"]["imageReference"] == reference
    ref = VirtualMachine(vm).storage_profile.image_reference  # the SDK's own model reads it as an image reference
    assert {name: getattr(ref, name) for name in reference} == reference


def test_peer_rules_put_the_runs_nodes_public_addresses_in_each_regions_nsg(fake, provider) -> None:
    from geotrain.providers.base import PeerRules

    assert isinstance(provider, PeerRules)
    provider.launch(request("run-peers"))

    def peers() -> list[str]:
        [nsg] = fake.resources("networkSecurityGroups")
        return next((r["properties"]["sourceAddressPrefixes"] for r in nsg["properties"]["securityRules"]
                     if r["name"] == "geotrain-peers"), [])

    provider.admit_peers("run-peers", ["198.51.100.7", "203.0.113.9"])
    assert peers() == ["198.51.100.7/32", "203.0.113.9/32"]
    provider.admit_peers("run-peers", ["203.0.113.9"])  # a node gone
    assert peers() == ["203.0.113.9/32"]
    provider.admit_peers("run-peers", [])
    assert peers() == []
    [nsg] = fake.resources("networkSecurityGroups")
    assert {r["name"] for r in nsg["properties"]["securityRules"]} >= {"geotrain-ssh", "geotrain-run-tcp"}


def test_a_task_s_boot_disk_size_and_tier_go_to_the_os_disk(fake, provider) -> None:
    from azure.mgmt.compute.models import VirtualMachine

    from geotrain.domain import BootDisk

    base = request("run-disk")
    provider.launch(LaunchRequest(base.request_id, base.run_id, base.offer, disk=BootDisk(256, "low")))
    [vm] = fake.vms()
    disk = VirtualMachine(vm).storage_profile.os_disk  # read through the SDK's own model
    assert (disk.disk_size_gb, disk.managed_disk.storage_account_type) == (256, "Standard_LRS")

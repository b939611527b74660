"""What the Azure provider asks ARM for: resource names and request bodies (plain ARM JSON), shared by
``launch`` and ``dry_run`` so that the dry run shows exactly what a launch sends."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from geotrain.domain import Market, Offer
from geotrain.providers.identity import azure_identity

CLOUD = "azure"
TAG_RUN = "geotrain-run"
TAG_REQUEST = "geotrain-request"
TAG_OFFER = "geotrain-offer"
TAG_VALUE_MAX = 256  # Azure's limit on a tag value

# Microsoft's Ubuntu-HPC 22.04 image (publisher microsoft-dsvm, Gen2): NVIDIA driver, CUDA, NCCL, InfiniBand
# drivers and Python 3 preinstalled, no marketplace plan to accept. Any image with bash and python3 works
# (the launcher ships and installs geotrain over SSH); set ``image`` to use another.
DEFAULT_IMAGE = {"publisher": "microsoft-dsvm", "offer": "ubuntu-hpc", "sku": "2204", "version": "latest"}
DEFAULT_ADMIN = "geotrain"
DEFAULT_OS_DISK_TYPE = "StandardSSD_LRS"  # every size takes it (Premium_LRS needs an "s" size)
DEFAULT_VNET_PREFIX = "10.77.0.0/16"
DEFAULT_SUBNET_PREFIX = "10.77.0.0/20"
SUBNET = "nodes"

PRIORITY_SSH = 100
PRIORITY_AGENT = PRIORITY_SSH  # the rule's former name
VNET_TAG = "VirtualNetwork"  # Azure's service tag: the addresses of the VNet (its VMs' private addresses)
PRIORITY_INTERNAL = 110
PRIORITY_PEERS = 120  # the run's nodes of other networks, by their public addresses (a run across regions)
PRIORITY_DENY = 4096  # below it nothing else is let in (Azure's defaults would admit the whole VNet tag)


def digest(text: str, length: int) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def vm_name(request_id: str) -> str:
    """The VM's name, fixed by the request id: the idempotency key (a lookup by name before the PUT)."""
    return f"gt-{digest(request_id, 16)}"


def nic_name(vm: str) -> str:
    return f"{vm}-nic"


def ip_name(vm: str) -> str:
    return f"{vm}-ip"


def disk_name(vm: str) -> str:
    return f"{vm}-osdisk"


def resource_group_name(run_id: str) -> str:
    """``geotrain-<run>`` in the characters a resource group name allows (≤ 90, no trailing dot)."""
    safe = re.sub(r"[^A-Za-z0-9_().-]", "-", run_id)
    name = f"geotrain-{safe}"
    if len(name) > 90:
        name = f"{name[:81]}-{digest(run_id, 8)}"
    return name.rstrip(".")


def network_names(run_id: str, region: str) -> tuple[str, str]:
    """(VNet, NSG) of a run in a region; the run's hash keeps runs apart in a shared resource group."""
    base = f"geotrain-{digest(run_id, 8)}-{region}"
    return f"{base}-vnet", f"{base}-nsg"


def tag_value(text: str) -> str:
    return text if len(text) <= TAG_VALUE_MAX else f"{text[:TAG_VALUE_MAX - 17]}#{digest(text, 16)}"


def tags(run_id: str, request_id: str | None = None, offer_id: str | None = None) -> dict[str, str]:
    out = {TAG_RUN: tag_value(run_id)}
    if request_id is not None:
        out[TAG_REQUEST] = tag_value(request_id)
    if offer_id is not None:
        out[TAG_OFFER] = tag_value(offer_id)
    return out


def arm_id(subscription_id: str, group: str, kind: str, name: str) -> str:
    """``kind`` like ``Microsoft.Network/virtualNetworks``."""
    return f"/subscriptions/{subscription_id}/resourceGroups/{group}/providers/{kind}/{name}"


def zones_of(offer: Offer) -> list[str]:
    """The offer's zone as ARM's ``zones``; none for a region-wide offer (Azure picks)."""
    return [offer.location.zone] if offer.location.zone else []


def group_body(region: str, run_id: str) -> dict[str, Any]:
    return {"location": region, "tags": tags(run_id)}


def nsg_body(region: str, run_id: str, *, control_cidr: str, ssh_port: int, vnet_prefix: str = "",
             peers: Sequence[str] = ()) -> dict[str, Any]:
    """Inbound: geotrain's SSH port (``geotrain.providers.cloudnodes``) from ``control_cidr``, all TCP
    within the VNet (the ``VirtualNetwork`` service tag: peers at their private addresses), all TCP from
    ``peers`` (the run's nodes at their public addresses, /32 each: a run across regions), nothing else
    (no 22). ``vnet_prefix`` is not used (the tag follows the VNet)."""

    def rule(name: str, priority: int, access: str, protocol: str, source: str, destination: str,
             port: str) -> dict[str, Any]:
        return {"name": name, "properties": {
            "priority": priority, "direction": "Inbound", "access": access, "protocol": protocol,
            "sourceAddressPrefix": source, "sourcePortRange": "*", "destinationAddressPrefix": destination,
            "destinationPortRange": port}}

    rules = [
        rule("geotrain-ssh", PRIORITY_SSH, "Allow", "Tcp", control_cidr, "*", str(ssh_port)),
        rule("geotrain-run-tcp", PRIORITY_INTERNAL, "Allow", "Tcp", VNET_TAG, VNET_TAG, "*"),
        rule("geotrain-deny-inbound", PRIORITY_DENY, "Deny", "*", "*", "*", "*"),
    ]
    if peers:
        peer_rule = rule("geotrain-peers", PRIORITY_PEERS, "Allow", "Tcp", "", "*", "*")
        del peer_rule["properties"]["sourceAddressPrefix"]
        peer_rule["properties"]["sourceAddressPrefixes"] = sorted(peers)
        rules.insert(2, peer_rule)
    return {"location": region, "tags": tags(run_id), "properties": {"securityRules": rules}}


def vnet_body(region: str, run_id: str, *, nsg_id: str, vnet_prefix: str, subnet_prefix: str) -> dict[str, Any]:
    return {"location": region, "tags": tags(run_id), "properties": {
        "addressSpace": {"addressPrefixes": [vnet_prefix]},
        "subnets": [{"name": SUBNET, "properties": {"addressPrefix": subnet_prefix,
                                                    "networkSecurityGroup": {"id": nsg_id}}}]}}


def ip_body(offer: Offer, run_id: str, request_id: str) -> dict[str, Any]:
    body: dict[str, Any] = {"location": offer.location.region, "tags": tags(run_id, request_id, offer.offer_id),
                            "sku": {"name": "Standard", "tier": "Regional"},
                            "properties": {"publicIPAllocationMethod": "Static", "publicIPAddressVersion": "IPv4"}}
    if zones_of(offer):
        body["zones"] = zones_of(offer)
    return body


def nic_body(offer: Offer, run_id: str, request_id: str, *, subnet_id: str, ip_id: str) -> dict[str, Any]:
    return {"location": offer.location.region, "tags": tags(run_id, request_id, offer.offer_id), "properties": {
        "ipConfigurations": [{"name": "ipconfig1", "properties": {
            "subnet": {"id": subnet_id}, "privateIPAllocationMethod": "Dynamic", "primary": True,
            "publicIPAddress": {"id": ip_id, "properties": {"deleteOption": "Delete"}}}}]}}


def image_reference(image: str) -> dict[str, str]:
    """``storageProfile.imageReference`` of an image name: a marketplace URN PUBLISHER:OFFER:SKU:VERSION, or
    a managed or gallery image's resource ID."""
    if image.startswith("/"):
        return {"id": image}
    publisher, offer, sku, version = image.split(":")
    return {"publisher": publisher, "offer": offer, "sku": sku, "version": version}


def custom_data(script: str) -> str:
    return base64.b64encode(script.encode("utf-8")).decode("ascii")


def vm_body(offer: Offer, run_id: str, request_id: str, *, name: str, nic_id: str, custom_data_b64: str,
            ssh_public_key: str, image: Mapping[str, Any], admin_username: str, os_disk_type: str,
            os_disk_gib: int | None, identity: str | None = None) -> dict[str, Any]:
    os_disk: dict[str, Any] = {"name": disk_name(name), "createOption": "FromImage", "deleteOption": "Delete",
                               "managedDisk": {"storageAccountType": os_disk_type}}
    if os_disk_gib is not None:
        os_disk["diskSizeGB"] = int(os_disk_gib)
    properties: dict[str, Any] = {
        "hardwareProfile": {"vmSize": offer.shape.instance_type},
        "storageProfile": {"imageReference": dict(image), "osDisk": os_disk},
        "osProfile": {"computerName": name, "adminUsername": admin_username, "customData": custom_data_b64,
                      "linuxConfiguration": {"disablePasswordAuthentication": True, "ssh": {"publicKeys": [
                          {"path": f"/home/{admin_username}/.ssh/authorized_keys", "keyData": ssh_public_key}]}}},
        "networkProfile": {"networkInterfaces": [{"id": nic_id, "properties": {"primary": True,
                                                                                 "deleteOption": "Delete"}}]},
    }
    if offer.market is Market.SPOT:
        properties.update({"priority": "Spot", "evictionPolicy": "Delete", "billingProfile": {"maxPrice": -1}})
    else:
        properties["priority"] = "Regular"
    body: dict[str, Any] = {"location": offer.location.region, "tags": tags(run_id, request_id, offer.offer_id),
                            "properties": properties}
    if identity:  # a user-assigned managed identity's resource ID
        body["identity"] = azure_identity(identity)
    if zones_of(offer):
        body["zones"] = zones_of(offer)
    return body


def new_ssh_public_key() -> str:
    """A fresh RSA public key in OpenSSH form. Azure requires one when password log-in is off; its private
    half is thrown away at once (port 22 is closed anyway: the node agent is the only way in)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return public.decode("ascii") + " geotrain-discarded"


# ---- reading ARM answers (SDK models are mappings of ARM's JSON) ------------------------------------

def props(resource: Any) -> Mapping[str, Any]:
    return (resource or {}).get("properties") or {}


def provisioning_state(vm: Any) -> str:
    return str(props(vm).get("provisioningState") or "")


def power_state(vm: Any) -> str | None:
    """``running``, ``starting``, ``deallocated`` ... from the instance view's ``PowerState/*`` status."""
    statuses = (props(vm).get("instanceView") or {}).get("statuses") or []
    for status in statuses:
        code = str(status.get("code") or "")
        if code.lower().startswith("powerstate/"):
            return code.split("/", 1)[1].lower()
    return None


def tags_of(resource: Any) -> Mapping[str, str]:
    return dict((resource.get("tags") if isinstance(resource, Mapping) else getattr(resource, "tags", None)) or {})

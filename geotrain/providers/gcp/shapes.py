"""What the GCP provider sends: deterministic names, labels and tags, GCE request ids, and the REST JSON
bodies of an instance and of the run's firewall rules (plain dicts in the wire shape, so that a dry run
shows exactly what ``launch`` sends and needs no SDK).

Machine types are the inverse of the price source's naming (``geotrain.pricing.live.gcp.skus``): an N1
offer with attached GPUs is named ``n1-standard-8+T4`` / ``n1-standard-16+2xT4`` (host machine type, then
``+``, then the count and the canonical accelerator name); every other name (a2-*, a3-*, g2-*: GPUs built
in) is the machine type itself, with no ``guestAccelerators``.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from typing import Any

from geotrain.clouds.gcp.accelerators import ACCELERATORS, N1_ATTACHABLE
from geotrain.domain import Market, Offer
from geotrain.providers.identity import gcp_service_accounts

CLOUD = "gcp"
NAME_PREFIX = "gt-"
LABEL_RUN = "geotrain-run"  # label keys; the same keys in the metadata hold the exact, unsanitised values
LABEL_REQUEST = "geotrain-request"
LABEL_OFFER = "geotrain-offer"
STARTUP_SCRIPT_KEY = "startup-script"
# The Deep Learning VM family with CUDA 12.8 and the NVIDIA 570 driver preinstalled, on Ubuntu 22.04. It
# replaces common-cu124-debian-11 (Debian 11 images are no longer built); a setting (``image``).
DEFAULT_IMAGE = "projects/deeplearning-platform-release/global/images/family/common-cu128-ubuntu-2204-nvidia-570"
DEFAULT_NETWORK = "global/networks/default"
DEFAULT_DISK_GB = 100  # Deep Learning VM images need at least 50 GB
DEFAULT_DISK_TYPE = "pd-balanced"
HYPERDISK_SERIES = ("a3-ultragpu", "a4-", "a4x-")  # machine series that boot only from Hyperdisk
_REQUEST_NAMESPACE = uuid.UUID("7b0e8d2c-4f1a-5c3e-9a6b-0d8f2e1c4b5a")  # geotrain's GCE request ids
_N1_OFFER = re.compile(r"^(?P<host>n1-[a-z0-9-]+)\+(?:(?P<count>\d+)x)?(?P<accelerator>[A-Za-z0-9-]+)$")
_LABEL_OK = re.compile(r"^[a-z0-9_-]{0,63}$")
_TAG_OK = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# canonical accelerator name -> GCE accelerator type, for the GPUs an N1 host attaches (the inverse of ACCELERATORS)
ATTACHABLE_TYPES = {ACCELERATORS[t]: t for t in sorted(N1_ATTACHABLE)}


def digest(text: str, length: int) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def instance_name(request_id: str) -> str:
    """The instance (and node id) of a request: ``gt-`` and 20 hex digits of its hash (RFC 1035)."""
    return f"{NAME_PREFIX}{digest(request_id, 20)}"


def label_value(text: str) -> str:
    """``text`` as a GCE label value (lower-case letters, digits, ``_`` and ``-``, at most 63); a value that
    had to change also carries a hash of the original, so that two runs never share one."""
    if _LABEL_OK.match(text):
        return text
    clean = re.sub(r"[^a-z0-9_-]", "_", text.lower())
    return f"{clean[:50]}-{digest(text, 12)}"


def request_label(request_id: str) -> str:
    return digest(request_id, 32)


def run_tag(run_id: str) -> str:
    """The run's network tag (the firewall rules' target): ``gt-<run>``, hashed where the run id is not a
    valid tag fragment or is long."""
    candidate = f"{NAME_PREFIX}{run_id}"
    if len(candidate) <= 48 and _TAG_OK.match(candidate):
        return candidate
    slug = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", run_id.lower())).strip("-")[:30].strip("-")
    return f"{NAME_PREFIX}{slug + '-' if slug else ''}{digest(run_id, 10)}"


def public_peers_body(run_id: str, ranges: list[str], *, network: str = DEFAULT_NETWORK) -> dict[str, Any]:
    """The run's rule for its nodes of other networks (a run across clouds): all TCP from their public
    addresses (``ranges``, /32 each) to the run's VMs (by network tag)."""
    tag = run_tag(run_id)
    return {"name": f"{tag}-public", "network": network, "direction": "INGRESS", "priority": 1000,
            "targetTags": [tag], "description": f"geotrain run {run_id}: TCP from the run's nodes in other networks",
            "sourceRanges": sorted(ranges), "allowed": [{"IPProtocol": "tcp"}]}


def firewall_names(run_id: str) -> tuple[str, str]:
    """(the rule that lets the launcher in, the rule between the run's nodes). The first is still named
    ``-agent``, from when it opened the node agent's port; it opens geotrain's SSH port now, and keeping
    its name lets a cleanup find the rules of runs made either way."""
    tag = run_tag(run_id)
    return f"{tag}-agent", f"{tag}-peers"


def gce_request_id(*parts: str) -> str:
    """GCE's ``requestId`` (a UUID, deduplicated by GCE for about an hour) for an idempotency key."""
    return str(uuid.uuid5(_REQUEST_NAMESPACE, "\x1f".join(parts)))


def launch_request_id(request_id: str, zone: str, *, attempt: int, zone_chosen: bool) -> str:
    """uuid5 of the request id; a zone geotrain picked for a region-wide offer, and the number of the attempt
    after a definite failure (GCE would answer a repeated id with the first, failed, operation), are part
    of the key."""
    parts = [request_id]
    if zone_chosen:
        parts.append(f"zone={zone}")
    if attempt:
        parts.append(f"attempt={attempt}")
    return gce_request_id(*parts)


def machine_of(instance_type: str) -> tuple[str, list[tuple[str, int]]]:
    """(machine type, [(GCE accelerator type, count)]) of an offer's instance type."""
    match = _N1_OFFER.match(instance_type)
    if match is None:
        return instance_type, []
    count = int(match["count"] or 1)
    gpu_type = ATTACHABLE_TYPES.get(match["accelerator"])
    if gpu_type is None or count < 1:
        raise ValueError(f"{instance_type!r}: no N1-attachable GCE accelerator {match['accelerator']!r} "
                         f"(known: {', '.join(sorted(ATTACHABLE_TYPES))})")
    return match["host"], [(gpu_type, count)]


def has_gpus(offer: Offer) -> bool:
    return bool(offer.shape.accelerator_count) or bool(machine_of(offer.shape.instance_type)[1]) or \
        offer.shape.instance_type.split("-")[0] in ("a2", "a3", "a4", "g2", "g4")


def scheduling(offer: Offer) -> dict[str, Any]:
    """Spot: GCE deletes the VM when it takes it back (30 s notice); GPU VMs cannot live-migrate."""
    if offer.market is Market.SPOT:
        return {"provisioningModel": "SPOT", "instanceTerminationAction": "DELETE", "onHostMaintenance": "TERMINATE",
                "automaticRestart": False}
    if has_gpus(offer):
        return {"provisioningModel": "STANDARD", "onHostMaintenance": "TERMINATE", "automaticRestart": True}
    return {"provisioningModel": "STANDARD", "onHostMaintenance": "MIGRATE", "automaticRestart": True}


def instance_body(*, name: str, zone: str, request_id: str, run_id: str, offer: Offer, script: str,
                  image: str = DEFAULT_IMAGE, network: str = DEFAULT_NETWORK, disk_gb: int = DEFAULT_DISK_GB,
                  disk_type: str | None = None, service_account: str | None = None) -> dict[str, Any]:
    """The ``Instance`` resource of ``instances.insert``, as REST JSON (``service_account``: the email of
    the identity the VM gets, with the cloud-platform scope; none by default)."""
    machine, gpus = machine_of(offer.shape.instance_type)
    if disk_type is None:
        disk_type = "hyperdisk-balanced" if machine.startswith(HYPERDISK_SERIES) else DEFAULT_DISK_TYPE
    body: dict[str, Any] = {
        "name": name,
        "machineType": f"zones/{zone}/machineTypes/{machine}",
        "scheduling": scheduling(offer),
        "labels": {LABEL_RUN: label_value(run_id), LABEL_REQUEST: request_label(request_id),
                   LABEL_OFFER: label_value(offer.offer_id)},
        "metadata": {"items": [
            {"key": STARTUP_SCRIPT_KEY, "value": script},
            {"key": LABEL_RUN, "value": run_id},
            {"key": LABEL_REQUEST, "value": request_id},
            {"key": LABEL_OFFER, "value": offer.offer_id},
            {"key": "install-nvidia-driver", "value": "True"},
        ]},
        "tags": {"items": [run_tag(run_id)]},
        "disks": [{"boot": True, "autoDelete": True, "type": "PERSISTENT",
                   "initializeParams": {"sourceImage": image, "diskSizeGb": str(int(disk_gb)),
                                        "diskType": f"zones/{zone}/diskTypes/{disk_type}"}}],
        "networkInterfaces": [{"network": network, "accessConfigs": [
            {"name": "External NAT", "type": "ONE_TO_ONE_NAT", "networkTier": "PREMIUM"}]}],
    }
    if service_account:
        body["serviceAccounts"] = gcp_service_accounts(service_account)
    if gpus:
        body["guestAccelerators"] = [{"acceleratorType": f"zones/{zone}/acceleratorTypes/{gpu}", "acceleratorCount": n}
                                     for gpu, n in gpus]
    return body


def firewall_bodies(run_id: str, *, control_cidr: str, ssh_port: int,
                    network: str = DEFAULT_NETWORK) -> list[dict[str, Any]]:
    """The run's two ingress rules: geotrain's SSH port on the VMs from the launcher's range, and all TCP
    between the run's own nodes (by network tag: their private addresses). Nothing else is opened (not
    the image's sshd on 22, not the node agent, which listens on the VM's loopback)."""
    tag = run_tag(run_id)
    ssh, peers = firewall_names(run_id)
    common = {"network": network, "direction": "INGRESS", "priority": 1000, "targetTags": [tag]}
    return [
        {"name": ssh, **common, "description": f"geotrain run {run_id}: geotrain's SSH port from the launcher",
         "sourceRanges": [control_cidr], "allowed": [{"IPProtocol": "tcp", "ports": [str(int(ssh_port))]}]},
        {"name": peers, **common, "description": f"geotrain run {run_id}: TCP between the run's nodes",
         "sourceTags": [tag], "allowed": [{"IPProtocol": "tcp"}]},
    ]


def metadata_value(instance: Any, key: str) -> str | None:
    """A metadata item of a compute_v1.Instance."""
    for item in getattr(getattr(instance, "metadata", None), "items", None) or ():
        if item.key == key:
            return item.value
    return None


def private_address_of(instance: Any) -> str:
    """The address of a compute_v1.Instance inside its network (``networkInterfaces[0].networkIP``), else ""."""
    for nic in instance.network_interfaces:
        return nic.network_i_p or ""
    return ""


def address_of(instance: Any) -> str:
    """The public (NAT) address of a compute_v1.Instance, else its private one, else ""."""
    private = ""
    for nic in instance.network_interfaces:
        for config in nic.access_configs:
            if config.nat_i_p:
                return config.nat_i_p
        private = private or nic.network_i_p
    return private

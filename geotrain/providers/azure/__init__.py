"""The Azure provider (:class:`AzureProvider`): one Azure VM per launch request, through azure-mgmt-compute,
azure-mgmt-network and azure-mgmt-resource (the ``azure`` extra).

What a launch makes (``dry_run`` lists the same calls with their bodies):

- **Per run**: a resource group ``geotrain-<run>`` in the region of the run's first launch
  (``resource_groups.get``, then ``create_or_update`` if absent), or the existing group of the
  ``resource_group`` setting (never created or deleted by geotrain). geotrain leaves its empty group in
  place when the run ends (deleting a group takes minutes and would race a relaunch after a
  preemption): ``az group delete -n geotrain-<run>``.
- **Per run and region**: an NSG ``geotrain-<runhash>-<region>-nsg`` whose inbound rules let in
  geotrain's own sshd port (7422, ``geotrain.providers.cloudnodes``) from ``control_cidr`` only, all TCP
  whose source and destination are in the VNet (the ``VirtualNetwork`` service tag: the nodes reach each
  other at their private addresses), for a run across regions all TCP from the run's nodes' public
  addresses (``geotrain-peers``, /32 each, the NSG put again by ``admit_peers`` as nodes come and go),
  and deny everything else at priority 4096 (so Azure's default
  AllowVnetInBound does not apply; no rule for port 22); and a VNet
  ``...-vnet`` with one subnet ``nodes`` (10.77.0.0/20) carrying that NSG
  (``network_security_groups.begin_create_or_update``, ``virtual_networks.begin_create_or_update``). Made
  once (recorded in the state file); deleted, VNet then NSG, when the run's last node in the region has
  been terminated (best effort: a failure is logged and the network stays in the group).
- **Per VM**, named ``gt-<sha256(request id)[:16]>`` (the idempotency key: ``virtual_machines.get`` by that
  name comes before any create, and a VM found is the request's): a Standard SKU static public IP
  ``<vm>-ip`` (zonal where the offer has a zone) and a NIC ``<vm>-nic`` in the subnet
  (``public_ip_addresses`` / ``network_interfaces.begin_create_or_update``), then the VM
  (``virtual_machines.begin_create_or_update``): ``hardwareProfile.vmSize`` = the offer's instance type,
  ``zones`` = [the offer's zone] when it has one (geotrain's Azure offers are region-wide: Azure picks),
  ``priority`` Spot + ``evictionPolicy`` Delete + ``billingProfile.maxPrice`` -1 (pay up to the on-demand
  price; evicted only for capacity) for spot offers, Regular otherwise; ``osProfile.customData`` =
  base64 of :func:`geotrain.providers.startup.ssh_startup_script` (``cloud="azure"``: an sshd of
  geotrain's own on 7422 with the node's host key and the run's login key, for the node user, nothing
  else), admin user ``geotrain`` with password log-in disabled and the run's login key as its SSH key
  (Azure's own channel: the key reaches the image's sshd on 22 too, which the NSG keeps closed);
  ``identity`` = the user-assigned managed identity ``instance_role`` names (``launch --instance-role``),
  if any; ``storageProfile.imageReference`` = the ``image`` setting, default Microsoft's Ubuntu-HPC 22.04 image
  ``microsoft-dsvm:ubuntu-hpc:2204:latest`` (NVIDIA driver, CUDA, NCCL, InfiniBand, Python 3; no
  marketplace plan); an OS disk ``<vm>-osdisk`` (StandardSSD_LRS) and the NIC with ``deleteOption``
  Delete (the NIC's public IP too); tags ``geotrain-run``, ``geotrain-request``, ``geotrain-offer``
  (values over 256 characters are cut and hashed). The launch waits for the create operation and then
  for ``PowerState/running`` (``virtual_machines.get(expand="instanceView")``). A create that fails
  deletes the VM it left (Failed state), the NIC and the public IP; a timeout leaves them (the outcome
  is unknown: a retry with the same request id finds the VM by name and makes no second one).

Watching (``list``): ``virtual_machines.list(group)`` filtered by the ``geotrain-run`` tag (one call a run
with live nodes; runs whose nodes have all ended make no call), then ``virtual_machines.get(expand=
"instanceView")`` per live VM: provisioningState Creating → PENDING; ``PowerState/running`` → RUNNING; a
VM that is gone (or Deleting) without our terminate, or a spot VM ``PowerState/deallocated``, is looked up
in the activity log (``GET /subscriptions/{s}/providers/Microsoft.Insights/eventtypes/management/values
?api-version=2015-04-01``, filtered by the VM's resource id since its launch): a ResourceHealth event
that says preempted/evicted (what Azure logs for a spot eviction) → PREEMPTED "preempted"; an
Administrative delete/deallocate/powerOff by someone → TERMINATED "lost"; no word either way (the log
lags by minutes, or is not readable) → PREEMPTED for a spot VM (with eviction policy Delete Azure deletes
it, which is what a vanished spot VM most likely means) and TERMINATED "lost" for an on-demand one.
A stopped VM, or a Failed one not running, is "lost". These verdicts are final (the state file keeps
the first end). VMs of the run that the state file does not know (launched from another machine) are
adopted from their tags. ``NodeInfo.address`` is the public IP (``public_ip_addresses.get`` when not
known from the launch), else the private one; ``NodeInfo.private_address`` the NIC's
(``network_interfaces.get`` once the VM runs).

Terminate: ``virtual_machines.begin_delete``, then ``network_interfaces.begin_delete``,
``public_ip_addresses.begin_delete`` and ``disks.begin_delete`` (each waited for; ARM answers 204 for what
is already gone), then the region's network as above. ``booted`` / ``start``: the launcher reaches the VM
over SSH (:class:`geotrain.providers.cloudnodes.CloudNodes`, the ``nodes`` setting): the first time it
ships and installs this geotrain and starts the node agent on the VM's loopback (its whereabouts kept in
the node record), then runs commands through the agent over that link
(:class:`geotrain.providers.remote.AgentChannel`, with the run's token); ``ship`` / ``store_address``
(:class:`geotrain.providers.base.NodeLink`) and ``login_command`` (``geotrain ssh``) use the same link.

Errors: see :mod:`geotrain.providers.azure.errors`. Throttling (429) is not retried by this provider (nor by
azure-core's retry policy, built to leave 429 alone as the price source's is): ThrottledError, and the
launcher retries with the same request id. State: :mod:`geotrain.providers.azure.state`.

Setting up (README):

- credentials: ``az login`` (or a service principal: ``AZURE_CLIENT_ID``, ``AZURE_TENANT_ID``,
  ``AZURE_CLIENT_SECRET``; or a managed identity: whatever DefaultAzureCredential finds) and
  ``AZURE_SUBSCRIPTION_ID``;
- role: Contributor on the subscription (creates resource groups), or, with ``resource_group`` set,
  Virtual Machine Contributor + Network Contributor on that group; Reader (Microsoft.Insights/eventtypes/
  values/read) for the activity log, without which a vanished spot VM counts as evicted;
- quota: regional vCPUs of the VM family (e.g. "Standard NCASv3_T4 Family vCPUs") for on-demand, and
  "Total Regional Spot vCPUs" for spot, in every region the plan uses (Subscription → Usage + quotas);
- the Microsoft.Compute, Microsoft.Network and Microsoft.Insights resource providers registered on the
  subscription (``az provider register -n Microsoft.Compute`` ...), which new subscriptions have.
"""

from geotrain.providers.azure.clients import AzureClients, azure_clients
from geotrain.providers.azure.provider import AzureProvider

__all__ = ["AzureClients", "AzureProvider", "azure_clients"]

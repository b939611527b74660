"""The GCP provider: nodes are Compute Engine VMs, bought, watched and released through google-cloud-compute
(``compute_v1`` over REST).

Launch (:meth:`GcpProvider.launch`), in order:

1. the run's firewall rules on the network (``default``), once per run: ``compute.firewalls.get`` each, and
   where absent ``compute.firewalls.insert`` (``requestId`` = uuid5 of run and rule) and
   ``compute.globalOperations.wait``. ``gt-<run>-agent`` (the name it had when it opened the
   node agent's port) allows tcp:<geotrain's SSH port> (7422) from
   ``control_cidr`` to the target tag ``gt-<run>``; ``gt-<run>-peers`` allows all TCP from source tag
   ``gt-<run>`` to target tag ``gt-<run>`` (the run's VMs, at their private addresses). For a run across
   clouds, ``admit_peers`` (PeerRules) keeps ``gt-<run>-public``: all TCP from the run's nodes' public
   addresses (/32 each), inserted, then ``compute.firewalls.patch`` as nodes come and go. Nothing else:
   the image's sshd on 22 and the node agent (on the VM's loopback) are not opened.
2. ``compute.instances.get`` of the request's instance name (``gt-`` + 20 hex digits of the request id's
   hash, so that a retry finds what an earlier try made), and where absent ``compute.instances.insert`` in
   the offer's zone with ``requestId`` = uuid5 of the request id (GCE deduplicates it for about an hour;
   after a failure that is certain, the next try adds the attempt number, since GCE would answer the same id
   with the same failed operation). The instance: machine type ``zones/<zone>/machineTypes/<type>``, for an
   N1 offer named ``n1-standard-8+T4`` / ``n1-standard-16+2xT4`` the host ``n1-standard-8`` plus
   ``guestAccelerators`` (``zones/<zone>/acceleratorTypes/nvidia-tesla-t4``, count), GPU-bundled types (a2,
   a3, g2) as they are; scheduling ``SPOT`` with ``instanceTerminationAction: DELETE``,
   ``onHostMaintenance: TERMINATE``, ``automaticRestart: false`` for spot, ``STANDARD`` with
   ``onHostMaintenance: TERMINATE`` for on-demand GPU VMs; metadata ``startup-script`` (only an sshd of geotrain's own
   with the node's host key and the run's login key: :func:`geotrain.providers.startup.ssh_startup_script`,
   ``geotrain.providers.cloudnodes``), ``install-nvidia-driver``, and the exact run, request
   and offer ids; labels ``geotrain-run`` (sanitised to GCE's label rules), ``geotrain-request`` (a hash),
   ``geotrain-offer``; network tag ``gt-<run>``; a boot disk from a Deep Learning VM image family
   (:data:`~geotrain.providers.gcp.shapes.DEFAULT_IMAGE`, setting ``image``), 100 GB pd-balanced; the
   default network with an external address (``ONE_TO_ONE_NAT``). A region-wide offer (zone "") asks
   ``compute.regions.get`` for the region's zones and tries them in order until one has capacity.
3. ``compute.zoneOperations.wait`` until the insert's operation is done (never ``ExtendedOperation.result()``),
   then ``compute.instances.get`` until the VM leaves PROVISIONING / STAGING.

A launch that fails for certain deletes what it made (``compute.instances.delete`` of a VM left behind, and
the run's firewall rules when the run has no other node). A call that gets no answer in time raises
ProviderTimeoutError and keeps the record: the retry with the same request id finds the VM by name.

List: ``compute.instances.list`` (filter ``labels.geotrain-run = "<run>"``) in each zone the state file knows
for the run's live nodes; where one is missing or stopping, ``compute.instances.get`` of it and
``compute.zoneOperations.list`` (filter ``operationType = "compute.instances.preempted"``): PROVISIONING /
STAGING → pending, RUNNING → running, a VM with a preemption operation → preempted, one deleted by
``terminate`` → terminated with its reason, any other that vanished or stopped → terminated "lost". A VM of
the run that another GEOTRAIN_HOME launched is adopted from its metadata.

Terminate: ``compute.instances.delete`` (``requestId`` per instance) and the zone operation; the run's firewall
rules are deleted (``compute.firewalls.delete``) when its last node has ended (best effort: a failure leaves
them recorded and the next terminate of a node of the run tries again).

Errors (SDK error → geotrain's, the SDK's kept as ``__cause__``):

=====================================================  ====================================================
operation error ZONE_RESOURCE_POOL_EXHAUSTED(_WITH_      CapacityError, scope = the offer's zone scope
DETAILS), RESOURCE_POOL_EXHAUSTED, stockout
insert answered 400 / 404: the zone does not sell the    ConfigurationError (``NotSoldError``) of that offer
machine or accelerator type                              alone (``offer_id``), scope the zone scope; a
                                                         region-wide offer tries the next zone (all refuse:
                                                         ConfigurationError; some out of stock: CapacityError)
insert answered 404 notFound naming the image, or 400    ConfigurationError (the image setting; the request
invalid (INVALID_FIELD_VALUE) on another field           itself is wrong): no other zone is tried
operation error QUOTA_EXCEEDED, HTTP 403 quotaExceeded   QuotaError, scope ``gcp/<region>`` (``gcp`` for a
                                                         global quota), message names the quota metric
HTTP 429, 403 rateLimitExceeded / userRateLimitExceeded  retried (doubling pause, 5 tries), then ThrottledError
HTTP 503                                                 retried likewise, then ProviderError
HTTP 401 (and the RefreshError / InvalidOperation the     CredentialsError: ``gcloud auth application-default
retried 401 leaves), DefaultCredentialsError, no project  login`` or GOOGLE_APPLICATION_CREDENTIALS, and
                                                         GOOGLE_CLOUD_PROJECT
HTTP 403 (forbidden, insufficient permissions)           CredentialsError naming the roles to grant
operation error RATE_LIMIT_EXCEEDED / RESOURCE_          ThrottledError
OPERATION_RATE_EXCEEDED
requests timeout / connection error on insert or wait    ProviderTimeoutError (outcome unknown)
firewalls.insert 404 (no such network)                   ProviderError saying how to make the network
anything else                                            ProviderError
=====================================================  ====================================================

An operation's error has no SDK exception: the geotrain error raised for it has no ``__cause__``.

Setup (what a user needs):

- Credentials: ``gcloud auth application-default login``, or GOOGLE_APPLICATION_CREDENTIALS = a
  service-account key file; the project in GOOGLE_CLOUD_PROJECT (or ``gcloud config set project``).
- The Compute Engine API enabled, and a VPC network ``default`` (auto-mode subnets) or the ``network`` setting.
- IAM: roles/compute.instanceAdmin.v1 (instances, their boot disks, the image, the subnet and its external
  address, zone operations, regions) and roles/compute.securityAdmin (firewall rules, global operations), or
  roles/compute.admin (a run across clouds patches its ``-public`` rule: compute.firewalls.update). No service account is attached to the VMs unless ``instance_role`` (``launch
  --instance-role``) names one (``serviceAccounts``, cloud-platform scope; then roles/iam.serviceAccountUser
  on it).
- Quotas in each region used: CPUS (or the series' own, e.g. A2_CPUS), the GPU model's (NVIDIA_T4_GPUS, and
  PREEMPTIBLE_NVIDIA_T4_GPUS for spot), GPUS_ALL_REGIONS (global), IN_USE_ADDRESSES (one external address per
  node), SSD_TOTAL_GB (100 GB pd-balanced per node); two firewall rules per run (project FIREWALLS).
- The launcher's address as ``control_cidr``: only geotrain's SSH port (7422) is opened, to it alone. The
  launcher then reaches each VM over SSH (``geotrain.providers.cloudnodes``): it ships and installs this
  geotrain, starts the node agent on the VM's loopback, copies the task's files and forwards the
  rendezvous store back, so nothing on the VMs connects to the launcher (which may be behind NAT).

State: :mod:`geotrain.providers.gcp.state`. Clients and environment: :mod:`geotrain.providers.gcp.clients`.
"""

from geotrain.providers.gcp.clients import ENDPOINT_ENV, ComputeClients, default_clients
from geotrain.providers.gcp.provider import GcpProvider

__all__ = ["ENDPOINT_ENV", "ComputeClients", "GcpProvider", "default_clients"]

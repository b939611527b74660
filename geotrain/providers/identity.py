"""Who a cloud node is to its cloud's APIs: the identity ``launch --instance-role`` attaches to the run's VMs,
and whether the nodes can then reach the checkpoint store at all.

One value per cloud, told apart by its form:

- **AWS**: an IAM instance profile, by name (``geotrain-nodes``) or ARN
  (``arn:aws:iam::123456789012:instance-profile/geotrain-nodes``): RunInstances' ``IamInstanceProfile``.
- **GCP**: a service account, by email (``trainer@PROJECT.iam.gserviceaccount.com``): the instance's
  ``serviceAccounts`` with the ``cloud-platform`` scope (the account's IAM roles say what it may do).
- **Azure**: a user-assigned managed identity, by resource ID
  (``/subscriptions/…/resourceGroups/…/providers/Microsoft.ManagedIdentity/userAssignedIdentities/NAME``):
  the VM's ``identity``.

A node's libraries find these credentials on their own (boto3/s3fs from the instance metadata service,
gcsfs from the metadata server, adlfs through ``DefaultAzureCredential``'s managed identity; for adlfs the
storage account must be in the URL or ``AZURE_STORAGE_ACCOUNT_NAME``). geotrain hands a node no keys of
yours: a store of another cloud than the node's is reachable only with credentials the task's ``envs``
carry (``store_access_problem``).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from urllib.parse import urlsplit

from geotrain.errors import InputError

CLOUDS = ("aws", "gcp", "azure")
GCP_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
STORE_CLOUDS = {"s3": "aws", "s3a": "aws", "gs": "gcp", "gcs": "gcp", "az": "azure", "abfs": "azure",
                "abfss": "azure", "adl": "azure"}
# the environment variables by which each store's library takes credentials (any one group, all set)
ENV_CREDENTIALS: dict[str, tuple[tuple[str, ...], ...]] = {
    "aws": (("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),),
    "gcp": (("GOOGLE_APPLICATION_CREDENTIALS",),),
    "azure": (("AZURE_STORAGE_CONNECTION_STRING",), ("AZURE_STORAGE_ACCOUNT_KEY",), ("AZURE_STORAGE_SAS_TOKEN",),
              ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET")),
}
FORMS = ("an AWS instance profile (its name or arn:aws:iam::ACCOUNT:instance-profile/NAME), a GCP service "
         "account's email (…@….gserviceaccount.com) or an Azure user-assigned identity's resource ID "
         "(/subscriptions/…/providers/Microsoft.ManagedIdentity/userAssignedIdentities/NAME)")

_AWS_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:instance-profile/[\w+=,.@/-]{1,128}$")
_AWS_NAME = re.compile(r"^[\w+=,.@-]{1,128}$")
_GCP_EMAIL = re.compile(r"^[a-z0-9-]+@[a-z0-9.-]+\.gserviceaccount\.com$")
_AZURE_ID = re.compile(r"^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.ManagedIdentity/"
                       r"userAssignedIdentities/[^/]+$", re.IGNORECASE)


def identity_cloud(value: str) -> str:
    """The cloud an ``--instance-role`` value belongs to, by its form."""
    value = value.strip()
    if _AZURE_ID.match(value):
        return "azure"
    if _GCP_EMAIL.match(value):
        return "gcp"
    if _AWS_ARN.match(value) or (_AWS_NAME.match(value) and "@" not in value):
        return "aws"
    raise InputError(f"--instance-role {value!r} is none of {FORMS}")


def identities_by_cloud(values: Iterable[str]) -> dict[str, str]:
    """Cloud → the identity its nodes get; at most one per cloud."""
    out: dict[str, str] = {}
    for value in values:
        cloud = identity_cloud(value)
        if cloud in out and out[cloud] != value.strip():
            raise InputError(f"--instance-role: two identities for {cloud} ({out[cloud]!r} and {value.strip()!r}); "
                             "give one per cloud")
        out[cloud] = value.strip()
    return out


def aws_instance_profile(value: str) -> dict[str, str]:
    """RunInstances' ``IamInstanceProfile``."""
    return {"Arn": value} if value.startswith("arn:") else {"Name": value}


def gcp_service_accounts(email: str) -> list[dict[str, object]]:
    """The instance's ``serviceAccounts``."""
    return [{"email": email, "scopes": list(GCP_SCOPES)}]


def azure_identity(resource_id: str) -> dict[str, object]:
    """The VM's ``identity``."""
    return {"type": "UserAssigned", "userAssignedIdentities": {resource_id: {}}}


def store_cloud(url: str) -> str | None:
    """The cloud whose object store ``url`` names, or None (a file system, memory, another scheme)."""
    return STORE_CLOUDS.get(urlsplit(url).scheme.lower())


def _env_credentials(cloud: str, envs: Mapping[str, str]) -> bool:
    return any(all(envs.get(name) for name in group) for group in ENV_CREDENTIALS.get(cloud, ()))


def store_access_problem(url: str, node_clouds: Collection[str], identities: Mapping[str, str],
                         envs: Mapping[str, str]) -> str | None:
    """Why the run's cloud nodes could not write the checkpoint store ``url``, or None.

    A node reaches an object store with its own cloud's identity (``identities``: what --instance-role
    attaches) or with credentials the task's ``envs`` carry to every node; geotrain gives it nothing else.
    Nodes of other kinds (on-prem machines have credentials of their own) and file systems (each node
    probes its own mounts once it is up) are not judged here."""
    cloud = store_cloud(url)
    if cloud is None or _env_credentials(cloud, envs):
        return None
    for node_cloud in sorted(set(node_clouds) & set(CLOUDS)):
        if node_cloud != cloud:
            names = " and ".join(ENV_CREDENTIALS[cloud][0])
            return (f"the nodes on {node_cloud} could not write the checkpoint store {url}: it is {cloud}'s, and "
                    f"geotrain gives a node only its own cloud's identity (--instance-role); put {names} in the "
                    f"task's envs, or give a store of {node_cloud}")
        if node_cloud not in identities:
            what = {"aws": "an IAM instance profile whose role may write the bucket",
                    "gcp": "a service account that may write the bucket",
                    "azure": "a user-assigned managed identity that may write the container"}[cloud]
            return (f"the nodes on {cloud} could not write the checkpoint store {url}: they get no credentials of "
                    f"yours; give --instance-role with {what}")
    return None

"""The SDK clients the Azure provider uses, built on :mod:`geotrain.clouds.azure.clients` as the Azure
price source's are: the credential chain, ``AZURE_SUBSCRIPTION_ID``, the ARM endpoint
(``base_url``; tests: a local fake) and the retry policy that leaves HTTP 429 to geotrain."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from geotrain.clouds.azure.clients import (
    DEFAULT_ARM_URL,
    SUBSCRIPTION_ENV,
    default_credential,
    no_throttle_retry_policy,
)
from geotrain.providers.azure.errors import credentials_missing, sdk_missing


@dataclass(frozen=True)
class AzureClients:
    """``compute``: ComputeManagementClient; ``network``: NetworkManagementClient; ``resources``:
    ResourceManagementClient (all on ``arm_url`` for ``subscription_id``). ``call_options`` go to every call
    (``{"enforce_https": False}`` lets the bearer token reach an http:// fake)."""

    compute: Any
    network: Any
    resources: Any
    subscription_id: str
    arm_url: str = DEFAULT_ARM_URL
    call_options: Mapping[str, Any] = field(default_factory=dict)

    def close(self) -> None:
        for client in (self.compute, self.network, self.resources):
            close = getattr(client, "close", None)
            if close is not None:
                close()


def azure_clients(*, credential: Any = None, subscription_id: str | None = None, arm_url: str = DEFAULT_ARM_URL,
                  enforce_https: bool = True, retry_total: int = 3, request_timeout_s: float = 60.0,
                  client_kwargs: Mapping[str, Any] | None = None,
                  environ: Mapping[str, str] | None = None) -> AzureClients:
    """Real SDK clients: ``credential`` default DefaultAzureCredential (``az login``, the AZURE_CLIENT_*
    variables, a managed identity ...), ``subscription_id`` default ``$AZURE_SUBSCRIPTION_ID``.
    ``request_timeout_s`` is the connect and read timeout of one HTTP request; ``retry_total`` azure-core's
    retries of transient failures other than 429 (tests: 0)."""
    env = os.environ if environ is None else environ
    subscription = subscription_id if subscription_id is not None else env.get(SUBSCRIPTION_ENV, "")
    if not subscription:
        raise credentials_missing(f"no subscription id; set {SUBSCRIPTION_ENV} "
                                  "(`az account show --query id -o tsv`)")
    try:
        from azure.mgmt.compute import ComputeManagementClient
        from azure.mgmt.network import NetworkManagementClient
        from azure.mgmt.resource.resources import ResourceManagementClient
    except ImportError as exc:
        raise sdk_missing(exc) from exc
    if credential is None:
        credential = default_credential()
    url = arm_url.rstrip("/")
    kwargs: dict[str, Any] = {"connection_timeout": request_timeout_s, "read_timeout": request_timeout_s}
    kwargs.update(client_kwargs or {})

    def make(cls: Any) -> Any:
        return cls(credential, subscription, base_url=url, retry_policy=no_throttle_retry_policy(retry_total),
                   **kwargs)

    return AzureClients(compute=make(ComputeManagementClient), network=make(NetworkManagementClient),
                        resources=make(ResourceManagementClient), subscription_id=subscription, arm_url=url,
                        call_options={} if enforce_https else {"enforce_https": False})

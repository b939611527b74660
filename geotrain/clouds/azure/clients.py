"""What every Azure SDK client of geotrain is built with: the ARM endpoint, ``AZURE_SUBSCRIPTION_ID``,
the standard credential chain and azure-core's retry policy minus HTTP 429 (throttling is retried by
:func:`geotrain.clouds.retry.with_backoff`, which reports it)."""

from __future__ import annotations

from typing import Any

DEFAULT_ARM_URL = "https://management.azure.com"
SUBSCRIPTION_ENV = "AZURE_SUBSCRIPTION_ID"


def default_credential() -> Any:
    """DefaultAzureCredential: ``az login``, the AZURE_CLIENT_* variables, a managed identity …"""
    from azure.identity import DefaultAzureCredential

    return DefaultAzureCredential()


def no_throttle_retry_policy(retry_total: int) -> Any:
    """azure-core's RetryPolicy, except that 429 is never retried there (geotrain's with_backoff does)."""
    from azure.core.pipeline.policies import RetryPolicy

    class _LeaveThrottlingToGeotrain(RetryPolicy):
        def is_retry(self, settings: Any, response: Any) -> bool:
            if response.http_response.status_code == 429:
                return False
            return super().is_retry(settings, response)

    return _LeaveThrottlingToGeotrain(retry_total=retry_total, retry_backoff_factor=0.5)

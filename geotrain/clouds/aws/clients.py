"""boto3 clients: one factory for the price source and the provider, and the client method of an
API operation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ClientFactory = Callable[[str, str], Any]  # (service, region) -> boto3 client


def default_client_factory(endpoint_url: str | None = None, max_attempts: int = 3) -> ClientFactory:
    """boto3 clients from one default session; ``endpoint_url`` None lets boto3 read AWS_ENDPOINT_URL.

    Credentials: boto3's standard chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE,
    ~/.aws/credentials and ~/.aws/config, SSO, container or instance metadata), resolved at the first
    call. botocore's own retries are kept small (``max_attempts`` in all, standard mode): throttling is
    retried by :func:`geotrain.clouds.retry.with_backoff`, which reports it."""
    import boto3
    from botocore.config import Config

    session = boto3.session.Session()
    config = Config(retries={"mode": "standard", "total_max_attempts": max_attempts},
                    connect_timeout=10, read_timeout=60)

    def make(service: str, region: str) -> Any:
        return session.client(service, region_name=region, endpoint_url=endpoint_url, config=config)

    return make


def method_name(operation: str) -> str:
    """The boto3 client method of an API operation: DescribeSpotPriceHistory → describe_spot_price_history."""
    out = []
    for i, ch in enumerate(operation):
        if ch.isupper() and i:
            out.append("_")
        out.append(ch.lower())
    return "".join(out)

"""How the AWS source talks to AWS: counted calls with backoff and pagination through the clients of
:mod:`geotrain.clouds.aws`, the Spot Advisor fetch.

The lowest layer of :mod:`geotrain.pricing.live.aws`: imports nothing from its siblings."""

from __future__ import annotations

import json
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from geotrain.clouds.aws.clients import ClientFactory, method_name
from geotrain.clouds.aws.errors import CREDENTIALS_HINT, is_throttled
from geotrain.clouds.retry import with_backoff
from geotrain.errors import CatalogError, CredentialsError

SPOT_ADVISOR_URL = "https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json"
SPOT_ADVISOR_URL_ENV = "GEOTRAIN_AWS_SPOT_ADVISOR_URL"  # read by AwsSource.from_environment


class AwsCalls:
    """API calls through one boto3 client per (service, region), each retried while throttled and
    counted per operation in ``counts``."""

    def __init__(self, factory: ClientFactory, *, sleep: Callable[[float], None] = time.sleep,
                 attempts: int = 6, first_pause_s: float = 0.5) -> None:
        self._factory = factory
        self._clients: dict[tuple[str, str], Any] = {}
        self._sleep, self._attempts, self._first_pause_s = sleep, attempts, first_pause_s
        self.counts: dict[str, int] = defaultdict(int)

    def client(self, service: str, region: str) -> Any:
        key = (service, region)
        if key not in self._clients:
            self._clients[key] = self._factory(service, region)
        return self._clients[key]

    def call(self, service: str, region: str, operation: str, **params: Any) -> Mapping[str, Any]:
        """One API call, retried while throttled; NoCredentialsError → CredentialsError."""
        from botocore.exceptions import NoCredentialsError

        client = self.client(service, region)
        method = getattr(client, method_name(operation))

        def once() -> Mapping[str, Any]:
            self.counts[operation] += 1
            return method(**params)

        try:
            return with_backoff(once, throttled=is_throttled, attempts=self._attempts,
                                first_pause_s=self._first_pause_s, sleep=self._sleep)
        except NoCredentialsError as exc:
            raise CredentialsError(f"AWS: no credentials found; {CREDENTIALS_HINT}", scope=region) from exc

    def pages(self, service: str, region: str, operation: str, key: str, **params: Any) -> Iterator[Any]:
        """The items under ``key`` of every page of a paginated call (NextToken)."""
        token = None
        while True:
            answer = self.call(service, region, operation, **params, **({"NextToken": token} if token else {}))
            items = answer.get(key)
            if not isinstance(items, list):
                raise CatalogError(f"AWS {operation} in {region}: the answer has no list {key!r}; "
                                   f"the API shape changed or the endpoint is not AWS")
            yield from items
            token = answer.get("NextToken")
            if not token:
                return


def term_match(field: str, value: str) -> dict[str, str]:
    """A TERM_MATCH filter of the Price List API."""
    return {"Type": "TERM_MATCH", "Field": field, "Value": value}


def http_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as answer:  # noqa: S310 - a fixed https URL or a test fake
        return json.loads(answer.read().decode("utf-8"))

"""The provider's API calls: one boto3 client per (service, region) from :mod:`geotrain.clouds.aws`'s factory,
each call retried with :func:`~geotrain.clouds.retry.with_backoff` while AWS throttles.

(Not :class:`geotrain.pricing.live.aws.calls.AwsCalls`, which counts every call for the refresh's
summary and takes an answer without its list for a changed API shape; both retry with the same policy
and the same throttling codes.)"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from geotrain.clouds.aws.clients import ClientFactory, method_name
from geotrain.clouds.aws.errors import is_throttled
from geotrain.clouds.retry import with_backoff


class Api:
    def __init__(self, factory: ClientFactory, *, sleep: Callable[[float], None] = time.sleep,
                 attempts: int = 3, first_pause_s: float = 0.5) -> None:
        self.factory = factory
        self._clients: dict[tuple[str, str], Any] = {}
        self._sleep, self._attempts, self._first_pause_s = sleep, attempts, first_pause_s

    def client(self, service: str, region: str) -> Any:
        key = (service, region)
        if key not in self._clients:
            self._clients[key] = self.factory(service, region)
        return self._clients[key]

    def call(self, service: str, region: str, operation: str, **params: Any) -> dict[str, Any]:
        method = getattr(self.client(service, region), method_name(operation))
        return dict(with_backoff(lambda: method(**params), throttled=is_throttled, attempts=self._attempts,
                                 first_pause_s=self._first_pause_s, sleep=self._sleep))

    def pages(self, service: str, region: str, operation: str, key: str, **params: Any) -> Iterator[Any]:
        token = None
        while True:
            answer = self.call(service, region, operation, **params, **({"NextToken": token} if token else {}))
            yield from answer.get(key) or []
            token = answer.get("NextToken")
            if not token:
                return

    def close(self) -> None:
        self._clients.clear()

"""How the AWS source talks to AWS: boto3 clients, counted calls with backoff and pagination, the
error codes it tells apart, the Spot Advisor fetch.

The lowest layer of :mod:`geotrain.pricing.live.aws`: imports nothing from its siblings."""

from __future__ import annotations

import json
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from geotrain.errors import CatalogError, CredentialsError
from geotrain.pricing.live.base import with_backoff

SPOT_ADVISOR_URL = "https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json"
SPOT_ADVISOR_URL_ENV = "GEOTRAIN_AWS_SPOT_ADVISOR_URL"  # read by AwsSource.from_environment
THROTTLE_CODES = frozenset({"RequestLimitExceeded", "Throttling", "ThrottlingException", "TooManyRequestsException",
                            "RequestThrottled", "RequestThrottledException", "SlowDown"})
CREDENTIAL_CODES = frozenset({"AuthFailure", "UnrecognizedClientException", "InvalidClientTokenId",
                              "SignatureDoesNotMatch", "ExpiredToken", "ExpiredTokenException"})
REFUSED_CODES = frozenset({"UnauthorizedOperation", "AccessDenied", "AccessDeniedException"})
CREDENTIALS_HINT = ("set AWS_PROFILE (a profile of ~/.aws/credentials), or AWS_ACCESS_KEY_ID and "
                    "AWS_SECRET_ACCESS_KEY, or run `aws configure`")

ClientFactory = Callable[[str, str], Any]  # (service, region) -> boto3 client


def default_client_factory(endpoint_url: str | None = None, max_attempts: int = 3) -> ClientFactory:
    """boto3 clients from one default session; ``endpoint_url`` None lets boto3 read AWS_ENDPOINT_URL.

    botocore's own retries are kept small (``max_attempts`` in all, standard mode): throttling is
    retried by :func:`with_backoff`, which reports it."""
    import boto3
    from botocore.config import Config

    session = boto3.session.Session()
    config = Config(retries={"mode": "standard", "total_max_attempts": max_attempts},
                    connect_timeout=10, read_timeout=60)

    def make(service: str, region: str) -> Any:
        return session.client(service, region_name=region, endpoint_url=endpoint_url, config=config)

    return make


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


def method_name(operation: str) -> str:
    """The boto3 client method of an API operation: DescribeSpotPriceHistory → describe_spot_price_history."""
    out = []
    for i, ch in enumerate(operation):
        if ch.isupper() and i:
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def sdk_errors() -> tuple[type[BaseException], ...]:
    """Every exception botocore raises for a call that did not work: an error answer (``ClientError``),
    no answer (``BotoCoreError``: connection, timeout, endpoint …), and an answer it cannot parse
    (``ResponseParserError``, which derives from neither: a proxy's HTML page, an endpoint that is
    not AWS, an action the endpoint does not implement)."""
    from botocore.exceptions import BotoCoreError, ClientError
    from botocore.parsers import ResponseParserError

    return (ClientError, BotoCoreError, ResponseParserError)


def one_line(exc: BaseException) -> str:
    """What went wrong with a call, in one line: ``Operation: Code: message`` for an error answer, the
    exception's kind and first line otherwise."""
    from botocore.exceptions import ClientError
    from botocore.parsers import ResponseParserError

    if isinstance(exc, ClientError):
        message = error_message(exc)
        if message.lstrip().startswith("<"):  # a web server's error page, not an AWS error
            message = "an error page, not an AWS error answer"
        return f"{exc.operation_name}: {error_code(exc)}: {_first_line(message)}"
    if isinstance(exc, ResponseParserError):
        return f"an answer botocore cannot parse ({_first_line(str(exc))}): the endpoint is not AWS or lacks the call"
    return f"{type(exc).__name__}: {_first_line(str(exc))}"


def _first_line(text: str, most: int = 200) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= most else line[:most - 1] + "…"


def error_code(exc: Any) -> str:
    return str((getattr(exc, "response", None) or {}).get("Error", {}).get("Code", ""))  # a timeout has None


def error_message(exc: Any) -> str:
    return str((getattr(exc, "response", None) or {}).get("Error", {}).get("Message", "")) or str(exc)


def is_throttled(exc: BaseException) -> bool:
    return error_code(exc) in THROTTLE_CODES


def term_match(field: str, value: str) -> dict[str, str]:
    """A TERM_MATCH filter of the Price List API."""
    return {"Type": "TERM_MATCH", "Field": field, "Value": value}


def http_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as answer:  # noqa: S310 - a fixed https URL or a test fake
        return json.loads(answer.read().decode("utf-8"))

"""AWS's error codes as geotrain tells them apart, botocore's exception classes, and the one line an
error becomes. The tables are AWS's published codes ("Error codes for the Amazon EC2 API",
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html, and the common errors
of every AWS API)."""

from __future__ import annotations

from collections.abc import Mapping

THROTTLE_CODES = frozenset({"RequestLimitExceeded", "Throttling", "ThrottlingException", "TooManyRequestsException",
                            "RequestThrottled", "RequestThrottledException", "SlowDown"})
CREDENTIAL_CODES = frozenset({"AuthFailure", "UnrecognizedClientException", "InvalidClientTokenId",
                              "SignatureDoesNotMatch", "ExpiredToken", "ExpiredTokenException"})
REFUSED_CODES = frozenset({"UnauthorizedOperation", "AccessDenied", "AccessDeniedException"})
CREDENTIALS_HINT = ("set AWS_PROFILE (a profile of ~/.aws/config or ~/.aws/credentials), or AWS_ACCESS_KEY_ID and "
                    "AWS_SECRET_ACCESS_KEY, or run `aws configure` (or `aws sso login`)")


def sdk_errors() -> tuple[type[BaseException], ...]:
    """Every exception botocore raises for a call that did not work: an error answer (``ClientError``),
    no answer (``BotoCoreError``: connection, timeout, endpoint …), and an answer it cannot parse
    (``ResponseParserError``, which derives from neither: a proxy's HTML page, an endpoint that is
    not AWS, an action the endpoint does not implement)."""
    from botocore.exceptions import BotoCoreError, ClientError
    from botocore.parsers import ResponseParserError

    return (ClientError, BotoCoreError, ResponseParserError)


def code_of(exc: BaseException) -> str:
    """The AWS error code of an SDK exception ("" if it has none: a timeout's ``response`` is None)."""
    response = getattr(exc, "response", None)
    return str(((response or {}).get("Error") or {}).get("Code", "")) if isinstance(response, Mapping) else ""


def message_of(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    said = ((response or {}).get("Error") or {}).get("Message", "") if isinstance(response, Mapping) else ""
    return str(said) or str(exc)


def status_of(exc: BaseException) -> int:
    response = getattr(exc, "response", None)
    meta = (response or {}).get("ResponseMetadata") or {} if isinstance(response, Mapping) else {}
    return int(meta.get("HTTPStatusCode") or 0)


def is_throttled(exc: BaseException) -> bool:
    return code_of(exc) in THROTTLE_CODES


def one_line(exc: BaseException) -> str:
    """What went wrong with a call, in one line: ``Operation: Code: message`` for an error answer, the
    exception's kind and first line otherwise."""
    from botocore.exceptions import ClientError
    from botocore.parsers import ResponseParserError

    if isinstance(exc, ClientError):
        message = message_of(exc)
        if message.lstrip().startswith("<"):  # a web server's error page, not an AWS error
            message = "an error page, not an AWS error answer"
        return f"{exc.operation_name}: {code_of(exc)}: {_first_line(message)}"
    if isinstance(exc, ResponseParserError):
        return f"an answer botocore cannot parse ({_first_line(str(exc))}): the endpoint is not AWS or lacks the call"
    return f"{type(exc).__name__}: {_first_line(str(exc))}"


def _first_line(text: str, most: int = 200) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= most else line[:most - 1] + "…"

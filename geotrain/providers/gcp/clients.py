"""The GCP provider's SDK clients (google-cloud-compute over REST), how they are built from the environment,
one retry policy, and geotrain's errors for the SDK's.

Credentials and project are found the way the price source finds them (``geotrain.pricing.live.gcp``:
Application Default Credentials, GOOGLE_CLOUD_PROJECT / CLOUDSDK_CORE_PROJECT / GCLOUD_PROJECT, the same
hints). ``GEOTRAIN_GCP_ENDPOINT`` (e.g. ``http://127.0.0.1:PORT``) points every client at another server
(a fake); an ``http://`` endpoint on a loopback address is used with anonymous credentials.

Operations are waited for with our own ``ZoneOperationsClient`` / ``GlobalOperationsClient`` (built with the
same client options), never ``ExtendedOperation.result()``, whose internal client ignores the options and
polls compute.googleapis.com (environment-notes §4).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from geotrain.clouds.gcp.credentials import CREDENTIALS_HINT, PROJECT_HINT, default_credentials
from geotrain.clouds.retry import with_backoff
from geotrain.errors import (
    CapacityError,
    ConfigurationError,
    CredentialsError,
    GeotrainError,
    NotFoundError,
    ProviderError,
    ProviderTimeoutError,
    QuotaError,
    ThrottledError,
)

T = TypeVar("T")

ENDPOINT_ENV = "GEOTRAIN_GCP_ENDPOINT"
ROLES_HINT = ("grant the account roles/compute.instanceAdmin.v1 and roles/compute.securityAdmin (firewall rules) "
              "on the project, and enable the Compute Engine API")
QUOTA_HINT = "ask for more at https://console.cloud.google.com/iam-admin/quotas, or plan another region"
CAPACITY_CODES = frozenset({"ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
                            "RESOURCE_POOL_EXHAUSTED", "STOCKOUT"})
QUOTA_CODES = frozenset({"QUOTA_EXCEEDED"})
RATE_CODES = frozenset({"RATE_LIMIT_EXCEEDED", "RESOURCE_OPERATION_RATE_EXCEEDED"})
RATE_REASONS = frozenset({"rateLimitExceeded", "userRateLimitExceeded"})
_QUOTA_IN_MESSAGE = re.compile(r"Quota '([^']+)' exceeded")
_REGION_IN_MESSAGE = re.compile(r"in region ([a-z]+-[a-z]+\d+)")


@dataclass(frozen=True, slots=True)
class ComputeClients:
    """The SDK clients the provider uses (google.cloud.compute_v1)."""

    instances: Any  # InstancesClient
    zone_operations: Any  # ZoneOperationsClient
    firewalls: Any  # FirewallsClient
    global_operations: Any  # GlobalOperationsClient
    regions: Any  # RegionsClient (the zones of a region, for region-wide offers)

    @classmethod
    def build(cls, credentials: Any, *, api_endpoint: str | None = None) -> ComputeClients:
        """Clients on ``credentials``; ``api_endpoint`` points all of them at one server (a fake)."""
        from google.api_core.client_options import ClientOptions
        from google.cloud import compute_v1

        options = ClientOptions(api_endpoint=api_endpoint) if api_endpoint else None
        kw = {"credentials": credentials, "client_options": options, "transport": "rest"}
        return cls(instances=compute_v1.InstancesClient(**kw), zone_operations=compute_v1.ZoneOperationsClient(**kw),
                   firewalls=compute_v1.FirewallsClient(**kw),
                   global_operations=compute_v1.GlobalOperationsClient(**kw), regions=compute_v1.RegionsClient(**kw))

    def close(self) -> None:
        for client in (self.instances, self.zone_operations, self.firewalls, self.global_operations, self.regions):
            try:
                client.transport.close()
            except Exception:  # noqa: BLE001, S112 - closing is best effort
                continue


def _loopback_http(endpoint: str) -> bool:
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    return parts.scheme == "http" and (host in ("localhost", "::1") or host.startswith("127."))


def default_clients(project: str | None = None, api_endpoint: str | None = None) -> tuple[ComputeClients, str]:
    """Clients on Application Default Credentials (anonymous ones for a loopback ``http://`` endpoint), and
    the project: given, from the environment, or the credentials' own. CredentialsError says what to set."""
    endpoint = api_endpoint or os.environ.get(ENDPOINT_ENV) or None
    credentials, project = default_credentials(project, anonymous=bool(endpoint and _loopback_http(endpoint)))
    return ComputeClients.build(credentials, api_endpoint=endpoint), project


# ---- errors -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Where:
    """What a call was about, for the messages and scopes of the errors it may raise."""

    action: str  # e.g. "compute.instances.insert gt-1234 in us-central1-a"
    region: str | None = None  # the region scope of a QuotaError
    zone_scope: str | None = None  # the scope of a CapacityError (the offer's zone scope)


def short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."


def _reasons(exc: Any) -> set[str]:
    out = set()
    for entry in getattr(exc, "errors", None) or ():
        if isinstance(entry, dict) and entry.get("reason"):
            out.add(str(entry["reason"]))
    if getattr(exc, "reason", None):
        out.add(str(exc.reason))
    return out


def quota_error(metric: str, region: str | None, where: Where, detail: str) -> QuotaError:
    scope = f"gcp/{region}" if region else "gcp"
    place = f"in {region}" if region else "across all regions"
    return QuotaError(f"GCP quota {metric} exceeded {place} ({detail}) for {where.action}: {QUOTA_HINT}", scope=scope)


def translate(exc: BaseException, where: Where, *, unknown_outcome: bool = False) -> GeotrainError:
    """geotrain's error for an SDK error (the caller raises it ``from exc``)."""
    import requests
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc

    if isinstance(exc, GeotrainError):
        return exc
    if isinstance(exc, (auth_exc.RefreshError, auth_exc.InvalidOperation)):  # a 401 the credentials cannot mend
        return CredentialsError(f"Google Cloud rejected the credentials for {where.action} ({short(exc)}): "
                                f"{CREDENTIALS_HINT}, and {PROJECT_HINT}", scope="gcp")
    if isinstance(exc, auth_exc.DefaultCredentialsError):
        return CredentialsError(f"no Google Cloud credentials found: {CREDENTIALS_HINT}, and {PROJECT_HINT}",
                                scope="gcp")
    if isinstance(exc, (requests.Timeout, requests.ConnectionError)) or isinstance(exc, gexc.DeadlineExceeded):
        if unknown_outcome:
            return ProviderTimeoutError(f"{where.action} got no answer in time ({short(exc)}); it may have been made: "
                                        "list the run's nodes, or launch again with the same request id (GCE "
                                        "deduplicates it)", scope=where.zone_scope)
        return ProviderError(f"{where.action}: Compute Engine did not answer ({short(exc)}); try again later",
                             scope=where.zone_scope)
    if not isinstance(exc, gexc.GoogleAPICallError):
        return ProviderError(f"{where.action} failed: {short(exc)}", scope=where.zone_scope)
    reasons = _reasons(exc)
    message = getattr(exc, "message", "") or str(exc)
    if isinstance(exc, gexc.Unauthorized) or exc.code == 401:
        return CredentialsError(f"Google Cloud rejected the credentials for {where.action} ({short(exc)}): "
                                f"{CREDENTIALS_HINT}, and {PROJECT_HINT}", scope="gcp")
    if isinstance(exc, gexc.TooManyRequests) or reasons & RATE_REASONS:
        return ThrottledError(f"Compute Engine asked geotrain to slow down ({short(exc)}) at {where.action}; "
                              "try again later with the same request id", scope="gcp")
    if "quotaExceeded" in reasons or _QUOTA_IN_MESSAGE.search(message):
        found = _QUOTA_IN_MESSAGE.search(message)
        region = _REGION_IN_MESSAGE.search(message)
        return quota_error(found.group(1) if found else "(see the message)",
                           region.group(1) if region else where.region, where, short(exc))
    if _is_capacity(" ".join(reasons) + " " + message):
        return CapacityError(f"no capacity for {where.action} ({short(exc)}); try another zone or later",
                             scope=where.zone_scope)
    if isinstance(exc, (gexc.Forbidden, gexc.PermissionDenied)):
        return CredentialsError(f"Google Cloud refused {where.action} ({short(exc)}): {ROLES_HINT}", scope="gcp")
    if isinstance(exc, gexc.NotFound) or (isinstance(exc, gexc.BadRequest) and "does not exist in zone" in message):
        return NotFoundError(f"{where.action}: not found ({short(exc)})")
    if isinstance(exc, gexc.ServiceUnavailable):
        return ProviderError(f"Compute Engine is unavailable at {where.action} ({short(exc)}); try again later",
                             scope=where.zone_scope)
    return ProviderError(f"{where.action} failed ({short(exc)})", scope=where.zone_scope)


# An insert GCE refuses as configured (not capacity: ZONE_RESOURCE_POOL_EXHAUSTED and the stockouts stay
# CapacityError). GCE's documented error catalog (https://cloud.google.com/compute/docs/reference/rest/v1 →
# "Errors": INVALID_FIELD_VALUE 400 "Invalid value for field '{field}': '{value}'. {reason}", reason "invalid";
# a resource that does not exist: 404 "The resource '{link}' was not found", reason "notFound") and
# https://cloud.google.com/compute/docs/troubleshooting/troubleshooting-resource-availability (what capacity is).
IMAGE_HINT = ("set the GCP provider's image to an image or image family the project can read (`gcloud compute "
              "images describe-from-family FAMILY --project PROJECT`)")
_IMAGE_IN_MESSAGE = re.compile(r"/images/|sourceImage|\bimage\b", re.I)
_TYPE_IN_MESSAGE = re.compile(r"machineTypes?|acceleratorTypes?|[Mm]achine type|[Aa]ccelerator type|"
                              r"does not exist in zone|/zones/[a-z0-9-]+' was not found")


def refused_insert(exc: BaseException, where: Where) -> GeotrainError | None:
    """geotrain's error for an instances.insert answered 400 or 404: None where the zone does not sell the
    machine or accelerator type (the caller raises its ``NotSoldError``, a ConfigurationError of that offer
    alone); a ConfigurationError where the image or another parameter is wrong; else what :func:`translate`
    makes of it (quota, capacity, credentials …)."""
    from google.api_core import exceptions as gexc

    error = translate(exc, where)
    if not isinstance(exc, (gexc.NotFound, gexc.BadRequest)) or isinstance(
            error, (CapacityError, QuotaError, CredentialsError, ThrottledError)):
        return error
    message = getattr(exc, "message", "") or str(exc)
    if _TYPE_IN_MESSAGE.search(message):
        return None
    if _IMAGE_IN_MESSAGE.search(message):
        return ConfigurationError(f"GCE has no such image for {where.action} ({short(exc)}); {IMAGE_HINT}",
                                  scope="gcp")
    return ConfigurationError(f"GCE refused {where.action} as configured ({short(exc)}); change what the message "
                              "names (the provider's image, network, disk settings, or the offer)",
                              scope=where.region and f"gcp/{where.region}")


def _is_capacity(text: str) -> bool:
    return any(code in text for code in CAPACITY_CODES) or "stockout" in text.lower()


def operation_error(operation: Any, where: Where) -> GeotrainError | None:
    """geotrain's error for a finished compute_v1.Operation that carries one, else None."""
    errors = list(operation.error.errors) if operation.error else []
    if not errors:
        return None
    codes = [e.code for e in errors]
    text = "; ".join(f"{e.code}: {e.message}" for e in errors)
    if any(code in CAPACITY_CODES or "stockout" in (code + e.message).lower() for code, e in zip(codes, errors)):
        return CapacityError(f"no capacity for {where.action} ({text}); try another zone or later",
                             scope=where.zone_scope)
    for e in errors:
        if e.code in QUOTA_CODES:
            metric, region, limit = None, None, None
            for detail in e.error_details:
                info = detail.quota_info
                if info and info.metric_name:
                    metric = info.metric_name
                    region = info.dimensions.get("region") if info.dimensions else None
                    limit = info.limit
            found = _QUOTA_IN_MESSAGE.search(e.message)
            metric = metric or (found.group(1) if found else "(unnamed)")
            if region is None:
                in_message = _REGION_IN_MESSAGE.search(e.message)
                global_quota = "ALL_REGIONS" in metric.upper() or "global" in e.message.lower()
                region = in_message.group(1) if in_message else (None if global_quota else where.region)
            detail_text = e.message if limit is None else f"{e.message}; limit {limit:g}"
            return quota_error(metric, region, where, detail_text)
    if any(code in RATE_CODES for code in codes):
        return ThrottledError(f"Compute Engine asked geotrain to slow down at {where.action} ({text}); try again "
                              "later with the same request id", scope="gcp")
    if operation.http_error_status_code in (401, 403):
        return CredentialsError(f"Google Cloud refused {where.action} ({text}): {ROLES_HINT}", scope="gcp")
    return ProviderError(f"{where.action} failed ({text})", scope=where.zone_scope)


# ---- calls --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallPolicy:
    """One retry policy for every call: 429, 403 rate-limit and 503 answers are retried with a doubling
    pause (the SDK's own retries are off), then raised as ThrottledError / ProviderError."""

    timeout_s: float = 60.0
    attempts: int = 5
    first_pause_s: float = 1.0
    sleep: Callable[[float], None] = time.sleep

    def call(self, where: Where, fn: Callable[[float], T], *, unknown_outcome: bool = False,
             passthrough: tuple[type[BaseException], ...] = ()) -> T:
        """``fn(timeout_s)`` with retries; SDK errors become geotrain's, except those in ``passthrough``."""
        from google.api_core import exceptions as gexc

        def throttled(exc: BaseException) -> bool:
            if isinstance(exc, passthrough):
                return False
            return isinstance(exc, (gexc.TooManyRequests, gexc.ServiceUnavailable)) or \
                (isinstance(exc, gexc.Forbidden) and bool(_reasons(exc) & RATE_REASONS))

        try:
            return with_backoff(lambda: fn(self.timeout_s), throttled=throttled, attempts=self.attempts,
                                first_pause_s=self.first_pause_s, sleep=self.sleep)
        except passthrough:
            raise
        except GeotrainError:
            raise
        except Exception as exc:
            raise translate(exc, where, unknown_outcome=unknown_outcome) from exc

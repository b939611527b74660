"""Azure SDK errors → geotrain's, in one place (the original stays the ``__cause__``).

=================================================================  ===========================================
Azure says                                                          geotrain raises
=================================================================  ===========================================
AllocationFailed, ZonalAllocationFailed, OverconstrainedAllocation  CapacityError, scope = the offer's zone
Request, OverconstrainedZonalAllocationRequest                      scope (``azure/<region>[/<zone>]``)
SkuNotAvailable (the size is not offered to the subscription in     ConfigurationError of that offer alone
the location or zone)                                               (``offer_id``), the zone scope
ImageNotFound, PlatformImageNotFound, InvalidTemplate,              ConfigurationError, scope ``azure/<region>``:
InvalidTemplateDeployment; InvalidParameter on a VM create          the image setting (or what Azure names)
QuotaExceeded; OperationNotAllowed whose message names a quota      QuotaError, scope ``azure/<region>``, the
                                                                    family Azure names (e.g. "standardNCASv3_T4
                                                                    Family Cores", "Low Priority Cores")
HTTP 401, AuthenticationFailed, InvalidAuthenticationToken*,        CredentialsError (``az login``, or the
azure-identity's CredentialUnavailableError / any                   AZURE_CLIENT_* variables, and
ClientAuthenticationError                                           AZURE_SUBSCRIPTION_ID)
HTTP 403, AuthorizationFailed                                       CredentialsError naming the role to grant
HTTP 404 SubscriptionNotFound                                       CredentialsError (check the subscription)
HTTP 429 (TooManyRequests, throttled)                               ThrottledError (not retried here: the
                                                                    launcher retries with the same request id)
a client timeout (ServiceRequest/ResponseTimeoutError), a dropped   ProviderTimeoutError: outcome unknown
answer (ServiceResponseError)
anything else                                                       ProviderError
=================================================================  ===========================================
"""

from __future__ import annotations

import re
from geotrain.clouds.azure.clients import SUBSCRIPTION_ENV
from geotrain.domain import Location
from geotrain.errors import (
    CapacityError,
    ConfigurationError,
    CredentialsError,
    ProviderError,
    ProviderTimeoutError,
    QuotaError,
    ThrottledError,
)

CAPACITY_CODES = frozenset(c.lower() for c in (
    "AllocationFailed", "ZonalAllocationFailed", "OverconstrainedAllocationRequest",
    "OverconstrainedZonalAllocationRequest"))
# Configuration, not capacity (the request can never succeed as sent). Sources: "Resolve errors for SKU not
# available" (https://learn.microsoft.com/azure/azure-resource-manager/troubleshooting/error-sku-not-available:
# SkuNotAvailable, "The requested size for resource … is currently not available in location … zones … for
# subscription …", or InvalidTemplateDeployment wrapping it; for Spot VMs it may also mean no Spot capacity
# there, which leaving that one offer out covers too); "Troubleshoot common Azure deployment errors"
# (https://learn.microsoft.com/azure/azure-resource-manager/troubleshooting/common-deployment-errors:
# InvalidTemplate, InvalidTemplateDeployment, SkuNotAvailable; OperationNotAllowed / QuotaExceeded are quota;
# AllocationFailed / ZonalAllocationFailed are capacity); "Understand common error messages when you manage
# virtual machines" (https://learn.microsoft.com/troubleshoot/azure/virtual-machines/windows/error-messages:
# ImageNotFound, PlatformImageNotFound, InvalidParameter).
OFFER_CONFIG_CODES = frozenset(c.lower() for c in ("SkuNotAvailable",))
IMAGE_CODES = frozenset(c.lower() for c in ("ImageNotFound", "PlatformImageNotFound"))
REQUEST_CONFIG_CODES = frozenset(c.lower() for c in ("InvalidTemplate", "InvalidTemplateDeployment"))
IMAGE_HINT = ("set the Azure provider's image to an image reference offered in that location (`az vm image list "
              "--location LOCATION --all --publisher PUBLISHER`; a marketplace image may need its terms accepted)")
AUTH_CODES = frozenset(c.lower() for c in (
    "AuthenticationFailed", "InvalidAuthenticationToken", "InvalidAuthenticationTokenTenant",
    "ExpiredAuthenticationToken", "AuthenticationFailedInvalidHeader"))
LOGIN_HINT = (f"sign in with `az login` (or set AZURE_CLIENT_ID, AZURE_TENANT_ID and AZURE_CLIENT_SECRET for a "
              f"service principal) and set {SUBSCRIPTION_ENV} to the subscription to launch in")
ROLE_HINT = ("give the identity the Contributor role on the subscription (or Virtual Machine Contributor and "
             "Network Contributor on the run's resource group, plus Reader for the activity log)")
_QUOTA_FAMILY = re.compile(r"approved\s+([\w ]+?)\s+quota", re.I)


def error_code(exc: BaseException) -> str:
    """ARM's error code (``{"error": {"code"}}``), or "". A wrapper code (e.g. Conflict) whose details
    carry a capacity or quota code gives that code."""
    error = getattr(exc, "error", None)
    code = str(getattr(error, "code", None) or "")
    for detail in getattr(error, "details", None) or []:
        inner = str(getattr(detail, "code", None) or "")
        if inner.lower() in CAPACITY_CODES | OFFER_CONFIG_CODES | IMAGE_CODES or \
                inner.lower() in ("quotaexceeded", "operationnotallowed"):
            return inner
    return code


def status_of(exc: BaseException) -> int | None:
    code = getattr(exc, "status_code", None)
    return code if isinstance(code, int) else None


def short(exc: BaseException) -> str:
    error = getattr(exc, "error", None)
    text = str(getattr(error, "message", None) or getattr(exc, "message", None) or exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


def quota_family(message: str) -> str | None:
    match = _QUOTA_FAMILY.search(message)
    return match.group(1).strip() if match else None


def is_throttle(exc: BaseException) -> bool:
    return status_of(exc) == 429 or error_code(exc).lower() in ("toomanyrequests", "throttled")


def is_timeout(exc: BaseException) -> bool:
    from azure.core.exceptions import ServiceRequestTimeoutError, ServiceResponseError

    return isinstance(exc, (ServiceResponseError, ServiceRequestTimeoutError))


def is_not_found(exc: BaseException) -> bool:
    return status_of(exc) == 404


def translate(exc: BaseException, *, what: str, location: Location | None = None,
              size: str | None = None, offer_id: str | None = None) -> ProviderError:
    """The geotrain error for an SDK error raised while doing ``what`` (e.g. "create VM gt-1a2b"); ``offer_id``:
    the offer a VM create was for (a SkuNotAvailable is about it alone)."""
    from azure.core.exceptions import AzureError, ClientAuthenticationError, HttpResponseError

    zone_scope = location.zone_scope if location else None
    region_scope = location.region_scope if location else None
    code, status, text = error_code(exc), status_of(exc), short(exc)
    detail = f"{code}: {text}" if code else text
    if isinstance(exc, ClientAuthenticationError) or status == 401 or code.lower() in AUTH_CODES:
        return CredentialsError(f"Azure rejected the credentials while trying to {what} ({detail}); {LOGIN_HINT}",
                                scope="azure")
    if status == 403 or code.lower() in ("authorizationfailed", "linkedauthorizationfailed"):
        return CredentialsError(f"Azure refused to {what} ({detail}); {ROLE_HINT}", scope="azure")
    if code.lower() == "subscriptionnotfound":
        return CredentialsError(f"Azure: the subscription was not found ({text}); check {SUBSCRIPTION_ENV} "
                                "(`az account list`)", scope="azure")
    if is_throttle(exc):
        return ThrottledError(f"Azure is throttling requests ({detail}) while trying to {what}; try again in a "
                              "minute with the same request", scope=region_scope or "azure")
    if code.lower() in CAPACITY_CODES:
        where = zone_scope or "the region"
        return CapacityError(f"Azure has no capacity for {size or 'this size'} in {where} now ({detail}); try "
                             "another zone, region or size, or later", scope=zone_scope)
    if code.lower() in OFFER_CONFIG_CODES:
        where = zone_scope or "that location"
        return ConfigurationError(f"Azure does not offer {size or 'this size'} to this subscription in {where} "
                                  f"({detail}); plan another size or region (`az vm list-skus --location "
                                  f"{location.region if location else 'LOCATION'} --size {size or 'SIZE'} --all` "
                                  "shows its restrictions)", scope=zone_scope, offer_id=offer_id)
    if code.lower() in IMAGE_CODES or (code.lower() == "invalidparameter" and offer_id is not None
                                       and "image" in text.lower()):
        return ConfigurationError(f"Azure has no such image to {what} ({detail}); {IMAGE_HINT}",
                                  scope=region_scope or "azure")
    if code.lower() in REQUEST_CONFIG_CODES or (code.lower() == "invalidparameter" and offer_id is not None):
        return ConfigurationError(f"Azure refused to {what} as configured ({detail}); change what the message "
                                  "names (the provider's image or settings, or the size)", scope=region_scope or "azure")
    if code.lower() == "quotaexceeded" or (code.lower() == "operationnotallowed" and "quota" in text.lower()):
        family = quota_family(text)
        named = f"the {family} quota" if family else f"a vCPU quota for {size or 'this size'}"
        return QuotaError(f"Azure: launching {size or 'the VM'} would exceed {named} in "
                          f"{location.region if location else 'the region'} ({text}); ask for more in the portal "
                          "(Subscription → Usage + quotas; spot VMs count against the Spot/Low Priority vCPU "
                          "quota) or pick another region or size", scope=region_scope or "azure")
    if is_timeout(exc):
        return ProviderTimeoutError(f"Azure did not answer in time while trying to {what} ({type(exc).__name__}); "
                                    "its outcome is unknown: list the run's nodes before trying again",
                                    scope=zone_scope)
    if isinstance(exc, HttpResponseError):
        return ProviderError(f"Azure refused to {what} (HTTP {status}, {detail})", scope=zone_scope)
    if isinstance(exc, AzureError):
        return ProviderError(f"Azure could not be reached to {what} ({type(exc).__name__}: {text}); check the "
                             "network and try again", scope=zone_scope)
    return ProviderError(f"Azure: could not {what} ({type(exc).__name__}: {text})", scope=zone_scope)


def credentials_missing(reason: str) -> CredentialsError:
    return CredentialsError(f"Azure: {reason}; {LOGIN_HINT}", scope="azure")


def sdk_missing(exc: ImportError) -> CredentialsError:
    return CredentialsError(f"Azure: the Azure SDK is not installed ({exc}); pip install 'geotrain[azure]', then "
                            f"{LOGIN_HINT}", scope="azure")

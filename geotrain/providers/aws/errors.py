"""AWS errors → geotrain's error types (the table is in :mod:`geotrain.providers.aws`)."""

from __future__ import annotations

from geotrain.clouds.aws.errors import (
    CREDENTIAL_CODES,
    CREDENTIALS_HINT,
    REFUSED_CODES,
    THROTTLE_CODES,
    code_of,
    message_of,
    status_of,
)
from geotrain.domain import Offer
from geotrain.errors import (
    CapacityError,
    ConfigurationError,
    CredentialsError,
    ProviderError,
    ProviderTimeoutError,
    QuotaError,
    ThrottledError,
)

CAPACITY_CODES = frozenset({"InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientHostCapacity",
                            "UnfulfillableCapacity"})
# Configuration, not capacity: the request can never succeed as sent. Codes and meanings from AWS's published
# list, "Error codes for the Amazon EC2 API" (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/
# errors-overview.html): InvalidAMIID.Malformed / .NotFound / .Unavailable (the AMI is malformed, does not
# exist in the region, or is no longer available); Unsupported ("the specified request is unsupported", e.g. an
# instance type the Availability Zone does not offer: AWS answers "Your requested instance type (…) is not
# supported in your requested Availability Zone (…)"); InvalidParameterValue / InvalidParameterCombination /
# InvalidParameter / MissingParameter (a value, combination or parameter of the request itself is wrong). And
# the SSM image parameter that does not exist in the region: GetParameter's ParameterNotFound ("The parameter
# couldn't be found", https://docs.aws.amazon.com/botocore/latest/reference/services/ssm/client/exceptions/
# ParameterNotFound.html), raised by the provider's image lookup (provider.AwsProvider._image).
IMAGE_CODES = frozenset({"InvalidAMIID.Malformed", "InvalidAMIID.NotFound", "InvalidAMIID.Unavailable"})
OFFER_CODES = frozenset({"Unsupported"})  # the offer's type where it is: that offer alone is refused
REQUEST_CODES = frozenset({"InvalidParameterValue", "InvalidParameterCombination", "InvalidParameter",
                           "MissingParameter"})
CONFIGURATION_CODES = IMAGE_CODES | OFFER_CODES | REQUEST_CODES
IMAGE_HINT = ("set the AWS provider's image_id to an AMI of that region, or its image_parameter to an SSM parameter "
              "that exists there, or plan without that region")
QUOTA_CODES = frozenset({"MaxSpotInstanceCountExceeded", "VcpuLimitExceeded", "InstanceLimitExceeded"})
NOT_MADE_SERVER_CODES = CAPACITY_CODES  # 5xx answers that say for sure that nothing was launched

# vCPU quota groups (Service Quotas, service ec2), by the letters an instance family starts with
_QUOTA_GROUPS = (("dl", "DL"), ("inf", "Inf"), ("trn", "Trn"), ("vt", "G and VT"), ("g", "G and VT"), ("p", "P"),
                 ("f", "F"), ("x", "X"))


def family(instance_type: str) -> str:
    """g4dn.xlarge → g4dn."""
    return instance_type.split(".", 1)[0]


def quota_name(instance_type: str, spot: bool) -> str:
    """The Service Quotas name of the vCPU quota an instance type counts against."""
    fam = family(instance_type).lower()
    group = next((g for prefix, g in _QUOTA_GROUPS if fam.startswith(prefix)), "Standard (A, C, D, H, I, M, R, T, Z)")
    return f"All {group} Spot Instance Requests" if spot else f"Running On-Demand {group} instances"


def translate(exc: BaseException, *, service: str, operation: str, region: str,
              offer: Offer | None = None) -> ProviderError:
    """The geotrain error for an SDK exception raised by ``service.operation`` in ``region``."""
    from botocore.exceptions import (
        ClientError,
        ConnectTimeoutError,
        NoCredentialsError,
        PartialCredentialsError,
        ProfileNotFound,
        ReadTimeoutError,
    )

    where = f"aws/{region}"
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError, ProfileNotFound)):
        return CredentialsError(f"AWS: {exc}; {CREDENTIALS_HINT}", scope="aws")
    if isinstance(exc, (ReadTimeoutError, ConnectTimeoutError)):
        return ProviderTimeoutError(
            f"AWS {service}:{operation} in {region} timed out ({exc}); its outcome is unknown: list the run's nodes "
            "(a launch retried with the same request id finds its instance, never makes a second)", scope=where)
    if not isinstance(exc, ClientError):
        return ProviderError(f"AWS {service}:{operation} in {region} failed: {type(exc).__name__}: {exc} "
                             "(check the network, or AWS_ENDPOINT_URL)", scope=where)
    code, message = code_of(exc), message_of(exc)
    said = f"{code}: {message}"
    if code in CAPACITY_CODES and offer is not None:
        loc = offer.location
        zone = f"zone {loc.zone}" if loc.zone else f"region {loc.region}"
        return CapacityError(f"AWS has no {offer.market} capacity for {offer.shape.instance_type} in {zone} now "
                             f"({said}); another zone or market may have some", scope=loc.zone_scope)
    if code in CONFIGURATION_CODES and operation == "RunInstances":
        return configuration_error(code, said, region, offer)
    if code in QUOTA_CODES and offer is not None:
        itype = offer.shape.instance_type
        spot = offer.market == "spot"
        what = ("the spot instance count limit" if code == "MaxSpotInstanceCountExceeded" else
                f"the vCPU quota '{quota_name(itype, spot)}'" if code == "VcpuLimitExceeded" else
                "the instance limit")
        return QuotaError(f"AWS {region}: launching a {family(itype)} instance ({itype}) would exceed {what} "
                          f"({said}); request an increase in Service Quotas (service ec2, region {region}) or use "
                          "another region", scope=where)
    if code in CREDENTIAL_CODES:
        return CredentialsError(f"AWS rejected the credentials ({said}); {CREDENTIALS_HINT}", scope="aws")
    if code in REFUSED_CODES:
        return CredentialsError(f"AWS refused {service}:{operation} in {region} ({code}): add the permission "
                                f"{service}:{operation} to the IAM policy of these credentials", scope="aws")
    if code in THROTTLE_CODES:
        return ThrottledError(f"AWS is throttling {service}:{operation} in {region} ({said}); retry later with "
                              "the same request id", scope=where)
    return ProviderError(f"AWS {service}:{operation} in {region} failed: {said}", scope=where)


def configuration_error(code: str, said: str, region: str, offer: Offer | None) -> ConfigurationError:
    """A RunInstances refusal that no capacity would mend (``CONFIGURATION_CODES``), saying what to change."""
    itype = offer.shape.instance_type if offer is not None else "the instance type"
    if code in IMAGE_CODES:
        return ConfigurationError(f"AWS {region} has no such image ({said}); {IMAGE_HINT}", scope=f"aws/{region}")
    if code in OFFER_CODES and offer is not None:
        loc = offer.location
        where = f"zone {loc.zone}" if loc.zone else f"region {region}"
        return ConfigurationError(f"AWS does not offer {itype} in {where} ({said}); the offer {offer.offer_id} "
                                  "cannot be launched there: plan another zone or instance type",
                                  scope=loc.zone_scope, offer_id=offer.offer_id)
    return ConfigurationError(f"AWS refused the launch of {itype} in {region} as configured ({said}); change what "
                              "the message names (the image, the instance type or the provider's settings)",
                              scope=f"aws/{region}")


def image_missing(parameter: str, region: str) -> ConfigurationError:
    """The SSM image parameter does not exist in ``region`` (GetParameter answered ParameterNotFound)."""
    return ConfigurationError(f"AWS SSM parameter {parameter} (the image to launch) does not exist in {region} "
                              f"(ParameterNotFound); {IMAGE_HINT}", scope=f"aws/{region}")


def is_server_error(exc: BaseException) -> bool:
    """A 5xx answer: AWS may have done the work (retry with the same ClientToken)."""
    return status_of(exc) >= 500 and code_of(exc) not in NOT_MADE_SERVER_CODES | THROTTLE_CODES

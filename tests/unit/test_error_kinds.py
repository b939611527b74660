"""The mapping tables: each cloud's refusals by kind (configuration is not capacity), and the places a new
account must opt in to."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace

import pytest

from geotrain.clouds.geography import AWS_OPT_IN_REGIONS, aws_zone_kind, launcher_may_go, named_places, needs_opt_in
from geotrain.domain import Continent, InstanceShape, InterruptionSignal, JobSpec, Location, Market, Offer, Objective
from geotrain.errors import CapacityError, ConfigurationError, ProviderError, QuotaError

AWS_ZONE = Location("aws", "us-west-2", "usw2-az1", Continent.NORTH_AMERICA)


def offer(location: Location = AWS_ZONE, itype: str = "g4dn.xlarge") -> Offer:
    return Offer(location, InstanceShape(itype, 4, 16, "T4", 1), Market.SPOT, 0.2, None,
                 InterruptionSignal(None, None), datetime(2026, 1, 1, tzinfo=timezone.utc), "test")


# ---- AWS ------------------------------------------------------------------------------------------------


def aws_error(code: str, operation: str = "RunInstances") -> BaseException:
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": f"{code} said"},
                        "ResponseMetadata": {"HTTPStatusCode": 400}}, operation)


@pytest.mark.parametrize(("code", "kind", "of_offer"), [
    ("InsufficientInstanceCapacity", CapacityError, False),
    ("InsufficientCapacity", CapacityError, False),
    ("UnfulfillableCapacity", CapacityError, False),
    ("Unsupported", ConfigurationError, True),
    ("InvalidAMIID.NotFound", ConfigurationError, False),
    ("InvalidAMIID.Malformed", ConfigurationError, False),
    ("InvalidAMIID.Unavailable", ConfigurationError, False),
    ("InvalidParameterValue", ConfigurationError, False),
    ("InvalidParameterCombination", ConfigurationError, False),
    ("VcpuLimitExceeded", QuotaError, False),
    ("InternalError", ProviderError, False),
])
def test_aws_codes_by_kind(code, kind, of_offer):
    from geotrain.providers.aws.errors import translate

    o = offer()
    error = translate(aws_error(code), service="ec2", operation="RunInstances", region="us-west-2", offer=o)
    assert type(error) is kind and code in str(error)
    assert getattr(error, "offer_id", None) == (o.offer_id if of_offer else None)


def test_aws_invalid_parameter_outside_run_instances_is_no_configuration_error():
    from geotrain.providers.aws.errors import image_missing, translate

    error = translate(aws_error("InvalidParameterValue", "CreateSecurityGroup"), service="ec2",
                      operation="CreateSecurityGroup", region="us-west-2")
    assert type(error) is ProviderError
    missing = image_missing("/aws/service/x", "me-south-1")
    assert isinstance(missing, ConfigurationError) and missing.scope == "aws/me-south-1" and missing.offer_id is None


# ---- Azure ----------------------------------------------------------------------------------------------


def azure_error(code: str, message: str = "said", details: tuple = ()) -> BaseException:
    from azure.core.exceptions import HttpResponseError

    exc = HttpResponseError(message=message)
    exc.error = SimpleNamespace(code=code, message=message,
                                details=[SimpleNamespace(code=c, message=m) for c, m in details])
    exc.status_code = 409
    return exc


@pytest.mark.parametrize(("code", "details", "kind", "of_offer"), [
    ("AllocationFailed", (), CapacityError, False),
    ("ZonalAllocationFailed", (), CapacityError, False),
    ("OverconstrainedAllocationRequest", (), CapacityError, False),
    ("SkuNotAvailable", (), ConfigurationError, True),
    ("InvalidTemplateDeployment", (("SkuNotAvailable", "not available"),), ConfigurationError, True),
    ("PlatformImageNotFound", (), ConfigurationError, False),
    ("ImageNotFound", (), ConfigurationError, False),
    ("InvalidTemplate", (), ConfigurationError, False),
    ("OperationNotAllowed", (), QuotaError, False),
])
def test_azure_codes_by_kind(code, details, kind, of_offer):
    from geotrain.providers.azure.errors import translate

    loc = Location("azure", "eastus", "1", Continent.NORTH_AMERICA)
    message = "exceeding approved Standard NCASv3_T4 Family Cores quota" if code == "OperationNotAllowed" else "said"
    error = translate(azure_error(code, message, details), what="create VM gt-1", location=loc, size="Standard_NC4as_T4_v3",
                      offer_id="azure/eastus/1/x")
    assert type(error) is kind
    assert getattr(error, "offer_id", None) == ("azure/eastus/1/x" if of_offer else None)


# ---- GCP ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("exc", "expect"), [
    ("NotFound:The resource 'projects/deeplearning-platform-release/global/images/family/nope' was not found",
     "image"),
    ("BadRequest:Invalid value for field 'resource.machineType': 'zones/us-central1-f/machineTypes/a3-highgpu-1g'. "
     "Machine type with name 'a3-highgpu-1g' does not exist in zone 'us-central1-f'.", "not sold"),
    ("BadRequest:Invalid value for field 'resource.labels': 'x=Y'", "request"),
    ("ServiceUnavailable:The zone 'projects/p/zones/us-central1-a' does not have enough resources available to "
     "fulfill the request. ZONE_RESOURCE_POOL_EXHAUSTED", "capacity"),
])
def test_gcp_insert_refusals_by_kind(exc, expect):
    from google.api_core import exceptions as gexc

    from geotrain.providers.gcp.clients import Where, refused_insert

    name, _, message = exc.partition(":")
    error = refused_insert(getattr(gexc, name)(message), Where("compute.instances.insert gt-1 in us-central1-f",
                                                               "us-central1", "gcp/us-central1/us-central1-f"))
    if expect == "not sold":
        assert error is None
    elif expect == "capacity":
        assert type(error) is CapacityError
    else:
        assert type(error) is ConfigurationError and error.offer_id is None
        assert ("no such image" in str(error)) == (expect == "image")


# ---- places that need opting in -------------------------------------------------------------------------


@pytest.mark.parametrize(("zone", "kind"), [
    ("use1-az1", "availability zone"), ("us-east-1a", "availability zone"), ("apne1-az4", "availability zone"),
    ("use1-atl2-az1", "local zone"), ("us-west-2-lax-1a", "local zone"),
    ("use1-wl1-bos-wlz1", "wavelength zone"), ("us-east-1-wl1-bos-wlz-1", "wavelength zone"), ("", "")])
def test_aws_zone_kinds(zone, kind):
    assert aws_zone_kind(zone) == kind


def test_opt_in_places_and_what_a_launcher_may_use():
    assert {"af-south-1", "ap-east-1", "me-south-1", "me-central-1", "il-central-1", "mx-central-1"} <= AWS_OPT_IN_REGIONS
    assert not {"us-east-1", "us-west-2", "eu-north-1", "ap-northeast-3", "sa-east-1"} & AWS_OPT_IN_REGIONS
    bahrain = Location("aws", "me-south-1", "mes1-az1", Continent.ASIA)
    atlanta = Location("aws", "us-east-1", "use1-atl2-az1", Continent.NORTH_AMERICA)
    oregon = AWS_ZONE
    gcp = Location("gcp", "me-central2", "me-central2-a", Continent.ASIA)
    assert "opt-in region me-south-1" in needs_opt_in(bahrain) and "local zone" in needs_opt_in(atlanta)
    assert needs_opt_in(oregon) is None and needs_opt_in(gcp) is None
    assert needs_opt_in(Location("aws", "us-gov-east-1", "", Continent.NORTH_AMERICA))
    job = JobSpec("j", "convnext-large", Objective.MIN_COST, target_samples_per_s=1)
    named = named_places(job, locations=[oregon])
    assert launcher_may_go(oregon, named) and launcher_may_go(gcp, named)
    assert not launcher_may_go(bahrain, named) and not launcher_may_go(atlanta, named)
    from dataclasses import replace

    from geotrain.domain import Constraints

    asked = replace(job, constraints=Constraints(regions=frozenset({"aws/me-south-1"})))
    assert launcher_may_go(bahrain, named_places(asked)) and not launcher_may_go(atlanta, named_places(asked))
    assert launcher_may_go(atlanta, named_places(job, locations=[atlanta]))  # the plan chose it: it was named

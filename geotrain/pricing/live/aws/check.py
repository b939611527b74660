"""``geotrain check`` for AWS: who the credentials are and which calls of a refresh they may make.

STS GetCallerIdentity proves the credentials (and names the account); then one DryRun call (EC2) or
a one-item call (Price List) per permission a refresh needs: DryRunOperation means allowed,
UnauthorizedOperation/AccessDenied names the missing permission."""

from __future__ import annotations

from typing import Any

from geotrain.clouds.aws.errors import CREDENTIALS_HINT, REFUSED_CODES, code_of
from geotrain.errors import CredentialsError
from geotrain.pricing.live.aws.calls import AwsCalls, term_match
from geotrain.pricing.live.base import CheckReport


def check_access(api: AwsCalls, cloud: str, home_region: str, pricing_region: str) -> CheckReport:
    """The check report of the credentials behind ``api`` (probes in ``home_region``, the Price List
    in ``pricing_region``)."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    try:
        identity = api.call("sts", home_region, "GetCallerIdentity")
    except CredentialsError as exc:
        return CheckReport(cloud, False, "", exc.message)
    except ClientError as exc:
        return CheckReport(cloud, False, "", f"AWS rejected the credentials ({code_of(exc)}); {CREDENTIALS_HINT}")
    except BotoCoreError as exc:
        return CheckReport(cloud, False, "", f"AWS STS unreachable ({exc}); check the network or AWS_ENDPOINT_URL")
    account = str(identity.get("Account", ""))
    probes: list[tuple[str, str, str, dict[str, Any]]] = [
        ("ec2:DescribeSpotPriceHistory", "ec2", "DescribeSpotPriceHistory", {"DryRun": True, "MaxResults": 10}),
        ("ec2:DescribeInstanceTypes", "ec2", "DescribeInstanceTypes", {"DryRun": True, "MaxResults": 5}),
        ("ec2:GetSpotPlacementScores", "ec2", "GetSpotPlacementScores",
         {"DryRun": True, "InstanceTypes": ["p3.2xlarge"], "TargetCapacity": 1,
          "SingleAvailabilityZone": True, "RegionNames": [home_region]}),
        ("pricing:GetProducts", "pricing", "GetProducts",
         {"ServiceCode": "AmazonEC2", "MaxResults": 1, "Filters": [term_match("regionCode", home_region)]}),
    ]
    missing, failed = [], []
    for permission, service, operation, params in probes:
        region = pricing_region if service == "pricing" else home_region
        try:
            api.call(service, region, operation, **params)
        except ClientError as exc:
            code = code_of(exc)
            if code == "DryRunOperation":
                continue
            if code in REFUSED_CODES:
                missing.append(permission)
            else:
                failed.append(f"{permission} ({code})")
        except (BotoCoreError, NoCredentialsError) as exc:
            failed.append(f"{permission} ({type(exc).__name__})")
    ok = not missing and not failed
    if ok:
        message = f"AWS account {account}: spot prices, instance types, placement scores and price list reachable"
    else:
        parts = []
        if missing:
            parts.append(f"refused: {', '.join(missing)} (add them to the IAM policy of the credentials)")
        if failed:
            parts.append(f"failed: {', '.join(failed)}")
        message = f"AWS account {account}: " + "; ".join(parts)
    return CheckReport(cloud, ok, account, message, tuple(missing))

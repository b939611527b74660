"""The run's security group in a region's default VPC: geotrain's SSH port from the control CIDR (the
launcher's public address), all TCP between the run's own instances (their private addresses, in one
VPC), nothing else in; outbound left as AWS makes it (all)."""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Callable, Iterable
from typing import Any

from geotrain.errors import InputError, ProviderError

Call = Callable[..., Any]  # (service, region, operation, *, expect=..., **params) -> answer


def group_name(run_id: str) -> str:
    """``geotrain-<run id>``, in the characters a VPC security group name allows (≤ 255)."""
    safe = re.sub(r"[^A-Za-z0-9._\-:/()#,@\[\]+=&;{}!$*]", "-", run_id)
    if len(safe) > 200 or safe != run_id:
        safe = f"{safe[:180]}-{hashlib.sha256(run_id.encode()).hexdigest()[:12]}"
    return f"geotrain-{safe}"


def control_range(cidr: str | None) -> tuple[str, str]:
    """(normalized CIDR, "IpRanges" or "Ipv6Ranges") of the control CIDR; InputError if unset or bad."""
    if not cidr:
        raise InputError("the AWS provider needs control_cidr: the address the launcher's connections come from, "
                         "e.g. your public IP as a.b.c.d/32 (the run's security group opens geotrain's SSH port "
                         "to it only)")
    try:
        net = ipaddress.ip_network(cidr, strict=False)
    except ValueError as exc:
        raise InputError(f"control_cidr {cidr!r} is not an IP network such as 203.0.113.7/32") from exc
    return str(net), ("Ipv6Ranges" if net.version == 6 else "IpRanges")


def ingress(agent_port: int, cidr: str, group_id: str) -> list[dict[str, Any]]:
    """The run's two inbound rules."""
    net, key = control_range(cidr)
    ip_range = {"CidrIpv6" if key == "Ipv6Ranges" else "CidrIp": net, "Description": "geotrain launcher → node sshd"}
    return [
        {"IpProtocol": "tcp", "FromPort": agent_port, "ToPort": agent_port, key: [ip_range]},
        {"IpProtocol": "tcp", "FromPort": 0, "ToPort": 65535,
         "UserIdGroupPairs": [{"GroupId": group_id, "Description": "between the run's nodes"}]},
    ]


def default_vpc(call: Call, region: str) -> str:
    answer = call("ec2", region, "DescribeVpcs", Filters=[{"Name": "isDefault", "Values": ["true"]}])
    vpcs = answer.get("Vpcs") or []
    if not vpcs:
        raise ProviderError(f"AWS {region} has no default VPC, which geotrain launches into; create one with "
                            f"`aws ec2 create-default-vpc --region {region}`", scope=f"aws/{region}")
    return str(vpcs[0]["VpcId"])


def find_group(call: Call, region: str, run_id: str, vpc_id: str) -> dict[str, Any] | None:
    answer = call("ec2", region, "DescribeSecurityGroups",
                  Filters=[{"Name": "group-name", "Values": [group_name(run_id)]},
                           {"Name": "vpc-id", "Values": [vpc_id]}])
    groups = answer.get("SecurityGroups") or []
    return groups[0] if groups else None


def ensure_group(call: Call, region: str, run_id: str, vpc_id: str, agent_port: int, cidr: str) -> str:
    """The run's group in ``vpc_id`` with both rules, made if missing; safe to call concurrently."""
    group = find_group(call, region, run_id, vpc_id)
    if group is None:
        made = call("ec2", region, "CreateSecurityGroup", expect={"InvalidGroup.Duplicate"}, **create_params(
            run_id, vpc_id))
        group = find_group(call, region, run_id, vpc_id) if "ErrorCode" in made else {"GroupId": made["GroupId"]}
        if group is None:
            raise ProviderError(f"AWS {region}: security group {group_name(run_id)} exists but cannot be found",
                                scope=f"aws/{region}")
    group_id = str(group["GroupId"])
    have = group.get("IpPermissions") or []
    missing = [rule for rule in ingress(agent_port, cidr, group_id) if not _has(have, rule)]
    if missing:
        call("ec2", region, "AuthorizeSecurityGroupIngress", expect={"InvalidPermission.Duplicate"},
             GroupId=group_id, IpPermissions=missing)
    return group_id


PEER_DESCRIPTION = "a node of the run in another network"


def admit_peers(call: Call, region: str, group_id: str, addresses: Iterable[str]) -> None:
    """The group's per-peer rules: all TCP from each of ``addresses`` (/32: the run's nodes at their public
    addresses, for a run across networks), and none from an address no longer among them."""
    answer = call("ec2", region, "DescribeSecurityGroups", GroupIds=[group_id])
    groups = answer.get("SecurityGroups") or []
    have = {r["CidrIp"] for g in groups for perm in g.get("IpPermissions") or []
            if (perm.get("IpProtocol"), perm.get("FromPort"), perm.get("ToPort")) == ("tcp", 0, 65535)
            for r in perm.get("IpRanges") or [] if r.get("Description") == PEER_DESCRIPTION}
    want = {f"{a}/32" for a in addresses}

    def rule(cidrs: list[str]) -> list[dict[str, Any]]:
        return [{"IpProtocol": "tcp", "FromPort": 0, "ToPort": 65535,
                 "IpRanges": [{"CidrIp": c, "Description": PEER_DESCRIPTION} for c in cidrs]}]

    if want - have:
        call("ec2", region, "AuthorizeSecurityGroupIngress", expect={"InvalidPermission.Duplicate"},
             GroupId=group_id, IpPermissions=rule(sorted(want - have)))
    if have - want:
        call("ec2", region, "RevokeSecurityGroupIngress", expect={"InvalidPermission.NotFound"},
             GroupId=group_id, IpPermissions=rule(sorted(have - want)))


def create_params(run_id: str, vpc_id: str) -> dict[str, Any]:
    name = group_name(run_id)
    return {"GroupName": name, "VpcId": vpc_id,
            "Description": f"geotrain run {run_id}: node agent port from the launcher, TCP between the run's nodes",
            "TagSpecifications": [{"ResourceType": "security-group", "Tags": [
                {"Key": "geotrain-run", "Value": run_id}, {"Key": "Name", "Value": name}]}]}


def delete_group(call: Call, region: str, group_id: str) -> bool:
    """Delete the group; False while instances still use it (DependencyViolation), True once it is gone."""
    answer = call("ec2", region, "DeleteSecurityGroup", expect={"DependencyViolation", "InvalidGroup.NotFound"},
                  GroupId=group_id)
    return answer.get("ErrorCode") != "DependencyViolation"


def _has(have: list[dict[str, Any]], rule: dict[str, Any]) -> bool:
    for perm in have:
        if (perm.get("IpProtocol"), perm.get("FromPort"), perm.get("ToPort")) != \
                (rule["IpProtocol"], rule["FromPort"], rule["ToPort"]):
            continue
        if "UserIdGroupPairs" in rule:
            wanted = rule["UserIdGroupPairs"][0]["GroupId"]
            if any(p.get("GroupId") == wanted for p in perm.get("UserIdGroupPairs") or []):
                return True
        else:
            key = "Ipv6Ranges" if "Ipv6Ranges" in rule else "IpRanges"
            field = "CidrIpv6" if key == "Ipv6Ranges" else "CidrIp"
            wanted = rule[key][0][field]
            if any(r.get(field) == wanted for r in perm.get(key) or []):
                return True
    return False

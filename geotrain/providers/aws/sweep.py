"""``geotrain cleanup --cloud aws``: every EC2 resource of a run (or of every geotrain run), found by the
``geotrain-run`` tag alone, in every region the account has enabled, released.

Calls, with no state file: ``ec2:DescribeRegions`` (in the home region; skipped when regions are given),
then per region, at once for up to ``REGION_THREADS`` regions:

1. ``ec2:DescribeInstances`` (filter ``tag:geotrain-run`` = the run, or ``tag-key`` geotrain-run; every state
   but terminated) → ``ec2:CreateTags`` (``geotrain-end-reason`` = cleanup, so that a launcher or
   ``geotrain stop`` that still knows the run sees why it ended) and ``ec2:TerminateInstances``; then
   DescribeInstances again until none of them is shutting down (at most ``settle_s``);
2. ``ec2:DescribeAddresses`` (the tag) → ``ec2:DisassociateAddress`` and ``ec2:ReleaseAddress``;
3. ``ec2:DescribeNetworkInterfaces`` (the tag; status available) → ``ec2:DeleteNetworkInterface``;
4. ``ec2:DescribeVolumes`` (the tag; status available: an instance's own volumes go with it) →
   ``ec2:DeleteVolume``;
5. ``ec2:DescribeSecurityGroups`` (the tag, and for one run its name ``geotrain-<run>``) →
   ``ec2:DeleteSecurityGroup``, retried while AWS answers DependencyViolation (an instance still shutting
   down) with a doubling pause, ``group_attempts`` times.

IAM beyond the provider's: ``ec2:DescribeRegions``, ``ec2:DescribeVolumes``, ``ec2:DeleteVolume``,
``ec2:DescribeAddresses``, ``ec2:DisassociateAddress``, ``ec2:ReleaseAddress``,
``ec2:DescribeNetworkInterfaces``, ``ec2:DeleteNetworkInterface``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from geotrain.clouds.aws.clients import ClientFactory
from geotrain.clouds.aws.errors import code_of
from geotrain.providers.aws import network
from geotrain.providers.aws.api import Api
from geotrain.providers.aws.errors import translate
from geotrain.providers.aws.records import TAG_END, TAG_RUN
from geotrain.providers.sweep import Say, Swept

CLOUD = "aws"
REGION_THREADS = 8
LIVE = ["pending", "running", "stopping", "stopped", "shutting-down"]
END_REASON = "cleanup"


class AwsSweep:
    def __init__(self, factory: ClientFactory, *, home_region: str = "us-east-1", settle_s: float = 180.0,
                 group_attempts: int = 6, first_pause_s: float = 2.0, sleep: Callable[[float], None] = time.sleep) -> None:
        self._api = Api(factory, sleep=sleep)
        self.home_region = home_region
        self.settle_s, self.group_attempts, self.first_pause_s = settle_s, group_attempts, first_pause_s
        self.sleep = sleep

    def call(self, region: str, operation: str, *, expect: Sequence[str] = (), **params: Any) -> dict[str, Any]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return self._api.call("ec2", region, operation, **params)
        except ClientError as exc:
            if code_of(exc) in expect:
                return {"ErrorCode": code_of(exc)}
            raise translate(exc, service="ec2", operation=operation, region=region) from exc
        except BotoCoreError as exc:
            raise translate(exc, service="ec2", operation=operation, region=region) from exc

    def pages(self, region: str, operation: str, key: str, **params: Any) -> list[Any]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return list(self._api.pages("ec2", region, operation, key, **params))
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, service="ec2", operation=operation, region=region) from exc

    def regions(self) -> list[str]:
        answer = self.call(self.home_region, "DescribeRegions")
        return sorted(r["RegionName"] for r in answer.get("Regions") or [])


def sweep(factory: ClientFactory, *, run_id: str | None = None, regions: Sequence[str] = (), dry_run: bool = False,
          say: Say | None = None, **settings: Any) -> list[Swept]:
    """Find (and unless ``dry_run`` release) the run's resources; what was found and done, region by region."""
    aws = AwsSweep(factory, **settings)
    where = list(regions) or aws.regions()
    for region in where:  # made here, one after another: a boto3 session does not make clients safely in threads
        aws._api.client("ec2", region)  # noqa: SLF001 - this module's own Api
    with ThreadPoolExecutor(max_workers=max(1, min(REGION_THREADS, len(where))), thread_name_prefix="sweep") as pool:
        found = list(pool.map(lambda region: _region(aws, region, run_id, dry_run, say or (lambda s: None)), where))
    return [s for per_region in found for s in per_region]


def _tag_filter(run_id: str | None) -> dict[str, Any]:
    return {"Name": f"tag:{TAG_RUN}", "Values": [run_id]} if run_id else {"Name": "tag-key", "Values": [TAG_RUN]}


def _run_of(resource: dict[str, Any]) -> str:
    return next((t["Value"] for t in resource.get("Tags") or [] if t.get("Key") == TAG_RUN), "")


def _region(aws: AwsSweep, region: str, run_id: str | None, dry_run: bool, say: Say) -> list[Swept]:
    out: list[Swept] = []

    def note(kind: str, rid: str, run: str, found: str, action: str, released: bool) -> None:
        swept = Swept(CLOUD, region, kind, rid, run, found, action, released)
        out.append(swept)
        say(swept)

    tag = _tag_filter(run_id)
    instances = [i for r in aws.pages(region, "DescribeInstances", "Reservations", Filters=[
        tag, {"Name": "instance-state-name", "Values": LIVE}]) for i in r.get("Instances") or []]
    ids = [i["InstanceId"] for i in instances]
    if ids and not dry_run:
        aws.call(region, "CreateTags", expect=("InvalidInstanceID.NotFound",), Resources=ids,
                 Tags=[{"Key": TAG_END, "Value": END_REASON}])
        for start in range(0, len(ids), 500):
            aws.call(region, "TerminateInstances", expect=("InvalidInstanceID.NotFound",),
                     InstanceIds=ids[start:start + 500])
    for inst in instances:
        note("instance", inst["InstanceId"], _run_of(inst), inst["State"]["Name"],
             "would terminate" if dry_run else "terminated", not dry_run)
    if ids and not dry_run:
        _settle(aws, region, ids)

    for addr in aws.call(region, "DescribeAddresses", Filters=[tag]).get("Addresses") or []:
        rid = addr.get("AllocationId") or addr.get("PublicIp", "")
        if not dry_run:
            if addr.get("AssociationId"):
                aws.call(region, "DisassociateAddress", expect=("InvalidAssociationID.NotFound",),
                         AssociationId=addr["AssociationId"])
            aws.call(region, "ReleaseAddress", expect=("InvalidAllocationID.NotFound",), AllocationId=rid)
        note("address", rid, _run_of(addr), addr.get("PublicIp", ""), "would release" if dry_run else "released",
             not dry_run)

    for nic in aws.pages(region, "DescribeNetworkInterfaces", "NetworkInterfaces", Filters=[tag]):
        rid, status = nic["NetworkInterfaceId"], nic.get("Status", "")
        if status != "available":
            note("network-interface", rid, _run_of(nic), status, "left: in use (goes with its instance)", False)
            continue
        if not dry_run:
            aws.call(region, "DeleteNetworkInterface", expect=("InvalidNetworkInterfaceID.NotFound",),
                     NetworkInterfaceId=rid)
        note("network-interface", rid, _run_of(nic), status, "would delete" if dry_run else "deleted", not dry_run)

    for vol in aws.pages(region, "DescribeVolumes", "Volumes", Filters=[tag]):
        rid, status = vol["VolumeId"], vol.get("State", "")
        if status in ("deleting", "deleted"):
            continue
        if status != "available":
            attached = ", ".join(a.get("InstanceId", "") for a in vol.get("Attachments") or [])
            if dry_run or not set(ids) >= {a.get("InstanceId") for a in vol.get("Attachments") or []}:
                note("volume", rid, _run_of(vol), status, f"left: attached to {attached}" if not dry_run else
                     "goes with its instance", False)
            continue  # a volume of an instance just terminated goes with it (or shows available next time)
        if not dry_run:
            aws.call(region, "DeleteVolume", expect=("InvalidVolume.NotFound",), VolumeId=rid)
        note("volume", rid, _run_of(vol), status, "would delete" if dry_run else "deleted", not dry_run)

    groups = {g["GroupId"]: g for g in aws.call(region, "DescribeSecurityGroups", Filters=[tag]).get(
        "SecurityGroups") or []}
    if run_id:  # a group made before it was tagged, or whose tag was removed: its name is the run's
        groups.update({g["GroupId"]: g for g in aws.call(region, "DescribeSecurityGroups", Filters=[
            {"Name": "group-name", "Values": [network.group_name(run_id)]}]).get("SecurityGroups") or []})
    for group_id, group in sorted(groups.items()):
        run = _run_of(group)
        if dry_run:
            note("security-group", group_id, run, group.get("GroupName", ""), "would delete", False)
            continue
        gone, pause = False, aws.first_pause_s
        for attempt in range(aws.group_attempts):
            if network.delete_group(lambda *a, **k: aws.call(a[1], a[2], **k), region, group_id):
                gone = True
                break
            if attempt + 1 < aws.group_attempts:
                aws.sleep(pause)
                pause *= 2
        note("security-group", group_id, run, group.get("GroupName", ""),
             "deleted" if gone else f"left: still in use (DependencyViolation after {aws.group_attempts} tries); "
             "run the cleanup again in a few minutes", gone)
    return out


def _settle(aws: AwsSweep, region: str, ids: list[str]) -> None:
    """Until AWS shows every one of ``ids`` terminated (their groups can go then), at most ``settle_s``."""
    deadline = time.monotonic() + aws.settle_s
    while time.monotonic() < deadline:
        reservations = aws.pages(region, "DescribeInstances", "Reservations", Filters=[
            {"Name": "instance-id", "Values": ids}])
        if all(i["State"]["Name"] == "terminated" for r in reservations for i in r.get("Instances") or []):
            return
        aws.sleep(min(5.0, max(0.2, aws.first_pause_s)))


"""The AWS provider: :class:`AwsProvider` (the rules are in the docstring of :mod:`geotrain.providers.aws`)."""

from __future__ import annotations

import contextlib
import copy
import re
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from geotrain.clouds.aws.clients import ClientFactory, default_client_factory
from geotrain.clouds.aws.errors import code_of
from geotrain.clouds.aws.shapes import availability_zone_ids
from geotrain.domain import Market, Offer
from geotrain.errors import ConfigurationError, CredentialsError, NotFoundError, ProviderError, ProviderTimeoutError
from geotrain.providers.aws import network, records
from geotrain.providers.aws.api import Api
from geotrain.providers.aws.errors import CREDENTIALS_HINT, image_missing, is_server_error, translate
from geotrain.providers.aws.records import TAG_END, TAG_OFFER, TAG_REQUEST, TAG_RUN
from geotrain.providers.aws.state import Record, StateFile, by_node, group_key
from geotrain.providers.base import Capabilities, LaunchRequest, NodeInfo, NodeState
from geotrain.providers.remote import AGENT_PORT, AgentChannel, run_token
from geotrain.providers.cloudnodes import CloudNodes, SshNodes
from geotrain.providers.identity import aws_instance_profile
from geotrain.providers.bootimage import aws_block_devices
from geotrain.providers.startup import ssh_startup_script

DEFAULT_IMAGE_PARAMETER = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-24.04/latest/ami-id"
SPOT_RECLAIM_CODE = "Server.SpotInstanceTermination"
LIVE_STATES = {"pending": NodeState.PENDING, "running": NodeState.RUNNING}
STOPPED = ("stopping", "stopped")
TOKEN_PLACEHOLDER = "<run token>"
_TRANSITION_TIME = re.compile(r"\((\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) (?:UTC|GMT)\)")


class AwsProvider(SshNodes):
    """Nodes are EC2 instances. See :mod:`geotrain.providers.aws`.

    ``client_factory`` makes a boto3 client per (service, region) (tests point it at a fake);
    ``control_cidr`` is where the launcher reaches the node agents from (required to launch);
    ``unlisted_grace_s`` is how long after its launch an instance that AWS does not list yet is
    still taken for pending (DescribeInstances is eventually consistent), not for lost.
    """

    name = "aws"
    capabilities = Capabilities(spot=True, notice_s=120.0, preemption_injection=False, shared_host=False)

    def __init__(self, client_factory: ClientFactory, *, home: Path | None = None, control_cidr: str | None = None,
                 image_parameter: str = DEFAULT_IMAGE_PARAMETER, image_id: str | None = None,
                 instance_role: str | None = None,
                 agent_port: int = AGENT_PORT, channel: AgentChannel | None = None, home_region: str = "us-east-1",
                 nodes: CloudNodes | None = None,
                 unlisted_grace_s: float = 300.0, throttle_attempts: int = 3, first_pause_s: float = 0.5,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], datetime] | None = None) -> None:
        self._api = Api(client_factory, sleep=sleep, attempts=throttle_attempts, first_pause_s=first_pause_s)
        self._state = StateFile(home, self.name)
        self.control_cidr = control_cidr
        self.image_parameter, self.image_id = image_parameter, image_id
        self.instance_role = instance_role  # the IAM instance profile the nodes get (name or ARN), if any
        self.agent_port = agent_port
        self.channel = channel or AgentChannel()
        self.nodes = nodes or CloudNodes("aws")  # how the launcher reaches the VMs: SSH, its own keys
        self.home_region = home_region
        self.unlisted_grace_s = unlisted_grace_s
        self._clock = clock or (lambda: datetime.now(timezone.utc))
        self._zones: dict[str, dict[str, str]] = {}  # region → AZ id → zone name
        self._images: dict[str, str] = {}  # region → image id
        self._ensured: dict[str, str] = {}  # group key → id of a group this instance made sure of

    @classmethod
    def from_environment(cls, **settings: Any) -> AwsProvider:
        """boto3's standard credential chain and region (AWS_PROFILE, AWS_ACCESS_KEY_ID … , SSO), the
        endpoint from AWS_ENDPOINT_URL(_EC2/_SSM/_STS) as boto3 reads it; ``settings`` go to the
        constructor (``endpoint_url`` and ``max_attempts``, botocore's attempts per call, to the
        client factory). No network call."""
        import boto3
        from botocore.exceptions import BotoCoreError

        factory = default_client_factory(settings.pop("endpoint_url", None), settings.pop("max_attempts", 3))
        try:
            settings.setdefault("home_region", boto3.session.Session().region_name or "us-east-1")
        except BotoCoreError as exc:  # AWS_PROFILE naming no profile, an unreadable config
            raise CredentialsError(f"AWS: {exc}; {CREDENTIALS_HINT}", scope="aws") from exc
        return cls(factory, **settings)

    # ------------------------------------------------------------------ Provider protocol

    def check_credentials(self) -> None:
        """sts:GetCallerIdentity in the home region."""
        self._call("sts", self.home_region, "GetCallerIdentity")

    def launch(self, request: LaunchRequest) -> NodeInfo:
        offer = request.offer
        records.check_offer(offer)
        network.control_range(self.control_cidr)
        retry = False
        with self._state.locked() as state:
            rec = state["nodes"].get(request.request_id)
            if rec is None:
                rec = state["nodes"][request.request_id] = records.new_record(request, self._now())
            else:
                records.same_request(rec, request)
                retry = True
            rec = copy.deepcopy(rec)
        if rec["node_id"]:
            return self._refresh(rec["node_id"])
        return self._send(request, rec, retry)

    def list(self, run_id: str | None = None) -> list[NodeInfo]:
        snapshot = self._state.read()
        recs = [r for r in snapshot["nodes"].values() if run_id is None or r["run_id"] == run_id]
        regions = sorted({r["region"] for r in recs if not r["node_id"] or not NodeState(r["state"]).ended})
        listings = {region: self._describe_run(region, run_id) for region in regions}
        finish: list[Record] = []
        with self._state.locked() as state:
            for region, instances in listings.items():
                finish += self._merge(state, region, run_id, instances)
        for rec in finish:  # a terminate that was asked for but did not reach AWS (a crash, an error)
            with contextlib.suppress(ProviderError):  # tried again at the next list
                self._terminate_in_aws(rec)
        self._release_groups(run_id)
        final = self._state.read()
        return records.sorted_infos(r for r in final["nodes"].values()
                                    if r["node_id"] and (run_id is None or r["run_id"] == run_id))

    def terminate(self, node_id: str, *, reason: str = "terminated") -> None:
        rec = self._record(node_id)
        if rec.get("aws_state") in STOPPED:  # ended for us (stopped behind our back), but its disk still costs
            self._call("ec2", rec["region"], "TerminateInstances", expect={"InvalidInstanceID.NotFound"},
                       InstanceIds=[node_id])
            with self._state.locked() as state:
                by_node(state, node_id)["aws_state"] = "shutting-down"  # type: ignore[index]
        if not NodeState(rec["state"]).ended:
            inst = self._describe_one(rec["region"], node_id)
            with self._state.locked() as state:
                rec = by_node(state, node_id)
                assert rec is not None
                if not NodeState(rec["state"]).ended:
                    if inst is not None:
                        self._reconcile(rec, inst)
                    else:
                        self._unlisted(rec)
                    if not NodeState(rec["state"]).ended:
                        rec["end_requested"] = rec.get("end_requested") or reason
                rec = copy.deepcopy(rec)
            if not NodeState(rec["state"]).ended:
                self._terminate_in_aws(rec)
        self._release_groups(rec["run_id"])

    # ------------------------------------------------------------------ nodes over SSH (cloudnodes.SshNodes)

    def _ssh_node(self, node_id: str) -> NodeInfo:
        return self._refresh(node_id)

    def _ssh_record(self, node_id: str) -> Record:
        return self._record(node_id)

    def _ssh_save_agent(self, node_id: str, agent: dict) -> None:
        with self._state.locked() as state:
            rec = by_node(state, node_id)
            if rec is not None:
                rec["agent"] = agent

    def _ssh_scope(self, record: Record) -> str:
        return f"aws/{record['region']}"

    @classmethod
    def for_dry_run(cls, **settings: Any) -> AwsProvider:
        """A provider for :meth:`dry_run` only: no credentials, no client, no call."""
        def refuse(service: str, region: str) -> Any:
            raise ProviderError("a dry run makes no AWS call")

        settings.pop("endpoint_url", None)
        settings.pop("max_attempts", None)
        return cls(refuse, **settings)

    def dry_run(self, request: LaunchRequest) -> list[dict[str, Any]]:
        """The calls :meth:`launch` makes for a new request, in order; values it would look up are shown
        as <…>, the run token as "<run token>". Makes no call and needs no credentials. (DescribeVpcs,
        DescribeSecurityGroups, CreateSecurityGroup and AuthorizeSecurityGroupIngress come once per run
        and region; the group's two rules are what AuthorizeSecurityGroupIngress adds.)"""
        offer = request.offer
        records.check_offer(offer)
        loc = offer.location
        region, vpc = loc.region, f"<default VPC of {loc.region}>"
        group = f"<id of security group {network.group_name(request.run_id)}>"
        cidr = self.control_cidr or "<control cidr>"
        calls: list[dict[str, Any]] = []
        if loc.zone:
            calls.append({"call": "ec2.describe_availability_zones", "params": {}})
        calls += [
            {"call": "ec2.describe_vpcs", "params": {"Filters": [{"Name": "isDefault", "Values": ["true"]}]}},
            {"call": "ec2.describe_security_groups", "params": {"Filters": [
                {"Name": "group-name", "Values": [network.group_name(request.run_id)]},
                {"Name": "vpc-id", "Values": [vpc]}]}},
            {"call": "ec2.create_security_group", "params": network.create_params(request.run_id, vpc)},
            {"call": "ec2.authorize_security_group_ingress", "params": {
                "GroupId": group, "IpPermissions": _dry_ingress(self.nodes.ssh_port, cidr, group)}},
        ]
        if (request.image or self.image_id) is None:
            calls.append({"call": "ssm.get_parameter", "params": {"Name": self.image_parameter}})
        image = request.image or self.image_id or f"<value of SSM parameter {self.image_parameter} in {region}>"
        zone = f"<zone name of {loc.zone} in {region}>" if loc.zone else None
        calls.append({"call": "ec2.run_instances", "params": self._run_params(
            request, records.client_token(request.request_id), image, group, zone, TOKEN_PLACEHOLDER)})
        return calls

    def close(self) -> None:
        """Nothing to release but the cached clients; instances outlive the provider."""
        self._api.close()

    def __enter__(self) -> AwsProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ launch

    def _send(self, request: LaunchRequest, rec: Record, retry: bool) -> NodeInfo:
        from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

        offer, region = request.offer, request.offer.location.region
        sent = False
        try:
            if retry:  # an earlier try may have made the instance: find it by its tag before sending again
                found = self._find_request(region, request.request_id)
                if found is not None:
                    return self._made(request, found)
            zone = self._zone_name(region, offer.location.zone, offer.offer_id) if offer.location.zone else None
            group_id = self._ensure_group(request.run_id, region)
            image = rec.get("image_id") or request.image or self._image(region)
            if not rec.get("image_id"):
                with self._state.locked() as state:  # a retry sends the same parameters (ClientToken)
                    if request.request_id in state["nodes"]:
                        state["nodes"][request.request_id]["image_id"] = image
            root = self._root_device(region, image) if request.disk is not None else ""
            params = self._run_params(request, rec["client_token"], image, group_id, zone, run_token(request.run_id),
                                      root)
            sent = True
            answer = self._call("ec2", region, "RunInstances", offer=offer, **params)
        except ProviderTimeoutError:
            raise  # outcome unknown: the record stays in flight, and the retry looks the instance up first
        except ProviderError as exc:
            cause = exc.__cause__
            refused = isinstance(cause, ClientError) and not is_server_error(cause) \
                and code_of(cause) != "IdempotentParameterMismatch"  # AWS said no: nothing was made
            unsent = isinstance(cause, (NoCredentialsError, EndpointConnectionError))
            if (sent and (refused or unsent)) or (not sent and not retry):
                self._abandon(request)
            raise  # else (a 5xx, a broken connection after sending …) kept in flight, as for a timeout
        return self._made(request, answer["Instances"][0])

    def _run_params(self, request: LaunchRequest, client_token: str, image: str, group_id: str,
                    zone: str | None, token: str, root_device: str = "<root device of the image>") -> dict[str, Any]:
        offer = request.offer
        tags = [{"Key": TAG_RUN, "Value": request.run_id},
                {"Key": TAG_REQUEST, "Value": records.tag(request.request_id)},
                {"Key": TAG_OFFER, "Value": records.tag(offer.offer_id)},
                {"Key": "Name", "Value": records.tag(f"geotrain {request.run_id}")}]
        if token == TOKEN_PLACEHOLDER:  # a dry run: no key is made
            user_data = ssh_startup_script(cloud="aws", login_public="ssh-ed25519 <run-login-key>",
                                           host_private="<this node's host key>", ssh_port=self.nodes.ssh_port,
                                           node_user=self.nodes.node_user)
        else:
            from geotrain.providers.runkeys import host_key, login_key

            user_data = ssh_startup_script(cloud="aws", login_public=login_key(request.run_id)[1],
                                           host_private=host_key(request.run_id, request.request_id).private,
                                           ssh_port=self.nodes.ssh_port, node_user=self.nodes.node_user)
        params: dict[str, Any] = {
            "ImageId": image, "InstanceType": offer.shape.instance_type, "MinCount": 1, "MaxCount": 1,
            "ClientToken": client_token,
            "UserData": user_data,
            "SecurityGroupIds": [group_id],
            "InstanceInitiatedShutdownBehavior": "terminate",
            "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
            "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}, {"ResourceType": "volume", "Tags": tags}],
        }
        if zone:
            params["Placement"] = {"AvailabilityZone": zone}
        if self.instance_role:
            params["IamInstanceProfile"] = aws_instance_profile(self.instance_role)
        if request.disk is not None:  # the task's disk_size / disk_tier on the image's root device
            params["BlockDeviceMappings"] = aws_block_devices(request.disk, root_device)
        if offer.market == Market.SPOT:
            params["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": {
                "SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}}
        return params

    def _root_device(self, region: str, image: str) -> str:
        """The image's root device (``DescribeImages`` RootDeviceName), where a task's boot disk goes."""
        answer = self._call("ec2", region, "DescribeImages", ImageIds=[image])
        images = answer.get("Images") or []
        if not images or not images[0].get("RootDeviceName"):
            raise ConfigurationError(f"AWS image {image} in {region} has no root device to size (DescribeImages "
                                     "found none); give another --image, or leave out disk_size and disk_tier",
                                     scope=f"aws/{region}")
        return images[0]["RootDeviceName"]

    def _made(self, request: LaunchRequest, inst: dict[str, Any]) -> NodeInfo:
        """Record the instance a request made (its answer, or found by tag)."""
        extra = None
        with self._state.locked() as state:
            rec = state["nodes"].setdefault(request.request_id, records.new_record(request, self._now()))
            if rec["node_id"] is None:
                rec["node_id"] = inst["InstanceId"]
                rec["launched_at"] = records.utc(inst.get("LaunchTime")) or rec["sent_at"]
            elif rec["node_id"] != inst["InstanceId"]:
                extra = inst["InstanceId"]  # cannot happen with ClientToken; never keep a second one
            if extra is None:
                self._reconcile(rec, inst)
            info = records.info(rec)
        if extra is not None:
            self._call("ec2", info.location.region, "TerminateInstances", InstanceIds=[extra],
                       expect={"InvalidInstanceID.NotFound"})
        return info

    def _abandon(self, request: LaunchRequest) -> None:
        """A launch that failed for sure: forget the request; the group goes if nothing else uses it."""
        with self._state.locked() as state:
            rec = state["nodes"].get(request.request_id)
            if rec is not None and rec["node_id"] is None:
                del state["nodes"][request.request_id]
        self._release_groups(request.run_id)

    def _find_request(self, region: str, request_id: str) -> dict[str, Any] | None:
        instances = self._describe(region, [{"Name": f"tag:{TAG_REQUEST}", "Values": [records.tag(request_id)]}])
        live = [i for i in instances if i["State"]["Name"] in LIVE_STATES]
        return (live or instances or [None])[0]

    def _image(self, region: str) -> str:
        if self.image_id:
            return self.image_id
        if region not in self._images:
            answer = self._call("ssm", region, "GetParameter", expect={"ParameterNotFound"}, Name=self.image_parameter)
            if "ErrorCode" in answer:
                raise image_missing(self.image_parameter, region)
            self._images[region] = str(answer["Parameter"]["Value"])
        return self._images[region]

    def _zone_name(self, region: str, zone_id: str, offer_id: str | None = None) -> str:
        if region not in self._zones:
            answer = self._call("ec2", region, "DescribeAvailabilityZones")
            names = availability_zone_ids(answer.get("AvailabilityZones"), region)  # the price source's mapping
            self._zones[region] = {zone_id: name for name, zone_id in names.items()}
        if zone_id not in self._zones[region]:
            raise ConfigurationError(f"AWS {region} has no availability zone {zone_id} for this account (its AZ ids: "
                                     f"{', '.join(sorted(self._zones[region]))}; a Local Zone needs opting in): plan "
                                     "another zone", scope=f"aws/{region}/{zone_id}", offer_id=offer_id)
        return self._zones[region][zone_id]

    # ------------------------------------------------------------------ the run's security group

    def _ensure_group(self, run_id: str, region: str) -> str:
        key = group_key(run_id, region)
        known = self._state.read()["groups"].get(key)
        if known and self._ensured.get(key) == known["group_id"]:
            return str(known["group_id"])  # made with both rules by this instance, and not deleted since
        vpc_id = known["vpc_id"] if known else network.default_vpc(self._call, region)
        group_id = network.ensure_group(self._call, region, run_id, vpc_id, self.nodes.ssh_port, str(self.control_cidr))
        with self._state.locked() as state:
            state["groups"][key] = {"run_id": run_id, "region": region, "vpc_id": vpc_id, "group_id": group_id,
                                    "retry_after": 0.0}
        self._ensured[key] = group_id
        return group_id

    def admit_peers(self, run_id: str, addresses: Sequence[str]) -> None:
        """PeerRules: in each region's group of the run, all TCP from each of ``addresses`` (/32), and none
        from an address no longer among them (``ec2:AuthorizeSecurityGroupIngress``,
        ``ec2:RevokeSecurityGroupIngress``)."""
        groups = [g for g in self._state.read()["groups"].values() if g["run_id"] == run_id]
        for group in groups:
            network.admit_peers(self._call, group["region"], group["group_id"], addresses)

    def _release_groups(self, run_id: str | None) -> None:
        """Delete the groups of runs with no live or in-flight instance left in their region (best effort:
        AWS refuses while an instance still shuts down; tried again at a later list or terminate)."""
        with self._state.locked() as state:
            for key, group in list(state["groups"].items()):
                if run_id is not None and group["run_id"] != run_id or group.get("retry_after", 0) > time.time():
                    continue
                if any(r["run_id"] == group["run_id"] and r["region"] == group["region"]
                       and (not r["node_id"] or not NodeState(r["state"]).ended) for r in state["nodes"].values()):
                    continue
                try:  # under the lock: no launch of this run can record a new request meanwhile
                    gone = network.delete_group(self._call, group["region"], group["group_id"])
                except ProviderError:
                    gone = False
                if gone:
                    del state["groups"][key]
                else:
                    group["retry_after"] = time.time() + 30.0

    # ------------------------------------------------------------------ list, terminate

    def _describe_run(self, region: str, run_id: str | None) -> list[dict[str, Any]]:
        wanted = {"Name": f"tag:{TAG_RUN}", "Values": [run_id]} if run_id else {"Name": "tag-key", "Values": [TAG_RUN]}
        return self._describe(region, [wanted])

    def _describe(self, region: str, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [inst for res in self._pages(region, "DescribeInstances", "Reservations", Filters=filters)
                for inst in res.get("Instances", [])]

    def _describe_one(self, region: str, node_id: str) -> dict[str, Any] | None:
        answer = self._call("ec2", region, "DescribeInstances", expect={"InvalidInstanceID.NotFound"},
                            InstanceIds=[node_id])
        found = [i for res in answer.get("Reservations", []) for i in res.get("Instances", [])]
        return found[0] if found else None

    def _merge(self, state: dict[str, Any], region: str, run_id: str | None,
               instances: list[dict[str, Any]]) -> list[Record]:
        """Fold one region's listing into the state; the records whose terminate must be sent again."""
        by_tag = {records.tag(r["request_id"]): r for r in state["nodes"].values()}
        known_runs = {r["run_id"] for r in state["nodes"].values()}  # list(): not other users' runs
        listed = set()
        for inst in instances:
            tags = {t["Key"]: t["Value"] for t in inst.get("Tags") or []}
            rec = by_tag.get(tags.get(TAG_REQUEST, ""))
            if rec is None:
                if run_id is None and tags.get(TAG_RUN) not in known_runs:
                    continue
                rec = records.adopted(inst, tags, region)
                if rec is None:
                    continue
                state["nodes"][rec["request_id"]] = by_tag[records.tag(rec["request_id"])] = rec
            if rec["node_id"] is None:  # the answer of an in-flight request
                rec["node_id"] = inst["InstanceId"]
                rec["launched_at"] = records.utc(inst.get("LaunchTime")) or rec["sent_at"]
            if rec["node_id"] != inst["InstanceId"]:
                continue
            listed.add(rec["node_id"])
            self._reconcile(rec, inst)
        finish = []
        for rec in state["nodes"].values():
            if rec["region"] != region or (run_id is not None and rec["run_id"] != run_id) or not rec["node_id"]:
                continue
            if rec["node_id"] not in listed:
                self._unlisted(rec)
            if rec.get("end_requested") and not NodeState(rec["state"]).ended:
                finish.append(copy.deepcopy(rec))
        return finish

    def _reconcile(self, rec: Record, inst: dict[str, Any]) -> None:
        """Bring a record up to date with what AWS shows of its instance; an ended record stays as it is."""
        name = inst.get("State", {}).get("Name", "pending")
        rec["aws_state"] = name
        if NodeState(rec["state"]).ended:
            return
        rec["address"] = inst.get("PublicIpAddress") or inst.get("PrivateIpAddress") or rec.get("address") or ""
        rec["private_address"] = inst.get("PrivateIpAddress") or rec.get("private_address") or ""
        if name in LIVE_STATES:
            rec["state"] = LIVE_STATES[name].value
            return
        tags = {t["Key"]: t["Value"] for t in inst.get("Tags") or []}
        if self._reclaimed(rec, inst):
            state, reason = NodeState.PREEMPTED, "preempted"
        elif rec.get("end_requested") or tags.get(TAG_END):
            state, reason = NodeState.TERMINATED, rec.get("end_requested") or tags[TAG_END]
        else:
            state, reason = NodeState.TERMINATED, "lost"
        match = _TRANSITION_TIME.search(inst.get("StateTransitionReason") or "")
        ended = (datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).isoformat()
                 if match else self._now())
        records.end(rec, state, reason, records.latest(ended, rec["launched_at"]))

    def _reclaimed(self, rec: Record, inst: dict[str, Any]) -> bool:
        if (inst.get("StateReason") or {}).get("Code") == SPOT_RECLAIM_CODE:
            return True
        request_id = inst.get("SpotInstanceRequestId")
        if not request_id or inst.get("InstanceLifecycle") != "spot":
            return False
        answer = self._call("ec2", rec["region"], "DescribeSpotInstanceRequests",
                            expect={"InvalidSpotInstanceRequestID.NotFound"}, SpotInstanceRequestIds=[request_id])
        status = ((answer.get("SpotInstanceRequests") or [{}])[0].get("Status") or {}).get("Code", "")
        return status.startswith("instance-terminated-") and status != "instance-terminated-by-user"

    def _unlisted(self, rec: Record) -> None:
        """The instance is not in AWS's answer: ended as the state says (our reason, else lost), unless it
        is young enough not to be listed yet."""
        if not NodeState(rec["state"]).ended and not self._young(rec):
            records.end(rec, NodeState.TERMINATED, rec.get("end_requested") or "lost", self._now())

    def _young(self, rec: Record) -> bool:
        age_s = (self._clock() - datetime.fromisoformat(rec["launched_at"] or rec["sent_at"])).total_seconds()
        return age_s < self.unlisted_grace_s

    def _terminate_in_aws(self, rec: Record) -> None:
        """Tag the reason, terminate, record the end (the reason asked for first). An instance too young
        for AWS to know its id stays as it is, its terminate asked for: the next list sends it again."""
        region, node_id = rec["region"], rec["node_id"]
        self._call("ec2", region, "CreateTags", expect={"InvalidInstanceID.NotFound"}, Resources=[node_id],
                   Tags=[{"Key": TAG_END, "Value": records.tag(rec["end_requested"])}])
        answer = self._call("ec2", region, "TerminateInstances", expect={"InvalidInstanceID.NotFound"},
                            InstanceIds=[node_id])
        if "ErrorCode" in answer and self._young(rec):
            return
        with self._state.locked() as state:
            now = by_node(state, node_id)
            if now is not None and not NodeState(now["state"]).ended:
                records.end(now, NodeState.TERMINATED, now.get("end_requested") or rec["end_requested"], self._now())

    def _refresh(self, node_id: str) -> NodeInfo:
        """The node as AWS shows it now (one DescribeInstances), saved."""
        rec = self._record(node_id)
        if not NodeState(rec["state"]).ended:
            inst = self._describe_one(rec["region"], node_id)
            with self._state.locked() as state:
                rec = by_node(state, node_id)
                assert rec is not None
                if inst is not None:
                    self._reconcile(rec, inst)
                else:
                    self._unlisted(rec)
                rec = copy.deepcopy(rec)
        return records.info(rec)

    def _record(self, node_id: str) -> Record:
        rec = by_node(self._state.read(), node_id)
        if rec is None:
            raise NotFoundError(f"no AWS node {node_id} in this provider's state; `geotrain` lists a run's nodes "
                                "by its run id")
        return rec

    # ------------------------------------------------------------------ calls

    def _call(self, service: str, region: str, operation: str, *, offer: Offer | None = None,
              expect: Iterable[str] = (), **params: Any) -> dict[str, Any]:
        """One API call (throttling retried with backoff); an error whose code is in ``expect`` comes back
        as ``{"ErrorCode": code}``, any other as geotrain's error (the SDK's as ``__cause__``)."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return self._api.call(service, region, operation, **params)
        except ClientError as exc:
            if code_of(exc) in set(expect):
                return {"ErrorCode": code_of(exc)}
            raise translate(exc, service=service, operation=operation, region=region, offer=offer) from exc
        except BotoCoreError as exc:
            raise translate(exc, service=service, operation=operation, region=region, offer=offer) from exc

    def _pages(self, region: str, operation: str, key: str, **params: Any) -> list[Any]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return list(self._api.pages("ec2", region, operation, key, **params))
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, service="ec2", operation=operation, region=region) from exc

    def _now(self) -> str:
        return self._clock().astimezone(timezone.utc).isoformat()


def _dry_ingress(agent_port: int, cidr: str, group: str) -> list[dict[str, Any]]:
    if cidr.startswith("<"):
        return [{"IpProtocol": "tcp", "FromPort": agent_port, "ToPort": agent_port, "IpRanges": [{"CidrIp": cidr}]},
                {"IpProtocol": "tcp", "FromPort": 0, "ToPort": 65535, "UserIdGroupPairs": [{"GroupId": group}]}]
    return network.ingress(agent_port, cidr, group)

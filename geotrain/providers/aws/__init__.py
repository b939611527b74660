"""The AWS provider: nodes are EC2 instances, bought through boto3 (``AwsProvider``).

**Launch** (one instance per request, in the offer's zone; ``Offer.location.zone`` is an AZ id such as
usw2-az1, mapped to the account's zone name; a region-wide offer lets AWS pick the zone):

1. ``ssm:GetParameter`` — the image: the public parameter ``image_parameter`` (default the AWS Deep
   Learning Base OSS Nvidia Driver GPU AMI, Ubuntu 24.04 (its Python 3.12; geotrain needs 3.11+), x86_64), per region; or ``image_id``.
2. ``ec2:DescribeAvailabilityZones`` — AZ id → zone name (once per region and provider instance).
3. ``ec2:DescribeVpcs`` (isDefault), ``ec2:DescribeSecurityGroups``, ``ec2:CreateSecurityGroup``,
   ``ec2:AuthorizeSecurityGroupIngress`` — the run's security group ``geotrain-<run id>`` in the
   region's default VPC, once per run and region (idempotent, safe concurrently): TCP ``nodes.ssh_port``
   (7422, geotrain's own sshd) from ``control_cidr`` only, all TCP from the group itself (the run's
   nodes, on their private addresses); outbound as AWS makes it (all). For a run across regions,
   ``admit_peers`` (PeerRules) adds all TCP from each node's public address /32 to each region's
   group and revokes those of nodes gone (``ec2:DescribeSecurityGroups``,
   ``ec2:AuthorizeSecurityGroupIngress``, ``ec2:RevokeSecurityGroupIngress``).
4. ``ec2:RunInstances`` — ImageId, InstanceType = the offer's type, Placement.AvailabilityZone,
   Min/MaxCount 1, ``ClientToken`` = sha256 of the request id (64 hex), UserData = the startup script
   (:func:`geotrain.providers.startup.ssh_startup_script`: geotrain's sshd with the node's host key
   and the run's login key; the launcher then sets the node up over SSH, ``cloudnodes.SshNodes``), SecurityGroupIds = the run's group, InstanceInitiatedShutdownBehavior terminate,
   MetadataOptions IMDSv2 required, TagSpecifications (instance and volume): ``geotrain-run``,
   ``geotrain-request``, ``geotrain-offer``, ``Name``; for spot, InstanceMarketOptions
   ``{MarketType: spot, SpotOptions: {SpotInstanceType: one-time, InstanceInterruptionBehavior: terminate}}``
   (no MaxPrice: the spot price, capped at on-demand); with ``instance_role`` (``launch --instance-role``),
   IamInstanceProfile ``{Name}`` or ``{Arn}`` (the caller needs ``iam:PassRole`` on its role).

A request is recorded in the state file *before* RunInstances is sent. A timeout (read or connect)
leaves it "in flight" and raises ProviderTimeoutError; the retry with the same request id first looks
the instance up by its ``geotrain-request`` tag (``ec2:DescribeInstances``) and sends RunInstances
again only if none is found, with the same ClientToken and image, so AWS answers with the instance it
made. A refused launch (any 4xx answer, or a capacity error) forgets the request and deletes the run's
security group if nothing else of the run uses it in that region: nothing is left behind.

**List** ``ec2:DescribeInstances`` filtered by ``tag:geotrain-run`` in each region the run used (from the
state file; regions whose nodes have all ended are not asked again). pending → PENDING, running →
RUNNING; shutting-down, terminated, stopping, stopped → ended: StateReason.Code
``Server.SpotInstanceTermination`` (or, for a spot instance, its spot request's status
``instance-terminated-*`` other than by-user, via ``ec2:DescribeSpotInstanceRequests``) → PREEMPTED
"preempted"; a terminate of ours (state file, or the ``geotrain-end-reason`` tag) → TERMINATED with
our reason; anything else (terminated from the console, another client) → TERMINATED "lost". An
instance AWS does not list (any more) ends as the state file says: our reason if we asked, else
"lost" once ``unlisted_grace_s`` (300 s) have passed since its launch (DescribeInstances is eventually
consistent). ``ended_at`` is the time in StateTransitionReason when AWS gives one, else when seen.
A run's tagged instance the state file does not know is adopted from its tags.

**Terminate** ``ec2:DescribeInstances`` (an instance already ended keeps how it ended), the reason into the
state file, ``ec2:CreateTags`` (``geotrain-end-reason``), ``ec2:TerminateInstances``; then, once the run
has no live or in-flight node in the region, ``ec2:DeleteSecurityGroup`` — best effort: AWS refuses
(DependencyViolation) while an instance still shuts down, and the deletion is tried again by later
``list``/``terminate`` calls (at most every 30 s); a run nobody lists again keeps its (empty) group.

**Start** through :class:`geotrain.providers.remote.AgentChannel` at the instance's public IP (else its
private IP) and ``agent_port``, with the run's token. **check_credentials**: ``sts:GetCallerIdentity``.

**Errors** (the SDK's exception is the ``__cause__``):

======================================================  ==========================================================
InsufficientInstanceCapacity, InsufficientCapacity,     CapacityError, scope = the offer's zone scope
InsufficientHostCapacity, UnfulfillableCapacity         (aws/<region>/<AZ id>, or aws/<region> for a
                                                        region-wide offer)
Unsupported (the type is not offered in the zone), an   ConfigurationError of that offer alone (``offer_id``),
AZ id the account does not have                         scope the offer's zone scope
InvalidAMIID.Malformed/.NotFound/.Unavailable; SSM      ConfigurationError, scope aws/<region>: the image
ParameterNotFound for ``image_parameter``               setting to change (or plan without the region)
InvalidParameterValue, InvalidParameterCombination,     ConfigurationError, scope aws/<region>: the request
InvalidParameter, MissingParameter (RunInstances)       itself is wrong (AWS's message says what)
MaxSpotInstanceCountExceeded, VcpuLimitExceeded,        QuotaError, scope aws/<region>; the message names the
InstanceLimitExceeded                                   family and the vCPU quota (e.g. "All G and VT Spot
                                                        Instance Requests")
AuthFailure, InvalidClientTokenId, ExpiredToken,        CredentialsError, scope aws: set AWS_PROFILE or
UnrecognizedClientException, SignatureDoesNotMatch;     AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or run
NoCredentialsError, PartialCredentialsError,            `aws sso login`
ProfileNotFound
UnauthorizedOperation, AccessDenied(Exception)          CredentialsError naming the permission (ec2:RunInstances …)
RequestLimitExceeded, Throttling, ThrottlingException…  ThrottledError, scope aws/<region>, after botocore's
                                                        retries and ``throttle_attempts`` backoff rounds
botocore ReadTimeoutError, ConnectTimeoutError          ProviderTimeoutError, scope aws/<region>
anything else (ClientError, EndpointConnectionError …)  ProviderError with the AWS code, scope aws/<region>
======================================================  ==========================================================

Modules: ``api`` (clients from :mod:`geotrain.clouds.aws`'s factory, calls with throttling backoff), ``errors``
(the table above), ``state`` (the state file), ``network`` (the security group), ``provider``
(:class:`AwsProvider`).
"""

from geotrain.providers.aws.provider import DEFAULT_IMAGE_PARAMETER, AwsProvider

__all__ = ["DEFAULT_IMAGE_PARAMETER", "AwsProvider"]

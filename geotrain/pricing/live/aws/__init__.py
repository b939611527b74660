"""AWS price source: live spot and on-demand prices, placement scores and Spot Advisor bands via boto3.

Calls, per refresh (every call of every page wrapped in :func:`with_backoff` for throttling):

- ``ec2:DescribeRegions`` (home region): the regions enabled for the account; ``FetchRequest.regions``
  narrows them (a requested region the account does not list is skipped with that reason).
- per region: ``ec2:DescribeAvailabilityZones`` (zone name → AZ id: offers carry AZ ids such as
  use1-az4 in ``zone``, as the bundled AWS rows do); ``ec2:DescribeInstanceTypeOfferings``
  (LocationType region: the types the region has); ``ec2:DescribeInstanceTypes`` (InstanceTypes =
  the types not yet seen in an earlier region, 100 a call, paginated: specs are the same in every
  region, so 29 regions cost ~10 calls, not ~15 each) → ``vcpus`` (VCpuInfo.DefaultVCpus), ``memory_gib`` (MemoryInfo.SizeInMiB / 1024),
  ``accelerator``/``accelerator_count`` (GpuInfo.Gpus, NeuronInfo.NeuronDevices or
  InferenceAcceleratorInfo.Accelerators; see :func:`canonical_accelerator`; types without any are
  not offers, fractional GPUs (GpuPartitionSize < 1) are left out, as in the bundled data);
  ``ec2:DescribeInstanceTypeOfferings`` (LocationType availability-zone: the AZs of each type);
  ``ec2:DescribeSpotPriceHistory`` (Linux/UNIX, StartTime = now, paginated: the price in effect now;
  the latest record per (type, AZ)) → spot rows per AZ id, ``price_usd_per_hour`` = SpotPrice.
- ``pricing:GetProducts`` (Price List API, us-east-1; ServiceCode AmazonEC2, TERM_MATCH regionCode,
  operatingSystem Linux, tenancy Shared, preInstalledSw NA, capacitystatus Used, ANY_OF instanceType;
  paginated; each PriceList entry a JSON string) → on-demand ``price_usd_per_hour`` =
  terms.OnDemand.*.priceDimensions.*.pricePerUnit.USD (the hourly dimension).
  **Zone of on-demand rows**: AWS prices on-demand per region; following the bundled SkyPilot rows,
  one on-demand row is written per AZ (AZ id) in which DescribeInstanceTypeOfferings lists the type,
  all with the region's price; a type that has a price in the region but is listed in none of its
  AZs gets one region-wide row (``zone`` ""), as the bundled tsaol rows are.
- ``ec2:GetSpotPlacementScores`` (home region; one request per *group*: the accelerated types of one
  accelerator model that have a spot price, together, as AWS recommends at least three types;
  TargetCapacity = ``placement_capacity`` instances, SingleAvailabilityZone, RegionNames in chunks of
  10) → on spot rows of every type of the group in the scored AZ: ``availability`` = score / 10 (AWS's
  1-10 likelihood that a request of that many instances succeeds there, read as a share; the
  ``source`` column says the score, the group, and when it was asked), ``capacity_hint`` =
  ``placement_capacity`` when the score is at least ``likely_score`` (default 7: AWS calls 7-10
  likely), empty (unknown) below. A group asked in the last 24 hours is answered from the cache under
  GEOTRAIN_HOME; new groups stop at the account's allowance (``daily_configurations``, 10). See
  :mod:`.placement`. ``placement_scores=False`` skips the call.
- the Spot Advisor feed (public JSON, ``spot_advisor_url``; :meth:`AwsSource.from_environment` reads
  ``$GEOTRAIN_AWS_SPOT_ADVISOR_URL``, else :data:`SPOT_ADVISOR_URL`) → spot rows' ``interruption_band`` (band of
  (region, type), Linux) and ``interruptions_per_hour`` through :mod:`geotrain.pricing.interruption`.
  An unreachable feed leaves the band empty and is reported in ``skipped`` as ("*", why).

On-demand rows get ``interruption_band`` "none" and ``interruptions_per_hour`` 0. ``observed_at`` of
every row is the refresh time (``FetchRequest.observed_at``, else now): the spot Timestamp is when
the price took effect, and the price is the one in effect at the refresh.

Errors: throttling (RequestLimitExceeded, Throttling, ThrottlingException …) is retried with backoff.
Each kind of data fails on its own (``Skipped(region, data, why)``, one line; every botocore error
class: ``ClientError``, ``BotoCoreError`` and ``ResponseParserError``, an answer it cannot parse):
a region's spot prices and its on-demand prices are read apart, so a refused or failing
``GetProducts`` leaves the spot rows (the on-demand prices stay as the current snapshot has them,
with their own source), and failing placement scores or an unreachable feed leave those columns
empty. A region whose zones, types or offerings cannot be read (any other ClientError such as
AuthFailure/UnauthorizedOperation, an endpoint or connection error, throttling that outlasts the
retries) is skipped whole with the reason; no
credentials (NoCredentialsError) or credentials AWS rejects (AuthFailure, InvalidClientTokenId … on the
first call, DescribeRegions) → CredentialsError; DescribeRegions failing otherwise → nothing refreshed,
("*", why) in ``skipped``; an answer of unexpected shape → CatalogError.

Modules (each depends only on those named before it; clients, error tables and botocore's exception
classes are :mod:`geotrain.clouds.aws`'s): ``calls`` (counted calls with backoff and pagination, the
feed fetch) and ``shapes`` (answers → specs, prices, bands; no I/O) import no sibling; ``check`` (``geotrain check``) uses ``calls``; ``placement``
(the groups, the allowance and the cache of placement scores) imports no sibling; ``source``
(:class:`AwsSource`, with :meth:`AwsSource.from_environment`) uses them all.
"""

from geotrain.pricing.live.aws.calls import SPOT_ADVISOR_URL, SPOT_ADVISOR_URL_ENV
from geotrain.pricing.live.aws.shapes import GPU_NAMES, InstanceSpec, canonical_accelerator, instance_spec
from geotrain.pricing.live.aws.source import AwsSource

__all__ = [
    "GPU_NAMES",
    "SPOT_ADVISOR_URL",
    "SPOT_ADVISOR_URL_ENV",
    "AwsSource",
    "InstanceSpec",
    "canonical_accelerator",
    "instance_spec",
]

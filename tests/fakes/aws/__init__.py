"""A local AWS for ``geotrain catalog refresh``: moto 5.2 in server mode plus what moto lacks.

What moto implements is also tested against a plain moto server, with nothing of ours in front of it
(``tests/integration/test_refresh_moto.py``).

One threaded werkzeug server on 127.0.0.1 (port 0) answers every AWS service the AWS price source
uses, so a real boto3 client works against it unchanged with ``endpoint_url=fake.endpoint_url`` (or
``AWS_ENDPOINT_URL``) and any dummy credentials:

- **moto** answers ``sts:GetCallerIdentity`` (account 123456789012) and every EC2 action not listed
  below; ``DescribeRegions`` and ``DescribeAvailabilityZones`` are answered from moto's own region
  and zone tables (zone name → AZ id), by the layer below, because moto builds a whole region
  backend on its first call per region (~0.25 s each); the fake's account has opted in to every
  opt-in region.
- **ours, in front of moto's EC2 dispatcher** (the WSGI layer answers these actions itself, serialized
  from the botocore model, so the XML is the real EC2 shape, with ``NextToken`` pagination; DryRun
  answers DryRunOperation):

  - ``DescribeSpotPriceHistory``: the bundled AWS spot rows of ``offers.csv`` (SkyPilot v8 and the
    hivemind 2023 snapshot), one record per (type, AZ) with ``SpotPrice`` = the bundled price,
    ``Timestamp`` = the bundled ``observed_at``, ``ProductDescription`` "Linux/UNIX" (moto's own
    answer is a constant 0.00001 from 2006). Bundled AZ ids are mapped to moto's zone names of its
    account through moto's own ``describe_availability_zones``; AZ ids moto does not have (the Local
    Zones use1-atl2-az1, usw2-lax1-az1/az2) are left out.
  - ``DescribeInstanceTypes``: moto's 1,395 types, plus the bundled types moto lacks (p3.*, p2.*,
    g2/g3/g3s, g4ad …) built from the bundled row: vCPUs, memory, accelerator count; the GPU's
    ``Name``/``Manufacturer``/memory per GPU are those of the canonical name (V100 = "V100" 16 GiB,
    V100-32GB = "V100" 32 GiB, K80 12 GiB, M60 8 GiB, K520 4 GiB, RadeonProV520 = AMD "Radeon Pro
    V520" 8 GiB), i.e. the name rule of PROVENANCE.md read backwards. Every region gets the same list
    (as moto does), with only the fields a price source reads (InstanceType, CurrentGeneration,
    VCpuInfo, MemoryInfo, GpuInfo, NeuronInfo, InferenceAcceleratorInfo); pages are cached.
  - ``DescribeInstanceTypeOfferings``: for a type that has bundled rows, LocationType
    availability-zone lists exactly the AZs of its bundled *per-AZ on-demand* rows (SkyPilot's
    offering list); a type with only region-wide rows (tsaol) is listed in no AZ, so the source
    prices it region-wide, as the bundled rows do. LocationType region lists it in every region where
    it has a bundled row of any kind. Other types: moto's own offerings.
  - ``GetSpotPlacementScores`` (moto: NotImplementedError): only where the bundled row has an
    ``availability`` (the SkyNomad p3.2xlarge trace, 4 AZs of us-east-1): score =
    clamp(round(10 · availability), 1, 10) per AZ id (``SingleAvailabilityZone``) or the best AZ's
    score per region. Nothing elsewhere: no score is invented.

- **ours, in front of moto**:

  - the Price List API (moto: 404), JSON 1.1, ``X-Amz-Target: AWSPriceListService.GetProducts``:
    one product per bundled on-demand (region, type) (the per-AZ SkyPilot rows of a region all carry
    the same price), attributes instanceType, regionCode, operatingSystem Linux, tenancy Shared,
    preInstalledSw NA, capacitystatus Used, licenseModel "No License required", vcpu, memory, gpu,
    and ``terms.OnDemand.<sku>.<term>.priceDimensions.<dim>.pricePerUnit.USD`` = the bundled price.
    Filters TERM_MATCH/EQUALS/CONTAINS/ANY_OF/NONE_OF are honoured; ``MaxResults``/``NextToken``.
  - ``GET /spot-advisor-data.json``: the Spot Advisor feed shape (``ranges`` with the five band
    labels, ``spot_advisor.<region>.Linux.<type>.r`` = band index), built from the bundled spot rows'
    ``interruption_band`` per (region, type). The savings field ``s`` is not served (no data).

Knobs (attributes; change them between calls): ``page_size`` (cap on items per page of every paginated
answer), ``throttle`` (operation → how many throttling answers to give before success:
RequestLimitExceeded/503 for EC2, ThrottlingException/400 for pricing), ``failing_regions`` (EC2
and pricing calls for these regions answer 503 Unavailable / 500 InternalErrorException), ``denied``
(operations answered UnauthorizedOperation/403 or AccessDeniedException), ``bad_shape``
(operations whose answer has an unexpected shape: spot price "n/a", GPU types without VCpuInfo,
price list entries without terms, a feed without ``ranges``), ``regions`` (a subset of regions that
DescribeRegions lists; None = moto's 38). ``calls`` records (operation, region) of each request.

Instances (``FakeAws(hypervisor=...)``, knobs on ``fake.vms``): RunInstances honours ClientToken, gives
127.0.0.N public IPs and boots the user data on the optional hypervisor; TerminateInstances kills the VMs;
``vms.run_errors``, ``vms.run_timeouts``, ``vms.reclaim`` (spot reclaim), ``vms.forget``; the Deep Learning
AMI SSM parameter is registered per region. See :mod:`tests.fakes.aws.vms`. With
``FakeAws(hypervisor=tests.fakes.cloudhosts.HostHypervisor(world, metadata))`` the instances are faithful
remote hosts instead (one VPC per region, the hosts' public and private addresses in moto, security groups
as their firewall, the metadata service at 169.254.169.254 inside the VPC).
"""

from tests.fakes.aws.data import ACCOUNT_ID, GPU_OF_CANONICAL, OFFERS_CSV, BundledRow, bundled_aws_rows, placement_score
from tests.fakes.aws.ec2 import EC2_ERRORS, EC2_HANDLERS
from tests.fakes.aws.server import FakeAws
from tests.fakes.aws.vms import DLAMI_IMAGE_ID, DLAMI_PARAMETER, SPOT_RECLAIM_CODE, AwsVms, HostsHypervisor

__all__ = ["ACCOUNT_ID", "DLAMI_IMAGE_ID", "DLAMI_PARAMETER", "EC2_ERRORS", "EC2_HANDLERS", "GPU_OF_CANONICAL",
           "OFFERS_CSV", "SPOT_RECLAIM_CODE", "AwsVms", "BundledRow", "FakeAws", "HostsHypervisor", "bundled_aws_rows",
           "placement_score"]

"""Frozen dataclasses shared by every layer. Standard library only.

Vocabulary (one word per concept):

- An **Offer** is one purchasable option: a cloud, region and zone, an instance type, a market
  (spot, on-demand, or owned for on-prem machines), its price per hour, accelerators, a capacity hint
  and an interruption signal. Not "instance option", not "resource".
- A **Location** is where an offer runs: cloud, region, zone (empty when the price is region-wide,
  as Azure's are) and continent.
- A **JobSpec** is what the user asks for: a workload, an objective and the constraints on the mix.

Units are in names: ``_usd_per_hour``, ``_gib``, ``_gbps``, ``_per_hour``, ``_s``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import StrEnum


class Market(StrEnum):
    """How an offer is bought. ``owned`` is the user's own hardware (on-prem)."""

    SPOT = "spot"
    ON_DEMAND = "on_demand"
    OWNED = "owned"


class Continent(StrEnum):
    """Continents as cloud egress price lists group them (the Middle East is its own group)."""

    NORTH_AMERICA = "north_america"
    SOUTH_AMERICA = "south_america"
    EUROPE = "europe"
    ASIA = "asia"
    MIDDLE_EAST = "middle_east"
    AFRICA = "africa"
    OCEANIA = "oceania"


class Objective(StrEnum):
    """What the planner optimises (issue: planner)."""

    MIN_COST = "min_cost"  # minimum $/h for at least a target samples/s
    MAX_THROUGHPUT = "max_throughput"  # maximum samples/s within a $/h budget
    MIN_COST_PER_SAMPLE = "min_cost_per_sample"  # minimum $ per 1M samples
    MIN_COST_BY_DEADLINE = "min_cost_by_deadline"  # N samples before a deadline, cheapest


class SyncStrategyName(StrEnum):
    """How peers synchronise; the perf model and the training runtime implement each."""

    HIVEMIND = "hivemind"  # large-batch averaging after a target batch size
    ALLREDUCE = "allreduce"  # synchronous data-parallel all-reduce every step
    LOCAL_SGD = "local-sgd"  # model averaging every H steps, per-region groups
    ASGD_GA = "asgd-ga"  # asynchronous SGD with gradient accumulation between regions
    MA = "ma"  # model averaging between the regions' parameter servers every K pushes


PRECISIONS = ("fp32", "fp16", "bf16", "int8")  # how parameters and gradients travel on the wire


WAN_STREAMS = 8  # TCP streams per pair of ranks that talk across regions (the runtime's WAN transport and the perf model)


@dataclass(frozen=True, slots=True)
class SyncSettings:
    """How peers synchronise, with every knob. The defaults written here are the only ones: the job spec,
    the flags of ``plan`` and ``estimate``, the plan file, the perf model, the solver and the training
    runtime all take them from this class.

    - ``strategy``: see :class:`SyncStrategyName`;
    - ``target_batch_size``: hivemind — samples all peers train between two averaging rounds;
    - ``group_size``: hivemind — the most peers in one averaging group (Hivemind's ``target_group_size``:
      more peers average in several groups at once, each of at most this many);
    - ``local_steps``: local-sgd — steps between two rounds of model averaging (H);
    - ``accumulation_steps``: asgd-ga — steps a region accumulates before it pushes (A);
    - ``staleness``: asgd-ga — pushes a region may run ahead of the home model it has back (S);
    - ``averaging_pushes``: ma — pushes (one per step) between two averages of the regional servers (K);
    - ``precision``: bytes per parameter on the wire (one of :data:`PRECISIONS`);
    - ``micro_batches``: micro-batches (of the workload's micro-batch size, per accelerator) each node
      trains per step; the global batch of a step is ``micro_batches`` × nodes × that size.
    """

    strategy: SyncStrategyName = SyncStrategyName.HIVEMIND
    target_batch_size: int = 32768
    group_size: int = 16
    local_steps: int = 32
    accumulation_steps: int = 16
    staleness: int = 1
    averaging_pushes: int = 16
    precision: str = "fp16"
    micro_batches: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "strategy", SyncStrategyName(self.strategy))
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision {self.precision!r} is not one of {', '.join(PRECISIONS)}")
        for name in ("target_batch_size", "group_size", "local_steps", "accumulation_steps", "staleness", "averaging_pushes",
                     "micro_batches"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10**9:
                raise ValueError(f"{name} must be a whole number from 1 to 1e9, got {value!r}")

    def describe(self) -> str:
        """The settings that matter for this strategy, in words."""
        knob = {SyncStrategyName.HIVEMIND: f"target batch {self.target_batch_size}, groups of at most {self.group_size}",
                SyncStrategyName.LOCAL_SGD: f"averaging every {self.local_steps} steps",
                SyncStrategyName.ASGD_GA: f"pushing every {self.accumulation_steps} steps",
                SyncStrategyName.MA: f"averaging the regions' servers every {self.averaging_pushes} pushes",
                SyncStrategyName.ALLREDUCE: "all-reduce every step"}[self.strategy]
        return f"{self.strategy.value} ({knob}, {self.precision} on the wire, {self.micro_batches} micro-batch/node/step)"

    def to_mapping(self) -> dict:
        """Every knob by name, the strategy as its word: what a plan file, a generation's config and a
        node's ``GEOTRAIN_SYNC`` carry; :meth:`from_mapping` reads it back."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["strategy"] = self.strategy.value
        return out

    @classmethod
    def from_mapping(cls, data: Mapping[str, object]) -> SyncSettings:
        """The settings :meth:`to_mapping` wrote; a knob it lacks takes this class's default."""
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"sync settings have no {', '.join(sorted(unknown))}")
        return cls(**data)  # type: ignore[arg-type]


class LinkClass(StrEnum):
    """How far apart two nodes are, as clouds price the traffic between them."""

    SAME_ZONE = "same_zone"
    CROSS_ZONE = "cross_zone"
    CROSS_REGION = "cross_region"  # same cloud, same continent
    CROSS_CONTINENT = "cross_continent"  # same cloud
    INTERNET = "internet"  # another cloud, an on-prem site, the internet


CLOUD_ONPREM = "onprem"


GLOBAL_NETWORK_CLOUDS = frozenset({"gcp"})  # one private network (VPC) across all of the cloud's regions


@dataclass(frozen=True, slots=True)
class Location:
    """Where an offer runs. ``zone`` is "" when the price holds for the whole region."""

    cloud: str
    region: str
    zone: str
    continent: Continent

    @property
    def region_scope(self) -> str:
        return f"{self.cloud}/{self.region}"

    @property
    def zone_scope(self) -> str:
        """The narrowest scope that preemptions are correlated in: the zone, else the region."""
        return f"{self.cloud}/{self.region}/{self.zone}" if self.zone else self.region_scope

    @property
    def network_scope(self) -> str:
        """The private network a node here is in, where its peers reach it at its private address without
        crossing the internet: a GCP VPC network spans every region (its regional subnets route to each
        other over Google's own network); an AWS VPC or an Azure VNet is one region's; an on-prem site
        is its own LAN."""
        return self.cloud if self.cloud in GLOBAL_NETWORK_CLOUDS else self.region_scope


def link_class(src: Location, dst: Location) -> LinkClass:
    """The link class of traffic from ``src`` to ``dst``.

    A region-wide location (zone "") next to a zoned one in the same region counts as cross-zone:
    nothing guarantees the two land in the same zone. Two machines of one on-prem site share its LAN
    (same zone); any other traffic to or from a site crosses the internet.
    """
    if src.cloud == dst.cloud == CLOUD_ONPREM and src.region == dst.region:
        return LinkClass.SAME_ZONE
    if src.cloud != dst.cloud or CLOUD_ONPREM in (src.cloud, dst.cloud):
        return LinkClass.INTERNET
    if src.continent != dst.continent:
        return LinkClass.CROSS_CONTINENT
    if src.region != dst.region:
        return LinkClass.CROSS_REGION
    if src.zone == dst.zone:
        return LinkClass.SAME_ZONE
    return LinkClass.CROSS_ZONE


@dataclass(frozen=True, slots=True)
class InstanceShape:
    """The hardware of one node. ``accelerator`` is None for a CPU-only machine."""

    instance_type: str
    vcpus: float
    memory_gib: float
    accelerator: str | None
    accelerator_count: int


@dataclass(frozen=True, slots=True)
class InterruptionSignal:
    """How likely an offer is to be taken away.

    ``band`` is the AWS Spot Advisor frequency band ("<5%" … ">20%"), "trace" when the figures come
    from an availability trace, "none" for markets that are not interrupted, or None when unknown.
    ``interruptions_per_hour`` is the expected number of interruptions per node-hour (None =
    unknown). ``availability`` is the share of time a spot request in this scope succeeded in a
    trace (None = no trace).
    """

    band: str | None
    interruptions_per_hour: float | None
    availability: float | None = None

    @property
    def mean_time_between_preemptions_h(self) -> float | None:
        if self.interruptions_per_hour is None:
            return None
        return math.inf if self.interruptions_per_hour == 0 else 1.0 / self.interruptions_per_hour


@dataclass(frozen=True, slots=True, order=True)
class OfferId:
    """The stable key of an offer: ``cloud/region/zone/instance_type/market`` (zone ``-`` when the
    price is region-wide). The one place that writes and reads that form."""

    cloud: str
    region: str
    zone: str
    instance_type: str
    market: Market

    def __str__(self) -> str:
        return f"{self.cloud}/{self.region}/{self.zone or '-'}/{self.instance_type}/{self.market}"

    @classmethod
    def parse(cls, text: str) -> OfferId:
        parts = str(text).split("/")
        if len(parts) != 5 or not all(parts) or parts[4] not in {m.value for m in Market}:
            raise ValueError(f"{text!r} is not an offer id (cloud/region/zone/instance_type/market)")
        cloud, region, zone, instance_type, market = parts
        return cls(cloud, region, "" if zone == "-" else zone, instance_type, Market(market))


@dataclass(frozen=True, slots=True)
class Offer:
    """One purchasable option at one moment. ``offer_id`` is its stable key (``str`` of :attr:`key`)."""

    location: Location
    shape: InstanceShape
    market: Market
    price_usd_per_hour: float
    capacity_hint: int | None  # nodes believed obtainable; None = unknown
    interruption: InterruptionSignal
    observed_at: datetime
    source: str
    uplink_gbps: float | None = None  # on-prem sites: their internet uplink

    @property
    def key(self) -> OfferId:
        loc = self.location
        return OfferId(loc.cloud, loc.region, loc.zone, self.shape.instance_type, self.market)

    @property
    def offer_id(self) -> str:
        return str(self.key)

    @property
    def price_usd_per_accelerator_hour(self) -> float | None:
        if not self.shape.accelerator_count:
            return None
        return self.price_usd_per_hour / self.shape.accelerator_count


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """``count`` nodes bought through one offer."""

    offer: Offer
    count: int


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A workload the user defines in the job spec (its ``model`` section), for the perf model and the
    GPU-memory fit check (``geotrain.perf.memory``): parameters, kind (``cv`` or ``nlp``, for the
    accelerator ratios), samples per step on one accelerator, and what a replica keeps per parameter
    and per sample."""

    parameters: int
    kind: str
    samples_per_step: int
    state_bytes_per_parameter: float = 16.0
    activation_mib_per_sample: float = 0.0


@dataclass(frozen=True, slots=True)
class DatasetSpec:
    """Where a job's training data lives, and how often nodes fetch it from there.

    ``reads_per_sample``: the share of trained samples a node fetches from the dataset's region —
    1 when nodes stream every epoch (the default), ``1/E`` when a node keeps the data after the
    first of ``E`` epochs, 0 when the data is already copied everywhere.
    """

    cloud: str
    region: str
    size_gib: float
    samples: int  # samples in the dataset
    reads_per_sample: float = 1.0

    @property
    def bytes_per_sample(self) -> float:
        return self.size_gib * 2**30 / self.samples

    @property
    def fetched_bytes_per_trained_sample(self) -> float:
        return self.bytes_per_sample * self.reads_per_sample


_AMI = re.compile(r"^ami-[0-9a-f]{8,17}$")
_GCP_IMAGE = re.compile(r"^(https://www\.googleapis\.com/compute/v1/)?projects/[^/\s]+/global/"
                        r"(images|images/family|machineImages)/[^/\s]+$")
_AZURE_URN = re.compile(r"^[^:/\s]+:[^:/\s]+:[^:/\s]+:[^:/\s]+$")
_AZURE_IMAGE_ID = re.compile(r"^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Compute/"
                             r"(images|galleries)/.+$", re.IGNORECASE)
IMAGE_FORMS = ("an AMI id (ami-…, AWS), projects/PROJECT/global/images/NAME or …/images/family/NAME (GCP), "
               "PUBLISHER:OFFER:SKU:VERSION or an image's resource ID /subscriptions/…/providers/Microsoft.Compute/"
               "images/… or …/galleries/… (Azure)")


def image_cloud(image: str) -> str | None:
    """The cloud a boot image belongs to, by its form (SkyPilot's ``image_id``; ``IMAGE_FORMS``), or None."""
    image = image.strip()
    if _AMI.match(image):
        return "aws"
    if _GCP_IMAGE.match(image):
        return "gcp"
    if _AZURE_URN.match(image) or _AZURE_IMAGE_ID.match(image):
        return "azure"
    return None


DISK_TIERS = ("low", "medium", "high", "ultra", "best")  # SkyPilot's ``disk_tier`` words


@dataclass(frozen=True, slots=True)
class BootDisk:
    """A node's boot disk as a task asks for it (SkyPilot's ``disk_size``, ``disk_tier``): its size in
    GiB and its tier (one of ``DISK_TIERS``; each provider maps it to its cloud's disk type); None: the
    provider's default."""

    size_gib: int | None = None
    tier: str | None = None


@dataclass(frozen=True, slots=True)
class ResourceFilter:
    """One resource choice of a task file (SkyPilot's ``resources``, or one of its ``any_of`` /
    ``ordered`` items): an offer matches when it meets every field that is set. Accelerator names
    match exactly (case-insensitive), as SkyPilot's do: ``A100`` is not ``A100-80GB``; the count is
    per node and exact. ``market`` None: spot or on-demand, whichever the plan prefers. ``image``: the
    boot image of the choice's nodes (its cloud's, by ``image_cloud``; an AMI only in its ``region``)."""

    cloud: str | None = None
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    accelerator: str | None = None  # "CPU" (or None with accelerator_count 0): no accelerator
    accelerator_count: int | None = None
    min_vcpus: float | None = None
    max_vcpus: float | None = None  # SkyPilot's ``cpus: 8`` is exactly 8 (min = max); ``8+`` sets min only
    min_memory_gib: float | None = None
    max_memory_gib: float | None = None
    market: Market | None = None
    image: str | None = None
    disk: BootDisk | None = None  # the boot disk of the choice's nodes (None: the provider's own)

    def matches(self, offer: Offer) -> bool:
        loc, shape = offer.location, offer.shape
        if self.cloud is not None and loc.cloud != self.cloud:
            return False
        if self.image is not None and loc.cloud != image_cloud(self.image):
            return False
        if self.region is not None and loc.region != self.region:
            return False
        if self.zone is not None and loc.zone != self.zone:
            return False
        if self.instance_type is not None and shape.instance_type != self.instance_type:
            return False
        if self.accelerator is not None:
            if self.accelerator.upper() == "CPU":
                if shape.accelerator is not None and shape.accelerator_count:
                    return False
            elif shape.accelerator is None or shape.accelerator.lower() != self.accelerator.lower():
                return False
        if self.accelerator_count is not None and (shape.accelerator_count or 0) != self.accelerator_count:
            return False
        if self.min_vcpus is not None and shape.vcpus < self.min_vcpus:
            return False
        if self.max_vcpus is not None and shape.vcpus > self.max_vcpus:
            return False
        if self.min_memory_gib is not None and shape.memory_gib < self.min_memory_gib:
            return False
        if self.max_memory_gib is not None and shape.memory_gib > self.max_memory_gib:
            return False
        if self.market is not None and offer.market != self.market and offer.market != Market.OWNED:
            return False
        return True


@dataclass(frozen=True, slots=True)
class Constraints:
    """Limits on the mix. None means "no limit"."""

    clouds: frozenset[str] | None = None
    regions: frozenset[str] | None = None  # "cloud/region" or bare region names
    continents: frozenset[Continent] | None = None
    max_regions: int | None = None
    max_nodes: int | None = None
    max_nodes_per_zone: int | None = None
    max_gpus_per_zone: int | None = None  # at most this many accelerators in one zone (any node sizes)
    max_zone_share: float | None = None  # at most this share of nodes in one zone
    max_spot_share: float | None = None
    spot_only: bool = False
    onprem_required: bool = False  # must use every on-prem machine in the inventory
    accelerators: frozenset[str] | None = None  # only these models (a name also matches its variants)
    quotas: tuple[tuple[str, int], ...] = ()  # (cloud or "cloud/region", accelerators at most)
    # plan at most the nodes of an offer that the capacity model gives at once with this chance;
    # None: no cap from the model (the plan still says the chance that its whole mix can be had)
    capacity_confidence: float | None = None
    # a task file's resource choices: an offer must match one of them (none given: no such filter)
    resources: tuple[ResourceFilter, ...] = ()
    node_count: int | None = None  # exactly this many nodes (a task's ``num_nodes``: a pinned shape)

    def image_for(self, offer: Offer) -> str | None:
        """The boot image the task names for ``offer``'s nodes: that of the first resource choice it
        matches that names one; None: the provider's own image."""
        return next((r.image for r in self.resources if r.image is not None and r.matches(offer)), None)

    def disk_for(self, offer: Offer) -> BootDisk | None:
        """The boot disk the task asks for on ``offer``'s nodes: that of the first matching resource
        choice that names one; None: the provider's default."""
        return next((r.disk for r in self.resources if r.disk is not None and r.matches(offer)), None)


@dataclass(frozen=True, slots=True)
class TaskRun:
    """What a task file runs on every node: SkyPilot's ``setup`` (once per node), ``run`` (every
    generation), ``workdir`` (copied to each node, where both run), ``envs`` and ``file_mounts``
    (destination on the node → absolute source path here). Paths are absolute on the launching machine."""

    run: str | None = None
    setup: str | None = None
    workdir: str | None = None
    envs: tuple[tuple[str, str], ...] = ()
    file_mounts: tuple[tuple[str, str], ...] = ()  # a source is a local path, or a storage URL (s3://, gs://, …)
    storage_mounts_to_mount: tuple[tuple[str, str, str], ...] = ()  # (destination, bucket, MOUNT | MOUNT_CACHED)
    container: str | None = None  # a task's ``docker:`` image_id: planned, refused by launch (no container runtime)

    @property
    def local_mounts(self) -> tuple[tuple[str, str], ...]:
        return tuple((d, s) for d, s in self.file_mounts if not is_storage_url(s))

    @property
    def storage_mounts(self) -> tuple[tuple[str, str], ...]:
        return tuple((d, s) for d, s in self.file_mounts if is_storage_url(s))


STORAGE_SCHEMES = ("s3://", "gs://", "az://", "abfs://", "abfss://")  # copied onto nodes through fsspec


def is_storage_url(source: str) -> bool:
    """Whether a file mount's source is cloud storage (copied onto each node) rather than a local path."""
    return source.startswith(STORAGE_SCHEMES)


# The workload of a task file that names none: its script's throughput is not modelled, the plan
# chooses by price alone (``geotrain.planning.shape``).
UNMODELLED_WORKLOAD = "unmodelled"


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A training job as the user describes it (see ``geotrain.config``)."""

    name: str
    workload: str
    objective: Objective
    sync: SyncSettings = field(default_factory=SyncSettings)
    target_samples_per_s: float | None = None
    budget_usd_per_hour: float | None = None
    total_samples: int | None = None
    deadline_h: float | None = None
    constraints: Constraints = field(default_factory=Constraints)
    onprem_inventory: str | None = None  # path to an inventory file
    dataset: DatasetSpec | None = None
    checkpoint_url: str | None = None
    model: ModelSpec | None = None  # the workload's definition, when it is the user's own
    rates_file: str | None = None  # path to the user's compute rates (``--rates``), over the bundled ones
    task: TaskRun | None = None  # a task file's commands: what launch runs on the nodes
    egress_file: str | None = None  # path to the user's egress rates (``--egress``), over the bundled ones
    notes: tuple[str, ...] = ()  # what a task file asked for that geotrain reads its own way (said in the plan)

    @property
    def strategy(self) -> SyncStrategyName:
        return self.sync.strategy

    @property
    def modelled(self) -> bool:
        """Whether the perf model knows what trains (a task file without ``workload:`` is not)."""
        return self.workload != UNMODELLED_WORKLOAD


@dataclass(frozen=True, slots=True)
class PlanItem:
    """``count`` nodes of one offer, and the samples/s they contribute to the plan."""

    offer: Offer
    count: int
    samples_per_s: float


@dataclass(frozen=True, slots=True)
class PlanTotals:
    """What the perf model predicts for the whole plan."""

    samples_per_s: float
    goodput_samples_per_s: float  # after expected interruptions × recovery time
    time_per_round_s: float
    granularity: float | None  # None: no communication
    compute_usd_per_hour: float
    egress_usd_per_hour: float
    data_egress_usd_per_hour: float
    usd_per_million_samples: float | None  # None: throughput not modelled (a task without a workload)
    interruptions_per_hour: float  # expected, unknown spot rates taken at the plan's default
    bottleneck: str

    @property
    def usd_per_hour(self) -> float:
        return self.compute_usd_per_hour + self.egress_usd_per_hour + self.data_egress_usd_per_hour


@dataclass(frozen=True, slots=True)
class SolverReport:
    objective: Objective
    status: str  # optimal | feasible
    gap: float
    wall_s: float  # the objective's search
    solves: int
    backend: str
    candidates: int
    dominated: int
    total_s: float = 0.0  # all of planning, as the user waits for it (0: not measured)
    frontier_s: float = 0.0
    baselines_s: float = 0.0
    bound: float | None = None  # no admissible mix beats this, in bound_unit (the certificate of gap)
    bound_unit: str = ""  # usd_per_hour | samples_per_s | usd_per_million_samples


class BaselineKind(StrEnum):
    """What a simpler tool would have picked for the same job, under the same limits."""

    SINGLE_ZONE = "single-zone"  # n nodes of one offer in one zone (or one region-wide offer)
    SINGLE_REGION = "single-region"  # n nodes of one instance type and market, over the zones of one region
    # SkyPilot's optimizer: n nodes of one accelerator type, the cheapest offer that holds them all, on-demand
    # unless the job asks for spot only
    CHEAPEST_IDENTICAL = "cheapest-identical"


BASELINE_WORDS = {
    BaselineKind.SINGLE_ZONE: "best single-zone homogeneous",
    BaselineKind.SINGLE_REGION: "best single-region homogeneous",
    BaselineKind.CHEAPEST_IDENTICAL: "SkyPilot's pick",
}


@dataclass(frozen=True, slots=True)
class Fallback:
    """Where the launcher moves the nodes of a planned zone it cannot get (no capacity, a failed boot, a
    preemption: the launcher blocks the zone): for each planned offer there, an offer of the same
    accelerators per node and market in another zone, and the perf model's figures for the plan with
    all of them moved (``planning.fallback``)."""

    replaces: str  # the planned zone's scope (cloud/region/zone, or cloud/region for a region-wide offer)
    moves: tuple[tuple[str, Offer], ...]  # (planned offer id, the offer that takes its nodes)
    samples_per_s: float
    usd_per_hour: float
    launch_chance: float  # the capacity model's chance of getting the moved nodes at once


@dataclass(frozen=True, slots=True)
class Baseline:
    """One simpler choice for the same job, evaluated by the perf model like the plan itself."""

    groups: tuple[NodeGroup, ...]
    samples_per_s: float
    usd_per_hour: float
    usd_per_million_samples: float
    kind: BaselineKind = BaselineKind.SINGLE_ZONE

    @property
    def offer(self) -> Offer:
        return self.groups[0].offer

    @property
    def count(self) -> int:
        return sum(g.count for g in self.groups)

    def describe(self) -> str:
        return " + ".join(f"{g.count} x {g.offer.offer_id}" for g in self.groups)


@dataclass(frozen=True, slots=True)
class Completion:
    """How long a plan takes to train the job's ``total_samples`` and what that costs in all: at its
    goodput (expected interruptions counted) and at its raw samples/s (none)."""

    samples: int
    hours: float
    usd: float
    raw_hours: float
    raw_usd: float


@dataclass(frozen=True, slots=True)
class BudgetUse:
    """What a plan leaves of its budget, and what kept the mix from growing into it: for every
    candidate, why one more node of it is not in the plan (``planning.answers``)."""

    budget_usd_per_hour: float
    unused_usd_per_hour: float
    limits: tuple[tuple[str, int], ...] = ()  # (what stopped one more node, candidates it stopped), most first
    words: str = ""

    @property
    def unused_share(self) -> float:
        return self.unused_usd_per_hour / self.budget_usd_per_hour if self.budget_usd_per_hour else 0.0


@dataclass(frozen=True, slots=True)
class Plan:
    plan_id: str
    created_at: datetime
    snapshot_id: str
    job: JobSpec
    items: tuple[PlanItem, ...]
    totals: PlanTotals
    solver: SolverReport
    recovery_h: float = 0.25  # work an interruption costs (checkpoint interval share + restart)
    provider: str | None = None  # "local": predicted for the local provider's nodes (processes here)
    frontier: tuple[tuple[float, float], ...] = ()  # (samples/s, $/h)
    baselines: tuple[Baseline, ...] = ()  # one per kind that reaches the job's goal under its limits
    assumptions: tuple[str, ...] = ()
    missing_baselines: tuple[tuple[BaselineKind, str], ...] = ()  # kinds with none, and why
    fallbacks: tuple[Fallback, ...] = ()  # per planned zone, best first (``planning.fallback``)
    completion: Completion | None = None  # the job gives total_samples: when they are trained, at what cost
    budget_use: BudgetUse | None = None  # the job has a budget: what is left of it, and why
    misses: tuple[str, ...] = ()  # goals a given mix misses (planned anyway: --allow-below-target)
    tradeoff: str = ""  # a homogeneous plan: what binds a mix that spreads further (``planning.tradeoff``)

    def fallbacks_for(self, zone_scope: str) -> list[Fallback]:
        return [f for f in self.fallbacks if f.replaces == zone_scope]

    @property
    def baseline(self) -> Baseline | None:
        """The best single-region homogeneous choice (else the first baseline there is)."""
        for b in self.baselines:
            if b.kind is BaselineKind.SINGLE_REGION:
                return b
        return self.baselines[0] if self.baselines else None

    @property
    def nodes(self) -> int:
        return sum(item.count for item in self.items)

    @property
    def sync(self) -> SyncSettings:
        return self.job.sync

"""Job spec file (YAML) → validated :class:`~geotrain.domain.JobSpec`.

A job spec says what to train, what to optimise and within which limits::

    name: convnext-spot                  # required
    workload: convnext-large             # required
    objective: min_cost                  # min_cost | max_throughput | min_cost_per_sample | min_cost_by_deadline
                                         #   (default: from what is given, see infer_objective)
    strategy: hivemind                   # hivemind | allreduce | local-sgd | asgd-ga | ma   (default hivemind)
    sync:                                # the strategy's knobs, all optional (defaults: domain.SyncSettings)
      target_batch_size: 32768           #   hivemind: samples per averaging round
      group_size: 16                     #   hivemind: the most peers in one averaging group
      local_steps: 32                    #   local-sgd: steps between averaging rounds
      accumulation_steps: 16             #   asgd-ga: steps per push
      staleness: 1                       #   asgd-ga: pushes a region may run ahead of the home model
      averaging_pushes: 16               #   ma: pushes (steps) between averages of the regions' servers
      precision: fp16                    #   fp32 | fp16 | bf16 | int8 on the wire
      micro_batches: 1                   #   micro-batches each node trains per step
    target_samples_per_s: 500            # required by min_cost
    budget_usd_per_hour: 20              # required by max_throughput
    total_samples: 100000000             # required by min_cost_by_deadline
    deadline_h: 48                       # required by min_cost_by_deadline
    constraints:                         # all optional
      clouds: [aws, gcp]
      regions: [aws/us-west-2, europe-west4]
      continents: [north_america, europe]
      max_regions: 2
      max_nodes: 16
      max_nodes_per_zone: 4
      max_gpus_per_zone: 16              # accelerators, whatever the node sizes
      max_zone_share: 0.5
      max_spot_share: 1.0
      spot_only: false
      accelerators: [T4, A10G]           # only these models (A100 also matches A100-80GB)
      quotas: {aws: 16, gcp/us-central1: 8}   # accelerators at most, per cloud or region
      capacity_confidence: 0.5           # at most what the capacity model gives at once with this chance
    onprem:
      inventory: sites.yaml              # relative to this file
      required: false                    # true: use every on-prem machine
    dataset:                             # where the training data lives (nodes stream it)
      cloud: gcp
      region: us-central1
      size_gib: 150
      samples: 1281167                   # samples in the dataset
      reads_per_sample: 1                # share of trained samples fetched from there
                                         # (1: streamed every epoch; 0.1: cached after 1 of 10)
    checkpoint_url: s3://my-bucket/convnext-spot
    model:                               # only for a workload of your own (workload: its name)
      parameters: 1.3B                   #   a number, or a size: 350M, 1.3B, 7B
      kind: nlp                          #   cv | nlp (which measured accelerator ratios apply)
      samples_per_step: 8                #   micro-batch on one accelerator
      state_bytes_per_parameter: 16      #   weights + gradients + optimizer state (16: mixed-precision Adam)
      activation_mib_per_sample: 0       #   activation memory; 0 = unknown, not counted in the fit check
    rates: my-rates.csv                  # your compute rates (geotrain profile writes them), relative to this file
    egress: my-egress.csv                # your egress rates (the egress table's columns), relative to this file

Every problem raises :class:`~geotrain.errors.JobSpecError` naming the field, e.g.
``job.yaml: constraints.max_regions: must be a whole number >= 1, got 0``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from geotrain.domain import (
    DISK_TIERS, IMAGE_FORMS, PRECISIONS, BootDisk, Constraints, Continent, DatasetSpec, JobSpec, Market, ModelSpec,
    Objective, ResourceFilter, SyncSettings, SyncStrategyName, TaskRun, image_cloud, is_storage_url,
)
from geotrain.errors import JobSpecError
from geotrain.specfile import Fields, load_yaml_mapping

_NEEDS = {
    Objective.MIN_COST: ("target_samples_per_s",),
    Objective.MAX_THROUGHPUT: ("budget_usd_per_hour",),
    Objective.MIN_COST_PER_SAMPLE: (),
    Objective.MIN_COST_BY_DEADLINE: ("total_samples", "deadline_h"),
}


def load_job_spec(path: str | Path) -> JobSpec:
    """Read and validate a job spec file."""
    path = Path(path)
    data = load_yaml_mapping(path, JobSpecError)
    return parse_job_spec(Fields(data, origin=str(path), error=JobSpecError), base_dir=path.parent)


def parse_job_spec(fields: Fields, *, base_dir: Path) -> JobSpec:
    name = fields.text("name")
    workload = fields.text("workload")
    objective_text = fields.choice("objective", [o.value for o in Objective], None)
    sync = parse_sync(fields)
    target = fields.number("target_samples_per_s", None, above=0)
    budget = fields.number("budget_usd_per_hour", None, above=0)
    total = fields.whole("total_samples", None, minimum=1)
    deadline = fields.number("deadline_h", None, above=0)
    given = {"target_samples_per_s": target, "budget_usd_per_hour": budget,
             "total_samples": total, "deadline_h": deadline}
    objective = Objective(objective_text) if objective_text else infer_objective(target, budget, total, deadline)
    for needed in _NEEDS[objective]:
        if given[needed] is None:
            raise fields.fail(needed, f"required when objective is {objective.value}")

    constraints = _constraints(fields.section("constraints"))
    inventory, onprem_required = _onprem(fields.section("onprem"), base_dir)
    if onprem_required:
        constraints = replace(constraints, onprem_required=True)
    dataset = _dataset(fields.section("dataset"))
    checkpoint_url = fields.text("checkpoint_url", None)
    model = _model(fields.section("model"))
    rates = fields.text("rates", None)
    if rates is not None:
        rates = str(_beside(rates, base_dir))
    egress = fields.text("egress", None)
    if egress is not None:
        egress = str(_beside(egress, base_dir))
    task = _task(fields.section("task"), base_dir)
    notes = tuple(fields.text_list("notes", None) or ())
    fields.finish()
    return JobSpec(
        name=name, workload=workload, objective=objective, sync=sync,
        target_samples_per_s=target, budget_usd_per_hour=budget, total_samples=total,
        deadline_h=deadline, constraints=constraints, onprem_inventory=inventory,
        dataset=dataset, checkpoint_url=checkpoint_url, model=model, rates_file=rates, task=task,
        egress_file=egress, notes=notes,
    )


_STRATEGIES = [s.value for s in SyncStrategyName]


def parse_sync(fields: Fields) -> SyncSettings:
    """``strategy`` (top level, the usual way to say it) and the ``sync`` section (every knob; it may
    name the strategy too, but not a different one). What is not given takes SyncSettings' default."""
    strategy = fields.choice("strategy", _STRATEGIES, None)
    section = fields.section("sync")
    values: dict = {}
    if section is not None:
        inner = section.choice("strategy", _STRATEGIES, None)
        if strategy is not None and inner is not None and inner != strategy:
            raise section.fail("strategy", f"{inner!r} contradicts strategy: {strategy!r}; give it once")
        strategy = strategy or inner
        for name in ("target_batch_size", "group_size", "local_steps", "accumulation_steps", "staleness",
                     "averaging_pushes", "micro_batches"):
            value = section.whole(name, None, minimum=1, maximum=10**9)
            if value is not None:
                values[name] = value
        precision = section.choice("precision", PRECISIONS, None)
        if precision is not None:
            values["precision"] = precision
        section.finish()
    if strategy is not None:
        values["strategy"] = SyncStrategyName(strategy)
    try:
        return SyncSettings(**values)
    except ValueError as exc:
        raise fields.fail("sync", str(exc)) from None


def infer_objective(target: float | None, budget: float | None, total: int | None,
                    deadline: float | None) -> Objective:
    """Without an explicit objective: a target asks for the cheapest way to reach it; samples and a
    deadline for the cheapest way to finish in time; a budget alone for the most throughput in it;
    nothing for the lowest cost per sample."""
    if target is not None:
        return Objective.MIN_COST
    if total is not None and deadline is not None:
        return Objective.MIN_COST_BY_DEADLINE
    if budget is not None:
        return Objective.MAX_THROUGHPUT
    return Objective.MIN_COST_PER_SAMPLE


def _constraints(fields: Fields | None) -> Constraints:
    if fields is None:
        return Constraints()
    clouds = fields.text_list("clouds", None)
    regions = fields.text_list("regions", None)
    continents = fields.text_list("continents", None)
    if continents is not None:
        valid = [c.value for c in Continent]
        for item in continents:
            if item not in valid:
                raise fields.fail("continents", f"{item!r} is not one of {', '.join(valid)}")
    out = Constraints(
        clouds=frozenset(c.lower() for c in clouds) if clouds else None,
        regions=frozenset(regions) if regions else None,
        continents=frozenset(Continent(c) for c in continents) if continents else None,
        max_regions=fields.whole("max_regions", None, minimum=1),
        max_nodes=fields.whole("max_nodes", None, minimum=1),
        max_nodes_per_zone=fields.whole("max_nodes_per_zone", None, minimum=1),
        max_gpus_per_zone=fields.whole("max_gpus_per_zone", None, minimum=1),
        max_zone_share=fields.number("max_zone_share", None, above=0, maximum=1),
        max_spot_share=fields.number("max_spot_share", None, minimum=0, maximum=1),
        spot_only=fields.flag("spot_only", False),
        accelerators=_accelerators(fields),
        quotas=_quotas(fields),
        capacity_confidence=fields.number("capacity_confidence", None, above=0, maximum=1),
        resources=_resources(fields),
        node_count=fields.whole("node_count", None, minimum=1, maximum=10_000),
    )
    fields.finish()
    return out


_RESOURCE_NUMBERS = ("min_vcpus", "max_vcpus", "min_memory_gib", "max_memory_gib")
_RESOURCE_TEXTS = ("cloud", "region", "zone", "instance_type", "accelerator", "image")


def _resources(fields: Fields) -> tuple[ResourceFilter, ...]:
    """``constraints.resources``: a list of resource choices (a task file's ``resources``), each a
    mapping of ResourceFilter's fields; an offer must match one."""
    if fields.value_or_none("resources") is None:
        return ()
    out = []
    for item in fields.sections("resources"):
        values: dict = {name: item.text(name, None) for name in _RESOURCE_TEXTS}
        values["accelerator_count"] = item.whole("accelerator_count", None, minimum=0, maximum=1024)
        values.update({name: item.number(name, None, minimum=0) for name in _RESOURCE_NUMBERS})
        market = item.choice("market", (Market.SPOT.value, Market.ON_DEMAND.value), None)
        values["market"] = Market(market) if market else None
        disk_size = item.whole("disk_size_gib", None, minimum=1, maximum=65_536)
        disk_tier = item.choice("disk_tier", DISK_TIERS, None)
        values["disk"] = BootDisk(disk_size, disk_tier) if disk_size is not None or disk_tier else None
        if values["cloud"]:
            values["cloud"] = values["cloud"].lower()
        if values["image"] is not None:
            cloud = image_cloud(values["image"])
            if cloud is None:
                raise item.fail("image", f"{values['image']!r} is not {IMAGE_FORMS}")
            if values["cloud"] not in (None, cloud):
                raise item.fail("image", f"{values['image']!r} is an image of {cloud}, not of {values['cloud']}")
        item.finish()
        out.append(ResourceFilter(**values))
    return tuple(out)


def _task(fields: Fields | None, base_dir: Path) -> TaskRun | None:
    """The ``task`` section: what launch runs on each node (a task file's setup, run, workdir, envs and
    file_mounts, in geotrain's own form; ``geotrain.taskfile`` reads SkyPilot's)."""
    if fields is None:
        return None
    workdir = fields.text("workdir", None)
    envs = fields.section("envs")
    mounts = fields.section("file_mounts")
    task = TaskRun(
        run=_script(fields, "run"), setup=_script(fields, "setup"),
        workdir=None if workdir is None else str(_beside(workdir, base_dir).resolve()),
        envs=() if envs is None else tuple((str(k), _env_value(envs, k)) for k in envs.keys()),
        file_mounts=() if mounts is None else tuple(
            (str(k), _mount_source(mounts.text(k), base_dir)) for k in mounts.keys()
            if not isinstance(mounts.value_or_none(k), Mapping)),
        container=fields.text("container", None),
        storage_mounts_to_mount=() if mounts is None else tuple(
            (str(k), str(v.get("source")), str(v.get("mode"))) for k in mounts.keys()
            if isinstance(v := mounts.value_or_none(k), Mapping)),
    )
    if envs is not None:
        envs.finish()
    if mounts is not None:
        mounts.finish()
    fields.finish()
    return task


def _mount_source(source: str, base_dir: Path) -> str:
    """A storage URL as it is; a local path made absolute (beside the spec file)."""
    return source if is_storage_url(source) else str(_beside(source, base_dir).resolve())


def _script(fields: Fields, key: str) -> str | None:
    value = fields.value_or_none(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise fields.fail(key, f"must be a shell script (text), got {type(value).__name__}")
    return value


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _env_value(envs: Fields, key: object) -> str:
    if not isinstance(key, str) or not _ENV_NAME.match(key):
        raise envs.fail(str(key), "is not an environment variable name (letters, digits and _, not first a digit)")
    value = envs.value_or_none(key)
    if value is None:
        raise envs.fail(key, "has no value; give one in the file")
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise envs.fail(key, f"must be a text or a number, got {type(value).__name__}")
    return str(value)


def _accelerators(fields: Fields) -> frozenset[str] | None:
    names = fields.text_list("accelerators", None)
    return frozenset(names) if names else None


def _quotas(fields: Fields) -> tuple[tuple[str, int], ...]:
    section = fields.section("quotas")
    if section is None:
        return ()
    out = []
    for scope in section.keys():  # every key is a scope
        if not isinstance(scope, str) or scope.count("/") > 1:
            raise fields.fail("quotas", f"{scope!r} is not a cloud or cloud/region")
        out.append((scope.lower() if "/" not in scope else scope, section.whole(scope, minimum=0)))
    section.finish()
    return tuple(sorted(out))


def _onprem(fields: Fields | None, base_dir: Path) -> tuple[str | None, bool]:
    if fields is None:
        return None, False
    inventory = fields.text("inventory")
    required = fields.flag("required", False)
    fields.finish()
    return str(_beside(inventory, base_dir)), required


def _beside(name: str, base_dir: Path) -> Path:
    """A path from the spec: relative ones are relative to the spec's own directory."""
    path = Path(name).expanduser()
    return path if path.is_absolute() else base_dir / path


def _dataset(fields: Fields | None) -> DatasetSpec | None:
    if fields is None:
        return None
    out = DatasetSpec(
        cloud=fields.text("cloud").lower(),
        region=fields.text("region"),
        size_gib=fields.number("size_gib", above=0),
        samples=fields.whole("samples", minimum=1),
        reads_per_sample=fields.number("reads_per_sample", 1.0, minimum=0),
    )
    fields.finish()
    return out



_SIZE_SUFFIX = {"k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmbt])\s*$", re.IGNORECASE)


def _model(fields: Fields | None) -> ModelSpec | None:
    """The ``model`` section: ``parameters`` as a number or a Hugging Face-style size ("1.3B", "350M")."""
    if fields is None:
        return None
    raw = fields.value("parameters")
    if isinstance(raw, str):
        match = _SIZE.match(raw)
        if match is None:
            raise fields.fail("parameters", f"{raw!r} is neither a number nor a size like 1.3B or 350M")
        parameters = int(round(float(match.group(1)) * _SIZE_SUFFIX[match.group(2).lower()]))
    else:
        parameters = fields.whole("parameters", minimum=1)
    if parameters < 1:
        raise fields.fail("parameters", "must be at least 1")
    out = ModelSpec(
        parameters=parameters,
        kind=fields.choice("kind", ("cv", "nlp")),
        samples_per_step=fields.whole("samples_per_step", minimum=1, maximum=10**7),
        state_bytes_per_parameter=fields.number("state_bytes_per_parameter", 16.0, above=0, maximum=1024),
        activation_mib_per_sample=fields.number("activation_mib_per_sample", 0.0, minimum=0, maximum=10**7),
    )
    fields.finish()
    return out


def job_to_mapping(job: JobSpec) -> dict:
    """The job spec in the file's own form (``parse_job_spec`` reads it back)."""
    c = job.constraints
    constraints = {
        "clouds": sorted(c.clouds) if c.clouds else None,
        "regions": sorted(c.regions) if c.regions else None,
        "continents": sorted(x.value for x in c.continents) if c.continents else None,
        "max_regions": c.max_regions, "max_nodes": c.max_nodes, "max_nodes_per_zone": c.max_nodes_per_zone,
        "max_gpus_per_zone": c.max_gpus_per_zone,
        "max_zone_share": c.max_zone_share, "max_spot_share": c.max_spot_share, "spot_only": c.spot_only,
        "accelerators": sorted(c.accelerators) if c.accelerators else None,
        "quotas": dict(c.quotas) or None, "capacity_confidence": c.capacity_confidence,
        "resources": [_resource_mapping(r) for r in c.resources] or None, "node_count": c.node_count,
    }
    out = {
        "name": job.name, "workload": job.workload, "objective": job.objective.value,
        "sync": job.sync.to_mapping(), "target_samples_per_s": job.target_samples_per_s,
        "budget_usd_per_hour": job.budget_usd_per_hour, "total_samples": job.total_samples,
        "deadline_h": job.deadline_h,
        "constraints": {k: v for k, v in constraints.items() if v is not None} or None,
        "onprem": {"inventory": job.onprem_inventory, "required": c.onprem_required} if job.onprem_inventory else None,
        "dataset": None if job.dataset is None else {
            "cloud": job.dataset.cloud, "region": job.dataset.region, "size_gib": job.dataset.size_gib,
            "samples": job.dataset.samples, "reads_per_sample": job.dataset.reads_per_sample,
        },
        "checkpoint_url": job.checkpoint_url, "rates": job.rates_file, "egress": job.egress_file,
        "notes": list(job.notes) or None,
        "model": None if job.model is None else {
            "parameters": job.model.parameters, "kind": job.model.kind,
            "samples_per_step": job.model.samples_per_step,
            "state_bytes_per_parameter": job.model.state_bytes_per_parameter,
            "activation_mib_per_sample": job.model.activation_mib_per_sample,
        },
        "task": None if job.task is None else {k: v for k, v in {
            "run": job.task.run, "setup": job.task.setup, "workdir": job.task.workdir,
            "envs": dict(job.task.envs) or None, "container": job.task.container,
            "file_mounts": {**dict(job.task.file_mounts), **{d: {"source": b, "mode": m} for d, b, m in
                                                             job.task.storage_mounts_to_mount}} or None,
        }.items() if v is not None},
    }
    return {k: v for k, v in out.items() if v is not None}


def _resource_mapping(resource: ResourceFilter) -> dict:
    out = {name: getattr(resource, name) for name in (*_RESOURCE_TEXTS, "accelerator_count", *_RESOURCE_NUMBERS)}
    out["market"] = resource.market.value if resource.market else None
    if resource.disk is not None:
        out["disk_size_gib"], out["disk_tier"] = resource.disk.size_gib, resource.disk.tier
    return {k: v for k, v in out.items() if v is not None}

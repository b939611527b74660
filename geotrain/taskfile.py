"""A SkyPilot task file (YAML) → a geotrain job spec mapping (``geotrain.config`` reads it).

``geotrain plan task.yaml`` and ``geotrain launch task.yaml`` take a SkyPilot task as it is::

    name: minGPT-ddp
    num_nodes: 2                      # exactly this many nodes (a pinned shape)
    resources:
      accelerators: A100:8            # or {A100: 8, H100: 8}, or [A100:8, H100:8]: any of them
      use_spot: true                  # true: spot only; false or absent: on-demand (with workload: the plan chooses)
      infra: aws/us-east-1            # or cloud: aws, region: us-east-1, zone: use1-az4
      cpus: 8+                        # 8: exactly 8; 8+: at least 8 (memory likewise, in GiB)
      instance_type: p4d.24xlarge
      any_of: [{infra: gcp}, {infra: aws}]    # or ordered: the candidate set (the plan picks by its objective)
      disk_size: 256                  # the boot disk, GiB; disk_tier: low | medium | high | ultra | best
    workdir: .                        # copied to each node (~/sky_workdir there); setup and run start in it
    file_mounts: {~/data: ./data, ~/ckpt: s3://bucket/ckpt}   # local files, and storage in COPY mode
    envs: {EPOCHS: 3, HF_TOKEN: null}  # null: given with --env HF_TOKEN[=VALUE] (secrets likewise)
    setup: pip install -r requirements.txt    # once per node
    run: torchrun --nnodes=$SKYPILOT_NUM_NODES --node_rank=$SKYPILOT_NODE_RANK ... main.py

and geotrain's own fields beside them, which extend it: ``workload``, ``target_samples_per_s``,
``budget_usd_per_hour``, ``total_samples``, ``deadline_h``, ``objective``, ``strategy``, ``sync``,
``constraints``, ``dataset``, ``onprem``, ``checkpoint_url``, ``model``, ``rates`` (as in a job spec,
``geotrain.config``). A task without ``workload`` is planned on price alone for its shape
(``num_nodes``, default 1, as SkyPilot's), the cheapest offers that match; with one, the perf model
chooses, and ``num_nodes`` (when given) pins the node count.

Without ``accelerators`` or ``instance_type``, a task without ``workload`` gets SkyPilot's default CPU VM
(``cpus`` 8+, 4 GiB per vCPU). Fields geotrain reads its own way (``job_recovery``, ``autostop``, ``ports``, …)
are accepted and said in the plan (``JobSpec.notes``). A pipeline (several documents) is its tasks in order
(``pipeline_tasks``). Planned but refused by launch before anything is bought: storage ``MOUNT`` /
``MOUNT_CACHED`` and a ``docker:`` image. What geotrain does not do at all is refused by name, never
ignored: e.g. ``service`` (serving), ``volumes``, TPU runtime arguments, a bucket to create.

``resources.image_id`` (SkyPilot's) is the nodes' boot image, its cloud told by its form: an AMI
(``ami-…``: AWS, which exists in one region, so give ``region`` too, or per region:
``image_id: {us-east-1: ami-…, us-west-2: ami-…}``, which plans only in those regions), a GCP image
(``projects/P/global/images/NAME`` or ``…/images/family/F``), an Azure marketplace URN
(``PUBLISHER:OFFER:SKU:VERSION``) or image resource ID. The plan keeps it with the resource choice
(``ResourceFilter.image``) and launch boots it on the nodes of that choice.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from geotrain.domain import DISK_TIERS, IMAGE_FORMS, STORAGE_SCHEMES, UNMODELLED_WORKLOAD, image_cloud
from geotrain.errors import JobSpecError

# Top-level SkyPilot keys that make a file a task file (a job spec has none of them).
TASK_KEYS = frozenset({"resources", "run", "setup", "num_nodes", "workdir", "envs", "file_mounts", "secrets"})

# SkyPilot task fields geotrain does not do, with what to do instead.
_REFUSED_TOP = {
    "service": "geotrain trains; it does not serve models (SkyServe)",
    "config": "SkyPilot's per-task config overrides have no geotrain meaning; remove it",
    "volumes": "give data through file_mounts (local files) or the job's dataset section",
    "event_callback": "not supported",
    "inputs": "give the dataset's location in geotrain's dataset section",
    "outputs": "not supported",
    "experimental": "not supported",
    "pool": "not supported",
}
_REFUSED_RESOURCES = {
    "accelerator_args": "TPU runtime arguments: geotrain does not launch TPU VMs",
    "priority": "geotrain runs one job per run; there is no queue to order",
    "volumes": "give data through file_mounts (local files or cloud storage in mode COPY)",
}
# SkyPilot resources fields geotrain reads its own way: accepted, with what the plan says about them.
_NOTED_RESOURCES = {
    "job_recovery": "{key}: geotrain always recovers a preempted run (re-plans, relaunches the missing nodes and "
                    "resumes from the last checkpoint); the strategy named is not used",
    "spot_recovery": "{key}: geotrain always recovers a preempted run (re-plans, relaunches the missing nodes and "
                     "resumes from the last checkpoint); the strategy named is not used",
    "use_spot_recovery": "{key}: geotrain always recovers a preempted run",
    "autostop": "{key}: a run's nodes are released when the run ends (autostop is what geotrain always does)",
    "labels": "{key}: geotrain labels each node with its run id; the task's labels are not applied",
    "network_tier": "{key}: the network each cloud gives the planned instance types is used as it is",
    "ports": "{key}: geotrain opens no ports to the internet on a node; reach one from here with "
             "`geotrain ssh RUN -- -L PORT:localhost:PORT`",
}
# clouds SkyPilot launches on and geotrain does not: an any_of / ordered branch on one is left out (as SkyPilot
# leaves out clouds that are not enabled), with a note; a task with no other branch is refused
OTHER_CLOUDS = frozenset({"lambda", "runpod", "paperspace", "fluidstack", "kubernetes", "k8s", "ssh", "vast",
                          "cudo", "do", "nebius", "oci", "ibm", "scp", "vsphere", "hyperbolic", "primeintellect",
                          "shadeform", "seeweb", "slurm", "coreweave", "together", "modal"})
DEFAULT_CPUS = 8.0  # SkyPilot's default VM for a task without accelerators: 8 vCPUs …
DEFAULT_MEMORY_GIB_PER_CPU = 4.0  # … with 4 GiB each (or what its cpus / memory say)
_RESOURCE_KEYS = ("infra", "cloud", "region", "zone", "accelerators", "use_spot", "cpus", "memory", "instance_type",
                  "image_id", "disk_size", "disk_tier", *_NOTED_RESOURCES)
_CLOUD_ALIASES = {"aws": "aws", "gcp": "gcp", "azure": "azure", "onprem": "onprem"}
_AMOUNT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(\+?)\s*$")


# dstack's configuration types (its top-level ``type``), which a SkyPilot task never has
DSTACK_TYPES = frozenset({"task", "dev-environment", "service", "fleet", "volume", "gateway"})


def foreign_format(data: Mapping[str, Any]) -> str | None:
    """What a YAML mapping is when it is another tool's file rather than a task or job spec, or None."""
    if data.get("type") in DSTACK_TYPES and "run" not in data:
        return (f"a dstack configuration (type: {data['type']}); geotrain reads SkyPilot tasks and its own "
                "job specs: write the commands as a SkyPilot task's setup and run, and resources.gpu as "
                "resources.accelerators")
    return None


def pipeline_tasks(docs: list[Any], origin: str) -> list[tuple[str, dict[str, Any]]]:
    """A SkyPilot pipeline (several YAML documents: an optional header with the pipeline's ``name``, then
    one task each) → (name, task) per task, in order; each task is named ``<pipeline>-<i>`` unless it names
    itself. A document that is not a task is refused by name."""
    header: Mapping[str, Any] = {}
    if docs and isinstance(docs[0], Mapping) and not is_task(docs[0]):
        header, docs = docs[0], docs[1:]
    pipeline = str(header.get("name") or Path(origin).stem)
    out = []
    for i, doc in enumerate(docs, start=1):
        if not isinstance(doc, Mapping) or not is_task(doc):
            raise JobSpecError(f"{origin}: document {i + bool(header)} of the pipeline is not a task (it has none "
                               "of run, setup, resources, num_nodes, workdir, envs, file_mounts)")
        task = dict(doc)
        task.setdefault("name", f"{pipeline}-{i}")
        out.append((str(task["name"]), task))
    if not out:
        raise JobSpecError(f"{origin}: a pipeline without tasks")
    return out


def is_task(data: Mapping[str, Any]) -> bool:
    """Whether a YAML mapping is a SkyPilot task (it has one of the task's own keys)."""
    return any(key in data for key in TASK_KEYS)


def task_to_job(data: Mapping[str, Any], origin: str) -> dict[str, Any]:
    """The job spec mapping of a task: SkyPilot's fields turned into geotrain's ``constraints``
    (``resources``, ``node_count``, ``spot_only``) and ``task`` section; geotrain's own fields kept."""
    for key, why in _REFUSED_TOP.items():
        if key in data:
            raise JobSpecError(f"{origin}: {key}: not supported by geotrain ({why})")
    job = {k: v for k, v in data.items() if k not in TASK_KEYS}
    if "task" in job:
        raise JobSpecError(f"{origin}: task: a task file gives run, setup, workdir, envs and file_mounts at the "
                           "top level, not in a task section")
    job.setdefault("name", Path(origin).stem if origin.endswith((".yaml", ".yml")) else "task")
    job["name"] = str(job["name"])
    if "workload" not in job:
        job["workload"] = UNMODELLED_WORKLOAD
        if any(k in job for k in ("target_samples_per_s", "budget_usd_per_hour", "total_samples", "deadline_h")):
            raise JobSpecError(f"{origin}: workload: required with a throughput target, budget or deadline (the "
                               "perf model must know what trains); add workload: NAME (a built-in one, or your own "
                               "with a model section and --rates), or leave the goal out to plan on price alone")
    constraints = dict(_mapping(job.get("constraints") or {}, f"{origin}: constraints"))
    notes: list[str] = []
    raw, container = _without_containers(data.get("resources"))
    resources = _resources(raw, origin, notes, modelled=job["workload"] != UNMODELLED_WORKLOAD)
    if resources:
        if "resources" in constraints:
            raise JobSpecError(f"{origin}: constraints.resources: give the resources once, in SkyPilot's "
                               "resources section")
        constraints["resources"] = resources
    num_nodes = data.get("num_nodes")
    if num_nodes is not None:
        if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or not 1 <= num_nodes <= 10_000:
            raise JobSpecError(f"{origin}: num_nodes: must be a whole number from 1 to 10000, got {num_nodes!r}")
        constraints["node_count"] = num_nodes
    elif job["workload"] == UNMODELLED_WORKLOAD:
        constraints["node_count"] = 1  # SkyPilot's default; with a workload the planner chooses
    if constraints:
        job["constraints"] = constraints
    task: dict[str, Any] = {}
    for key in ("run", "setup"):
        if data.get(key) is not None:
            task[key] = data[key]
    workdir = data.get("workdir")
    if workdir is not None:
        if not isinstance(workdir, str):
            raise JobSpecError(f"{origin}: workdir: must be a local directory; a git workdir (url, ref) is not "
                               "supported: clone it in setup instead")
        task["workdir"] = workdir
    envs = {**dict(_mapping(data.get("envs") or {}, f"{origin}: envs")),
            **dict(_mapping(data.get("secrets") or {}, f"{origin}: secrets"))}  # secrets: envs not shown in plans
    if envs:
        task["envs"] = envs
    mounts = data.get("file_mounts")
    if mounts is not None:
        task["file_mounts"] = {str(dest): _mount_source(dest, source, f"{origin}: file_mounts.{dest}")
                               for dest, source in _mapping(mounts, f"{origin}: file_mounts").items()}
    if container is not None:
        task["container"] = container
    if task:
        job["task"] = task
    if notes:
        job["notes"] = list(dict.fromkeys(notes))
    return job


MOUNT_MODES = ("COPY", "MOUNT", "MOUNT_CACHED")


def _without_containers(value: Any) -> tuple[Any, str | None]:
    """``resources`` without its ``docker:`` images (SkyPilot runs the task in that container), and the
    container image: planned as any task, and refused by launch before anything is bought."""
    if not isinstance(value, Mapping):
        return value, None
    found: list[str] = []

    def strip(fields: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(fields)
        image = out.get("image_id")
        if isinstance(image, str) and image.strip().startswith("docker:"):
            found.append(image.strip())
            del out["image_id"]
        return out

    out = strip(value)
    for key in ("any_of", "ordered"):
        if isinstance(out.get(key), list):
            out[key] = [strip(item) if isinstance(item, Mapping) else item for item in out[key]]
    return out, (found[0] if found else None)


def _mount_source(dest: Any, source: Any, where: str) -> str | dict[str, str]:
    """A file mount's source: a local path (copied from here), or a cloud-storage URL copied onto each node
    (``s3://``, ``gs://``, ``az://``/``abfs://``: a plain URL, or SkyPilot's ``{source: URL, mode: COPY}``).
    ``MOUNT``/``MOUNT_CACHED`` (SkyPilot's default mode) are kept as ``{source, mode}``: planned, and refused
    by launch before anything is bought (geotrain mounts no storage); buckets SkyPilot would create are refused."""
    if isinstance(source, str):
        if "://" in source and not source.startswith(STORAGE_SCHEMES):
            raise JobSpecError(f"{where}: {source!r}: geotrain copies storage from {', '.join(STORAGE_SCHEMES)} "
                               "URLs; fetch others in setup")
        return source
    fields = _mapping(source, where)
    unknown = set(fields) - {"name", "source", "store", "mode", "persistent", "config"}
    if unknown:
        raise JobSpecError(f"{where}: unknown storage fields {', '.join(sorted(map(str, unknown)))}")
    mode = str(fields.get("mode", "MOUNT")).upper()
    if mode not in MOUNT_MODES:
        raise JobSpecError(f"{where}: mode {mode!r} is not one of COPY, {', '.join(MOUNT_MODES[1:])}")
    url = fields.get("source")
    name, store = fields.get("name"), str(fields.get("store") or "").lower()
    scheme = {"s3": "s3://", "gcs": "gs://", "azure": "az://"}.get(store)
    if mode != "COPY":  # planned; launch refuses it before anything is bought (launcher.task.check_task)
        source = url if isinstance(url, str) else f"{scheme or ''}{name}" if isinstance(name, str) else "?"
        return {"source": source, "mode": mode}
    if isinstance(url, str) and url.startswith(STORAGE_SCHEMES):
        return url
    if isinstance(url, str) and "://" not in url:
        return url  # a local source in COPY mode: copied to each node directly (no bucket in between)
    if url is None and isinstance(name, str) and scheme:
        return f"{scheme}{name}"  # an existing bucket, by name and store
    raise JobSpecError(f"{where}: {url!r}: geotrain copies from a cloud-storage URL ({', '.join(STORAGE_SCHEMES)}), "
                       "a local path, or a bucket named with its store (name: B, store: s3|gcs|azure); it creates no "
                       "buckets")


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise JobSpecError(f"{where}: must be a mapping of field: value, got {type(value).__name__}")
    return value


def _resources(value: Any, origin: str, notes: list[str], *, modelled: bool) -> list[dict[str, Any]]:
    """SkyPilot's ``resources`` → a list of resource choices (ResourceFilter mappings): one per
    ``any_of``/``ordered`` item (each over the base fields) and per accelerator alternative. A task
    without ``workload`` and without resources gets SkyPilot's default VM (see ``_choice``)."""
    where = f"{origin}: resources"
    if value is None:
        return [] if modelled else _choice({}, where, notes, modelled=modelled)
    if isinstance(value, list):
        raise JobSpecError(f"{where}: must be a mapping; for alternatives use any_of: [...] inside it")
    base = dict(_mapping(value, where))
    if "any_of" in base and "ordered" in base:
        raise JobSpecError(f"{where}: give one of any_of and ordered")
    alternatives = []
    for key in ("any_of", "ordered"):
        if key in base:
            items = base.pop(key)
            if not isinstance(items, list) or not items:
                raise JobSpecError(f"{where}.{key}: must be a non-empty list of resource mappings")
            alternatives += [(f"{where}.{key}[{i}]", dict(_mapping(item, f"{where}.{key}[{i}]")))
                             for i, item in enumerate(items)]
    choices = [(where, base)] if not alternatives else [(w, {**base, **item}) for w, item in alternatives]
    if len(choices) > 1:
        kept = [(w, f) for w, f in choices if _cloud_word(f) not in OTHER_CLOUDS]
        left = sorted({_cloud_word(f) for w, f in choices if _cloud_word(f) in OTHER_CLOUDS})
        if left and kept:
            notes.append(f"resources: the choices on {', '.join(left)} are left out (geotrain launches on aws, gcp, "
                         "azure and your own machines)")
            choices = kept
    out: list[dict[str, Any]] = []
    for place, fields in choices:
        out += _choice(fields, place, notes, modelled=modelled)
    return out


def _cloud_word(fields: Mapping[str, Any]) -> str | None:
    """The cloud a resource choice names (``infra``'s first part, or ``cloud``), lower case."""
    text = fields.get("infra") or fields.get("cloud")
    return str(text).split("/")[0].strip().lower() if text else None


def _choice(fields: dict[str, Any], where: str, notes: list[str], *, modelled: bool) -> list[dict[str, Any]]:
    """One resource choice, as SkyPilot reads it: ``use_spot`` absent is on-demand (a task with geotrain's
    ``workload`` leaves the market to the perf model, which prices preemptions); without accelerators
    or an instance type, a task without ``workload`` gets a CPU-only VM of ``cpus`` (default 8+) vCPUs
    and ``memory`` (default 4 GiB per vCPU) GiB."""
    for key in fields:
        if key in _NOTED_RESOURCES:
            notes.append(_NOTED_RESOURCES[key].format(key=f"resources.{key}"))
            continue
        if key in _REFUSED_RESOURCES:
            raise JobSpecError(f"{where}.{key}: not supported by geotrain ({_REFUSED_RESOURCES[key]})")
        if key not in _RESOURCE_KEYS:
            raise JobSpecError(f"{where}.{key}: unknown resources field; geotrain reads {', '.join(_RESOURCE_KEYS)}, "
                               "any_of and ordered")
    one: dict[str, Any] = {}
    cloud, region, zone = _infra(fields, where)
    for name, item in (("cloud", cloud), ("region", region), ("zone", zone)):
        if item is not None:
            one[name] = item
    if fields.get("instance_type") is not None:
        one["instance_type"] = _text(fields["instance_type"], f"{where}.instance_type")
    use_spot = fields.get("use_spot")
    if use_spot is not None:
        if not isinstance(use_spot, bool):
            raise JobSpecError(f"{where}.use_spot: must be true or false, got {use_spot!r}")
        one["market"] = "spot" if use_spot else "on_demand"
    elif not modelled:
        one["market"] = "on_demand"  # SkyPilot's default
    for key, low, high in (("cpus", "min_vcpus", "max_vcpus"), ("memory", "min_memory_gib", "max_memory_gib")):
        if fields.get(key) is not None:
            amount, at_least = _amount(fields[key], f"{where}.{key}")
            one[low] = amount
            if not at_least:
                one[high] = amount
    images = _images(fields.get("image_id"), one, f"{where}.image_id", notes)
    accelerators = _accelerators(fields.get("accelerators"), f"{where}.accelerators")
    if not accelerators and fields.get("instance_type") is None and not modelled:
        one["accelerator"] = "CPU"  # SkyPilot's default VM: CPU only, 8+ vCPUs, 4 GiB per vCPU
        if fields.get("cpus") is None and fields.get("memory") is None:
            one["min_vcpus"] = DEFAULT_CPUS
        if fields.get("memory") is None:
            one["min_memory_gib"] = DEFAULT_MEMORY_GIB_PER_CPU * one.get("min_vcpus", DEFAULT_CPUS)
    _disk(fields, one, where)
    with_images = [{**one, **image} for image in images] if images else [one]
    if not accelerators:
        return with_images
    return [{**choice, "accelerator": name, "accelerator_count": count}
            for choice in with_images for name, count in accelerators]


def _disk(fields: dict[str, Any], one: dict[str, Any], where: str) -> None:
    """``disk_size`` (GiB, a whole number) and ``disk_tier`` (low, medium, high, ultra, best) → the
    choice's boot disk."""
    size = fields.get("disk_size")
    if size is not None:
        if isinstance(size, bool) or not isinstance(size, (int, float)) or size < 1 or not float(size).is_integer():
            raise JobSpecError(f"{where}.disk_size: must be a whole number of GiB, got {size!r}")
        one["disk_size_gib"] = int(size)
    tier = fields.get("disk_tier")
    if tier is not None:
        if str(tier).lower() not in DISK_TIERS:
            raise JobSpecError(f"{where}.disk_tier: {tier!r} is not one of {', '.join(DISK_TIERS)}")
        one["disk_tier"] = str(tier).lower()


def _images(value: Any, one: dict[str, Any], where: str, notes: list[str]) -> list[dict[str, Any]]:
    """``image_id``: one image, or a mapping region → image (one choice per region) → the fields each
    choice gets (``image``, its ``cloud``, and the ``region`` of a per-region image)."""
    if value is None:
        return []
    pairs = ([(str(k), v) for k, v in value.items()] if isinstance(value, Mapping) else [(one.get("region"), value)])
    out = []
    for region, image in pairs:
        text = _text(image, f"{where}.{region}" if isinstance(value, Mapping) else where)
        if text.startswith("skypilot:"):  # SkyPilot's own image tags: each cloud's deep-learning image here
            notes.append(f"{where}: {text!r} is SkyPilot's own image; the nodes boot each cloud's deep-learning image "
                         "(give an image id of the cloud to choose another)")
            continue
        cloud = image_cloud(text)
        if cloud is None:
            raise JobSpecError(f"{where}: {text!r} is not {IMAGE_FORMS}")
        if one.get("cloud") not in (None, cloud):
            raise JobSpecError(f"{where}: {text!r} is an image of {cloud}, but the resources name {one['cloud']}")
        if one.get("region") not in (None, region):
            raise JobSpecError(f"{where}: an image for {region}, but the resources name region {one['region']}")
        if cloud == "aws" and region is None:
            raise JobSpecError(f"{where}: {text!r}: an AMI exists in one region; give the region (region: R or "
                               "infra: aws/R), or image_id as a mapping REGION: AMI")
        out.append({"image": text, "cloud": cloud, **({"region": region} if region else {})})
    return out


def _infra(fields: dict[str, Any], where: str) -> tuple[str | None, str | None, str | None]:
    """``infra: cloud[/region[/zone]]`` or ``cloud``, ``region``, ``zone`` (not both ways)."""
    parts: list[str | None] = [None, None, None]
    if fields.get("infra") is not None:
        if any(fields.get(k) is not None for k in ("cloud", "region", "zone")):
            raise JobSpecError(f"{where}: give infra or cloud/region/zone, not both")
        text = _text(fields["infra"], f"{where}.infra")
        pieces = [p for p in text.split("/")]
        if len(pieces) > 3 or not all(pieces):
            raise JobSpecError(f"{where}.infra: {text!r} is not CLOUD, CLOUD/REGION or CLOUD/REGION/ZONE")
        parts[:len(pieces)] = pieces
    else:
        for i, key in enumerate(("cloud", "region", "zone")):
            if fields.get(key) is not None:
                parts[i] = _text(fields[key], f"{where}.{key}")
    cloud, region, zone = parts
    if cloud is not None:
        lower = cloud.lower()
        if lower in ("k8s", "kubernetes", "ssh"):
            raise JobSpecError(f"{where}: {cloud!r}: geotrain does not launch on {cloud}; for your own machines use an "
                               "on-prem inventory (--onprem sites.yaml, cloud onprem)")
        cloud = _CLOUD_ALIASES.get(lower, lower)
    if zone is not None and cloud == "aws" and re.match(r"^[a-z]{2}-[a-z]+-\d[a-z]$", zone):
        raise JobSpecError(f"{where}: zone {zone!r}: AWS zone names differ between accounts; geotrain names AWS "
                           "zones by their AZ id (e.g. use1-az4): see `geotrain catalog list --cloud aws "
                           f"--region {region or zone[:-1]}`")
    return cloud, region, zone


def _accelerators(value: Any, where: str) -> list[tuple[str, int]]:
    """``A100``, ``A100:8``, ``{A100: 8, H100: 8}`` or ``[A100:8, H100:8]`` → (name, count) pairs."""
    if value is None:
        return []
    if isinstance(value, str):
        items = [value]
    elif isinstance(value, list):
        items = value
    elif isinstance(value, Mapping):
        # {A10:1, L4:1} (no space after ':') is YAML for keys "A10:1" and "L4:1" with no value
        items = [str(k) if v is None and ":" in str(k) else f"{k}:{1 if v is None else v}" for k, v in value.items()]
    else:
        raise JobSpecError(f"{where}: must be NAME[:COUNT], a list of them or a mapping NAME: COUNT")
    out = []
    for item in items:
        text = _text(item, where)
        name, _, count = text.partition(":")
        name = name.strip()
        try:
            number = float(count) if count else 1.0
        except ValueError:
            raise JobSpecError(f"{where}: {text!r}: the count after ':' must be a number") from None
        if not name or number < 1 or not number.is_integer():
            raise JobSpecError(f"{where}: {text!r}: give NAME:COUNT with a whole count >= 1 (fractional "
                               "accelerators are not supported)")
        out.append((name, int(number)))
    return out


def _amount(value: Any, where: str) -> tuple[float, bool]:
    """``8`` (exactly) or ``"8+"`` (at least)."""
    if isinstance(value, bool):
        raise JobSpecError(f"{where}: must be a number or NUMBER+, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value), False
    match = _AMOUNT.match(str(value))
    if match is None:
        raise JobSpecError(f"{where}: {value!r} is not a number or NUMBER+ (at least)")
    return float(match.group(1)), bool(match.group(2))


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise JobSpecError(f"{where}: must be a non-empty text, got {value!r}")
    return value.strip()

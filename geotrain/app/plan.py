"""``geotrain plan``: merge the spec file and the flags, plan, write the outputs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from geotrain.config import parse_job_spec
from geotrain.domain import Plan
from geotrain.errors import InputError, JobSpecError
from geotrain.planning.planfile import SCHEMA, advantage, finishes_at, plan_to_dict, save_plan, savings
from geotrain.planning.planner import PlanOptions, make_plan, plan_for_nodes
from geotrain.planning.taskwords import with_task_words
from geotrain.pricing.inventory import load_inventory
from geotrain.pricing.outliers import ROBUST_MARK
from geotrain.pricing.snapshot import REFRESH_HINT, STALE_AFTER_DAYS, SnapshotStore, age_days
from geotrain.providers.base import LOCAL_PROVIDER
from geotrain.solver.model import BACKENDS
from geotrain.solver.search import SearchProgress
from geotrain.specfile import Fields, load_yaml_mapping
from geotrain.taskenv import apply_envs, parse_envs
from geotrain.taskfile import foreign_format, is_task, task_to_job

PROVIDERS = (LOCAL_PROVIDER,)


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """What the user asked for. Every flag is None when not given, so that the spec file's value (and
    then the one default, in ``geotrain.domain``) applies."""

    spec: Path | None = None
    flags: dict[str, Any] = field(default_factory=dict)  # job fields
    sync_flags: dict[str, Any] = field(default_factory=dict)  # sync settings (strategy, local_steps, …)
    constraint_flags: dict[str, Any] = field(default_factory=dict)
    onprem: Path | None = None
    onprem_required: bool | None = None
    snapshot_id: str | None = None
    backend: str = "CBC"
    recovery_h: float = 0.25
    time_limit_s: float = 60.0
    nodes: str | None = None  # a mix chosen by hand: evaluate it instead of solving
    provider: str | None = None  # "local": predict for the local provider's nodes (this machine)
    rates_file: Path | None = None  # the user's compute rates (``geotrain.perf.rates``): the job's ``rates``
    egress_file: Path | None = None  # the user's egress rates (``geotrain.pricing.egress``): the job's ``egress``
    allow_below_target: bool = False  # a given mix (--nodes) that misses the goal is planned, with a warning
    raw_prices: bool = False  # plan on the listed prices, low listings not seen since included
    progress: Callable[[SearchProgress], None] | None = None  # hears of the search's solves (a progress display)
    envs: dict[str, str] = field(default_factory=dict)  # a task's envs and secrets (--env, --env-file, --secret)
    document: dict[str, Any] | None = None  # one task of a pipeline file (``spec``), already read


def job_mapping(request: PlanRequest) -> tuple[dict[str, Any], str, Path]:
    """The job spec as a mapping: the file's fields, overridden by the flags that were given."""
    if request.spec is not None:
        data = dict(request.document) if request.document is not None else dict(
            load_yaml_mapping(request.spec, JobSpecError))
        origin, base = str(request.spec), request.spec.parent
        if request.document is not None:
            origin = f"{request.spec} (task {data.get('name')})"
        foreign = foreign_format(data)
        if foreign is not None:
            raise JobSpecError(f"{origin}: {foreign}")
        if is_task(data):  # a SkyPilot task file (with geotrain's fields beside, if any)
            data = task_to_job(apply_envs(data, request.envs, origin), origin)
        elif request.envs:
            raise InputError("--env, --env-file and --secret set a task file's envs; this is a job spec (give the "
                             "commands' environment in its task section)")
    else:
        data, origin, base = {}, "command line", Path.cwd()
    data.update({k: v for k, v in request.flags.items() if v is not None})
    if request.rates_file is not None:
        data["rates"] = str(request.rates_file.resolve())
    data.setdefault("name", "job")
    given_sync = {k: v for k, v in request.sync_flags.items() if v is not None}
    if given_sync:
        sync = _section(data, "sync", origin)
        if "strategy" in given_sync:  # a flag overrides the file's strategy wherever the file says it
            data.pop("strategy", None)
        sync.update(given_sync)
        data["sync"] = sync
    constraints = _section(data, "constraints", origin)
    constraints.update({k: v for k, v in request.constraint_flags.items() if v is not None})
    if constraints:
        data["constraints"] = constraints
    if request.onprem is not None or request.onprem_required is not None:
        onprem = _section(data, "onprem", origin)
        if request.onprem is not None:
            onprem["inventory"] = str(request.onprem.resolve())
        if request.onprem_required is not None:
            onprem["required"] = request.onprem_required
        data["onprem"] = onprem
    if "workload" not in data:
        raise JobSpecError(f"{origin}: workload: required; give --workload or a spec file with one")
    return data, origin, base


def task_of(path: Path, envs: dict[str, str] | None = None):  # noqa: ANN201 - TaskRun | None
    """The commands of a task file (its setup, run, envs …), read as plan reads it, without planning."""
    data, origin, base = job_mapping(PlanRequest(spec=path, envs=dict(envs or {})))
    return parse_job_spec(Fields(data, origin=origin, error=JobSpecError), base_dir=base).task


def task_envs(env, env_file, secret) -> dict[str, str]:  # noqa: ANN001 - the flags' lists (None when not given)
    """``--env-file``, ``--env`` and ``--secret`` → the task's variables (``geotrain.taskenv``)."""
    return {**parse_envs(env or (), env_file or ()), **parse_envs(secret or (), flag="--secret")}


def _section(data: dict[str, Any], key: str, origin: str) -> dict[str, Any]:
    """A section of the spec as a dict to merge flags into (the parser checks its fields later)."""
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise JobSpecError(f"{origin}: {key}: must be a mapping of field: value, got {type(value).__name__}")
    return dict(value)


def run_plan(request: PlanRequest, *, output: Path | None = None, plot: Path | None = None) -> Plan:
    if request.backend not in BACKENDS:
        raise InputError(f"--backend: {request.backend!r} is not one of {', '.join(BACKENDS)}")
    if request.provider is not None and request.provider not in PROVIDERS:
        raise InputError(f"--provider: {request.provider!r} is not one of {', '.join(PROVIDERS)} "
                         "(without it, the plan is for the offers' own hardware)")
    data, origin, base = job_mapping(request)
    if request.egress_file is not None:
        data["egress"] = str(request.egress_file.resolve())
    job = parse_job_spec(Fields(data, origin=origin, error=JobSpecError), base_dir=base)
    store = SnapshotStore()
    snapshot = store.load(request.snapshot_id) if request.snapshot_id else store.current()
    inventory = load_inventory(job.onprem_inventory) if job.onprem_inventory else None
    options = PlanOptions(backend=request.backend, recovery_h=request.recovery_h, provider=request.provider,
                          time_limit_s=request.time_limit_s, progress=request.progress,
                          allow_below_target=request.allow_below_target, raw_prices=request.raw_prices)
    if request.nodes:
        plan = plan_for_nodes(job, snapshot, request.nodes, inventory=inventory, options=options)
    else:
        plan = make_plan(job, snapshot, inventory=inventory, options=options)
    plan = with_task_words(plan, snapshot)  # what a task file's own choices mean, in the plan's words
    if output is not None:
        save_plan(plan, output)
    if plot is not None:
        from geotrain.planning.plot import draw_frontier

        draw_frontier(plan, plot)
    return plan


def pipeline_of(path: Path) -> list[tuple[str, dict[str, Any]]] | None:
    """A SkyPilot pipeline file's tasks (name, task) in order; None for a file of one document."""
    from geotrain.specfile import load_yaml_documents
    from geotrain.taskfile import pipeline_tasks

    if path.suffix not in (".yaml", ".yml") or not path.is_file():
        return None
    docs = load_yaml_documents(path, JobSpecError)
    return pipeline_tasks(docs, str(path)) if len(docs) > 1 else None


def run_pipeline(request: PlanRequest, tasks: list[tuple[str, dict[str, Any]]]) -> list[Plan]:
    """Each task of a pipeline planned as a task file of its own, in order (SkyPilot runs them one after
    the other, each on its own resources)."""
    return [run_plan(replace(request, document=task)) for _, task in tasks]


def plan_record(plan: Plan) -> dict[str, Any]:
    """The plan as ``--json`` prints it: the plan file's JSON, without its ``schema`` field (the
    document's printer adds it: ``geotrain.plan.v1``, :data:`SCHEMA`)."""
    return {k: v for k, v in plan_to_dict(plan).items() if k != "schema"}


__all__ = ["PROVIDERS", "SCHEMA", "PlanRequest", "SearchProgress", "advantage", "finishes_at", "pipeline_of",
           "plan_record", "run_pipeline", "run_plan", "savings", "task_envs", "task_of"]


def prices_line(plan: Plan) -> str:
    """How old the planned offers' prices are, and how many are planned at their type's price elsewhere:
    the plan's first line after its title."""
    bought = [i.offer for i in plan.items if i.offer.market.value != "owned"]
    if not bought:
        return "none bought: every node is the user's own"
    newest, oldest = max(o.observed_at for o in bought), min(o.observed_at for o in bought)
    days = age_days(newest)
    span = f"{oldest:%Y-%m-%d}" + (f" to {newest:%Y-%m-%d}" if newest.date() != oldest.date() else "")
    words = f"observed {span}, the newest {days:.0f} days ago"
    if days > STALE_AFTER_DAYS:
        words += f" ({REFRESH_HINT})"
    robust = sum(i.count for i in plan.items if ROBUST_MARK in i.offer.source)
    if robust:
        words += (f"; {robust} node{'s' if robust > 1 else ''} at {'their' if robust > 1 else 'its'} type's price "
                  "elsewhere, listed far lower and not seen since (--raw-prices: as listed)")
    return words

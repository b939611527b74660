"""What ``geotrain plan`` does: merge the spec file and the flags, plan, write the outputs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from geotrain.config import parse_job_spec
from geotrain.domain import Plan
from geotrain.errors import JobSpecError
from geotrain.planning.planfile import save_plan
from geotrain.planning.planner import PlanOptions, make_plan, plan_for_nodes
from geotrain.pricing.inventory import load_inventory
from geotrain.pricing.snapshot import SnapshotStore
from geotrain.specfile import Fields, load_yaml_mapping


@dataclass(frozen=True, slots=True)
class PlanRequest:
    spec: Path | None = None
    flags: dict[str, Any] = field(default_factory=dict)  # job fields; None = not given
    constraint_flags: dict[str, Any] = field(default_factory=dict)
    onprem: Path | None = None
    onprem_required: bool | None = None
    snapshot_id: str | None = None
    backend: str = "CBC"
    target_batch_size: int = 32768
    local_steps: int = 32
    accumulation_steps: int = 16
    precision: str = "fp16"
    recovery_h: float = 0.25
    time_limit_s: float = 60.0
    nodes: str | None = None  # a mix chosen by hand: evaluate it instead of solving


def job_mapping(request: PlanRequest) -> tuple[dict[str, Any], str, Path]:
    """The job spec as a mapping: the file's fields, overridden by the flags that were given."""
    if request.spec is not None:
        data = dict(load_yaml_mapping(request.spec, JobSpecError))
        origin, base = str(request.spec), request.spec.parent
    else:
        data, origin, base = {}, "command line", Path.cwd()
    data.update({k: v for k, v in request.flags.items() if v is not None})
    data.setdefault("name", "job")
    constraints = dict(data.get("constraints") or {})
    constraints.update({k: v for k, v in request.constraint_flags.items() if v is not None})
    if constraints:
        data["constraints"] = constraints
    if request.onprem is not None or request.onprem_required is not None:
        onprem = dict(data.get("onprem") or {})
        if request.onprem is not None:
            onprem["inventory"] = str(request.onprem.resolve())
        if request.onprem_required is not None:
            onprem["required"] = request.onprem_required
        data["onprem"] = onprem
    if "workload" not in data:
        raise JobSpecError(f"{origin}: workload: required; give --workload or a spec file with one")
    return data, origin, base


def run_plan(request: PlanRequest, *, output: Path | None = None, plot: Path | None = None) -> Plan:
    data, origin, base = job_mapping(request)
    job = parse_job_spec(Fields(data, origin=origin, error=JobSpecError), base_dir=base)
    store = SnapshotStore()
    snapshot = store.load(request.snapshot_id) if request.snapshot_id else store.current()
    inventory = load_inventory(job.onprem_inventory) if job.onprem_inventory else None
    options = PlanOptions(
        backend=request.backend, recovery_h=request.recovery_h, target_batch_size=request.target_batch_size,
        local_steps=request.local_steps, accumulation_steps=request.accumulation_steps, precision=request.precision,
        time_limit_s=request.time_limit_s,
    )
    if request.nodes:
        plan = plan_for_nodes(job, snapshot, request.nodes, inventory=inventory, options=options)
    else:
        plan = make_plan(job, snapshot, inventory=inventory, options=options)
    if output is not None:
        save_plan(plan, output)
    if plot is not None:
        from geotrain.planning.plot import draw_frontier

        draw_frontier(plan, plot)
    return plan

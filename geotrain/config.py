"""Job spec file (YAML) → validated :class:`~geotrain.domain.JobSpec`.

A job spec says what to train, what to optimise and within which limits::

    name: convnext-spot                  # required
    workload: convnext-large             # required
    objective: min_cost                  # min_cost | max_throughput | min_cost_per_sample | min_cost_by_deadline
    strategy: hivemind                   # hivemind | allreduce | local-sgd | asgd-ga   (default hivemind)
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
      max_zone_share: 0.5
      max_spot_share: 1.0
      spot_only: false
    onprem:
      inventory: sites.yaml              # relative to this file
      required: false                    # true: use every on-prem machine
    dataset:                             # where the training data lives (nodes stream it)
      cloud: gcp
      region: us-central1
      size_gib: 150
      samples: 1281167                   # samples in the dataset
    checkpoint_url: s3://my-bucket/convnext-spot

Every problem raises :class:`~geotrain.errors.JobSpecError` naming the field, e.g.
``job.yaml: constraints.max_regions: must be a whole number >= 1, got 0``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from geotrain.domain import Constraints, Continent, DatasetSpec, JobSpec, Objective, SyncStrategyName
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
    objective = Objective(fields.choice("objective", [o.value for o in Objective]))
    strategy = SyncStrategyName(
        fields.choice("strategy", [s.value for s in SyncStrategyName], SyncStrategyName.HIVEMIND.value)
    )
    target = fields.number("target_samples_per_s", None, above=0)
    budget = fields.number("budget_usd_per_hour", None, above=0)
    total = fields.whole("total_samples", None, minimum=1)
    deadline = fields.number("deadline_h", None, above=0)
    given = {"target_samples_per_s": target, "budget_usd_per_hour": budget,
             "total_samples": total, "deadline_h": deadline}
    for needed in _NEEDS[objective]:
        if given[needed] is None:
            raise fields.fail(needed, f"required when objective is {objective.value}")

    constraints = _constraints(fields.section("constraints"))
    inventory, onprem_required = _onprem(fields.section("onprem"), base_dir)
    if onprem_required:
        constraints = replace(constraints, onprem_required=True)
    dataset = _dataset(fields.section("dataset"))
    checkpoint_url = fields.text("checkpoint_url", None)
    fields.finish()
    return JobSpec(
        name=name, workload=workload, objective=objective, strategy=strategy,
        target_samples_per_s=target, budget_usd_per_hour=budget, total_samples=total,
        deadline_h=deadline, constraints=constraints, onprem_inventory=inventory,
        dataset=dataset, checkpoint_url=checkpoint_url,
    )


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
        max_zone_share=fields.number("max_zone_share", None, above=0, maximum=1),
        max_spot_share=fields.number("max_spot_share", None, minimum=0, maximum=1),
        spot_only=fields.flag("spot_only", False),
    )
    fields.finish()
    return out


def _onprem(fields: Fields | None, base_dir: Path) -> tuple[str | None, bool]:
    if fields is None:
        return None, False
    inventory = fields.text("inventory")
    required = fields.flag("required", False)
    fields.finish()
    path = Path(inventory).expanduser()
    if not path.is_absolute():
        path = base_dir / path
    return str(path), required


def _dataset(fields: Fields | None) -> DatasetSpec | None:
    if fields is None:
        return None
    out = DatasetSpec(
        cloud=fields.text("cloud").lower(),
        region=fields.text("region"),
        size_gib=fields.number("size_gib", above=0),
        samples=fields.whole("samples", minimum=1),
    )
    fields.finish()
    return out


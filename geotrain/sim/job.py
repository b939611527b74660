"""The job a replay runs: its work, its deadline, its gang, and what a restart costs.

A replay job file (YAML)::

    name: resnet50-48h
    workload: resnet50          # the perf model's workload (geotrain catalog of workloads)
    strategy: allreduce         # and the sync settings, as in a job spec (optional)
    nodes: 1                    # the gang: this many nodes train together, never fewer
    # or  target_samples_per_s: 5000   the gang is then the fewest nodes of the traces' first zone that reach it
    work:
      gpu_hours: 48             # or samples: 2.0e8
    deadline_h: 72              # from the replay's start (--deadline overrides it)
    checkpoint_every_min: 30    # work since the last checkpoint is lost when a node is taken without notice
    checkpoint_gb: 0.2          # moved (and billed as egress) when the next gang starts in another region
    restart_min: 5              # from a (re)start of the gang to training again
    notice_s: 0                 # warning before a preemption; >= checkpoint_write_s saves the work
    checkpoint_write_s: 30

``work.gpu_hours`` counts the gang's accelerator-hours at its rate in one zone: a 1-node V100 job of
48 GPU-hours is the samples one p3.2xlarge trains in 48 hours.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from geotrain.config import parse_sync
from geotrain.domain import SyncSettings
from geotrain.errors import InputError
from geotrain.specfile import Fields, load_yaml_mapping


@dataclass(frozen=True, slots=True)
class SimJob:
    name: str
    workload: str
    nodes: int  # the gang
    deadline_h: float
    work_samples: float | None = None  # exactly one of work_samples and work_gpu_hours
    work_gpu_hours: float | None = None
    sync: SyncSettings = field(default_factory=SyncSettings)
    checkpoint_every_s: float = 1800.0
    checkpoint_gb: float = 0.0
    restart_s: float = 300.0
    notice_s: float = 0.0
    checkpoint_write_s: float = 30.0
    target_samples_per_s: float | None = None  # given instead of a gang: the world sizes the gang to reach it

    def __post_init__(self) -> None:
        if (self.work_samples is None) == (self.work_gpu_hours is None):
            raise InputError(f"job {self.name!r}: give its work as samples or as gpu_hours (one of them)")
        if self.nodes < 1 or self.deadline_h <= 0:
            raise InputError(f"job {self.name!r}: nodes must be >= 1 and deadline_h > 0")

    @property
    def notice_saves_work(self) -> bool:
        return self.notice_s >= self.checkpoint_write_s

    def with_deadline(self, deadline_h: float | None) -> SimJob:
        return self if deadline_h is None else replace(self, deadline_h=deadline_h)


def load_sim_job(path: str | Path) -> SimJob:
    path = Path(path)
    fields = Fields(load_yaml_mapping(path, InputError), origin=str(path), error=InputError)
    name = fields.text("name", path.stem)
    workload = fields.text("workload")
    sync = parse_sync(fields)
    nodes = fields.whole("nodes", None, minimum=1, maximum=4096)
    target = fields.number("target_samples_per_s", None, above=0)
    if nodes is not None and target is not None:
        raise fields.fail("target_samples_per_s", "give nodes (the gang) or target_samples_per_s, not both")
    work = fields.section("work")
    if work is None:
        raise fields.fail("work", "required: samples: N or gpu_hours: H")
    samples = work.number("samples", None, above=0)
    gpu_hours = work.number("gpu_hours", None, above=0)
    if (samples is None) == (gpu_hours is None):
        raise work.fail("samples", "give one of samples and gpu_hours")
    work.finish()
    deadline = fields.number("deadline_h", above=0, maximum=24 * 365)
    job = SimJob(
        name=name, workload=workload, nodes=int(nodes or 1), target_samples_per_s=target, deadline_h=float(deadline), work_samples=samples,
        work_gpu_hours=gpu_hours, sync=sync,
        checkpoint_every_s=60 * fields.number("checkpoint_every_min", 30.0, above=0, maximum=1e6),
        checkpoint_gb=fields.number("checkpoint_gb", 0.0, minimum=0, maximum=1e5),
        restart_s=60 * fields.number("restart_min", 5.0, minimum=0, maximum=1e5),
        notice_s=fields.number("notice_s", 0.0, minimum=0, maximum=3600),
        checkpoint_write_s=fields.number("checkpoint_write_s", 30.0, minimum=0, maximum=1e5),
    )
    fields.finish()
    return job

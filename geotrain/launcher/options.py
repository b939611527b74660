"""What a launch is asked to do (``LaunchOptions``), what it shows while running (``Status``) and
how it ended (``RunOutcome``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from geotrain.domain import Plan
from geotrain.launcher.preemptions import PreemptionSchedule, schedule_from_dict


@dataclass(frozen=True, slots=True)
class LaunchOptions:
    workload: str = "tiny-cnn"
    command: tuple[str, ...] = ()  # a user's torchrun-style script instead of a built-in workload
    steps: int = 200
    checkpoint_url: str | None = None  # default: GEOTRAIN_HOME/runs/<run>/checkpoints
    checkpoint_location: str | None = None  # "cloud/region" of the checkpoint storage (for its traffic cost)
    checkpoint_every: int = 20
    deterministic: bool = False
    sync: str | None = None  # allreduce | local-sgd; default from the plan's strategy
    local_steps: int = 8
    micro_batches: int = 8
    lr: float = 0.05
    momentum: float = 0.9
    seed: int = 0
    progress_every: int = 5
    max_restarts: int = 3
    block_s: float = 600.0
    replan: bool = True
    budget_usd: float | None = None  # for the whole run
    preemptions: PreemptionSchedule = field(default_factory=PreemptionSchedule)
    collective_timeout_s: float = 60.0
    poll_s: float = 0.1

    def to_dict(self) -> dict:
        data = asdict(self)
        data["command"] = list(self.command)
        data["preemptions"] = self.preemptions.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict) -> LaunchOptions:
        data = dict(data)
        data["command"] = tuple(data.get("command") or ())
        data["preemptions"] = schedule_from_dict(data.get("preemptions") or {})
        return cls(**data)

    def sync_for(self, plan: Plan) -> str:
        if self.sync:
            return self.sync
        return "allreduce" if plan.job.strategy.value == "allreduce" else "local-sgd"


@dataclass
class Status:
    """What the live display shows; refreshed by the loop."""

    run_id: str
    generation: int = 0
    step: int = 0
    target_steps: int = 0
    samples: int = 0
    samples_per_s: float | None = None
    loss: float | None = None
    nodes_by_region: dict[str, int] = field(default_factory=dict)
    usd_so_far: float = 0.0
    preemptions: int = 0
    restarts: int = 0
    events: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RunOutcome:
    run_id: str
    status: str  # completed | stopped | failed
    reason: str
    steps: int
    generations: int
    preemptions: int
    restarts: int
    usd: float
    wall_s: float
    checkpoint_url: str

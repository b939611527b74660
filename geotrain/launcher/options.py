"""What a launch is asked to do (``LaunchOptions``), what it shows while running (``Status``) and
how it ended (``RunOutcome``).

What trains comes from the plan (its workload and sync settings, see ``geotrain.launcher.training``);
the options here only say how to run it, and what to train instead where the user asks
(``train_workload``, ``sync``: recorded as substitutions).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from geotrain.launcher.preemptions import PreemptionSchedule, schedule_from_dict


@dataclass(frozen=True, slots=True)
class LaunchOptions:
    train_workload: str | None = None  # a built-in stand-in instead of the plan's workload (a substitution)
    sync: str | None = None  # a runtime strategy instead of the plan's (a substitution)
    command: tuple[str, ...] = ()  # a user's torchrun-style script instead of the built-in runtime
    data: str | None = None  # the built-in runtime's data: an image folder or token file (geotrain.train.userdata)
    steps: int = 200
    checkpoint_url: str | None = None  # default: GEOTRAIN_HOME/runs/<run>/checkpoints
    checkpoint_location: str | None = None  # "cloud/region" of the checkpoint storage (for its traffic cost)
    checkpoint_every: int = 20
    deterministic: bool = False
    lr: float = 0.05
    momentum: float = 0.9
    seed: int = 0
    progress_every: int = 5
    max_restarts: int = 3
    block_s: float = 600.0
    replan: bool = True
    replan_time_limit_s: float = 10.0  # each re-plan's search (survivors idle meanwhile); its best mix when cut short
    max_spend_usd: float | None = None  # for the whole run
    preemptions: PreemptionSchedule = field(default_factory=PreemptionSchedule)
    collective_timeout_s: float = 60.0
    poll_s: float = 0.1
    launch_attempts: int = 6  # throttled launches: tries per node before giving up
    backoff_s: float = 0.5  # first pause after a throttled launch (doubles each time)
    control_address: str | None = None  # where remote nodes reach the launcher (default: its outbound address)
    instance_roles: tuple[str, ...] = ()  # identities the cloud nodes get (geotrain.providers.identity)
    images: tuple[str, ...] = ()  # boot images instead of the task's or the providers' (geotrain.providers.bootimage)
    name: str | None = None  # the run's name (SkyPilot's cluster name, ``launch -c``): other commands take it for the id

    def to_dict(self) -> dict:
        data = asdict(self)
        data["command"] = list(self.command)
        data["instance_roles"] = list(self.instance_roles)
        data["images"] = list(self.images)
        data["preemptions"] = self.preemptions.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict) -> LaunchOptions:
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in data.items() if k in known}  # a ledger of an older geotrain may hold more
        data["command"] = tuple(data.get("command") or ())
        data["instance_roles"] = tuple(data.get("instance_roles") or ())
        data["images"] = tuple(data.get("images") or ())
        data["preemptions"] = schedule_from_dict(data.get("preemptions") or {})
        return cls(**data)


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
    usd: float  # geotrain.billing.run_cost at the end: what status and cost-report show
    wall_s: float
    checkpoint_url: str
    workload: str = ""
    substitutions: tuple[str, ...] = ()

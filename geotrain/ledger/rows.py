"""The ledger's rows as typed, frozen records, and the kinds of event a run can have."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from geotrain.domain import Continent, Location, OfferId


class EventKind(StrEnum):
    """What can happen in a run, in the order a run usually meets them."""

    RUN_STARTED = "run_started"
    SUBSTITUTED = "substituted"  # the user asked to train something other than the plan
    LAUNCHED = "launched"
    LAUNCH_FAILED = "launch_failed"  # capacity, quota, boot failure: the scope is blocked
    THROTTLED = "throttled"  # the provider asked us to slow down; retried after a pause
    RECONCILED = "reconciled"  # a launch whose outcome was unknown, settled by listing the run's nodes
    BOOT_FAILED = "boot_failed"  # a node died after launch, before its worker started
    BLOCKED = "blocked"
    FELL_BACK = "fell_back"  # a blocked zone's missing nodes moved to the plan's fallback for it
    REPLANNED = "replanned"
    REPLAN_FAILED = "replan_failed"
    RELEASED = "released"  # a live node the re-planned mix does not want: terminated
    WAITING = "waiting"  # no node up, none to be had: a job with a deadline waits for spot while its slack allows
    GENERATION_STARTED = "generation_started"
    SYNC_ROUNDS = "sync_rounds"  # a worker's sync rounds since its last report: count, seconds, compute seconds
    CHECKPOINT_RESTORED = "checkpoint_restored"
    CHECKPOINT_WRITE_STARTED = "checkpoint_write_started"
    CHECKPOINT_SAVED = "checkpoint_saved"
    NOTICE = "notice"
    PREEMPTION_INJECTED = "preemption_injected"
    PREEMPTION_FAILED = "preemption_failed"
    PREEMPTED = "preempted"
    PEER_LEFT = "peer_left"  # an elastic strategy's peer was lost; the others train on in its generation
    PEER_JOINED = "peer_joined"  # a replacement joined a running generation with its peers' state
    WORKER_FAILED = "worker_failed"
    SPEND_LIMIT = "spend_limit"  # the run reached --max-spend-usd
    TRAINING_FINISHED = "training_finished"
    RESUMED = "resumed"
    COMPLETED = "completed"
    STOPPED = "stopped"
    FAILED = "failed"


class RunStatus(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    STOPPED = "stopped"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class RunRow:
    run_id: str
    plan_id: str
    plan_json: str  # the plan file's JSON (read it with ``geotrain.planning.planfile.plan_from_dict``)
    created_at: str
    status: str
    ended_at: str | None
    reason: str | None
    workload: str  # what was trained: the plan's workload, a stand-in the user asked for, or a command
    provider: str
    checkpoint_url: str
    launcher_pid: int | None
    target_steps: int | None
    options_json: str
    substitutions_json: str = "[]"

    @property
    def options(self) -> dict[str, Any]:
        return json.loads(self.options_json or "{}")

    @property
    def substitutions(self) -> tuple[str, ...]:
        """What the run trained instead of what was planned, in words (empty: exactly the plan)."""
        return tuple(json.loads(self.substitutions_json or "[]"))


@dataclass(frozen=True, slots=True)
class NodeRow:
    node_id: str
    run_id: str
    request_id: str
    offer_id: str
    offer_json: str
    cloud: str
    region: str
    zone: str
    market: str
    price_usd_per_hour: float
    launched_at: float
    ended_at: float | None
    end_reason: str | None

    @property
    def offer_key(self) -> OfferId:
        return OfferId.parse(self.offer_id)

    @property
    def location(self) -> Location:
        return Location(self.cloud, self.region, self.zone, Continent(json.loads(self.offer_json)["continent"]))


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    run_id: str
    at: float
    kind: str  # an EventKind value
    node_id: str | None
    detail: dict


@dataclass(frozen=True, slots=True)
class ProgressRow:
    at: float
    generation: int
    step: int
    samples: int
    loss: float | None
    samples_per_s: float | None
    world_size: int | None


@dataclass(frozen=True, slots=True)
class LinkBytes:
    """Bytes one node sent to another over the whole run (summed over generations)."""

    src_node: str
    dst_node: str
    link_class: str
    bytes: int


@dataclass(frozen=True, slots=True)
class PricePoint:
    at: float
    price_usd_per_hour: float
    source: str

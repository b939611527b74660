"""The replay: a job on a market, tick by tick, under one policy; every policy is billed the same way.

At each tick boundary, in this order:

1. **the market moves**: in each zone the run's spot nodes beyond what the trace says can be had are
   preempted, newest first. If a node of the training gang is taken, the work since the last
   checkpoint is lost (unless the job's notice is long enough to write a checkpoint);
2. **the policy acts**: it launches nodes (a spot launch fails with ``CapacityError`` when the zone
   has no node left to give at this tick; on-demand always succeeds) and terminates nodes. A change it
   makes to the training nodes writes a checkpoint first: nothing is lost;
3. **the tick runs**: the run's nodes train together when there are at least the job's gang of them,
   at the perf model's rate for that mix. A gang that differs from the last one restarts: it trains
   only after the job's restart time, and it first fetches the checkpoint into every region it lacks
   it (billed as egress). Checkpoints are written every ``checkpoint_every_s`` of training;
4. **billing**: every node is billed for the tick at that tick's price of its offer (spot prices
   move with the trace; on-demand is fixed), plus the perf model's training traffic while it trains.

The job ends the moment its samples are trained (its last tick is billed pro rata). After the trace
ends, no spot node is known to be available: a run still going finishes on on-demand nodes or not at
all. A replay is deterministic: the same world, policy and seed give the same outcome.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from geotrain.domain import Market
from geotrain.errors import CapacityError
from geotrain.sim.world import Placement, World, placement_of

HOURS = 3600.0


@dataclass
class SimNode:
    node_id: str
    zone: int
    market: str
    launched_s: float
    request_id: str = ""
    ended_s: float | None = None
    end_reason: str | None = None

    @property
    def running(self) -> bool:
        return self.ended_s is None


@dataclass(frozen=True, slots=True)
class Timeline:
    hours: np.ndarray  # end of each tick, hours from the job's start
    progress: np.ndarray  # share of the work trained (at risk included)
    usd: np.ndarray  # spent so far
    nodes: np.ndarray  # nodes held during the tick
    on_demand: np.ndarray  # of which on-demand


@dataclass(frozen=True, slots=True)
class Outcome:
    policy: str
    usd: float
    compute_usd: float
    traffic_usd: float  # training traffic between zones
    checkpoint_usd: float  # moving checkpoints between regions
    finished: bool
    completion_h: float | None
    deadline_h: float
    preemptions: int  # nodes taken by the market
    restarts: int  # gangs started after the first
    spot_node_h: float
    on_demand_node_h: float
    run_s: float  # how long the replay took here
    timeline: Timeline | None = None
    notes: tuple[str, ...] = ()

    @property
    def deadline_met(self) -> bool:
        return self.finished and self.completion_h is not None and self.completion_h <= self.deadline_h + 1e-9


class Policy(Protocol):
    name: str

    def start(self, replay: Replay) -> None: ...

    def act(self, replay: Replay) -> None: ...


@dataclass
class Replay:
    """One policy's run over a world (see the module docstring). Policies read the public state
    (``tick``, ``hours_left``, ``samples_left``, the running nodes, prices) and act through
    :meth:`launch` and :meth:`terminate`."""

    world: World
    start_tick: int = 0  # ticks before it are the market's past: a policy may read them, not use them
    record: bool = True
    nodes: dict[str, SimNode] = field(default_factory=dict)
    tick: int = 0
    progress: float = 0.0
    committed: float = 0.0
    since_commit_s: float = 0.0
    restart_left_s: float = 0.0
    gang_ids: frozenset[str] = frozenset()
    checkpoint_zone: int | None = None
    compute_usd: float = 0.0
    traffic_usd: float = 0.0
    checkpoint_usd: float = 0.0
    preemptions: int = 0
    restarts: int = -1
    spot_node_h: float = 0.0
    on_demand_node_h: float = 0.0
    done_h: float | None = None
    trained: set = field(default_factory=set)  # every mix that trained (the oracle may choose it too)
    _counter: int = 0
    _changed_by_policy: bool = False
    _up: dict[str, SimNode] = field(default_factory=dict)  # the running nodes, in launch order

    # -- what a policy reads ---------------------------------------------------------------------

    @property
    def job(self):  # noqa: ANN201
        return self.world.job

    @property
    def tick_s(self) -> float:
        return self.world.market.tick_s

    @property
    def now_s(self) -> float:
        """Seconds since the job's start (tick boundaries)."""
        return (self.tick - self.start_tick) * self.tick_s

    @property
    def hours_left(self) -> float:
        return self.job.deadline_h - self.now_s / HOURS

    @property
    def samples_left(self) -> float:
        return max(0.0, self.world.work_samples - self.progress)

    def running(self) -> list[SimNode]:
        return list(self._up.values())

    def running_placement(self) -> Placement:
        return placement_of([(n.zone, n.market) for n in self.running()])

    def can_launch(self, zone: int, market: str, count: int = 1) -> bool:
        if market != Market.SPOT:
            return True
        held = sum(1 for n in self.running() if n.zone == zone and n.market == Market.SPOT)
        return held + count <= self.world.capacity(zone, self.tick)

    # -- what a policy does ----------------------------------------------------------------------

    def launch(self, zone: int, market: str, request_id: str = "") -> SimNode:
        if not self.can_launch(zone, market):
            scope = self.world.spot[zone].location.zone_scope
            raise CapacityError(f"no spot capacity for {self.world.spot[zone].shape.instance_type} in {scope}",
                                scope=scope)
        self._counter += 1
        node = SimNode(f"sim-{self._counter}", zone, str(market), self.now_s, request_id)
        self.nodes[node.node_id] = node
        self._up[node.node_id] = node
        self._changed_by_policy = True
        return node

    def launch_gang(self, zone: int, market: str) -> bool:
        """All of the job's gang in one zone, or nothing (what a launched part got is given back)."""
        if not self.can_launch(zone, market, self.job.nodes):
            return False
        for _ in range(self.job.nodes):
            self.launch(zone, market)
        return True

    def terminate(self, node_id: str, reason: str = "terminated") -> None:
        node = self.nodes[node_id]
        if node.running:
            node.ended_s, node.end_reason = self.now_s, reason
            self._up.pop(node_id, None)
            self._changed_by_policy = True

    def terminate_all(self, reason: str = "terminated") -> None:
        for node in self.running():
            self.terminate(node.node_id, reason)

    # -- the loop ----------------------------------------------------------------------------------

    def run(self, policy: Policy, *, name: str | None = None) -> Outcome:
        clock = time.perf_counter()
        world = self.world
        self.tick = self.start_tick
        od_rate = max(world.rate(world.gang(z, Market.ON_DEMAND))[0]
                      for z in range(world.zones) if world.on_demand[z] is not None)
        spare = math.ceil((world.work_samples / od_rate + 2 * self.job.restart_s) / self.tick_s) + 2
        last = max(world.market.ticks, self.start_tick + math.ceil(self.job.deadline_h * HOURS / self.tick_s)) + spare
        rows: list[tuple[float, float, float, int, int]] = []
        policy.start(self)
        while self.tick < last and self.done_h is None:
            self._market_moves()
            self._changed_by_policy = False
            policy.act(self)
            self._run_tick()
            if self.record:
                held = self.running()
                rows.append((self.now_s / HOURS + self.tick_s / HOURS if self.done_h is None else self.done_h,
                             min(1.0, self.progress / world.work_samples), self.usd,
                             len(held), sum(1 for n in held if n.market != Market.SPOT)))
            self.tick += 1
        self.terminate_all("finished" if self.done_h is not None else "out of time")
        timeline = None
        if self.record and rows:
            cols = list(zip(*rows, strict=True))
            timeline = Timeline(*(np.asarray(c) for c in cols))
        return Outcome(
            name or policy.name, self.usd, self.compute_usd, self.traffic_usd, self.checkpoint_usd,
            self.done_h is not None, self.done_h, self.job.deadline_h, self.preemptions, max(0, self.restarts),
            self.spot_node_h, self.on_demand_node_h, time.perf_counter() - clock, timeline,
            tuple(getattr(policy, "notes", ())))

    @property
    def usd(self) -> float:
        return self.compute_usd + self.traffic_usd + self.checkpoint_usd

    def _market_moves(self) -> None:
        lost_gang = False
        by_zone: dict[int, list[SimNode]] = {}
        for node in self.running():
            if node.market == Market.SPOT:
                by_zone.setdefault(node.zone, []).append(node)
        for zone, held in by_zone.items():
            excess = len(held) - self.world.capacity(zone, self.tick)
            if excess <= 0:
                continue
            for node in sorted(held, key=lambda n: (n.launched_s, n.node_id), reverse=True)[:excess]:
                node.ended_s, node.end_reason = self.now_s, "preempted"
                self._up.pop(node.node_id, None)
                self.preemptions += 1
                lost_gang = lost_gang or node.node_id in self.gang_ids
        if lost_gang and not self.job.notice_saves_work:
            self.progress = self.committed
            self.since_commit_s = 0.0
        elif lost_gang:
            self.committed = self.progress

    def _run_tick(self) -> None:
        world, tick_s = self.world, self.tick_s
        held = self.running()
        ids = frozenset(n.node_id for n in held)
        training = len(held) >= self.job.nodes
        if ids != self.gang_ids:
            if self._changed_by_policy or not self.gang_ids - ids:
                self.committed = self.progress  # a change the run makes: checkpointed first
                self.since_commit_s = 0.0
            self.gang_ids = ids if training else frozenset()
            if training:
                self.restarts += 1
                self.restart_left_s = self.job.restart_s
                zones = {n.zone for n in held}
                self.checkpoint_usd += world.checkpoint_usd(self.checkpoint_zone, zones)
        used_s = tick_s
        if training:
            placement = placement_of([(n.zone, n.market) for n in held])
            self.trained.add(placement)
            rate, traffic_usd_per_hour = world.rate(placement)
            wait = min(tick_s, self.restart_left_s)
            self.restart_left_s -= wait
            train_s = tick_s - wait
            need_s = self.samples_left / rate if rate > 0 else math.inf
            if need_s <= train_s:
                train_s = need_s
                used_s = wait + need_s
                self.done_h = (self.now_s + used_s) / HOURS
            self.progress += rate * train_s
            if self.done_h is not None:
                self.progress = world.work_samples
            self._commit(rate, train_s)
            self.traffic_usd += traffic_usd_per_hour * train_s / HOURS
            head = min(held, key=lambda n: (world.spot[n.zone].location.region_scope, n.zone, n.node_id))
            if train_s > 0:
                self.checkpoint_zone = head.zone
        for node in held:
            price = world.price(node.zone, node.market, min(self.tick, world.market.ticks - 1))
            self.compute_usd += price * used_s / HOURS
            if node.market == Market.SPOT:
                self.spot_node_h += used_s / HOURS
            else:
                self.on_demand_node_h += used_s / HOURS

    def _commit(self, rate: float, train_s: float) -> None:
        interval = self.job.checkpoint_every_s
        total = self.since_commit_s + train_s
        if total >= interval:
            rest = total % interval
            self.committed = self.progress - rate * rest
            self.since_commit_s = rest
        else:
            self.since_commit_s = total

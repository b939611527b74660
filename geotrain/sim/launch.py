"""geotrain's own policy in a replay: the launcher's provisioning (``geotrain.launcher.provisioning``:
plan, launch what is missing, block a zone that fails or preempts, fall back, re-plan with the
survivors kept, wait for spot while a deadline's slack allows) driven over a simulated provider.

Nothing here decides where nodes go. The replay supplies what a launch would have:

- :class:`SimProvider`, the ``Provider`` contract over the replay's nodes (a spot launch fails with
  ``CapacityError`` where the market has no node left at this tick);
- :class:`SimLaunch`, the ``provisioning.Launch`` state: a real ledger (SQLite, in a directory of the
  replay's own), the replay's clock, a price snapshot of the tick (the trace's spot prices, each
  zone's interruption rate and availability as the market's past shows them, never its future), the
  capacity model of that past, and what is left of the job by its deadline.

Each tick the policy does what the launcher's loop does: while the gang trains as wanted, it watches
the deadline (``replanning.keep_the_deadline``, with the rate the gang trains at); when something
changed, or with no node up, it provisions (``provision``: record the nodes the market took, mend,
launch the difference; re-plan when nothing is wanted). The job's gang is the plan's node count
(``Constraints.node_count``); the mix may span zones and regions where the perf model says it pays.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from geotrain.domain import Constraints, JobSpec, Market, Objective
from geotrain.errors import GeotrainError, NotFoundError, ProviderError
from geotrain.launcher.deadline import Deadline, MarketRule
from geotrain.launcher.options import LaunchOptions
from geotrain.launcher.provisioning import provision
from geotrain.launcher.replanning import keep_the_deadline
from geotrain.ledger import Ledger
from geotrain.planning.planfile import plan_to_dict
from geotrain.planning.planner import PlanOptions, make_plan
from geotrain.pricing.records import offer_record
from geotrain.pricing.schema import COLUMN_NAMES, parse_offers
from geotrain.pricing.snapshot import PriceSnapshot
from geotrain.providers.base import Capabilities, LaunchRequest, NodeInfo, NodeState
from geotrain.sim.engine import Replay
from geotrain.sim.world import observed_capacity


class SimClock:
    def __init__(self, replay: Replay) -> None:
        self.replay = replay
        start = replay.world.market.start
        self.epoch = (start if start.tzinfo else start.replace(tzinfo=timezone.utc)).timestamp()

    def time(self) -> float:
        return self.epoch + self.replay.tick * self.replay.tick_s

    def sleep(self, seconds: float) -> None:  # throttling never happens in a replay
        return None


class SimProvider:
    """The ``Provider`` contract over a replay's nodes."""

    name = "replay"

    def __init__(self, replay: Replay, clock: SimClock, run_id: str) -> None:
        self.replay = replay
        self.clock = clock
        self.run_id = run_id
        world = replay.world
        self.capabilities = Capabilities(spot=True, notice_s=world.job.notice_s or None, preemption_injection=False)
        self.providers = frozenset(o.location.cloud for o in world.spot)
        self._zone_of = {world.spot[z].location.zone_scope + "/" + world.spot[z].shape.instance_type: z
                         for z in range(world.zones)}
        self._by_request: dict[str, str] = {}

    def check_credentials(self) -> None:
        return None

    def launch(self, request: LaunchRequest) -> NodeInfo:
        if request.request_id in self._by_request:
            return self._info(self.replay.nodes[self._by_request[request.request_id]])
        offer = request.offer
        zone = self._zone_of.get(offer.location.zone_scope + "/" + offer.shape.instance_type)
        if zone is None:
            raise ProviderError(f"the replay has no market for {offer.offer_id}", scope=offer.location.zone_scope)
        node = self.replay.launch(zone, offer.market.value, request.request_id)  # CapacityError where the market has none
        self._by_request[request.request_id] = node.node_id
        return self._info(node)

    def list(self, run_id: str | None = None) -> list[NodeInfo]:
        return [self._info(n) for n in self.replay.nodes.values()]

    def terminate(self, node_id: str, *, reason: str = "terminated") -> None:
        if node_id not in self.replay.nodes:
            raise NotFoundError(f"no node {node_id} in the replay")
        self.replay.terminate(node_id, reason)

    def start(self, node_id, argv, env, log_path, cwd=None):  # noqa: ANN001, ANN201
        raise ProviderError("a replay runs no commands")

    def _info(self, node) -> NodeInfo:  # noqa: ANN001
        world = self.replay.world
        offer = world.offer(node.zone, node.market)
        state = (NodeState.RUNNING if node.running else
                 NodeState.PREEMPTED if node.end_reason == "preempted" else NodeState.TERMINATED)
        at = lambda s: datetime.fromtimestamp(self.clock.epoch + self.replay.start_tick * self.replay.tick_s + s,  # noqa: E731
                                              tz=timezone.utc)
        return NodeInfo(node.node_id, node.request_id, self.run_id, offer.offer_id, offer.location, state,
                        at(node.launched_s), None if node.ended_s is None else at(node.ended_s), node.end_reason,
                        "127.0.0.1")


class SimLaunch:
    """``provisioning.Launch`` for a replay (see the module docstring)."""

    def __init__(self, replay: Replay, plan, ledger: Ledger, options: LaunchOptions, run_id: str,  # noqa: ANN001
                 clock: SimClock, provider: SimProvider) -> None:
        self.replay = replay
        self.plan = plan
        self.provider = provider
        self.options = options
        self.ledger = ledger
        self.run_id = run_id
        self.offers = {item.offer.offer_id: item.offer for item in plan.items}
        self.wanted = Counter({item.offer.offer_id: item.count for item in plan.items})
        self.blocked: dict[str, float] = {}
        self.stand_ins: dict[str, str] = {}
        self.preemptions = 0
        self.generation = 0
        self.clock = clock
        self._capacity = None

    @property
    def stop_requested(self) -> bool:
        return False

    def alive_nodes(self) -> list[NodeInfo]:
        return [n for n in self.provider.list(self.run_id) if n.state == NodeState.RUNNING]

    def prices(self) -> PriceSnapshot:
        return snapshot_at(self.replay, self.replay.tick)

    def capacity(self):  # noqa: ANN201
        return self._capacity

    def remaining(self) -> Deadline:
        """The work at risk is what the replay trained since its last checkpoint (a launcher knows when it
        last wrote one), plus a restart and one tick until it looks again."""
        r = self.replay
        at_risk = 0.0 if r.job.notice_saves_work else r.progress - r.committed
        rate = max(self.plan.totals.samples_per_s, 1e-9)
        return Deadline(r.samples_left, r.hours_left, (at_risk / rate + r.job.restart_s + r.tick_s) / 3600)


def snapshot_at(replay: Replay, tick: int) -> PriceSnapshot:
    """The offers as the market shows them at ``tick``: spot at the tick's price, with the past's
    interruption rate and availability; on-demand at its price."""
    world = replay.world
    signals = world.interruption_signals(tick)
    records = []
    for z in range(world.zones):
        spot = world.offer(z, Market.SPOT, tick)
        record = offer_record(spot)
        record.update(interruption_band="trace", interruptions_per_hour=signals[z].interruptions_per_hour,
                      availability=signals[z].availability)
        records.append(record)
        if world.on_demand[z] is not None:
            records.append(offer_record(world.on_demand[z]))
    raw = pd.DataFrame([{k: "" if r[k] is None else (repr(r[k]) if isinstance(r[k], float) else str(r[k]))
                         for k in COLUMN_NAMES} for r in records], dtype="string")
    raw.index = [f"offer {n}" for n in range(len(raw))]
    table = parse_offers(raw, "replay")
    return PriceSnapshot.from_table(table, label=f"replay tick {tick}", created_at=world.market.time_of(tick))


class GeotrainPolicy:
    """``geotrain``: the launcher's provisioning over the replay (see the module docstring)."""

    name = "geotrain"

    def __init__(self, *, block_s: float = 600.0, workdir: Path | None = None) -> None:
        self.block_s = block_s
        self.workdir = workdir
        self.notes: list[str] = []
        self._tmp = None

    def job_spec(self, replay: Replay) -> JobSpec:
        job = replay.job
        return JobSpec(
            name=job.name, workload=job.workload, objective=Objective.MIN_COST_BY_DEADLINE, sync=job.sync,
            total_samples=max(1, int(replay.world.work_samples + 0.999)), deadline_h=job.deadline_h,
            constraints=Constraints(node_count=job.nodes, spot_only=True))

    def start(self, replay: Replay) -> None:
        if self.workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="geotrain-replay-")
            self.workdir = Path(self._tmp.name)
        job = replay.job
        lost_s = 0 if job.notice_saves_work else job.checkpoint_every_s
        recovery_h = (job.restart_s + lost_s / 2) / 3600  # what it costs on average (the planner's goodput)
        self.plan_options = PlanOptions(frontier_points=0, time_limit_s=10, recovery_h=recovery_h,
                                        capacity=observed_capacity(replay.world, replay.tick))
        clock = SimClock(replay)
        run_id = "replay"
        provider = SimProvider(replay, clock, run_id)
        spec = self.job_spec(replay)
        snapshot = snapshot_at(replay, replay.tick)
        on_demand = replace(spec.constraints, spot_only=False, max_spot_share=0.0)
        plan = None
        for attempt in (spec, replace(spec, objective=Objective.MIN_COST_PER_SAMPLE, total_samples=None,
                                      deadline_h=None)):
            try:
                plan = make_plan(attempt, snapshot, options=self.plan_options)
                break
            except GeotrainError as exc:
                self.notes.append(f"first plan on spot: {exc}")
        if plan is None or Deadline(replay.samples_left, replay.hours_left, (job.restart_s + replay.tick_s) / 3600).rule(
                plan.totals.samples_per_s) is not MarketRule.SPOT:  # no slack for spot
            try:
                plan = make_plan(replace(spec, constraints=on_demand), snapshot, options=self.plan_options)
            except GeotrainError:  # the deadline is out of reach even on on-demand: the fastest mix then
                budget = 10 * sum(o.price_usd_per_hour for o in snapshot.offers()) * replay.job.nodes
                plan = make_plan(replace(spec, constraints=on_demand, objective=Objective.MAX_THROUGHPUT,
                                         budget_usd_per_hour=budget, total_samples=None, deadline_h=None),
                                 snapshot, options=self.plan_options)
        ledger = Ledger(self.workdir / "ledger.sqlite")
        options = LaunchOptions(block_s=self.block_s, replan=True)
        ledger.create_run(run_id=run_id, plan_id=plan.plan_id, plan_json=_plan_json(plan), workload=job.workload,
                          provider=provider.name, checkpoint_url=str(self.workdir), launcher_pid=0,
                          target_steps=None, options=options.to_dict(), substitutions=())
        self.la = SimLaunch(replay, plan, ledger, options, run_id, clock, provider)
        self.la._capacity = self.plan_options.capacity
        self._seen_ended: set[str] = set()


    def act(self, replay: Replay) -> None:
        la = self.la
        ended = {n.node_id for n in replay.nodes.values() if not n.running}
        changed = bool(ended - self._seen_ended)
        self._seen_ended = ended
        alive = Counter(n.offer_id for n in la.alive_nodes())
        if not changed and alive == la.wanted and alive:  # training as wanted: the launcher watches the deadline
            held = replay.running_placement()
            if len(held) < replay.job.nodes:
                return
            if keep_the_deadline(la, replay.world.rate(held)[0]):
                self._seen_ended = {n.node_id for n in replay.nodes.values() if not n.running}
            return
        try:
            provision(la)
        except GeotrainError as exc:
            self.notes.append(f"tick {replay.tick}: {exc}")
        self._seen_ended = {n.node_id for n in replay.nodes.values() if not n.running}


def _plan_json(plan) -> str:  # noqa: ANN001
    import json

    return json.dumps(plan_to_dict(plan))

"""geotrain's own policy in a replay: the launcher's provisioning (``geotrain.launcher.provisioning``:
launch what is missing, record what the market took, release what is no longer wanted), steered by
the launcher's spot policy (``launcher.steering``, ``launcher.spot_policy``) with the deadline's
safety net (``launcher.deadline``), driven over a simulated provider.

Nothing here decides where nodes go. The replay supplies what a launch would have:

- :class:`SimProvider`, the ``Provider`` contract over the replay's nodes (a spot launch fails with
  ``CapacityError`` where the market has no node left at this tick);
- :class:`SimLaunch`, the ``provisioning.Launch`` state: a real ledger (SQLite, in a directory of the
  replay's own), the replay's clock, the offers at the tick's prices, the mixes a gang of the job's
  size can hold (``spot_policy.gang_mixes``, priced by the perf model, and the first plan's mix), and
  a ``MarketWatch`` that has seen every zone at every tick of the market's past up to now, never
  later (a launcher that probes the zones it may buy in).

Each tick the policy does what the launcher does at each look: record the nodes the market took
(``provisioning.recover``), steer (``steering.steer``: the spot policy's decision becomes the wanted
mix; what it no longer holds is released) and launch the difference. The first plan
(``planning.make_plan``, on the past's interruption rates and capacity) is the run's record in the
ledger and one of the mixes; the job's gang is its node count.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from geotrain.domain import Constraints, JobSpec, Market, Objective, Offer
from geotrain.errors import GeotrainError, NotFoundError, ProviderError
from geotrain.launcher.deadline import Deadline
from geotrain.launcher.options import LaunchOptions
from geotrain.launcher.provisioning import launch_missing, recover
from geotrain.launcher.spot_policy import Mix, Situation, SpotPolicy, gang_mixes
from geotrain.launcher.steering import steer
from geotrain.launcher.watch import MarketWatch, need_of
from geotrain.ledger import Ledger
from geotrain.planning.planfile import plan_to_dict
from geotrain.planning.planner import PlanOptions, make_plan
from geotrain.pricing.records import offer_record
from geotrain.pricing.schema import COLUMN_NAMES, parse_offers
from geotrain.pricing.snapshot import PriceSnapshot
from geotrain.providers.base import Capabilities, LaunchRequest, NodeInfo, NodeState
from geotrain.sim.engine import Replay
from geotrain.sim.world import observed_capacity, placement_of


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
        self._clouds = frozenset(o.location.cloud for o in world.spot)
        self._zone_of = {world.spot[z].location.zone_scope + "/" + world.spot[z].shape.instance_type: z
                         for z in range(world.zones)}
        self._by_request: dict[str, str] = {}
        self._infos: dict[str, tuple[float | None, NodeInfo]] = {}  # node id -> (ended at, its description)

    def served_clouds(self) -> frozenset[str]:
        """The replay's clouds (``providers.base.ServesClouds``)."""
        return self._clouds

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

    def running(self) -> list[NodeInfo]:
        """The nodes up (``list`` filtered, without describing every node that ever ran)."""
        return [self._info(n) for n in self.replay.running()]

    def terminate(self, node_id: str, *, reason: str = "terminated") -> None:
        if node_id not in self.replay.nodes:
            raise NotFoundError(f"no node {node_id} in the replay")
        self.replay.terminate(node_id, reason)

    def start(self, node_id, argv, env, log_path, cwd=None, files=None):  # noqa: ANN001, ANN201
        raise ProviderError("a replay runs no commands")

    def _info(self, node) -> NodeInfo:  # noqa: ANN001
        cached = self._infos.get(node.node_id)
        if cached is not None and cached[0] == node.ended_s:
            return cached[1]
        info = self._describe(node)
        self._infos[node.node_id] = (node.ended_s, info)
        return info

    def _describe(self, node) -> NodeInfo:  # noqa: ANN001
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
        self.watch = MarketWatch(down_prior_h=options.block_s / 3600)  # the launcher's prior, as in a launch
        self.spot_policy = SpotPolicy()
        world = replay.world
        self._keys = [world.market.zones[z].key for z in range(world.zones)]
        self._where: dict[str, tuple[int, str]] = {}  # offer id -> (zone, market)
        regions: set[str] = set()
        self._od_zones = []
        for z in range(world.zones):
            self._where[world.spot[z].offer_id] = (z, Market.SPOT.value)
            od = world.on_demand[z]
            if od is not None:
                self._where.setdefault(od.offer_id, (z, Market.ON_DEMAND.value))
                if od.location.region_scope not in regions:  # one on-demand gang per region
                    regions.add(od.location.region_scope)
                    self._od_zones.append(z)
        self._plan_nodes = {item.offer.offer_id: item.count for item in plan.items if item.offer.offer_id in self._where}
        self._mixes: tuple[int, list[Mix]] | None = None
        self.on_demand_samples_per_s = max(world.rate(world.gang(z, Market.ON_DEMAND))[0] for z in self._od_zones)

    @property
    def stop_requested(self) -> bool:
        return False

    def alive_nodes(self) -> list[NodeInfo]:
        return self.provider.running()

    def prices(self) -> PriceSnapshot:
        return snapshot_at(self.replay, self.replay.tick)

    def capacity(self):  # noqa: ANN201
        return None

    def remaining(self) -> Deadline:
        """The work at risk is what the replay trained since its last checkpoint (a launcher knows when it
        last wrote one), none on an on-demand gang (it is not taken, and a change the run makes
        checkpoints first: counting it swung the margin by a checkpoint's worth of work); the next look
        is a tick away."""
        r = self.replay
        running = r.running()
        on_demand = bool(running) and all(n.market == Market.ON_DEMAND for n in running)
        at_risk = 0.0 if r.job.notice_saves_work or on_demand else r.progress - r.committed
        return Deadline(r.samples_left, r.hours_left, self.on_demand_samples_per_s, at_risk_samples=at_risk,
                        restart_h=r.job.restart_s / 3600, look_h=r.tick_s / 3600)

    def situation(self) -> Situation:
        r = self.replay
        held = None
        alive = Counter(n.offer_id for n in self.alive_nodes())
        if alive and sum(alive.values()) >= r.job.nodes and frozenset(n.node_id for n in r.running()) == r.gang_ids:
            held = self.mix_of(tuple(sorted(alive.items())))
        return Situation(self.remaining(), r.job.checkpoint_every_s / 3600, r.job.notice_saves_work, held,
                         restart_left_h=r.restart_left_s / 3600, since_checkpoint_h=r.since_commit_s / 3600)

    def mixes(self) -> list[Mix]:
        """The gangs of the job's size the market offers at this tick (``spot_policy.gang_mixes``), and the
        first plan's mix."""
        tick = self.replay.tick
        if self._mixes is not None and self._mixes[0] == tick:
            return self._mixes[1]
        world = self.replay.world
        price_tick = min(tick, world.market.ticks - 1)
        spot = [(self._keys[z], world.spot[z].offer_id, world.spot[z].location.region_scope,
                 world.price(z, Market.SPOT, price_tick)) for z in range(world.zones)]
        od = [(world.on_demand[z].offer_id, world.on_demand[z].location.region_scope,
               world.on_demand[z].price_usd_per_hour) for z in self._od_zones]
        out = gang_mixes(spot, od, self.replay.job.nodes, self._rate, self.watch.available, self.watch.usual_price,
                         self.watch.reversion_h)
        if self._plan_nodes and sum(self._plan_nodes.values()) >= self.replay.job.nodes:
            planned = self.mix_of(tuple(sorted(self._plan_nodes.items())))
            if planned not in out:
                out.append(planned)
        self._mixes = (tick, out)
        return out

    def mix_of(self, nodes: tuple[tuple[str, int], ...]) -> Mix:
        world = self.replay.world
        price_tick = min(self.replay.tick, world.market.ticks - 1)
        samples_per_s, traffic = self._rate(nodes)
        usd = traffic + sum(n * world.price(*self._where[o], price_tick) for o, n in nodes)
        usual = traffic + sum(n * self._usual(o, price_tick) for o, n in nodes)
        keys = {self._keys[self._where[o][0]]: n for o, n in nodes if self._where[o][1] == Market.SPOT.value}
        return Mix(nodes, usd, samples_per_s, need_of(keys), usual,
                   max((self.watch.reversion_h(k) for k in keys), default=1.0))

    def _usual(self, offer_id: str, tick: int) -> float:
        z, market = self._where[offer_id]
        price = self.watch.usual_price(self._keys[z]) if market == Market.SPOT.value else None
        return self.replay.world.price(z, market, tick) if price is None else price

    def _rate(self, nodes: tuple[tuple[str, int], ...]) -> tuple[float, float]:
        placement = placement_of([self._where[o] for o, n in nodes for _ in range(n)])
        return self.replay.world.rate(placement)

    def holds(self, need) -> bool:  # noqa: ANN001
        return self.watch.holds(need)  # probed at this tick

    def offer_for(self, offer_id: str) -> Offer:
        z, market = self._where[offer_id]
        return self.replay.world.offer(z, market)

    def block_s(self, scope: str) -> float:
        return 0.0  # a replay probes every zone at every tick: the spot policy decides when to go back

    def seen(self, offer: Offer, available: int) -> None:
        return None  # a replay probes every zone at every tick (``GeotrainPolicy.act``)

    def look(self) -> None:
        """Probe every zone at this tick: what a launch there would get."""
        r = self.replay
        at_s = r.tick * r.tick_s
        price_tick = min(r.tick, r.world.market.ticks - 1)
        for z, key in enumerate(self._keys):
            self.watch.observe(key, at_s, r.world.capacity(z, r.tick))
            self.watch.observe_price(key, at_s, r.world.price(z, Market.SPOT, price_tick))


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
    """``geotrain``: the launcher's provisioning, steered by its spot policy, over the replay (see the
    module docstring)."""

    name = "geotrain"

    def __init__(self, *, workdir: Path | None = None, spot_policy: dict | None = None) -> None:
        """``spot_policy``: keyword arguments of ``SpotPolicy`` (its constants; a benchmark tunes them)."""
        self.workdir = workdir
        self.spot_policy = dict(spot_policy or {})
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
        options = PlanOptions(frontier_points=0, time_limit_s=10, recovery_h=recovery_h,
                              capacity=observed_capacity(replay.world, replay.tick))
        clock = SimClock(replay)
        run_id = "replay"
        provider = SimProvider(replay, clock, run_id)
        spec = self.job_spec(replay)
        snapshot = snapshot_at(replay, replay.tick)
        plan = None
        for attempt in (spec, replace(spec, objective=Objective.MIN_COST_PER_SAMPLE, total_samples=None,
                                      deadline_h=None),
                        replace(spec, objective=Objective.MIN_COST_PER_SAMPLE, total_samples=None, deadline_h=None,
                                constraints=replace(spec.constraints, spot_only=False))):
            try:
                plan = make_plan(attempt, snapshot, options=options)
                break
            except GeotrainError as exc:
                self.notes.append(f"first plan: {exc}")
        if plan is None:
            raise ProviderError("the replay found no mix to plan: " + "; ".join(self.notes))
        ledger = Ledger(self.workdir / "ledger.sqlite")
        launch_options = LaunchOptions(replan=True)
        ledger.create_run(run_id=run_id, plan_id=plan.plan_id, plan_json=_plan_json(plan), workload=job.workload,
                          provider=provider.name, checkpoint_url=str(self.workdir), launcher_pid=0,
                          target_steps=None, options=launch_options.to_dict(), substitutions=())
        self.la = SimLaunch(replay, plan, ledger, launch_options, run_id, clock, provider)
        self.la.spot_policy = SpotPolicy(**self.spot_policy)
        self.la.wanted = Counter()  # the spot policy decides the first mix too
        past = replay.tick
        for tick in range(past):  # the market's past: what a launcher watching it would have seen
            replay.tick = tick
            self.la.look()
        replay.tick = past
        self._seen_ended: set[str] = set()

    def act(self, replay: Replay) -> None:
        la = self.la
        la.look()
        lost = [n for n in la.provider.list(la.run_id) if n.ended and n.node_id not in self._seen_ended
                and n.end_reason == "preempted"]
        try:
            if lost:
                recover(la, lost)  # ended in the ledger, then steered (``provisioning.mend``)
            else:
                steer(la, cause="look")
            alive = Counter(n.offer_id for n in la.alive_nodes())
            if alive != +la.wanted:
                launch_missing(la)
        except GeotrainError as exc:
            self.notes.append(f"tick {replay.tick}: {exc}")
        self._seen_ended = {n.node_id for n in replay.nodes.values() if not n.running}


def _plan_json(plan) -> str:  # noqa: ANN001
    import json

    return json.dumps(plan_to_dict(plan))

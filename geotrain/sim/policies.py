"""The published baselines, each as its paper defines it, over the replay's public state.

Every baseline runs the job's gang (``job.nodes`` nodes) in one zone at a time, on one market:

- ``on-demand``: the gang on on-demand nodes from the start, in the zone whose on-demand gang trains
  cheapest per sample.
- ``greedy``: spot in one zone (``zone``, default: the cheapest spot at the start) whenever it can be
  had; when it cannot, wait; on-demand from the moment the safety net says so, to the end.
- ``up``: Uniform Progress (Wu et al., *Can't Be Late*, NSDI '24) in one zone: the job should have
  trained ``W·t/D`` by time ``t``. Spot whenever it can be had; when it cannot, on-demand while the job
  is behind that line, nothing while it is ahead; once on on-demand, it stays there until the job is
  a restart's worth of work ahead of the line (their hysteresis, against thrashing).
- ``up-s``: Uniform Progress over every zone, failing over cheapest first: when the gang is lost or
  cannot be had, the cheapest zone (at that tick's prices) that can hold the whole gang (what
  SkyPilot's managed jobs do with their multi-region failover); on-demand in the cheapest on-demand
  zone while behind.

The safety net (every baseline, as in Can't Be Late): on-demand, to the end, from the first tick at
which waiting one more tick, losing the work since the last checkpoint and restarting would no
longer leave time to finish on on-demand.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from geotrain.domain import Market
from geotrain.sim.engine import Replay


def must_go_on_demand(replay: Replay, od_samples_per_s: float) -> bool:
    at_risk = 0.0 if replay.job.notice_saves_work else replay.progress - replay.committed
    need_s = (replay.samples_left + at_risk) / od_samples_per_s + replay.job.restart_s
    return replay.hours_left * 3600 - replay.tick_s <= need_s


def cheapest_on_demand(replay: Replay) -> tuple[int, float]:
    """The zone whose on-demand gang trains cheapest per sample, and that gang's samples/s."""
    world = replay.world
    best = None
    for z in range(world.zones):
        if world.on_demand[z] is None:
            continue
        rate, traffic = world.rate(world.gang(z, Market.ON_DEMAND))
        usd = world.job.nodes * world.on_demand[z].price_usd_per_hour + traffic
        key = (usd / rate, z)
        if best is None or key < best[0]:
            best = (key, z, rate)
    return best[1], best[2]


@dataclass
class _Gang:
    """A baseline's bookkeeping: the zone and market its gang is in (None: none held)."""

    zone: int | None = None
    market: str | None = None
    final: bool = False  # on-demand to the end (the safety net)
    notes: list[str] = field(default_factory=list)

    def holds(self, replay: Replay) -> bool:
        held = replay.running()
        if self.zone is not None and len(held) >= replay.job.nodes:
            return True
        replay.terminate_all("gang broken")  # a gang short of nodes trains nothing: give the rest back
        self.zone = self.market = None
        return False

    def take(self, replay: Replay, zone: int, market: str) -> bool:
        if self.zone == zone and self.market == market and self.holds(replay):
            return True
        replay.terminate_all("moved")
        self.zone = self.market = None
        if replay.launch_gang(zone, market):
            self.zone, self.market = zone, market
            return True
        return False

    def release(self, replay: Replay) -> None:
        replay.terminate_all("released")
        self.zone = self.market = None


class OnDemandOnly(_Gang):
    name = "on-demand"

    def start(self, replay: Replay) -> None:
        self.od_zone, _ = cheapest_on_demand(replay)

    def act(self, replay: Replay) -> None:
        self.take(replay, self.od_zone, Market.ON_DEMAND)


class Greedy(_Gang):
    name = "greedy"

    def __init__(self, zone: int | None = None) -> None:
        super().__init__()
        self.spot_zone = zone

    def start(self, replay: Replay) -> None:
        world = replay.world
        if self.spot_zone is None:
            self.spot_zone = min(range(world.zones), key=lambda z: (world.price(z, Market.SPOT, replay.tick), z))
        self.od_zone, self.od_rate = _od_of(replay, self.spot_zone)

    def act(self, replay: Replay) -> None:
        if self.final or must_go_on_demand(replay, self.od_rate):
            self.final = True
            self.take(replay, self.od_zone, Market.ON_DEMAND)
            return
        if not (self.market == Market.SPOT and self.holds(replay)):
            self.take(replay, self.spot_zone, Market.SPOT) or self.release(replay)


class UniformProgress(_Gang):
    """``up`` over one zone, or ``up-s`` over all (``multi_zone``)."""

    def __init__(self, zone: int | None = None, *, multi_zone: bool = False) -> None:
        super().__init__()
        self.spot_zone = zone
        self.multi_zone = multi_zone
        self.name = "up-s" if multi_zone else "up"

    def start(self, replay: Replay) -> None:
        world = replay.world
        if self.multi_zone:
            self.od_zone, self.od_rate = cheapest_on_demand(replay)
            return
        if self.spot_zone is None:
            self.spot_zone = min(range(world.zones), key=lambda z: (world.price(z, Market.SPOT, replay.tick), z))
        self.od_zone, self.od_rate = _od_of(replay, self.spot_zone)

    def _behind(self, replay: Replay, ahead_s: float = 0.0) -> bool:
        elapsed_h = replay.now_s / 3600
        expected = replay.world.work_samples * min(1.0, elapsed_h / replay.job.deadline_h)
        return replay.progress < expected + ahead_s * self.od_rate

    def _spot(self, replay: Replay) -> bool:
        """Hold a spot gang: the one held, else the first zone (cheapest first) that has room for it."""
        if self.market == Market.SPOT and self.holds(replay):
            return True
        world = replay.world
        zones = ([self.spot_zone] if not self.multi_zone else
                 sorted(range(world.zones), key=lambda z: (world.price(z, Market.SPOT, replay.tick), z)))
        for zone in zones:
            if replay.can_launch(zone, Market.SPOT, replay.job.nodes):
                return self.take(replay, zone, Market.SPOT)
        return False

    def act(self, replay: Replay) -> None:
        if self.final or must_go_on_demand(replay, self.od_rate):
            self.final = True
            self.take(replay, self.od_zone, Market.ON_DEMAND)
            return
        if self.market == Market.ON_DEMAND and self.holds(replay):
            if self._behind(replay, ahead_s=replay.job.restart_s):
                return  # hysteresis: stay until a restart's worth ahead of the line
        if self._spot(replay):
            return
        if self._behind(replay):
            self.take(replay, self.od_zone, Market.ON_DEMAND)
        else:
            self.release(replay)


def _od_of(replay: Replay, zone: int) -> tuple[int, float]:
    """A single-zone baseline's on-demand: its own zone's region where it has a price, else the cheapest."""
    world = replay.world
    if world.on_demand[zone] is not None:
        return zone, world.rate(world.gang(zone, Market.ON_DEMAND))[0]
    return cheapest_on_demand(replay)


BASELINES = ("on-demand", "greedy", "up", "up-s")


def baseline(name: str, zone: int | None = None):  # noqa: ANN201
    if name == "on-demand":
        return OnDemandOnly()
    if name == "greedy":
        return Greedy(zone)
    if name == "up":
        return UniformProgress(zone)
    if name == "up-s":
        return UniformProgress(multi_zone=True)
    raise KeyError(name)

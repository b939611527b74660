"""Every policy on one world, and the oracle over the mixes they ran: what ``geotrain simulate`` and
``bench/simulate.py`` print."""

from __future__ import annotations

from geotrain.sim.engine import Outcome, Replay
from geotrain.sim.launch import GeotrainPolicy
from geotrain.sim.oracle import oracle
from geotrain.sim.policies import BASELINES, baseline
from geotrain.sim.world import World

POLICIES = (*BASELINES, "geotrain", "oracle")


def policy_named(name: str, zone: int | None = None):  # noqa: ANN201
    return GeotrainPolicy() if name == "geotrain" else baseline(name, zone)


def compare(world: World, *, start_tick: int = 0, policies: tuple[str, ...] = POLICIES, zone: int | None = None,
            record: bool = True) -> list[Outcome]:
    """Each policy's outcome, in the order asked; the oracle (if asked) also chooses among the mixes
    the other policies trained with, so that it stays a lower bound for them."""
    outcomes, mixes = [], set()
    for name in policies:
        if name == "oracle":
            continue
        replay = Replay(world, start_tick=start_tick, record=record)
        outcomes.append(replay.run(policy_named(name, zone)))
        mixes |= replay.trained
    if "oracle" in policies:
        outcomes.insert(list(policies).index("oracle"), oracle(world, start_tick=start_tick,
                                                              extra=tuple(sorted(mixes))))
    return outcomes

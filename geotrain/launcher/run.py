"""What provisioning, re-planning and steering share: the :class:`Launch` they read and change (the
launcher's run, or a replay's), its :class:`Clock`, and the helpers all three use. A module of its own
so that none of them imports another's internals: provisioning calls re-planning and steering, which
need only this.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Protocol

from geotrain.domain import Offer, Plan
from geotrain.ledger import EventKind, Ledger
from geotrain.providers.base import NodeInfo, Provider

if TYPE_CHECKING:
    from geotrain.launcher.deadline import Deadline
    from geotrain.launcher.options import LaunchOptions
    from geotrain.launcher.spot_policy import Mix, Situation, SpotPolicy
    from geotrain.launcher.watch import MarketWatch, Need
    from geotrain.pricing.capacity import CapacityModel
    from geotrain.pricing.snapshot import PriceSnapshot


class Clock(Protocol):
    """Wall time for a launch (the ``time`` module is one); simulated time for a replay."""

    def time(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class Launch(Protocol):
    """What provisioning reads and changes: the launcher's state (``launcher.loop.Launcher``, or a
    replay's run in ``geotrain.sim``, which drives these same functions over a simulated provider)."""

    plan: Plan
    provider: Provider
    options: LaunchOptions
    ledger: Ledger
    run_id: str
    offers: dict[str, Offer]
    wanted: Counter[str]
    blocked: dict[str, float]
    stand_ins: dict[str, str]
    preemptions: int
    generation: int
    clock: Clock

    @property
    def stop_requested(self) -> bool: ...

    def alive_nodes(self) -> list[NodeInfo]: ...

    def prices(self) -> PriceSnapshot:
        """The offers a re-plan chooses from (a launch: the plan's own snapshot)."""
        ...

    def capacity(self) -> CapacityModel | None:
        """The capacity model a re-plan and the fallbacks use (None: the bundled one)."""
        ...

    def remaining(self) -> Deadline | None:
        """What is left of a job with a deadline (samples, hours, the on-demand gang's rate); None: no
        deadline. A job with a deadline is steered by the spot policy (``launcher.steering``)."""
        ...

    # -- a job with a deadline: what the spot policy reads (``launcher.steering``) ------------------

    watch: MarketWatch
    spot_policy: SpotPolicy

    def situation(self) -> Situation | None:
        """What the spot policy decides on; None: no deadline."""
        ...

    def mixes(self) -> list[Mix]:
        """The gangs the run could hold now."""
        ...

    def holds(self, need: Need) -> bool:
        """Whether a need's spot nodes can be had now, as far as the run knows."""
        ...

    def offer_for(self, offer_id: str) -> Offer:
        """The offer of a mix's offer id."""
        ...

    def block_s(self, scope: str) -> float:
        """How long a scope that failed or preempted is left out."""
        ...

    def seen(self, offer: Offer, available: int) -> None:
        """What a launch, a failure or a preemption showed of an offer's market: ``available`` nodes."""
        ...


def served_clouds(provider: object) -> frozenset[str] | None:
    """The clouds whose offers the provider can launch; None: any (every node a process here)."""
    if provider.capabilities.shared_host:  # type: ignore[attr-defined]
        return None
    from geotrain.providers.base import ServesClouds

    if isinstance(provider, ServesClouds):  # a router over several, or a wrapper of one
        return provider.served_clouds()
    return frozenset({provider.name})  # type: ignore[attr-defined]


def release_surplus(la: Launch) -> None:
    """Terminate the live nodes the wanted mix no longer holds (newest first): no node is paid for that
    the plan does not want."""
    extra = Counter(n.offer_id for n in la.alive_nodes())
    extra.subtract(la.wanted)
    for node in sorted(la.alive_nodes(), key=lambda n: (n.launched_at, n.node_id), reverse=True):
        if extra[node.offer_id] > 0:
            extra[node.offer_id] -= 1
            la.provider.terminate(node.node_id, reason="released")
            la.ledger.end_node(node.node_id, "released", at=la.clock.time())
            la.ledger.event(la.run_id, EventKind.RELEASED, node_id=node.node_id, offer_id=node.offer_id,
                            reason="the re-planned mix does not want it")



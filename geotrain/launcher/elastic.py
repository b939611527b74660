"""A lost peer of an elastic strategy (hivemind): the others train on in their generation.

The lost node's worker is stopped and the loss recorded as any preemption is (its zone blocked, the
mix mended, ``PREEMPTED``), plus ``PEER_LEFT`` with the peers left; the launcher then launches what
the mended mix is missing and starts each new node's worker in the running generation, in a lost
peer's rank, as a joiner (``GEOTRAIN_JOINING``: it loads the model, the optimizer and the step from
its peers before it trains; the worker records ``PEER_JOINED``). No survivor is stopped, and the
generation's number does not change. While the replacements boot, the survivors train on; a
replacement that cannot be had leaves them training with fewer peers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from geotrain.ledger import EventKind
from geotrain.providers.base import NodeInfo

if TYPE_CHECKING:
    from geotrain.launcher.loop import Launcher


def replace_lost(la: Launcher, lost: list[NodeInfo]) -> bool:
    """True: the survivors train on (with what replacements could be had); False: no peer survives
    (the launcher starts a new generation from the checkpoint)."""
    from geotrain.launcher.provisioning import provision, recover

    gone = {n.node_id for n in lost}
    ranks = {n.node_id: r for r, n in enumerate(la.members)}
    survivors = [n for n in la.members if n.node_id not in gone and n.node_id not in la.departed]
    if not survivors:
        return False
    for node in lost:
        proc = la.procs.pop(node.node_id, None)
        if proc is not None and proc.poll() is None:
            try:
                proc.kill()
            except ProcessLookupError:
                pass
        la.departed.add(node.node_id)
        la.ledger.event(la.run_id, EventKind.PEER_LEFT, node_id=node.node_id, rank=ranks[node.node_id],
                        generation=la.generation, peers=len(survivors))
    recover(la, lost)
    if la.stop_requested:
        return True
    known = {n.node_id for n in la.members}
    fresh = [n for n in provision(la) if n.node_id not in known]
    free = sorted(ranks[n] for n in la.departed if n in ranks)
    if not fresh or not free or not la.ready(fresh):
        return True
    for rank, node in zip(free, fresh):
        la.members[rank] = node
        la.start_joiner(rank, node)
    return True

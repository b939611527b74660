"""Getting the wanted nodes: launch what is missing, meet the provider's failures, re-plan around them.

Every node is launched with a request id derived from the run, the offer and a counter of that
offer's nodes already in the ledger, so a repeated request (a retry, a restarted launcher) names the
same node and a provider never makes it twice. What a launch can meet, and what happens then:

=========================  =====================================================================
CapacityError              the scope (the offer's zone) is blocked for ``block_s``; re-plan
QuotaError                 the scope (the cloud, or ``cloud/region``) is blocked; re-plan
ThrottledError             wait (``backoff_s``, doubling) and send the same request again, at most
                           ``launch_attempts`` times; then the launch fails
ProviderTimeoutError       outcome unknown: list the run's nodes; a node with this request id is
                           the launched one (recorded, not launched again); else send it again
other ProviderError        the node did not boot: its scope is blocked; re-plan
a node gone after launch   (it died booting) ended in the ledger as ``boot_failed``, its zone
                           blocked; re-plan
=========================  =====================================================================

After a failure or a preemption the wanted mix is mended (``mend``): first from the plan's fallbacks
(``planning.fallback``): the missing nodes of every blocked zone move to that zone's best fallback
whose zones are not blocked, without a solver; where a blocked zone has no fallback left, re-planning
solves the plan's job again with the surviving nodes kept and the blocked scopes left out
(``replan``): the cheapest mix that reaches the plan's throughput within its node count, else the most
throughput for the plan's $/h + 25 %, else the survivors alone. Both write the new wanted mix to the
ledger (``fell_back``, ``replanned``), so that a resumed launcher wants the same. When nothing can be
launched and no node is left, the run fails with the reasons.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from geotrain.domain import Objective, Offer
from geotrain.errors import (
    CapacityError, CredentialsError, GeotrainError, ProviderError, ProviderTimeoutError, QuotaError, ThrottledError,
)
from geotrain.ledger import EventKind
from geotrain.providers.base import LaunchRequest, NodeInfo, NodeState

if TYPE_CHECKING:
    from geotrain.launcher.loop import Launcher


@dataclass(frozen=True, slots=True)
class LaunchFailure:
    kind: str  # capacity | quota | boot
    scope: str
    offer_id: str
    message: str


def launch_missing(la: Launcher) -> list[LaunchFailure]:
    """Launch every wanted node that is not up; the failures met (their scopes are blocked)."""
    alive = la.alive_nodes()
    have = Counter(n.offer_id for n in alive)
    launched_before = Counter(row.offer_id for row in la.ledger.nodes(la.run_id))
    failures: list[LaunchFailure] = []
    new: list[NodeInfo] = []
    for offer_id, count in sorted(la.wanted.items()):
        offer = la.offers[offer_id]
        missing = max(0, count - have[offer_id])
        if missing and _is_blocked(la, offer):  # e.g. a resumed launcher's mix meets a zone blocked since
            failures.append(LaunchFailure("blocked", offer.location.zone_scope, offer_id,
                                          f"{missing} wanted node(s) in a blocked scope"))
            continue
        for k in range(missing):
            request = LaunchRequest(f"{la.run_id}/{offer_id}/{launched_before[offer_id] + k}", la.run_id, offer)
            try:
                node = _launch_one(la, request)
            except (CapacityError, QuotaError) as exc:
                kind = "capacity" if isinstance(exc, CapacityError) else "quota"
                scope = exc.scope or (offer.location.zone_scope if kind == "capacity" else offer.location.cloud)
                failures.append(_fail(la, kind, scope, offer_id, exc))
                break
            except CredentialsError:
                raise
            except ProviderError as exc:
                if isinstance(exc, ThrottledError):
                    raise
                failures.append(_fail(la, "boot", exc.scope or offer.location.zone_scope, offer_id, exc))
                break
            record_node(la, node, offer)
            new.append(node)
    if new:
        now = {n.node_id: n for n in la.provider.list(la.run_id)}
        for node in new:
            seen = now.get(node.node_id)
            if seen is not None and seen.state == NodeState.PREEMPTED:
                continue  # taken back at once: a preemption, which the launcher records (_record_ended)
            if seen is None or seen.state != NodeState.RUNNING:  # it died while booting, before any worker ran
                failures.append(boot_failed(la, node.node_id, node.location.zone_scope, node.offer_id,
                                            "the node was gone right after its launch"))
    return failures


def track_untracked(la: Launcher) -> None:
    """Put in the ledger every node the provider holds for the run that the ledger lacks (a launcher
    killed while a node booted, a launch whose timeout hid a node that showed up later): a node of a
    known offer is adopted; one of an unknown offer is terminated, so that nothing runs unaccounted."""
    known = {row.node_id for row in la.ledger.nodes(la.run_id)}
    for node in la.provider.list(la.run_id):
        if node.node_id in known:
            continue
        offer = la.offers.get(node.offer_id)
        if offer is None:
            if not node.ended:
                la.provider.terminate(node.node_id, reason="untracked")
            la.ledger.event(la.run_id, EventKind.RECONCILED, node_id=node.node_id, offer_id=node.offer_id,
                            found=[node.node_id], reason="a node of an offer this run does not know: terminated")
            continue
        record_node(la, node, offer)  # an ended one is then recorded (once) by the launcher's _record_ended
        la.ledger.event(la.run_id, EventKind.RECONCILED, node_id=node.node_id, offer_id=node.offer_id,
                        found=[node.node_id], reason="a node the ledger did not know yet: adopted")


def boot_failed(la: Launcher, node_id: str, scope: str, offer_id: str, why: str) -> LaunchFailure:
    """A launched node died before its worker ran: end it in the ledger, block its zone."""
    la.ledger.end_node(node_id, "boot_failed")
    la.ledger.event(la.run_id, EventKind.BOOT_FAILED, node_id=node_id, scope=scope, offer_id=offer_id, reason=why)
    block(la, scope, f"node {node_id} failed to boot")
    return LaunchFailure("boot", scope, offer_id, why)


def record_node(la: Launcher, node: NodeInfo, offer: Offer) -> None:
    """Put a launched node in the ledger (once; a node reconciled after a timeout is recorded here too)."""
    from geotrain.pricing.records import offer_record

    la.ledger.add_node(
        run_id=la.run_id, node_id=node.node_id, request_id=node.request_id, offer_id=offer.offer_id,
        offer_json=json.dumps(offer_record(offer)), cloud=offer.location.cloud,
        region=offer.location.region, zone=offer.location.zone, market=offer.market.value,
        price_usd_per_hour=offer.price_usd_per_hour, launched_at=node.launched_at.timestamp(),
    )
    la.ledger.add_price(offer.offer_id, offer.price_usd_per_hour, f"launch {la.run_id}")
    la.ledger.event(la.run_id, EventKind.LAUNCHED, node_id=node.node_id, offer_id=offer.offer_id,
                    request_id=node.request_id)


def block(la: Launcher, scope: str, why: str) -> None:
    until = time.time() + la.options.block_s
    la.blocked[scope] = until
    la.ledger.event(la.run_id, EventKind.BLOCKED, scope=scope, until=until, reason=why)


def _launch_one(la: Launcher, request: LaunchRequest) -> NodeInfo:
    """One node, retried through throttling and settled after a timeout (never launched twice)."""
    pause = la.options.backoff_s
    for attempt in range(1, la.options.launch_attempts + 1):
        try:
            return la.provider.launch(request)
        except ThrottledError as exc:
            la.ledger.event(la.run_id, EventKind.THROTTLED, request_id=request.request_id, attempt=attempt,
                            pause_s=pause, reason=str(exc))
            if attempt == la.options.launch_attempts:
                raise ThrottledError(
                    f"{la.provider.name} kept throttling the launch of {request.offer.offer_id} "
                    f"({attempt} attempts over {la.options.backoff_s * (2 ** attempt - 1):.1f} s); try again later "
                    "or raise its API rate limit", scope=exc.scope) from exc
            _sleep(la, pause)
            pause *= 2
        except ProviderTimeoutError as exc:
            found = [n for n in la.provider.list(la.run_id) if n.request_id == request.request_id]
            la.ledger.event(la.run_id, EventKind.RECONCILED, request_id=request.request_id, attempt=attempt,
                            found=[n.node_id for n in found], reason=str(exc))
            if found:
                return found[0]
            _sleep(la, pause)
    raise ProviderTimeoutError(f"launching {request.offer.offer_id} timed out {la.options.launch_attempts} times",
                               scope=request.offer.location.zone_scope)


def _sleep(la: Launcher, seconds: float) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline and not la.stop_requested:
        time.sleep(min(0.05, seconds))


def _fail(la: Launcher, kind: str, scope: str, offer_id: str, exc: GeotrainError) -> LaunchFailure:
    la.ledger.event(la.run_id, EventKind.LAUNCH_FAILED, failure=kind, scope=scope, offer_id=offer_id, reason=str(exc))
    block(la, scope, f"{kind}: {exc}")
    return LaunchFailure(kind, scope, offer_id, str(exc))


def served_clouds(provider: object) -> frozenset[str] | None:
    """The clouds whose offers the provider can launch; None: any (every node a process here)."""
    if provider.capabilities.shared_host:  # type: ignore[attr-defined]
        return None
    inner = getattr(provider, "inner", provider)  # a fault injector wraps the provider
    return frozenset(getattr(inner, "providers", None) or {inner.name})


def _is_blocked(la: Launcher, offer: Offer) -> bool:
    loc = offer.location
    now = time.time()
    clouds = served_clouds(la.provider)
    return (clouds is not None and loc.cloud not in clouds) or any(
        la.blocked.get(scope, 0) > now for scope in (loc.cloud, loc.region_scope, loc.zone_scope, offer.offer_id))


def mend(la: Launcher, survivors: Counter, *, cause: str) -> bool:
    """The plan's fallbacks where they cover every blocked zone that misses nodes, else a re-plan."""
    return fall_back(la, survivors, cause=cause) or replan(la, survivors, cause=cause)


def fall_back(la: Launcher, survivors: Counter, *, cause: str) -> bool:
    """Move the missing nodes of each blocked planned zone (held by its planned offers, or by the
    fallback offers that stand in for them) to the zone's first fallback in the plan whose offers are
    not blocked. False (and nothing changed): nothing blocked is missing, or a blocked zone has no such
    fallback left, or misses nodes of an offer that no fallback of a planned zone moves."""
    planned = {item.offer.offer_id: item.offer for item in la.plan.items}
    held_by = {holder: key for key, holder in la.stand_ins.items()}
    short: dict[str, set[str]] = {}  # planned zone -> planned offers whose nodes are missing
    for offer_id, count in la.wanted.items():
        if count > survivors[offer_id] and _is_blocked(la, la.offers[offer_id]):
            key = held_by.get(offer_id, offer_id)
            if key not in planned:
                return False  # an offer of a re-plan: only a re-plan knows where its nodes may go
            short.setdefault(planned[key].location.zone_scope, set()).add(key)
    if not short:
        return False
    chosen = []
    for zone, keys in sorted(short.items()):
        choice = next((f for f in la.plan.fallbacks_for(zone)
                       if keys <= {key for key, _ in f.moves} and not any(_is_blocked(la, o) for _, o in f.moves)),
                      None)
        if choice is None:
            return False
        chosen.append(choice)
    from geotrain.pricing.records import offer_record

    for fallback in chosen:
        for key, offer in fallback.moves:
            holder = la.stand_ins.get(key, key)
            missing = max(0, la.wanted[holder] - survivors[holder])
            if not missing or holder == offer.offer_id:
                continue
            la.wanted[holder] -= missing
            la.wanted[offer.offer_id] += missing
            la.offers[offer.offer_id] = offer
            la.stand_ins[key] = offer.offer_id
        la.ledger.event(la.run_id, EventKind.FELL_BACK, zone=fallback.replaces, cause=cause,
                        moves={key: offer.offer_id for key, offer in fallback.moves},
                        wanted={k: v for k, v in la.wanted.items() if v}, kept=dict(survivors),
                        usd_per_hour=fallback.usd_per_hour, samples_per_s=fallback.samples_per_s,
                        launch_chance=fallback.launch_chance,
                        offers=[offer_record(offer) for _, offer in fallback.moves])
    la.wanted = Counter({k: v for k, v in la.wanted.items() if v})
    return True


def replan(la: Launcher, survivors: Counter, *, cause: str) -> bool:
    """Buy back what the plan promised around the blocked scopes, the survivors kept. False: no new
    mix was found (the wanted mix is the survivors alone)."""
    from geotrain.planning.planner import PlanOptions, make_plan
    from geotrain.pricing.inventory import load_inventory
    from geotrain.pricing.snapshot import SnapshotStore

    started = time.time()
    blocked = frozenset(scope for scope, until in la.blocked.items() if until > started)
    plan, job = la.plan, la.plan.job
    nodes = max(plan.nodes, sum(survivors.values()))
    constraints = replace(job.constraints, max_nodes=min(job.constraints.max_nodes or nodes, nodes))
    clouds = served_clouds(la.provider)  # a re-plan buys only where this launch's providers can
    if clouds is not None:
        constraints = replace(constraints, clouds=clouds & job.constraints.clouds if job.constraints.clouds else clouds)
    attempts = [
        replace(job, objective=Objective.MIN_COST, constraints=constraints,
                target_samples_per_s=plan.totals.samples_per_s * 0.999),
        replace(job, objective=Objective.MAX_THROUGHPUT, constraints=constraints,
                budget_usd_per_hour=plan.totals.usd_per_hour * 1.25),
    ]
    options = PlanOptions(keep=dict(survivors), blocked=blocked, frontier_points=0, time_limit_s=10,
                          recovery_h=plan.recovery_h, provider=plan.provider)
    reasons = []
    try:
        snapshot = SnapshotStore().load(plan.snapshot_id)
        inventory = load_inventory(job.onprem_inventory) if job.onprem_inventory else None
    except GeotrainError as exc:
        reasons.append(str(exc))
        attempts = []
    for attempt in attempts:
        try:
            new = make_plan(attempt, snapshot, inventory=inventory, options=options)
        except GeotrainError as exc:
            reasons.append(str(exc))
            continue
        from geotrain.pricing.records import offer_record

        for item in new.items:
            la.offers[item.offer.offer_id] = item.offer
        la.wanted = Counter({item.offer.offer_id: item.count for item in new.items})
        la.stand_ins.clear()
        la.ledger.event(la.run_id, EventKind.REPLANNED, wanted=dict(la.wanted), kept=dict(survivors), cause=cause,
                        objective=attempt.objective.value, blocked=sorted(blocked),
                        usd_per_hour=new.totals.usd_per_hour, samples_per_s=new.totals.samples_per_s,
                        seconds=round(time.time() - started, 3), offers=[offer_record(i.offer) for i in new.items])
        return True
    la.wanted = Counter(dict(survivors))
    la.ledger.event(la.run_id, EventKind.REPLAN_FAILED, reasons=reasons, kept=dict(survivors), cause=cause)
    return False


def survivors_of(nodes: list[NodeInfo]) -> Counter:
    return Counter(n.offer_id for n in nodes if n.state == NodeState.RUNNING)

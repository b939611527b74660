"""Getting the wanted nodes: launch what is missing, meet the provider's failures, re-plan around them.

Every node is launched with a request id derived from the run, the offer and a counter of that
offer's nodes already in the ledger, so a repeated request (a retry, a restarted launcher) names the
same node and a provider never makes it twice. What a launch can meet, and what happens then:

=========================  =====================================================================
CapacityError              the scope (the offer's zone) is blocked for ``block_s``; re-plan
QuotaError                 the scope (the cloud, or ``cloud/region``) is blocked; re-plan
ConfigurationError         not capacity: no zone is blocked and nothing fails over. Refused for one
                           offer alone (its type or size where it is, ``offer_id`` set) while the
                           wanted mix has other offers: that offer is left out for the run (blocked
                           by id, ``LAUNCH_FAILED`` failure "configuration" and ``BLOCKED`` in the
                           ledger) and the mix mended without it; else (the image, a parameter, or
                           the mix's only offer) the launch stops with the error's one line
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
(``launcher.replanning.replan``): the cheapest mix that reaches the plan's throughput within its node count, else the most
throughput for the plan's $/h + 25 %, else the survivors alone. Both write the new wanted mix to the
ledger (``fell_back``, ``replanned``), so that a resumed launcher wants the same. When nothing can be
launched and no node is left, the run fails with the reasons. Neither moves nodes into a place a new
account must opt in to (an AWS opt-in region, a Local or Wavelength Zone) that the job or its plan did not
name (``clouds.geography.launcher_may_go``).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from geotrain.domain import Market, Offer, Plan
from geotrain.launcher.deadline import MarketRule
from geotrain.launcher.replanning import replan
from geotrain.launcher.run import Clock, Launch, release_surplus, served_clouds
from geotrain.launcher.steering import steer
from geotrain.errors import (
    CapacityError, ConfigurationError, CredentialsError, GeotrainError, ProviderError, ProviderTimeoutError, QuotaError,
    ThrottledError,
)
from geotrain.ledger import EventKind, Ledger
from geotrain.providers.base import LaunchRequest, NodeInfo, NodeState, Provider
from geotrain.providers.bootimage import boot_disk, boot_image

if TYPE_CHECKING:
    from geotrain.launcher.deadline import Deadline
    from geotrain.launcher.spot_policy import Mix, Situation, SpotPolicy
    from geotrain.launcher.watch import MarketWatch, Need
    from geotrain.launcher.options import LaunchOptions
    from geotrain.pricing.capacity import CapacityModel
    from geotrain.pricing.snapshot import PriceSnapshot

MAX_PROVISION_ROUNDS = 8  # launch, fail, re-plan: rounds before a generation starts with what is up
LEFT_OUT_UNTIL = 4102444800.0  # 2100-01-01 UTC: "blocked until" of an offer left out for the run (configuration)


def provision(la: Launch) -> list[NodeInfo]:
    """The nodes of the next generation: launch what is missing, re-plan around what fails."""
    track_untracked(la)
    if not la.wanted and la.options.replan and not la.alive_nodes():  # a re-plan found nothing before: again
        if la.remaining() is not None:
            steer(la, cause="no node wanted")
        else:
            replan(la, Counter(), cause="no node wanted")
    for _ in range(MAX_PROVISION_ROUNDS):
        recorded = record_ended(la)  # ended meanwhile (preempted during recovery): recorded, re-planned
        failures = launch_missing(la)
        if la.stop_requested or not (failures or recorded):
            break
        if not failures:
            continue  # launch what the re-plan of the recorded preemptions wants
        if not la.options.replan:
            la.wanted = survivors_of(la.provider.list(la.run_id))
            break
        mend(la, survivors_of(la.provider.list(la.run_id)), cause="; ".join(f"{f.kind} in {f.scope}" for f in failures))
    return sorted(la.alive_nodes(), key=lambda n: (n.location.region_scope, n.location.zone, n.node_id))


def record_ended(la: Launch) -> bool:
    """Nodes that ended while no generation watched them (preempted during recovery, or at the end of
    a notice that began in the last generation): recorded once, their zones blocked, re-planned.
    True if there were any."""
    still_open = {row.node_id for row in la.ledger.nodes(la.run_id) if row.ended_at is None}
    lost = [n for n in la.provider.list(la.run_id) if n.ended and n.node_id in still_open]
    if lost:
        recover(la, lost)
    return bool(lost)


def recover(la: Launch, lost: list[NodeInfo]) -> None:
    """Lost nodes: ended in the ledger, the zones of spot nodes blocked (a market took them; a machine
    of one's own or an on-demand VM that died says nothing of its zone's other machines), the wanted mix
    mended."""
    for node in lost:
        la.preemptions += 1
        reason = node.end_reason or "preempted"
        offer = la.offers.get(node.offer_id)
        if offer is not None:  # the zone holds no more than the run's survivors there
            la.seen(offer, sum(1 for n in la.alive_nodes() if n.offer_id == node.offer_id))
        la.ledger.end_node(node.node_id, reason, at=node.ended_at.timestamp() if node.ended_at else None)
        la.ledger.event(la.run_id, EventKind.PREEMPTED, node_id=node.node_id, zone=node.location.zone_scope,
                        reason=reason, generation=la.generation)
        if offer is None or offer.market == Market.SPOT:
            block(la, node.location.zone_scope, f"{node.node_id} {reason}")
    if la.options.replan:
        mend(la, survivors_of(la.provider.list(la.run_id)), cause="preemption")


@dataclass(frozen=True, slots=True)
class LaunchFailure:
    kind: str  # capacity | quota | boot | blocked | configuration
    scope: str
    offer_id: str
    message: str


def launch_missing(la: Launch) -> list[LaunchFailure]:
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
            if la.stop_requested:  # a stop between two launches: buy nothing more (the launcher ends the run)
                break
            request = LaunchRequest(f"{la.run_id}/{offer_id}/{launched_before[offer_id] + k}", la.run_id, offer,
                                    image=boot_image(offer, la.plan.job.constraints, la.options.images),
                                    disk=boot_disk(offer, la.plan.job.constraints))
            try:
                node = _launch_one(la, request)
            except ConfigurationError as exc:  # not capacity: no zone is blocked, nothing fails over
                failures.append(_misconfigured(la, offer_id, exc))
                break
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
            la.seen(offer, have[offer_id] + k + 1)
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


def _misconfigured(la: Launch, offer_id: str, exc: ConfigurationError) -> LaunchFailure:
    """A launch refused as configured (``ConfigurationError``). About one offer alone (its type or size where it
    is) while the wanted mix has other offers: that offer is left out for the run (blocked by its id, the
    ledger says why) and the mix is mended without it. Anything else (the image, a parameter: every offer
    would meet it; or the mix's only offer): the launch stops with the error's one line (the launcher's
    failure path releases what it launched), rather than wander to other regions."""
    la.ledger.event(la.run_id, EventKind.LAUNCH_FAILED, failure="configuration", scope=exc.scope or "",
                    offer_id=offer_id, reason=str(exc))
    left_out = {key for key, until in la.blocked.items() if key in la.offers and until >= LEFT_OUT_UNTIL}
    others = [key for key, n in la.wanted.items() if n and key != offer_id and key not in left_out]
    if exc.offer_id != offer_id or not others:
        raise exc
    la.blocked[offer_id] = LEFT_OUT_UNTIL
    la.ledger.event(la.run_id, EventKind.BLOCKED, scope=offer_id, until=LEFT_OUT_UNTIL,
                    reason=f"left out of the run (configuration, not capacity): {exc}")
    return LaunchFailure("configuration", offer_id, offer_id, str(exc))


def track_untracked(la: Launch) -> None:
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


def boot_failed(la: Launch, node_id: str, scope: str, offer_id: str, why: str) -> LaunchFailure:
    """A launched node died before its worker ran: end it in the ledger, block its zone."""
    la.ledger.end_node(node_id, "boot_failed")
    la.ledger.event(la.run_id, EventKind.BOOT_FAILED, node_id=node_id, scope=scope, offer_id=offer_id, reason=why)
    block(la, scope, f"node {node_id} failed to boot")
    return LaunchFailure("boot", scope, offer_id, why)


def record_node(la: Launch, node: NodeInfo, offer: Offer) -> None:
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


def block(la: Launch, scope: str, why: str) -> None:
    until = la.clock.time() + la.block_s(scope)
    la.blocked[scope] = until
    la.ledger.event(la.run_id, EventKind.BLOCKED, scope=scope, until=until, reason=why)


def _launch_one(la: Launch, request: LaunchRequest) -> NodeInfo:
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


def _sleep(la: Launch, seconds: float) -> None:
    deadline = la.clock.time() + seconds
    while la.clock.time() < deadline and not la.stop_requested:
        la.clock.sleep(min(0.05, seconds))


def _fail(la: Launch, kind: str, scope: str, offer_id: str, exc: GeotrainError) -> LaunchFailure:
    if kind == "capacity":
        la.seen(la.offers[offer_id], sum(1 for n in la.alive_nodes() if n.offer_id == offer_id))
    la.ledger.event(la.run_id, EventKind.LAUNCH_FAILED, failure=kind, scope=scope, offer_id=offer_id, reason=str(exc))
    block(la, scope, f"{kind}: {exc}")
    return LaunchFailure(kind, scope, offer_id, str(exc))


def _is_blocked(la: Launch, offer: Offer) -> bool:
    loc = offer.location
    now = la.clock.time()
    clouds = served_clouds(la.provider)
    return (clouds is not None and loc.cloud not in clouds) or any(
        la.blocked.get(scope, 0) > now for scope in (loc.cloud, loc.region_scope, loc.zone_scope, offer.offer_id))


def mend(la: Launch, survivors: Counter, *, cause: str) -> bool:
    """The plan's fallbacks where they cover every blocked zone that misses nodes, else a re-plan. A
    job with a deadline is steered by its spot policy instead (``launcher.steering``): the fallbacks
    were chosen for the whole deadline, not for what is left of it."""
    if la.remaining() is not None:
        steer(la, cause=cause)
        return True
    return fall_back(la, survivors, cause=cause) or replan(la, survivors, cause=cause)


def fall_back(la: Launch, survivors: Counter, *, cause: str) -> bool:
    """Move the missing nodes of each blocked planned zone (held by its planned offers, or by the
    fallback offers that stand in for them) to the zone's first fallback in the plan whose offers are
    not blocked. False (and nothing changed): nothing blocked is missing, or a blocked zone has no such
    fallback left, or misses nodes of an offer that no fallback of a planned zone moves, or (a job with a
    deadline) the moved mix would train too slowly to keep it on spot."""
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
    from geotrain.clouds.geography import launcher_may_go, named_places

    named = named_places(la.plan.job, la.plan)  # a plan saved before fallbacks knew opt-in places: checked here too
    chosen = []
    for zone, keys in sorted(short.items()):
        choice = next((f for f in la.plan.fallbacks_for(zone)
                       if keys <= {key for key, _ in f.moves} and not any(_is_blocked(la, o) for _, o in f.moves)
                       and all(launcher_may_go(o.location, named) for _, o in f.moves)), None)
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


def waiting_s(la: Launch) -> float | None:
    """With no node up and none to be had: how long to wait before trying again (a job with a
    deadline whose slack still allows spot: until the first blocked scope opens, at most a minute and
    at least a second), or None (no deadline, or only on-demand is left: the run fails)."""
    deadline = la.remaining()
    if deadline is None or deadline.rule() is not MarketRule.SPOT:
        return None
    now = la.clock.time()
    opens = [until - now for until in la.blocked.values() if until > now]
    return min(60.0, max(1.0, min(opens, default=60.0)))


def survivors_of(nodes: list[NodeInfo]) -> Counter:
    return Counter(n.offer_id for n in nodes if n.state == NodeState.RUNNING)

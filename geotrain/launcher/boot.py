"""Waiting for a generation's nodes to boot: every node at once, and never past a stop.

A cloud VM is running minutes before its node agent answers (the startup script installs geotrain).
Waiting for the nodes one after another, each up to ``BOOT_TIMEOUT_S``, made a launch with N nodes that
never answer wait N × 10 minutes, deaf to Ctrl-C and ``geotrain stop``. :func:`wait_booted` instead
watches every node in a thread of its own (one short look at a time through the provider's
:class:`~geotrain.providers.bootwatch.BootWatch`: a few API calls and one ``GET /v1/health``), while the
calling thread looks at the stop flag every ``STOP_LOOK_S`` and returns as soon as it is set: the
boot wait costs one timeout whatever the number of nodes, and a stop at most ``STOP_LOOK_S``.

:func:`boot_generation` is the launcher's step between provisioning and starting the workers
(``Launcher._start_generation`` calls it first, with the generation's members): the generation starts
only when every member answers; a node that ended or never answered is terminated, recorded as a boot
failure (its zone blocked) and the mix mended, as a boot failure found by ``start`` is; a stop leaves the
nodes to the launcher's next turn, which terminates every node of the run. :func:`release_all` terminates
a run's live nodes in parallel (what a stop must do within a minute, whatever the number of nodes).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from enum import StrEnum
from typing import TYPE_CHECKING

from geotrain.errors import GeotrainError, NotFoundError
from geotrain.providers.base import NodeInfo, NodeState, Provider
from geotrain.providers.bootwatch import BootWatch

if TYPE_CHECKING:
    from geotrain.launcher.run import Launch

__all__ = ["BOOT_TIMEOUT_S", "BootOutcome", "BootWatch", "boot_generation", "release_all", "wait_booted"]

BOOT_TIMEOUT_S = 600.0  # a VM whose agent has not answered by then will not (AgentChannel's ready timeout)
STOP_LOOK_S = 0.2  # how often the waiting thread looks at the stop flag
LOOK_EVERY_S = 1.0  # how often each node is looked at (its first look at once)
RELEASE_THREADS = 16  # terminate calls in flight at once


class BootOutcome(StrEnum):
    READY = "ready"  # up, and its agent answers: start the worker (``start`` will not wait)
    FAILED = "failed"  # ended while booting, or its agent refuses the run's token
    TIMED_OUT = "timed_out"  # still silent when the wait's time was up
    STOPPED = "stopped"  # not ready when the stop flag was set


def wait_booted(provider: Provider, nodes: Iterable[NodeInfo | str], *, stop: Callable[[], bool],
                timeout_s: float = BOOT_TIMEOUT_S, look_every_s: float = LOOK_EVERY_S,
                clock: Callable[[], float] = time.monotonic) -> dict[str, BootOutcome]:
    """Every node's outcome, by node id, waiting for all of them at once (a thread per node) for at most
    ``timeout_s``. ``stop`` is looked at every ``STOP_LOOK_S``: once it says True, the nodes not ready yet
    are STOPPED and the call returns at once (their watching threads end after their current look).
    A provider without :class:`BootWatch` has nodes that are ready once launched. A look that fails with a
    provider error (the cloud did not answer) is tried again at the next look; an unknown node is FAILED."""
    ids = list(dict.fromkeys(n if isinstance(n, str) else n.node_id for n in nodes))
    if not isinstance(provider, BootWatch):
        return {node_id: BootOutcome.READY for node_id in ids}
    results: dict[str, BootOutcome] = {}
    lock = threading.Lock()
    quit_ = threading.Event()
    news = threading.Event()

    def watch(node_id: str) -> None:
        while not quit_.is_set():
            try:
                said = provider.booted(node_id)  # type: ignore[attr-defined]
            except NotFoundError:
                said = False
            except GeotrainError:
                said = None  # the cloud did not answer now: look again
            if said is not None:
                with lock:
                    results.setdefault(node_id, BootOutcome.READY if said else BootOutcome.FAILED)
                news.set()
                return
            quit_.wait(look_every_s)

    for node_id in ids:
        threading.Thread(target=watch, args=(node_id,), name=f"boot-{node_id}", daemon=True).start()
    deadline = clock() + timeout_s
    try:
        while True:
            with lock:
                if len(results) == len(ids):
                    break
            late = BootOutcome.STOPPED if stop() else BootOutcome.TIMED_OUT if clock() >= deadline else None
            if late is not None:
                with lock:
                    for node_id in ids:
                        results.setdefault(node_id, late)
                break
            news.wait(STOP_LOOK_S)
            news.clear()
    finally:
        quit_.set()
    with lock:
        return {node_id: results[node_id] for node_id in ids}


def boot_generation(la: Launch, members: list[NodeInfo], *, timeout_s: float = BOOT_TIMEOUT_S) -> bool:
    """Wait until every member answers (``wait_booted`` with ``stop=lambda: la.stop_requested``). True: start
    the workers. False: start no worker now: the run was asked to stop (the launcher's next turn terminates
    every node), or members did not boot; a preempted one is recovered as a preemption, every other one
    terminated, recorded as a boot failure (its zone blocked) and the mix mended; the launcher provisions
    again."""
    from geotrain.launcher.provisioning import boot_failed, mend, recover, survivors_of

    outcomes = wait_booted(la.provider, members, stop=lambda: la.stop_requested, timeout_s=timeout_s)
    if la.stop_requested:
        return False
    bad = {node_id: outcome for node_id, outcome in outcomes.items() if outcome is not BootOutcome.READY}
    if not bad:
        return True
    now = {n.node_id: n for n in la.provider.list(la.run_id)}
    preempted = [now[i] for i in bad if i in now and now[i].state == NodeState.PREEMPTED]
    for node in members:
        if node.node_id not in bad or any(p.node_id == node.node_id for p in preempted):
            continue
        seen = now.get(node.node_id)
        if seen is not None and not seen.ended:
            la.provider.terminate(node.node_id, reason="boot_failed")
        why = (f"its agent did not answer within {timeout_s:.0f} s; the VM's startup script may have failed (see "
               "its serial console / system log)" if bad[node.node_id] is BootOutcome.TIMED_OUT else
               f"the node ended before its agent answered ({seen.end_reason if seen else 'gone'})"
               if seen is None or seen.ended else "its agent refused the run's token")
        boot_failed(la, node.node_id, node.location.zone_scope, node.offer_id, why)
    if preempted:
        recover(la, preempted)  # mends the mix for the boot failures too
    elif la.options.replan:
        mend(la, survivors_of(la.provider.list(la.run_id)), cause=f"boot failure of {', '.join(sorted(bad))}")
    return False


def release_all(provider: Provider, run_id: str, reason: str, *, threads: int = RELEASE_THREADS) -> list[str]:
    """Terminate every pending or running node of the run, ``threads`` at a time; the node ids asked to end.
    A terminate that fails is tried once more, then raised."""
    live = [n.node_id for n in provider.list(run_id) if n.state in (NodeState.RUNNING, NodeState.PENDING)]

    def end(node_id: str) -> None:
        try:
            provider.terminate(node_id, reason=reason)
        except NotFoundError:
            return
        except GeotrainError:
            provider.terminate(node_id, reason=reason)

    if live:
        with ThreadPoolExecutor(max_workers=max(1, min(threads, len(live))), thread_name_prefix="release") as pool:
            for future in [pool.submit(end, node_id) for node_id in live]:
                future.result()
    return live

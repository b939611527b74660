"""Executes a run's preemption schedule against the provider (with the local provider: real kills).

Runs as a thread of the launcher: it watches the training's progress and checkpoint writes in the
ledger, and preempts nodes through ``provider.preempt`` when an event of the schedule is due (see
``geotrain.launcher.preemptions`` for the schedule's forms).

Its state is the ledger's: every injection is recorded with the index of its schedule event, and a
resumed launcher's injector skips the events already fired; ``during_checkpoint`` events watch only
the writes that begin after the injector starts, and ``at_s`` counts from the run's first generation.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from geotrain.errors import GeotrainError
from geotrain.launcher.preemptions import RateClock
from geotrain.providers.base import Preempting
from geotrain.ledger import EventKind

if TYPE_CHECKING:
    from geotrain.launcher.loop import Launcher


class Injector(threading.Thread):
    """Executes the run's preemption schedule against the provider (local provider: real kills)."""

    def __init__(self, launcher: Launcher) -> None:
        super().__init__(name="geotrain-preemptions", daemon=True)
        self.launcher = launcher
        self.schedule = launcher.options.preemptions
        fired = {e.detail.get("event") for e in launcher.ledger.events(launcher.run_id,
                                                                        kinds=(EventKind.PREEMPTION_INJECTED,))}
        self.pending = [(n, e) for n, e in enumerate(self.schedule.events) if n not in fired]
        self.clock = RateClock(self.schedule.rate_per_node_hour or 0.0, self.schedule.seed)
        self.next_rate_at: float | None = None
        self._halt = threading.Event()
        past = launcher.ledger.events(launcher.run_id)
        self._seen_event = past[-1].id if past else 0  # checkpoint writes from now on

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)

    def run(self) -> None:
        la = self.launcher
        if not isinstance(la.provider, Preempting) or self.schedule.is_empty():
            return
        preempt = la.provider.preempt
        while not self._halt.wait(0.05):
            if la.training_started_at is None:
                continue
            elapsed = time.time() - la.training_started_at
            writing, writing_step = None, -1
            for event in la.ledger.events(la.run_id, after_id=self._seen_event,
                                          kinds=(EventKind.CHECKPOINT_WRITE_STARTED,)):
                writing, writing_step = event.node_id, event.detail.get("step", 0)
                self._seen_event = event.id
            last = la.ledger.last_progress(la.run_id)
            step = last.step if last else 0
            for index, event in list(self.pending):
                if event.during_checkpoint:
                    fire = writing is not None and writing_step >= (event.at_step or 0)
                else:
                    fire = ((event.at_s is not None and elapsed >= event.at_s)
                            or (event.at_step is not None and step >= event.at_step))
                if fire:
                    target = self._pick(event, writing)
                    if target is None and isinstance(event.node, str):  # a node id that is not up: say so, once
                        self.pending.remove((index, event))
                        la.ledger.event(la.run_id, EventKind.PREEMPTION_FAILED, node_id=event.node, event=index,
                                        reason=f"no live node {event.node} in this run when the event was due")
                        continue
                    if target is None:
                        continue
                    self.pending.remove((index, event))
                    self._fire(preempt, target, event.notice_s, index)
            if self.schedule.rate_per_node_hour:
                alive = la.members
                if self.next_rate_at is None:
                    self.next_rate_at = self.clock.next_after(elapsed, len(alive))
                elif elapsed >= self.next_rate_at:
                    up = {n.node_id for n in la.alive_nodes()}
                    live = [n for n in alive if n.node_id in up]
                    if live:
                        node = live[int(self.clock.rng.random() * len(live))]
                        self._fire(preempt, node.node_id, None, None)
                    self.next_rate_at = self.clock.next_after(elapsed, len(alive))

    def _pick(self, event, writing: str | None) -> str | None:  # noqa: ANN001
        live = {n.node_id for n in self.launcher.alive_nodes()}
        members = [n.node_id for n in self.launcher.members if n.node_id in live]
        if not members:
            return None
        if isinstance(event.node, str):
            return event.node if event.node in members else None
        if isinstance(event.node, int):
            return members[event.node % len(members)]
        if event.during_checkpoint:
            return writing
        return members[-1]

    def _fire(self, preempt, node_id: str, notice_s: float | None, index: int | None) -> None:  # noqa: ANN001
        notice = self.schedule.notice_s if notice_s is None else notice_s
        la = self.launcher
        la.ledger.event(la.run_id, EventKind.PREEMPTION_INJECTED, node_id=node_id, notice_s=notice, event=index)
        try:
            preempt(node_id, notice_s=notice)
        except GeotrainError as exc:
            la.ledger.event(la.run_id, EventKind.PREEMPTION_FAILED, node_id=node_id, reason=str(exc))

"""Injected preemptions: when, which node, with how much notice.

Three ways to say when (``geotrain launch`` flags):

- ``--preempt-rate R``: a Poisson process, R expected preemptions per node-hour (as the catalog's
  interruption figures);
- ``--preempt-at 10,25,40``: at these seconds after the start of training;
- ``--preempt-trace FILE``: a CSV (``at_s,node,notice_s``) or a JSON/YAML list of events, each with
  one trigger — ``at_s`` (seconds after the start), ``at_step`` (when training reaches a step) or
  ``during_checkpoint: true`` (while a checkpoint is being written, from ``at_step`` on if given;
  the writer is preempted unless a node is named) — and optionally ``node`` (an index into the live
  nodes in rank order, or a node id) and ``notice_s``.

``--notice S`` gives every injected preemption S seconds of notice unless the event says otherwise
(AWS gives 120 s, GCP and Azure about 30 s).

A YAML/JSON trace may also hold provider faults, each an event with a ``fault`` key instead of a
trigger: ``{fault: capacity, scope: aws/us-east-1/use1-az2}``, ``{fault: quota, scope: aws}``,
``{fault: throttle, times: 2}``, ``{fault: timeout}``, ``{fault: boot, after: 4}``,
``{fault: dies_booting}``, ``{fault: dies_before_start}`` — see ``geotrain.providers.faults`` for
what each does; ``after`` skips that many matching launches first, ``times`` is how many fail.
"""

from __future__ import annotations

import csv
import io
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

from geotrain.errors import InputError
from geotrain.providers.faults import Fault, FaultKind, fault_from_dict
from geotrain.specfile import parse_yaml, read_text


@dataclass(frozen=True, slots=True)
class PreemptionEvent:
    at_s: float | None = None
    at_step: int | None = None
    during_checkpoint: bool = False
    node: int | str | None = None  # index into live nodes (rank order) or a node id; None: chosen for you
    notice_s: float | None = None  # None: the schedule's default


@dataclass(frozen=True, slots=True)
class PreemptionSchedule:
    events: tuple[PreemptionEvent, ...] = ()
    rate_per_node_hour: float | None = None
    notice_s: float = 0.0
    seed: int = 0
    faults: tuple[Fault, ...] = ()  # provider faults (``geotrain.providers.faults``)

    def is_empty(self) -> bool:
        return not self.events and not self.rate_per_node_hour

    def to_dict(self) -> dict:
        return {"events": [_event_dict(e) for e in self.events],
                "rate_per_node_hour": self.rate_per_node_hour, "notice_s": self.notice_s, "seed": self.seed,
                "faults": [f.to_dict() for f in self.faults]}


def _event_dict(event: PreemptionEvent) -> dict:
    return {"at_s": event.at_s, "at_step": event.at_step, "during_checkpoint": event.during_checkpoint,
            "node": event.node, "notice_s": event.notice_s}


def schedule_from_dict(data: dict) -> PreemptionSchedule:
    return PreemptionSchedule(tuple(PreemptionEvent(**e) for e in data.get("events", [])),
                              data.get("rate_per_node_hour"), data.get("notice_s", 0.0), data.get("seed", 0),
                              tuple(fault_from_dict(f) for f in data.get("faults", [])))


MAX_SECONDS = 10 * 365 * 86400.0  # no injected time or notice beyond ten years
MAX_STEP = 10**10 - 1  # a checkpoint step's range


def parse_times(text: str) -> tuple[PreemptionEvent, ...]:
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = float(part)
        except ValueError:
            raise InputError(f"--preempt-at: {part!r} is not a number of seconds") from None
        if not math.isfinite(value) or not 0 <= value <= MAX_SECONDS:
            raise InputError(f"--preempt-at: {part} is not a number of seconds from 0 to {MAX_SECONDS:g}")
        out.append(PreemptionEvent(at_s=value))
    return tuple(out)


def load_trace(path: str | Path) -> tuple[tuple[PreemptionEvent, ...], tuple[Fault, ...]]:
    """The preemptions and provider faults of a trace file."""
    path = Path(path)
    text = read_text(path, InputError)
    if path.suffix.lower() == ".csv":
        try:
            rows = list(csv.DictReader(io.StringIO(text)))
        except csv.Error as exc:
            raise InputError(f"{path}: not valid CSV ({exc})") from exc
        if not rows or "at_s" not in rows[0]:
            raise InputError(f"{path}: a preemption trace CSV needs the columns at_s[,node,notice_s]")
        for line, row in enumerate(rows, start=2):
            if None in row or None in row.values():
                raise InputError(f"{path}: line {line}: the number of fields differs from the header's")
        items = [{k: _csv_value(k, v) for k, v in r.items() if v not in (None, "")} for r in rows]
    else:
        items = parse_yaml(text, path, InputError)
        if not isinstance(items, list):
            raise InputError(f"{path}: a preemption trace is a list of events")
    events, faults = [], []
    for n, item in enumerate(items, start=1):
        if isinstance(item, dict) and "fault" in item:
            faults.append(_fault(item, f"{path}: event {n}"))
        else:
            events.append(_event(item, f"{path}: event {n}"))
    return tuple(events), tuple(faults)


def _fault(item: dict, where: str) -> Fault:
    known = {"fault", "scope", "times", "after", "made"}
    unknown = {str(k) for k in item} - known
    if unknown:
        raise InputError(f"{where}: unknown field {', '.join(sorted(unknown))}; a fault knows {', '.join(sorted(known))}")
    kinds = [k.value for k in FaultKind]
    if not isinstance(item["fault"], str) or item["fault"] not in kinds:
        raise InputError(f"{where}: fault {item['fault']!r} is not one of {', '.join(kinds)}")
    scope = item.get("scope")
    if scope is not None and (not isinstance(scope, str) or not scope.strip()):
        raise InputError(f"{where}: scope must be a cloud, cloud/region, a zone scope or an offer id")
    times, after = item.get("times", 1), item.get("after", 0)
    if isinstance(times, bool) or not isinstance(times, int) or times < 1:
        raise InputError(f"{where}: times must be a whole number >= 1")
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise InputError(f"{where}: after must be a whole number >= 0")
    made = item.get("made", True)
    if not isinstance(made, bool):
        raise InputError(f"{where}: made must be true or false")
    return Fault(FaultKind(item["fault"]), scope.strip() if scope else None, times, after, made)


def _csv_value(key: str, value: str) -> object:
    """A CSV cell as the YAML form would give it: numbers as numbers."""
    if key in ("at_s", "notice_s"):
        try:
            return float(value)
        except ValueError:
            return value
    if key in ("at_step", "node") and value.strip().isdigit():
        return int(value)
    return value


def _number(item: dict, key: str, where: str, *, whole: bool = False) -> float | int | None:
    if key not in item:
        return None
    value = item[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{where}: {key} must be a number, got {value!r}")
    limit = MAX_STEP if whole else MAX_SECONDS
    if not math.isfinite(value) or not 0 <= value <= limit:
        raise InputError(f"{where}: {key} must be a number from 0 to {limit:g}, got {value!r}")
    if whole:
        if isinstance(value, float) and not value.is_integer():
            raise InputError(f"{where}: {key} must be a whole number, got {value!r}")
        return int(value)
    return float(value)


def _event(item: object, where: str) -> PreemptionEvent:
    if not isinstance(item, dict):
        raise InputError(f"{where}: not a mapping")
    known = {"at_s", "at_step", "during_checkpoint", "node", "notice_s"}
    unknown = {str(k) for k in item} - known
    if unknown:
        raise InputError(f"{where}: unknown field {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")
    at_s = _number(item, "at_s", where)
    at_step = _number(item, "at_step", where, whole=True)
    notice = _number(item, "notice_s", where)
    during = item.get("during_checkpoint", False)
    if not isinstance(during, bool):
        raise InputError(f"{where}: during_checkpoint must be true or false, got {during!r}")
    if during and at_s is not None or not during and (at_s is None) == (at_step is None):
        raise InputError(f"{where}: give one of at_s, at_step, during_checkpoint (which may have an at_step)")
    node = item.get("node")
    if isinstance(node, str) and node.strip().isdigit():
        node = int(node)
    if node is not None and not (isinstance(node, int) and not isinstance(node, bool) and node >= 0
                                 or isinstance(node, str) and node.strip()):
        raise InputError(f"{where}: node must be an index (0, 1, …) into the live nodes or a node id, got {node!r}")
    return PreemptionEvent(at_s, at_step, during, node, notice)


class RateClock:
    """Draws the next preemption time of a Poisson process whose rate follows the node count."""

    def __init__(self, rate_per_node_hour: float, seed: int) -> None:
        self.rate = rate_per_node_hour / 3600
        self.rng = random.Random(seed)

    def next_after(self, now_s: float, nodes: int) -> float:
        if nodes <= 0 or self.rate <= 0:
            return math.inf
        return now_s + self.rng.expovariate(self.rate * nodes)


def describe(schedule: PreemptionSchedule) -> str:
    parts = []
    if schedule.rate_per_node_hour:
        parts.append(f"{schedule.rate_per_node_hour:g} per node-hour")
    if schedule.events:
        parts.append(f"{len(schedule.events)} scheduled")
    if schedule.notice_s:
        parts.append(f"{schedule.notice_s:g} s notice")
    return ", ".join(parts) or "none"


def dumps(schedule: PreemptionSchedule) -> str:
    return json.dumps(schedule.to_dict(), sort_keys=True)

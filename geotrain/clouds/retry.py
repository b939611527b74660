"""The one retry policy for a cloud that asks us to slow down (throttling), used by the price sources
and the providers alike."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def with_backoff(call: Callable[[], T], *, throttled: Callable[[BaseException], bool], attempts: int = 6,
                 first_pause_s: float = 0.2, sleep: Callable[[float], None] = time.sleep,
                 on_retry: Callable[[int, float], None] | None = None) -> T:
    """``call()``, retried after a pause that doubles while ``throttled(error)`` says the cloud asked us to
    slow down; the last throttling error is raised after ``attempts`` tries."""
    pause = first_pause_s
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - which errors are throttling is the caller's to say
            if not throttled(exc) or attempt == attempts:
                raise
            if on_retry is not None:
                on_retry(attempt, pause)
            sleep(pause)
            pause *= 2
    raise AssertionError("unreachable")

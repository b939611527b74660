"""wait_booted: every node watched at once, a stop honoured within a second, failures and timeouts told
apart; boot_generation's verdicts; release_all ends every live node."""

from __future__ import annotations

import threading
import time

from geotrain.errors import NotFoundError, ProviderError
from geotrain.launcher.boot import BootOutcome, BootWatch, release_all, wait_booted


class Watched:
    """A provider whose nodes boot after ``ready_after_s`` (None: never); ``booted`` takes ``look_s``."""

    def __init__(self, ready_after_s: dict[str, float | None], look_s: float = 0.0,
                 failing: frozenset[str] = frozenset()) -> None:
        self.started = time.monotonic()
        self.ready_after_s = ready_after_s
        self.look_s = look_s
        self.failing = failing
        self.looks: dict[str, int] = {}
        self.lock = threading.Lock()

    def booted(self, node_id: str) -> bool | None:
        with self.lock:
            self.looks[node_id] = self.looks.get(node_id, 0) + 1
        time.sleep(self.look_s)
        if node_id in self.failing:
            return False
        if node_id not in self.ready_after_s:
            raise NotFoundError(node_id)
        after = self.ready_after_s[node_id]
        return True if after is not None and time.monotonic() - self.started >= after else None


def test_the_provider_seam_is_a_protocol():
    assert isinstance(Watched({}), BootWatch)
    assert not isinstance(object(), BootWatch)


def test_nodes_are_waited_for_at_once_not_one_after_another():
    provider = Watched({f"n{i}": 0.6 for i in range(8)}, look_s=0.3)
    t0 = time.monotonic()
    outcomes = wait_booted(provider, list(provider.ready_after_s), stop=lambda: False, timeout_s=30, look_every_s=0.1)
    took = time.monotonic() - t0
    assert outcomes == {f"n{i}": BootOutcome.READY for i in range(8)}
    assert took < 2.5, f"8 nodes booting in 0.6 s each took {took:.1f} s: not waited for in parallel"


def test_a_stop_ends_the_wait_within_a_second_even_while_a_look_hangs():
    provider = Watched({"a": None, "b": None, "c": 0.0}, look_s=5.0)  # each look blocks 5 s (a dropped SYN)
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    t0 = time.monotonic()
    outcomes = wait_booted(provider, ["a", "b", "c"], stop=stop.is_set, timeout_s=600)
    took = time.monotonic() - t0
    assert took < 1.5, took
    assert outcomes == {"a": BootOutcome.STOPPED, "b": BootOutcome.STOPPED, "c": BootOutcome.STOPPED}


def test_failures_timeouts_and_unknown_nodes_are_told_apart():
    provider = Watched({"up": 0.0, "silent": None, "dead": 0.0}, failing=frozenset({"dead"}))
    outcomes = wait_booted(provider, ["up", "silent", "dead", "unknown"], stop=lambda: False, timeout_s=0.8,
                           look_every_s=0.1)
    assert outcomes == {"up": BootOutcome.READY, "silent": BootOutcome.TIMED_OUT, "dead": BootOutcome.FAILED,
                        "unknown": BootOutcome.FAILED}
    assert provider.looks["silent"] >= 3  # looked at again and again, not once


def test_a_cloud_that_does_not_answer_is_asked_again():
    class Flaky(Watched):
        def booted(self, node_id: str) -> bool | None:
            if self.looks.setdefault(node_id, 0) < 2:
                self.looks[node_id] += 1
                raise ProviderError("throttled")
            return True

    assert wait_booted(Flaky({}), ["x"], stop=lambda: False, timeout_s=5, look_every_s=0.05) == {
        "x": BootOutcome.READY}


def test_a_provider_without_a_boot_watch_has_ready_nodes():
    assert wait_booted(object(), ["a", "b"], stop=lambda: True, timeout_s=1) == {  # type: ignore[arg-type]
        "a": BootOutcome.READY, "b": BootOutcome.READY}


def test_release_all_terminates_every_live_node_in_parallel():
    from datetime import datetime, timezone

    from geotrain.domain import Continent, Location
    from geotrain.providers.base import NodeInfo, NodeState

    loc = Location("aws", "us-west-2", "usw2-az1", Continent.NORTH_AMERICA)

    def node(i: int, state: NodeState) -> NodeInfo:
        return NodeInfo(f"i-{i}", f"r/{i}", "run", "aws/us-west-2/usw2-az1/t/spot", loc, state,
                        datetime.now(timezone.utc), None, None, "")

    class Slow:
        def __init__(self) -> None:
            self.ended: list[str] = []

        def list(self, run_id: str | None = None) -> list[NodeInfo]:
            return [node(i, NodeState.RUNNING) for i in range(10)] + [node(99, NodeState.TERMINATED)]

        def terminate(self, node_id: str, *, reason: str = "terminated") -> None:
            time.sleep(0.3)
            self.ended.append(node_id)

    provider = Slow()
    t0 = time.monotonic()
    asked = release_all(provider, "run", "stopped")  # type: ignore[arg-type]
    assert sorted(asked) == sorted(provider.ended) == sorted(f"i-{i}" for i in range(10))
    assert time.monotonic() - t0 < 1.5

"""A provider's own state file: what it launched, so that a VM the cloud no longer lists still lists
as ended, and another process (a resumed launcher, ``geotrain stop``) sees the same nodes.

``<root>/state.json`` (0600 under GEOTRAIN_HOME, written atomically), read and written under an
``fcntl.flock`` on ``<root>/state.lock``: a fresh open file description per use, so the lock
excludes other processes *and* other threads of this one. ``root`` is resolved at each use
(GEOTRAIN_HOME may be set after the provider is made).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from geotrain.domain import Continent, Location
from geotrain.errors import ProviderError
from geotrain.files import atomic_write_text, geotrain_home
from geotrain.providers.base import NodeInfo, NodeState


def provider_root(home: Path | None, name: str) -> Callable[[], Path]:
    """``home``/providers/``name``, or GEOTRAIN_HOME's at each call when ``home`` is None."""
    return lambda: (Path(home) if home is not None else geotrain_home()) / "providers" / name


@contextlib.contextmanager
def flocked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (made if missing) for the block."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


class JsonState:
    """``empty()`` is the state of a provider that has launched nothing; a file whose version is not
    ``version`` or lacks an object under one of the keys of ``empty()`` is corrupt, and the error says
    ``corrupt_hint`` (where the VMs it listed can be found). Keys ``empty()`` has that an older file
    lacks are added."""

    def __init__(self, root: Callable[[], Path], empty: Callable[[], dict[str, Any]], *, corrupt_hint: str) -> None:
        self._root = root
        self._empty = empty
        self._hint = corrupt_hint

    @property
    def root(self) -> Path:
        return self._root()

    @property
    def path(self) -> Path:
        return self._root() / "state.json"

    def lock(self) -> contextlib.AbstractContextManager[None]:
        return flocked(self._root() / "state.lock")

    @contextlib.contextmanager
    def locked(self) -> Iterator[dict[str, Any]]:
        """The state, under the lock; written back if the block changed it and did not raise."""
        with self.lock():
            state = self.load()
            before = json.dumps(state, sort_keys=True)
            yield state
            if json.dumps(state, sort_keys=True) != before:
                self.save(state)

    def read(self) -> dict[str, Any]:
        """A copy of the state, read under the lock."""
        with self.locked() as state:
            return json.loads(json.dumps(state))

    def load(self) -> dict[str, Any]:
        """The state as on disk (call under :meth:`lock`)."""
        empty = self._empty()
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return empty
        try:
            state = json.loads(text)
            if not isinstance(state, dict) or state.get("version") != empty["version"]:
                raise ValueError(f"expected version {empty['version']}")
            for key, value in empty.items():
                state.setdefault(key, value)
                if isinstance(value, dict) and not isinstance(state[key], dict):
                    raise ValueError(f"{key!r} is not an object")
        except ValueError as exc:
            raise ProviderError(f"{self.path} is corrupt ({exc}); {self._hint}, and move the file away") from exc
        return state

    def save(self, state: dict[str, Any]) -> None:
        """Write the state (call under :meth:`lock`)."""
        atomic_write_text(self.path, json.dumps(state, indent=1, sort_keys=True) + "\n")


def location_of(rec: Mapping[str, Any]) -> Location:
    """The location a node record keeps as ``{"cloud", "region", "zone", "continent"}``."""
    loc = rec["location"]
    return Location(loc["cloud"], loc["region"], loc["zone"], Continent(loc["continent"]))


def node_info(rec: Mapping[str, Any], address: str) -> NodeInfo:
    """The NodeInfo of a node record (node_id, request_id, run_id, offer_id, location, state, ISO times)."""
    return NodeInfo(
        node_id=rec["node_id"], request_id=rec["request_id"], run_id=rec["run_id"], offer_id=rec["offer_id"],
        location=location_of(rec), state=NodeState(rec["state"]),
        launched_at=datetime.fromisoformat(rec["launched_at"]),
        ended_at=datetime.fromisoformat(rec["ended_at"]) if rec["ended_at"] else None,
        end_reason=rec["end_reason"], address=address,
    )

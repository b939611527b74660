"""The GCP provider's state file: what it launched, so that a terminated-and-vanished VM still lists as ended
and another process (a resumed launcher, ``geotrain stop``) sees the run's nodes.

``GEOTRAIN_HOME/providers/gcp/state.json`` (0600, written atomically), read and written under an
``fcntl.flock`` on ``state.lock`` beside it. It holds, per node (instance name): request id, run, offer,
location, project, zone, when it was launched, its last known state and address, and the end reason
geotrain gave; per run: the firewall rules it made; per request id: the attempts that failed for certain
(so that a retry sends GCE a new request id).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from geotrain.errors import ProviderError
from geotrain.files import atomic_write_text, geotrain_home

VERSION = 1


def _empty() -> dict[str, Any]:
    return {"version": VERSION, "nodes": {}, "firewalls": {}, "attempts": {}}


class StateFile:
    """The state under ``home`` (None: GEOTRAIN_HOME at each use)."""

    def __init__(self, home: Path | None = None) -> None:
        self._home = Path(home) if home is not None else None

    @property
    def root(self) -> Path:
        return (self._home if self._home is not None else geotrain_home()) / "providers" / "gcp"

    @property
    def path(self) -> Path:
        return self.root / "state.json"

    @contextlib.contextmanager
    def locked(self) -> Iterator[dict[str, Any]]:
        """The state, read under the lock; written back (atomically) when the block ends without error."""
        root = self.root
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(root / "state.lock", "a+b") as handle:  # a fresh open file description: excludes threads too
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                state = self._load()
                before = json.dumps(state, sort_keys=True)
                yield state
                if json.dumps(state, sort_keys=True) != before:
                    atomic_write_text(self.path, json.dumps(state, indent=1, sort_keys=True) + "\n")
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def read(self) -> dict[str, Any]:
        with self.locked() as state:
            return json.loads(json.dumps(state))

    def _load(self) -> dict[str, Any]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return _empty()
        try:
            state = json.loads(text)
            if not isinstance(state, dict) or state.get("version") != VERSION or \
                    not isinstance(state.get("nodes"), dict):
                raise ValueError(f"expected version {VERSION} with a nodes object")
        except ValueError as exc:
            raise ProviderError(f"{self.path} is corrupt ({exc}); the VMs it listed may still run (look for instances "
                                "labelled geotrain-run in the project), delete them and move the file away") from exc
        for key, value in _empty().items():
            state.setdefault(key, value)
        return state

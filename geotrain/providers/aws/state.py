"""The AWS provider's state file: what this user launched, so that an instance AWS no longer lists
still lists as ended, and another process (a resumed launcher, ``geotrain stop``) sees the same nodes.

``GEOTRAIN_HOME/providers/aws/state.json`` (0600, written atomically), read and written under an
``fcntl.flock`` on ``state.lock`` beside it. Version 1::

    {"version": 1,
     "nodes": {<request id>: {"request_id", "run_id", "offer_id", "region", "zone" (AZ id or ""),
                              "continent", "client_token", "image_id", "sent_at",
                              "node_id" (null while the request is in flight: sent, answer not seen),
                              "launched_at", "address", "state", "ended_at", "end_reason",
                              "end_requested" (the reason given to terminate, before AWS was asked),
                              "aws_state" (the instance state AWS showed last)}},
     "groups": {"<run id> <region>": {"run_id", "region", "vpc_id", "group_id"}}}
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

STATE_VERSION = 1
Record = dict[str, Any]


class StateFile:
    """One provider's state under ``home`` (None: GEOTRAIN_HOME at each call)."""

    def __init__(self, home: Path | None, name: str) -> None:
        self._home = Path(home) if home is not None else None
        self._name = name

    @property
    def root(self) -> Path:
        return (self._home if self._home is not None else geotrain_home()) / "providers" / self._name

    @contextlib.contextmanager
    def locked(self) -> Iterator[dict[str, Any]]:
        """The state, under the lock; saved on leaving the block if it changed."""
        root = self.root
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(root / "state.lock", "a+b") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                state = self._load(root / "state.json")
                before = json.dumps(state, sort_keys=True)
                yield state
                if json.dumps(state, sort_keys=True) != before:
                    atomic_write_text(root / "state.json", json.dumps(state, indent=1, sort_keys=True) + "\n")
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def read(self) -> dict[str, Any]:
        with self.locked() as state:
            return json.loads(json.dumps(state))

    @staticmethod
    def _load(path: Path) -> dict[str, Any]:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {"version": STATE_VERSION, "nodes": {}, "groups": {}}
        try:
            state = json.loads(text)
            if not isinstance(state, dict) or state.get("version") != STATE_VERSION \
                    or not isinstance(state.get("nodes"), dict) or not isinstance(state.get("groups"), dict):
                raise ValueError(f"expected version {STATE_VERSION} with nodes and groups")
        except ValueError as exc:
            raise ProviderError(
                f"{path} is corrupt ({exc}); the run's instances still run: find them in the EC2 console by the tag "
                "geotrain-run, terminate them, and move the file away") from exc
        return state


def by_node(state: dict[str, Any], node_id: str) -> Record | None:
    return next((r for r in state["nodes"].values() if r.get("node_id") == node_id), None)


def group_key(run_id: str, region: str) -> str:
    return f"{run_id} {region}"

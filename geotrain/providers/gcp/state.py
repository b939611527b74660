"""The GCP provider's state file: what it launched, so that a terminated-and-vanished VM still lists as ended
and another process (a resumed launcher, ``geotrain stop``) sees the run's nodes.

``GEOTRAIN_HOME/providers/gcp/state.json`` (0600, written atomically), read and written under an
``fcntl.flock`` on ``state.lock`` beside it. It holds, per node (instance name): request id, run, offer,
location, project, zone, when it was launched, its last known state and address, and the end reason
geotrain gave; per run: the firewall rules it made; per request id: the attempts that failed for certain
(so that a retry sends GCE a new request id).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from geotrain.providers.statefile import JsonState, provider_root

VERSION = 1


def _empty() -> dict[str, Any]:
    return {"version": VERSION, "nodes": {}, "firewalls": {}, "attempts": {}}


class StateFile(JsonState):
    """The state under ``home`` (None: GEOTRAIN_HOME at each use)."""

    def __init__(self, home: Path | None = None) -> None:
        super().__init__(provider_root(home, "gcp"), _empty,
                         corrupt_hint="the VMs it listed may still run (look for instances labelled geotrain-run in "
                                      "the project), delete them")

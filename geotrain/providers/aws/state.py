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

from pathlib import Path
from typing import Any

from geotrain.providers.statefile import JsonState, provider_root

STATE_VERSION = 1
Record = dict[str, Any]


class StateFile(JsonState):
    """One provider's state under ``home`` (None: GEOTRAIN_HOME at each call)."""

    def __init__(self, home: Path | None, name: str) -> None:
        super().__init__(provider_root(home, name), lambda: {"version": STATE_VERSION, "nodes": {}, "groups": {}},
                         corrupt_hint="the run's instances still run: find them in the EC2 console by the tag "
                                      "geotrain-run, terminate them")


def by_node(state: dict[str, Any], node_id: str) -> Record | None:
    return next((r for r in state["nodes"].values() if r.get("node_id") == node_id), None)


def group_key(run_id: str, region: str) -> str:
    return f"{run_id} {region}"

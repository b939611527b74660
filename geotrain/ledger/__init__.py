"""The ledger: what happened in every run (SQLite under GEOTRAIN_HOME), below the launcher, the
training runtime and the cost report, which all read or write it."""

from geotrain.ledger.rows import (
    Event, EventKind, LinkBytes, NodeRow, PricePoint, ProgressRow, RunRow, RunStatus,
)
from geotrain.ledger.store import Ledger, now_iso

__all__ = ["Event", "EventKind", "Ledger", "LinkBytes", "NodeRow", "PricePoint", "ProgressRow", "RunRow", "RunStatus",
           "now_iso"]

"""The ledger of a worker on another machine: its records go through the launcher's rendezvous store.

A worker on a cloud VM or an on-prem host cannot write the launcher's SQLite ledger. With
``GEOTRAIN_LEDGER=store`` (set by the launcher for every provider whose nodes are other machines),
the runtime writes through :class:`StoreLedger` instead: each record (an event, a progress row, link
bytes) becomes one key of the generation's store, ``ledger/<rank>/<n>``, numbered by an atomic
counter ``ledger/<rank>/n``; the launcher copies them into the ledger as they come (:func:`drain`),
with the worker's own timestamps, and deletes them. The store is the one the workers already
rendezvous through, under the run's secret prefix.

The built-in runtime finds the store in its generation file; a user's script, which has none, in its
environment (:func:`relay_env`: ``GEOTRAIN_STORE`` = host:port, ``GEOTRAIN_STORE_PREFIX``), which is
how ``geotrain.train.api.report_progress`` reaches the ledger from another machine.
"""

from __future__ import annotations

import json
import time
from typing import Any

RELAY_ENV = "GEOTRAIN_LEDGER"
RELAY_STORE = "store"
STORE_ENV = "GEOTRAIN_STORE"  # host:port of the launcher's store
STORE_PREFIX_ENV = "GEOTRAIN_STORE_PREFIX"  # the generation's key prefix in it (the run's secret in it)
CONNECT_TIMEOUT_S = 60.0


def relay_env(store: dict[str, Any], generation: int) -> dict[str, str]:
    """The environment that lets any process of a worker reach the generation's store (``store``: the
    generation file's ``store``, host, port and prefix)."""
    return {STORE_ENV: f"{store['host']}:{store['port']}", STORE_PREFIX_ENV: f"{store['prefix']}/gen{generation}/"}


def connect(env: dict[str, str] | Any, rank: int) -> StoreLedger:  # noqa: ANN401 - os.environ or a dict
    """A :class:`StoreLedger` on the store that :func:`relay_env` describes (imports torch)."""
    from datetime import timedelta

    import torch.distributed as dist

    host, _, port = env[STORE_ENV].rpartition(":")
    base = dist.TCPStore(host.strip("[]"), int(port), is_master=False, timeout=timedelta(seconds=CONNECT_TIMEOUT_S))
    return StoreLedger(dist.PrefixStore(env[STORE_PREFIX_ENV], base), rank)


class StoreLedger:
    """What the runtime calls of :class:`geotrain.ledger.Ledger`, sent through ``store``."""

    def __init__(self, store: Any, rank: int) -> None:  # noqa: ANN401 - a torch.distributed Store
        self.store = store
        self.base = f"ledger/{rank}"

    def _put(self, record: dict[str, Any]) -> None:
        n = self.store.add(f"{self.base}/n", 1)
        self.store.set(f"{self.base}/{n}", json.dumps(record, default=str))

    def event(self, run_id: str, kind: str, *, node_id: str | None = None, **detail: Any) -> None:
        self._put({"op": "event", "run_id": run_id, "kind": str(kind), "node_id": node_id, "at": time.time(),
                   "detail": detail})

    def progress(self, run_id: str, **fields: Any) -> None:
        self._put({"op": "progress", "run_id": run_id, "at": time.time(), "fields": fields})

    def add_progress(self, run_id: str, **fields: Any) -> None:
        self._put({"op": "add_progress", "run_id": run_id, "at": time.time(), "fields": fields})

    def add_link_bytes(self, run_id: str, generation: int, rows: list[tuple[str, str, str, int]]) -> None:
        if rows:
            self._put({"op": "link_bytes", "run_id": run_id, "generation": generation, "at": time.time(),
                       "rows": [list(r) for r in rows]})


def drain(store: Any, ledger: Any, ranks: range, done: dict[int, int]) -> int:  # noqa: ANN401
    """Copy the records the workers of ``ranks`` sent since ``done`` (rank → last record copied, updated)
    into ``ledger``; the number copied. A record whose key is not there yet waits for the next call."""
    copied = 0
    for rank in ranks:
        base = f"ledger/{rank}"
        last = int(store.add(f"{base}/n", 0))
        n = done.get(rank, 0)
        while n < last:
            key = f"{base}/{n + 1}"
            if not store.check([key]):
                break  # counted, not yet written
            record = json.loads(store.get(key))
            _apply(ledger, record)
            store.delete_key(key)
            n += 1
            copied += 1
        done[rank] = n
    return copied


def _apply(ledger: Any, record: dict[str, Any]) -> None:  # noqa: ANN401
    op = record["op"]
    if op == "event":
        ledger.event(record["run_id"], record["kind"], node_id=record["node_id"], at=record["at"], **record["detail"])
    elif op == "progress":
        ledger.progress(record["run_id"], at=record["at"], **record["fields"])
    elif op == "add_progress":
        ledger.add_progress(record["run_id"], at=record["at"], **record["fields"])
    elif op == "link_bytes":
        ledger.add_link_bytes(record["run_id"], record["generation"], [tuple(r) for r in record["rows"]],
                              at=record["at"])

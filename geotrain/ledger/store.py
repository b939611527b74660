"""The ledger: what happened in every run, in SQLite (WAL) under ``GEOTRAIN_HOME/ledger.sqlite``.

Tables:

- ``runs``: one row per run — its plan (the plan file's JSON), the workload it trained and what it
  trained instead of the plan (substitutions), checkpoint URL, launcher pid, launch options, status
  (:class:`~geotrain.ledger.rows.RunStatus`) and why it ended.
- ``nodes``: every node a run had — its offer (JSON record) and price, launch and end times, why it
  ended (preempted | terminated | lost | completed | stopped), the provider's node id and request id.
- ``events``: what happened, in order; one :class:`~geotrain.ledger.rows.EventKind` each, with its
  details as JSON.
- ``progress``: samples, step, loss and samples/s over time (written by the training runtime).
- ``link_bytes``: bytes sent between two nodes, with the link class, per generation of workers.
- ``prices``: price observations per offer over time (launch prices, and changes where known).

Rows come back as the typed records of :mod:`geotrain.ledger.rows`. Several processes write (the launcher and every training worker): WAL mode and a busy timeout
make that safe. Every write is one short transaction.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from geotrain.errors import NotFoundError
from geotrain.files import PRIVATE_FILE, geotrain_home, home_path
from geotrain.ledger.rows import Event, EventKind, LinkBytes, NodeRow, PricePoint, ProgressRow, RunRow, RunStatus

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    plan_id TEXT NOT NULL,
    plan_json TEXT NOT NULL,
    created_at TEXT NOT NULL,
    status TEXT NOT NULL,
    ended_at TEXT,
    reason TEXT,
    workload TEXT NOT NULL,
    provider TEXT NOT NULL,
    checkpoint_url TEXT NOT NULL,
    launcher_pid INTEGER,
    target_steps INTEGER,
    options_json TEXT NOT NULL DEFAULT '{}',
    substitutions_json TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE IF NOT EXISTS nodes (
    node_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    request_id TEXT NOT NULL,
    offer_id TEXT NOT NULL,
    offer_json TEXT NOT NULL,
    cloud TEXT NOT NULL,
    region TEXT NOT NULL,
    zone TEXT NOT NULL,
    market TEXT NOT NULL,
    price_usd_per_hour REAL NOT NULL,
    launched_at REAL NOT NULL,
    ended_at REAL,
    end_reason TEXT
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    node_id TEXT,
    detail_json TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS progress (
    run_id TEXT NOT NULL,
    at REAL NOT NULL,
    generation INTEGER NOT NULL,
    step INTEGER NOT NULL,
    samples INTEGER NOT NULL,
    loss REAL,
    samples_per_s REAL,
    world_size INTEGER
);
CREATE TABLE IF NOT EXISTS link_bytes (
    run_id TEXT NOT NULL,
    generation INTEGER NOT NULL,
    src_node TEXT NOT NULL,
    dst_node TEXT NOT NULL,
    link_class TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS prices (
    offer_id TEXT NOT NULL,
    at REAL NOT NULL,
    price_usd_per_hour REAL NOT NULL,
    source TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_run ON events(run_id, id);
CREATE INDEX IF NOT EXISTS progress_run ON progress(run_id, at);
CREATE INDEX IF NOT EXISTS nodes_run ON nodes(run_id);
"""


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


class Ledger:
    """One SQLite database; open a ``Ledger`` per process (connections are not shared)."""

    def __init__(self, path: Path | None = None, *, create: bool = True) -> None:
        """``create=False``: a command that only reads runs (status, stop, cost-report, resume) finds no
        ledger yet as NotFoundError, and writes nothing."""
        self.path = Path(path) if path is not None else home_path() / "ledger.sqlite"
        if not create and not self.path.exists():
            raise NotFoundError("no run yet (geotrain has no ledger here); start one with `geotrain launch plan.json`")
        if path is None:
            geotrain_home()  # created private
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.path.exists():  # private: it holds the user's command lines and runs
            os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, PRIVATE_FILE))
        self._conn = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA busy_timeout=30000")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.executescript(SCHEMA)
        self._migrate()

    def _migrate(self) -> None:
        """Columns added since the first ledger format (a ledger from an older geotrain gains them)."""
        columns = {row[1] for row in self._conn.execute("PRAGMA table_info(runs)")}
        if "substitutions_json" not in columns:
            try:
                with self._tx() as c:
                    c.execute("ALTER TABLE runs ADD COLUMN substitutions_json TEXT NOT NULL DEFAULT '[]'")
            except sqlite3.OperationalError as exc:  # another process added it first
                if "duplicate column" not in str(exc):
                    raise

    def close(self) -> None:
        self._conn.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        for attempt in range(50):
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                break
            except sqlite3.OperationalError:
                if attempt == 49:
                    raise
                time.sleep(0.05)
        try:
            yield self._conn
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise

    # -- runs -------------------------------------------------------------------------------

    def create_run(self, *, run_id: str, plan_id: str, plan_json: str, workload: str, provider: str,
                   checkpoint_url: str, launcher_pid: int, target_steps: int | None, options: dict,
                   substitutions: tuple[str, ...] = ()) -> None:
        with self._tx() as c:
            c.execute(
                "INSERT INTO runs (run_id, plan_id, plan_json, created_at, status, workload, provider, checkpoint_url,"
                " launcher_pid, target_steps, options_json, substitutions_json) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, plan_id, plan_json, now_iso(), RunStatus.RUNNING.value, workload, provider, checkpoint_url,
                 launcher_pid, target_steps, json.dumps(options, sort_keys=True), json.dumps(list(substitutions))),
            )

    def run(self, run_id: str) -> RunRow:
        row = self._conn.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no run {run_id!r} in {self.path}; see `geotrain status`")
        return RunRow(*row)

    def runs(self) -> list[RunRow]:
        return [RunRow(*r) for r in self._conn.execute(f"SELECT {_RUN_COLUMNS} FROM runs ORDER BY created_at, run_id")]

    def latest_run_id(self) -> str | None:
        row = self._conn.execute("SELECT run_id FROM runs ORDER BY created_at DESC, rowid DESC LIMIT 1").fetchone()
        return row[0] if row else None

    def set_launcher(self, run_id: str, pid: int) -> None:
        with self._tx() as c:
            c.execute("UPDATE runs SET launcher_pid = ?, status = 'running', ended_at = NULL, reason = NULL"
                      " WHERE run_id = ?", (pid, run_id))

    def finish_run(self, run_id: str, status: RunStatus | str, reason: str) -> None:
        with self._tx() as c:
            c.execute("UPDATE runs SET status = ?, reason = ?, ended_at = ? WHERE run_id = ?",
                      (RunStatus(status).value, reason, now_iso(), run_id))

    # -- nodes ------------------------------------------------------------------------------

    def add_node(self, *, run_id: str, node_id: str, request_id: str, offer_id: str, offer_json: str, cloud: str,
                 region: str, zone: str, market: str, price_usd_per_hour: float, launched_at: float) -> None:
        with self._tx() as c:
            c.execute(
                "INSERT OR IGNORE INTO nodes (node_id, run_id, request_id, offer_id, offer_json, cloud, region, zone,"
                " market, price_usd_per_hour, launched_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (node_id, run_id, request_id, offer_id, offer_json, cloud, region, zone, market, price_usd_per_hour,
                 launched_at),
            )

    def end_node(self, node_id: str, reason: str, at: float | None = None) -> None:
        with self._tx() as c:
            c.execute("UPDATE nodes SET ended_at = ?, end_reason = ? WHERE node_id = ? AND ended_at IS NULL",
                      (at if at is not None else time.time(), reason, node_id))

    def nodes(self, run_id: str) -> list[NodeRow]:
        return [NodeRow(*r) for r in self._conn.execute(
            f"SELECT {_NODE_COLUMNS} FROM nodes WHERE run_id = ? ORDER BY launched_at, node_id", (run_id,))]

    # -- events, progress, bytes, prices -----------------------------------------------------

    def event(self, run_id: str, kind: EventKind, *, node_id: str | None = None, at: float | None = None,
              **detail: Any) -> None:
        with self._tx() as c:
            c.execute("INSERT INTO events (run_id, at, kind, node_id, detail_json) VALUES (?,?,?,?,?)",
                      (run_id, at if at is not None else time.time(), EventKind(kind).value, node_id,
                       json.dumps(detail, sort_keys=True, default=str)))

    def events(self, run_id: str, *, after_id: int = 0, kinds: tuple[EventKind, ...] = ()) -> list[Event]:
        query = "SELECT id, run_id, at, kind, node_id, detail_json FROM events WHERE run_id = ? AND id > ?"
        args: list[Any] = [run_id, after_id]
        if kinds:
            query += f" AND kind IN ({','.join('?' * len(kinds))})"
            args += [EventKind(k).value for k in kinds]
        rows = self._conn.execute(query + " ORDER BY id", args).fetchall()
        return [Event(r[0], r[1], r[2], r[3], r[4], json.loads(r[5])) for r in rows]

    def last_events(self, run_id: str, count: int) -> list[Event]:
        """The run's newest ``count`` events, oldest first (what a status line shows)."""
        rows = self._conn.execute(
            "SELECT id, run_id, at, kind, node_id, detail_json FROM events WHERE run_id = ? ORDER BY id DESC LIMIT ?",
            (run_id, count)).fetchall()
        return [Event(r[0], r[1], r[2], r[3], r[4], json.loads(r[5])) for r in reversed(rows)]

    def progress(self, run_id: str, *, generation: int, step: int, samples: int, loss: float | None,
                 samples_per_s: float | None, world_size: int, at: float | None = None) -> None:
        with self._tx() as c:
            c.execute("INSERT INTO progress (run_id, at, generation, step, samples, loss, samples_per_s, world_size)"
                      " VALUES (?,?,?,?,?,?,?,?)",
                      (run_id, at if at is not None else time.time(), generation, step, samples, loss, samples_per_s,
                       world_size))

    def add_progress(self, run_id: str, *, generation: int, steps: int, samples: int, samples_per_s: float | None,
                     world_size: int, at: float | None = None) -> ProgressRow:
        """Progress told as what was done since the last report (a user's script: it says how many steps
        and samples it did, not where it is): a row of the run's last step and samples plus ``steps``
        and ``samples``, read and written in one transaction. The new row."""
        at = at if at is not None else time.time()
        with self._tx() as c:
            last = c.execute("SELECT step, samples FROM progress WHERE run_id = ? ORDER BY at DESC LIMIT 1",
                             (run_id,)).fetchone()
            step, total = (last[0] + steps, last[1] + samples) if last else (steps, samples)
            c.execute("INSERT INTO progress (run_id, at, generation, step, samples, loss, samples_per_s, world_size)"
                      " VALUES (?,?,?,?,?,?,?,?)", (run_id, at, generation, step, total, None, samples_per_s, world_size))
        return ProgressRow(at, generation, step, total, None, samples_per_s, world_size)

    def progress_rows(self, run_id: str) -> list[ProgressRow]:
        return [ProgressRow(*r) for r in self._conn.execute(
            f"SELECT {_PROGRESS_COLUMNS} FROM progress WHERE run_id = ? ORDER BY at", (run_id,))]

    def last_progress(self, run_id: str) -> ProgressRow | None:
        row = self._conn.execute(
            f"SELECT {_PROGRESS_COLUMNS} FROM progress WHERE run_id = ? ORDER BY at DESC LIMIT 1", (run_id,)).fetchone()
        return ProgressRow(*row) if row else None

    def add_link_bytes(self, run_id: str, generation: int, rows: list[tuple[str, str, str, int]],
                       at: float | None = None) -> None:
        if not rows:
            return
        at = at if at is not None else time.time()
        with self._tx() as c:
            c.executemany("INSERT INTO link_bytes VALUES (?,?,?,?,?,?,?)",
                          [(run_id, generation, src, dst, cls, int(n), at) for src, dst, cls, n in rows])

    def link_bytes(self, run_id: str) -> list[LinkBytes]:
        return [LinkBytes(*r) for r in self._conn.execute(
            "SELECT src_node, dst_node, link_class, SUM(bytes) FROM link_bytes WHERE run_id = ?"
            " GROUP BY src_node, dst_node, link_class ORDER BY src_node, dst_node", (run_id,))]

    def add_price(self, offer_id: str, price_usd_per_hour: float, source: str, at: float | None = None) -> None:
        with self._tx() as c:
            c.execute("INSERT INTO prices VALUES (?,?,?,?)",
                      (offer_id, at if at is not None else time.time(), price_usd_per_hour, source))

    def prices(self, offer_id: str) -> list[PricePoint]:
        return [PricePoint(*r) for r in self._conn.execute(
            "SELECT at, price_usd_per_hour, source FROM prices WHERE offer_id = ? ORDER BY at", (offer_id,))]


_RUN_COLUMNS = ("run_id, plan_id, plan_json, created_at, status, ended_at, reason, workload, provider, checkpoint_url,"
                " launcher_pid, target_steps, options_json, substitutions_json")
_NODE_COLUMNS = ("node_id, run_id, request_id, offer_id, offer_json, cloud, region, zone, market, price_usd_per_hour,"
                 " launched_at, ended_at, end_reason")
_PROGRESS_COLUMNS = "at, generation, step, samples, loss, samples_per_s, world_size"

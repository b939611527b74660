"""A worker on another machine sends its ledger records through the launcher's store; the launcher
copies them into the ledger with the worker's timestamps (a real TCPStore, a real SQLite ledger)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from geotrain.ledger import EventKind, Ledger

dist = pytest.importorskip("torch.distributed")

from geotrain.train.ledger_relay import StoreLedger, drain  # noqa: E402


def test_records_reach_the_ledger_once_in_order_with_the_workers_times(geotrain_home: Path) -> None:
    master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    client = dist.TCPStore("127.0.0.1", master.port, is_master=False, timeout=timedelta(seconds=10))
    worker = StoreLedger(dist.PrefixStore("secret/gen1/", client), rank=1)
    launcher_side = dist.PrefixStore("secret/gen1/", master)
    ledger = Ledger()
    run = "run-relay"
    worker.event(run, EventKind.CHECKPOINT_SAVED, node_id="n1", step=8, purpose="periodic")
    worker.progress(run, generation=1, step=8, samples=256, loss=0.5, samples_per_s=10.0, world_size=2)
    worker.add_link_bytes(run, 1, [("n1", "n0", "cross_zone", 1234)])
    done: dict[int, int] = {}
    assert drain(launcher_side, ledger, range(2), done) == 3
    assert drain(launcher_side, ledger, range(2), done) == 0  # each record once
    saved = ledger.events(run, kinds=(EventKind.CHECKPOINT_SAVED,))
    assert [(e.node_id, e.detail) for e in saved] == [("n1", {"step": 8, "purpose": "periodic"})]
    assert ledger.last_progress(run).step == 8 and ledger.last_progress(run).at <= saved[0].at + 5
    worker.event(run, EventKind.TRAINING_FINISHED, node_id="n1", step=9)
    assert drain(launcher_side, ledger, range(2), done) == 1 and done == {0: 0, 1: 4}
    assert not master.check(["secret/gen1/ledger/1/1"])  # copied records leave the store

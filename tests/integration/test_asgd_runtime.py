"""asgd-ga in the runtime's own processes (``python -m geotrain.train.runtime``, gloo over loopback),
two regions: every region trains at its own pace, the run ends on its sample budget as the home
server counts it, the home leader reports that count and writes the checkpoints, and a resumed
generation trains what the budget has left (not a step count) and ends on one model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from geotrain.launcher.workers import open_store
from geotrain.ledger import EventKind, Ledger
from geotrain.train.checkpoint import CheckpointStore
from geotrain.train.workloads import WORKLOADS

pytestmark = pytest.mark.slow

WORKLOAD = "tiny-lm"
M = 4  # micro-batches of the global batch: ranks 0 and 1 (us-east-1) train 2 and 1 of them, rank 2 (us-west-2) 1
PLACES = [("us-east-1", 1.0), ("us-east-1", 1.0), ("us-west-2", 3.0)]  # us-west-2 is home: the most compute
WORLD = len(PLACES)
A = 2


def _config(home: Path, store, generation: int, target_steps: int) -> Path:  # noqa: ANN001
    nodes = [{"node_id": f"n{r}", "rank": r, "region": f"aws/{name}", "region_name": name, "zone": f"{name}a",
              "cloud": "aws", "continent": "north_america", "samples_per_s": rate}
             for r, (name, rate) in enumerate(PLACES)]
    config = {"run_id": "asgd", "generation": generation, "workload": WORKLOAD,
              "sync": {"strategy": "asgd-ga", "precision": "fp32", "accumulation_steps": A, "staleness": 1},
              "deterministic": False, "micro_batches": M, "lr": 0.5, "momentum": 0.9, "seed": 0,
              "target_steps": target_steps, "checkpoint_url": str(home / "ckpt"), "checkpoint_every": 8,
              "progress_every": 4, "collective_timeout_s": 60, "backend": "gloo", "nodes": nodes,
              "store": {"host": "127.0.0.1", "port": store.port, "prefix": f"asgd{generation}"}}
    path = home / f"gen{generation}.json"
    path.write_text(json.dumps(config))
    return path


def _generation(home: Path, generation: int, target_steps: int) -> None:
    store = open_store(dist, True)
    path = _config(home, store, generation, target_steps)
    procs = [subprocess.Popen([sys.executable, "-m", "geotrain.train.runtime", str(path)],
                              env={**os.environ, "RANK": str(r), "WORLD_SIZE": str(WORLD), "GEOTRAIN_NODE_ID": f"n{r}",
                                   "GEOTRAIN_HOME": str(home), "OMP_NUM_THREADS": "1"},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in range(WORLD)]
    outs = [p.communicate(timeout=240)[0].decode(errors="replace") for p in procs]
    assert [p.returncode for p in procs] == [0] * WORLD, "\n".join(o[-2000:] for o in outs)


def test_asgd_ga_ends_on_the_home_servers_sample_count_and_a_resumed_generation_trains_what_is_left(tmp_path):
    home = tmp_path
    global_samples = M * WORKLOADS[WORKLOAD].samples_per_step
    _generation(home, 1, 24)
    ledger = Ledger(home / "ledger.sqlite")
    rows = ledger.progress_rows("asgd")
    # the home region is us-west-2 (rank 2: the most compute by the nodes' rates); it reports the run
    assert rows and {r.generation for r in rows} == {1}
    first = rows[-1].samples
    budget = 24 * global_samples
    assert budget <= first <= 1.25 * budget, f"generation 1 counted {first} samples for a budget of {budget}"
    steps = {e.detail["rank"]: 0 for e in ledger.events("asgd", kinds=(EventKind.SYNC_ROUNDS,))}
    for e in ledger.events("asgd", kinds=(EventKind.SYNC_ROUNDS,)):
        steps[e.detail["rank"]] += e.detail["steps"]
    # us-west-2 trains 1 of the 4 micro-batches a step, us-east-1's rank 0 2 and an all-reduce: each
    # region at its own pace, us-west-2 takes more steps
    assert steps[2] > steps[0] == steps[1], steps
    saved = [e for e in ledger.events("asgd", kinds=(EventKind.CHECKPOINT_SAVED,))]
    assert saved and {e.node_id for e in saved} == {"n2"}  # the home leader writes the run's checkpoints
    store = CheckpointStore(str(home / "ckpt"))
    latest = store.latest()
    state = store.load(latest)
    assert int(state["samples"]) == first and state["step"] == saved[-1].detail["step"]

    _generation(home, 2, 40)  # a longer target: the resumed generation trains what is left of it
    restored = ledger.events("asgd", kinds=(EventKind.CHECKPOINT_RESTORED,))
    assert restored and restored[-1].detail["generation"] == 2
    second = [r for r in ledger.progress_rows("asgd") if r.generation == 2]
    budget = 40 * global_samples
    assert second and first < second[0].samples and budget <= second[-1].samples <= 1.25 * budget
    final = store.load(store.latest())
    assert int(final["samples"]) == second[-1].samples
    # the run ends on one model: the final checkpoint is the model every rank took (the home model)
    assert all(torch.isfinite(v).all() for v in final["model"].values())

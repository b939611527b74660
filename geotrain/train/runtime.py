"""What runs on each node: one generation of training with the built-in workloads.

The launcher starts one worker per node for each *generation* (a fixed set of nodes); when a node
is preempted the generation ends and the launcher starts the next one on the new set, which resumes
from the newest committed checkpoint. Per step, the global batch is ``M`` micro-batches of the
workload's size; sample ``i`` is a pure function of (seed, i), so the data position is just the step.

    python -m geotrain.train.runtime <generation.json>

Environment: ``RANK``, ``WORLD_SIZE``, ``GEOTRAIN_NODE_ID``, ``GEOTRAIN_NODE_DIR`` (preemption
notices), ``GEOTRAIN_HOME`` (the ledger). The process group rendezvous happens in the launcher's
TCP store (a stable host, unlike a node that may be preempted), under a prefix per generation.

The run ends after ``target_steps`` steps; asgd-ga across regions, where every region trains at its
own pace, ends when the home server has counted ``target_steps`` global batches of samples.

Checkpoints: every ``checkpoint_every`` steps (by rank 0; asgd-ga: the home leader, which holds the
run's model and sample count and reports its progress), when the run ends, and at once when a
preemption notice arrives (by the warned node: with all-reduce every rank holds the whole state; with
local SGD at the next averaging boundary). A checkpoint holds model, optimizer, RNG states and step.

Backend: the generation's (``backend`` in the config, chosen by the launcher with ``pick_backend``):
nccl on the GPU ``LOCAL_RANK`` of this host, or gloo on the CPU.

Exit codes: 0 the run reached its target; 75 a collective failed (a peer was lost); 1 anything else.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from contextlib import nullcontext
from datetime import timedelta
from collections.abc import Sequence
from pathlib import Path

PEER_LOST = 75


def pick_backend(ranks_per_host: int, host_gpus: Sequence[int]) -> str:
    """The process-group backend of a generation: NCCL when every rank can have a GPU of its own
    (``host_gpus``: CUDA devices of each host the ranks run on), else gloo on the CPU. Every rank
    must use the same backend, so the launcher decides it for all of them."""
    if host_gpus and all(gpus >= ranks_per_host for gpus in host_gpus):
        return "nccl"
    return "gloo"


class NoticeWatch:
    """A preemption notice: SIGUSR1 (the provider's hook) or the notice file on the node."""

    def __init__(self, node_dir: str | None) -> None:
        self.flag = False
        self.path = Path(node_dir) / "preemption-notice.json" if node_dir else None
        signal.signal(signal.SIGUSR1, self._on_signal)

    def _on_signal(self, signum, frame) -> None:  # noqa: ANN001
        self.flag = True

    def received(self) -> bool:
        if not self.flag and self.path is not None and self.path.exists():
            self.flag = True
        return self.flag


def _config_path(name: str) -> Path:
    """The generation's config: ``name`` as given, else in the node's directory (where the node agent
    writes what the launcher sent with the command)."""
    path = Path(name)
    if not path.is_absolute() and not path.exists() and os.environ.get("GEOTRAIN_NODE_DIR"):
        return Path(os.environ["GEOTRAIN_NODE_DIR"]) / name
    return path


def main(argv: list[str]) -> int:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    config = json.loads(_config_path(argv[0]).read_text())
    import torch
    import torch.distributed as dist

    from geotrain.domain import Continent, Location, SyncSettings, link_class
    from geotrain.ledger import EventKind, Ledger
    from geotrain.train.checkpoint import CheckpointStore
    from geotrain.train.ledger_relay import RELAY_ENV, RELAY_STORE, STORE_ENV, StoreLedger
    from geotrain.train.sync import ByteCounter, StepInput, SyncContext, make_sync
    from geotrain.train.workloads import WORKLOADS

    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    node_id = os.environ["GEOTRAIN_NODE_ID"]
    run_id, generation = config["run_id"], config["generation"]
    nodes = config["nodes"]
    deterministic = config.get("deterministic", False)
    backend = config.get("backend", "gloo")
    device = torch.device(f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if backend == "nccl" else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
    if deterministic:
        torch.use_deterministic_algorithms(True)
    notice = NoticeWatch(os.environ.get("GEOTRAIN_NODE_DIR"))
    store_cfg = config["store"]
    if os.environ.get(STORE_ENV):  # where this node reaches the store (a port its SSH link forwards back)
        host, _, port = os.environ[STORE_ENV].rpartition(":")
        store_cfg = {**store_cfg, "host": host, "port": int(port)}
    base_store = dist.TCPStore(store_cfg["host"], store_cfg["port"], is_master=False,
                               timeout=timedelta(seconds=60))
    store = dist.PrefixStore(f"{store_cfg.get('prefix', '')}/gen{generation}/", base_store)
    # a node that is another machine sends its records through the launcher's store
    ledger = StoreLedger(store, rank) if os.environ.get(RELAY_ENV) == RELAY_STORE else Ledger()
    if world > 1:
        dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                                timeout=timedelta(seconds=config.get("collective_timeout_s", 60)))

    workload = WORKLOADS[config["workload"]]
    torch.manual_seed(config["seed"])
    random.seed(config["seed"])
    model = workload.build_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=config["momentum"])
    ckpt = CheckpointStore(config["checkpoint_url"],
                           write_delay_s=float(os.environ.get("GEOTRAIN_FAULT_CHECKPOINT_DELAY_S", "0")))
    M = config["micro_batches"]  # of the global batch: fixed for the run, whatever the world size
    step = 0
    samples = 0  # trained by all ranks (a hivemind round trains about its target batch, not M micro-batches)
    latest = ckpt.latest()
    if latest is not None:
        state = ckpt.load(latest)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        step = int(state["step"])
        samples = int(state.get("samples", step * M * workload.samples_per_step))  # older checkpoints: M per step
        if rank == 0:
            ledger.event(run_id, EventKind.CHECKPOINT_RESTORED, node_id=node_id, step=step, generation=generation,
                         url=latest.url, rejected=[list(r) for r in ckpt.rejected])

    counter = ByteCounter()
    regions = [n["region"] for n in nodes]
    m = workload.samples_per_step

    def fetch(position: int) -> tuple:
        return tuple(t.to(device) for t in workload.batch(config["seed"], position, m))

    target = config["target_steps"]
    every = config["checkpoint_every"]
    global_samples = M * m
    sync = make_sync(SyncSettings.from_mapping(config["sync"]), SyncContext(
        model, workload.loss, rank, world, counter, regions, micro_batches=M, samples_per_micro=m,
        deterministic=deterministic, rates=[n.get("samples_per_s") or 1.0 for n in nodes], store=store,
        address=os.environ.get("GEOTRAIN_NODE_ADDRESS", "127.0.0.1"), timeout_s=config.get("collective_timeout_s", 60),
        samples_left=target * global_samples - samples))
    own_data = getattr(sync, "reads_own_data", False)
    reporter = getattr(sync, "reporter", 0)  # the rank whose model and sample count are the run's
    budget = getattr(sync, "samples_left", None)  # a strategy that ends on samples, not on the step count
    lock = getattr(sync, "lock", None) or nullcontext()  # held while a parameter server changes the model
    mine = [j for j in range(M) if j % world == rank]

    def save(kind: str) -> None:
        ledger.event(run_id, EventKind.CHECKPOINT_WRITE_STARTED, node_id=node_id, step=step, purpose=kind)
        with lock:
            weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        info = ckpt.save(step, {
            "model": weights, "optimizer": optimizer.state_dict(), "step": step, "samples": samples,
            "torch_rng": torch.get_rng_state(),
        }, meta={"run_id": run_id, "generation": generation, "world_size": world, "samples": samples,
                 "kind": kind})
        ledger.event(run_id, EventKind.CHECKPOINT_SAVED, node_id=node_id, step=step, purpose=kind, url=info.url,
                     size_bytes=info.size_bytes)
        if rank == reporter:
            ckpt.prune(keep=3)

    def flush_bytes() -> None:
        sent = counter.drain()
        me = nodes[rank]
        src = Location(me["cloud"], me["region_name"], me["zone"], Continent(me["continent"]))
        rows = []
        for dst_rank, nbytes in sent.items():
            other = nodes[dst_rank]
            dst = Location(other["cloud"], other["region_name"], other["zone"], Continent(other["continent"]))
            rows.append((node_id, other["node_id"], link_class(src, dst).value, nbytes))
        if not wire_metered:  # with emulated links the launcher records what the wire counted
            ledger.add_link_bytes(run_id, generation, rows)
        rounds = sync.clock.drain()
        if rounds["steps"]:
            ledger.event(run_id, EventKind.SYNC_ROUNDS, node_id=node_id, generation=generation, rank=rank,
                         strategy=sync.name, **rounds)

    wire_metered = os.environ.get("GEOTRAIN_WIRE_METERED") == "1"
    noticed = False
    window_start, window_samples = time.perf_counter(), samples
    finished = budget <= 0 if budget is not None else step >= target
    try:
        while not finished:
            batches = [] if own_data else [fetch(step * global_samples + j * m) for j in mine]
            result = sync.step(StepInput(batches, mine, global_samples, M, step=step, fetch=fetch), optimizer)
            loss = result.loss
            samples += result.samples
            step += 1
            finished = sync.after_step(step, final=step >= target)  # the run ends on one model
            samples += getattr(sync, "samples_after_last_step", 0) if finished else 0
            if notice.received() and not noticed and sync.averaged(step):
                noticed = True
                ledger.event(run_id, EventKind.NOTICE, node_id=node_id, step=step)
                save("emergency")
            elif rank == reporter and step % every == 0 and sync.averaged(step):
                save("periodic")
            if rank == reporter and (step % config["progress_every"] == 0 or finished):
                now = time.perf_counter()
                rate = (samples - window_samples) / (now - window_start) if now > window_start else None
                window_start, window_samples = now, samples
                ledger.progress(run_id, generation=generation, step=step, samples=samples, loss=loss,
                                samples_per_s=rate, world_size=world)
            if step % config["progress_every"] == 0:
                flush_bytes()
        if rank == reporter and sync.averaged(step):
            save("final")
            ledger.event(run_id, EventKind.TRAINING_FINISHED, node_id=node_id, step=step)
        flush_bytes()
        sync.close()
        if world > 1:
            dist.barrier()
            dist.destroy_process_group()
        return 0
    except (RuntimeError, ConnectionError, dist.DistBackendError, dist.DistStoreError) as exc:  # a peer or the store is gone
        flush_bytes()
        sync.close()
        print(f"geotrain worker {node_id} rank {rank}: collective failed at step {step}: {exc}", file=sys.stderr)
        return PEER_LOST


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

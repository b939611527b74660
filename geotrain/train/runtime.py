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

Data: the workload's synthetic data, or the user's (``data`` in the config: an image folder or a
token file, ``geotrain.train.userdata``), sample ``i`` a pure function of (seed, i) either way.

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
import sys
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


def main(argv: list[str]) -> int:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch
    import torch.distributed as dist

    from geotrain.train.session import Session, config_path
    from geotrain.train.sync import StepInput
    from geotrain.train.trainer import NoticeWatch, Trainer
    from geotrain.train.workloads import workload_named

    config = json.loads(config_path(argv[0]).read_text())
    torch.set_num_threads(1)
    deterministic = config.get("deterministic", False)
    if deterministic:
        torch.use_deterministic_algorithms(True)
    notice = NoticeWatch(os.environ.get("GEOTRAIN_NODE_DIR"))
    workload = workload_named(config["workload"])
    batch = workload.batch
    if config.get("data"):  # the user's data instead: checked before this worker joins its peers
        from geotrain.train.userdata import DataError, data_batches
        from geotrain.train.worker_env import DATA_FAILED

        node_dir = os.environ.get("GEOTRAIN_NODE_DIR")
        try:
            batch, data = data_batches(workload.name, config["data"], Path(node_dir) if node_dir else None)
        except DataError as exc:
            print(f"{DATA_FAILED}{exc}", file=sys.stderr, flush=True)
            return 1
    session = Session.open(config)
    rank, world = session.rank, session.world
    if config.get("data"):
        print(f"rank {rank}/{world}: {workload.name} on the {data}", flush=True)
    torch.manual_seed(config["seed"])
    random.seed(config["seed"])
    model = workload.build_model().to(session.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=config["momentum"])
    M = config["micro_batches"]  # of the global batch: fixed for the run, whatever the world size
    m = workload.samples_per_step
    trainer = Trainer(session, model, optimizer, loss_fn=workload.loss, micro_batches=M, samples_per_micro=m,
                      target_steps=config["target_steps"], checkpoint_url=config["checkpoint_url"],
                      checkpoint_every=config["checkpoint_every"], progress_every=config["progress_every"],
                      deterministic=deterministic, notice=notice,
                      write_delay_s=float(os.environ.get("GEOTRAIN_FAULT_CHECKPOINT_DELAY_S", "0")))

    def fetch(position: int) -> tuple:
        return tuple(t.to(session.device) for t in batch(config["seed"], position, m))

    own_data = getattr(trainer.sync, "reads_own_data", False)
    mine = [j for j in range(M) if j % world == rank]
    global_samples = M * m
    try:
        while not trainer.finished:
            step = trainer.step_count
            batches = [] if own_data else [fetch(step * global_samples + j * m) for j in mine]
            trainer.run_step(StepInput(batches, mine, global_samples, M, step=step, fetch=fetch))
        trainer.finish()
        return 0
    except (RuntimeError, ConnectionError, dist.DistBackendError, dist.DistStoreError) as exc:  # a peer or the store is gone
        trainer.abort()
        print(f"geotrain worker {session.node_id} rank {rank}: collective failed at step {trainer.step_count}: {exc}",
              file=sys.stderr)
        return PEER_LOST


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Launch on the local provider: recovery time, checkpoint overhead, runtime speed vs plain torchrun.

1. Recovery: 4 nodes in two regions, tiny-cnn; preemptions at given steps (no notice). For each:
   seconds from the kill to the next generation's restored checkpoint ("training resumed") and to
   its first progress report (target: under 10 s).
2. Checkpoint overhead: the same run (no preemption) with a checkpoint every 10 steps and with none;
   overhead = extra wall time of the steps as a share of step time.
3. Step throughput of geotrain's runtime (DDP) against plain ``torchrun`` DDP of the same model,
   global batch and process count on this machine (target ratio ≥ 0.95).

    .venv/bin/python bench/launch.py [--part 1|2|3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

NODES = "aws/usw2-az1/g4dn.xlarge=1,aws/usw2-az2/g4dn.xlarge=1,aws/use1-az1/g4dn.xlarge=1,aws/use1-az2/g4dn.xlarge=1"
WORLD = 4
MICRO = 8  # micro-batches of 32 samples per step: global batch 256


def make_plan():  # noqa: ANN201
    from geotrain.domain import JobSpec, Objective, SyncSettings, SyncStrategyName
    from geotrain.planning.planner import PlanOptions, plan_for_nodes
    from geotrain.pricing.snapshot import bundled_snapshot

    job = JobSpec("bench", "tiny-cnn", Objective.MIN_COST, target_samples_per_s=100,
                  sync=SyncSettings(SyncStrategyName.ALLREDUCE, precision="fp32", micro_batches=MICRO // WORLD))
    return plan_for_nodes(job, bundled_snapshot(), NODES, options=PlanOptions(frontier_points=0, provider="local"))


def launch(plan, tmp: Path, **kw):  # noqa: ANN001, ANN201
    from geotrain.launcher.loop import LaunchOptions, Launcher
    from geotrain.providers.local import LocalProvider

    options = LaunchOptions(checkpoint_url=str(tmp / "ckpt"), progress_every=5, **kw)
    launcher = Launcher(plan, LocalProvider(), options=options)
    run_id = launcher.start()
    outcome = launcher.run()
    return run_id, outcome


def recovery(plan) -> None:  # noqa: ANN001
    from geotrain.ledger import Ledger
    from geotrain.launcher.preemptions import PreemptionEvent, PreemptionSchedule

    with tempfile.TemporaryDirectory() as tmp:
        schedule = PreemptionSchedule(events=tuple(PreemptionEvent(at_step=s, node=i % WORLD)
                                                   for i, s in enumerate((40, 90, 140))))
        run_id, outcome = launch(plan, Path(tmp), steps=200, checkpoint_every=10, preemptions=schedule,
                                 block_s=600)
        events = Ledger().events(run_id)
        progress = Ledger().progress_rows(run_id)
        resumed, trained = [], []
        for e in events:
            if e.kind != "preempted":
                continue
            restored = next((x for x in events if x.at > e.at and x.kind == "checkpoint_restored"), None)
            if restored is not None:
                resumed.append(restored.at - e.at)
                later = [row for row in progress if row.at > restored.at]
                if later:
                    trained.append(later[0].at - e.at)
        replans = [x.detail.get("seconds", 0) for x in events if x.kind == "replanned"]
        print(f"recovery over {len(resumed)} preemptions ({outcome.generations} generations, 4 nodes, 2 regions):")
        print(f"  kill -> checkpoint restored: median {statistics.median(resumed):.2f} s, max {max(resumed):.2f} s "
              f"(target < 10 s: ratio {statistics.median(resumed) / 10:.2f})")
        if trained:
            print(f"  kill -> first progress report after it: median {statistics.median(trained):.2f} s")
        if replans:
            print(f"  of which re-planning on the full catalog: median {statistics.median(replans):.2f} s")


def overhead(plan) -> None:  # noqa: ANN001
    """Time inside checkpoint writes (rank 0: serialise, hash, write, fsync, rename) as a share of the
    wall time between checkpoints; and the same run without checkpoints for a throughput check."""
    from geotrain.ledger import Ledger

    with tempfile.TemporaryDirectory() as tmp:
        run_id, _ = launch(plan, Path(tmp), steps=150, checkpoint_every=10)
        events = Ledger().events(run_id, kinds=("checkpoint_write_started", "checkpoint_saved"))
        starts = [e.at for e in events if e.kind == "checkpoint_write_started"]
        ends = [e.at for e in events if e.kind == "checkpoint_saved"]
        writes = [b - a for a, b in zip(starts, ends, strict=False)]
        gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
        rows = [r for r in Ledger().progress_rows(run_id) if r.step > 20]
        with_ckpt = (rows[-1].samples - rows[0].samples) / (rows[-1].at - rows[0].at)
    with tempfile.TemporaryDirectory() as tmp:
        run_id, _ = launch(plan, Path(tmp), steps=150, checkpoint_every=10_000)
        rows = [r for r in Ledger().progress_rows(run_id) if r.step > 20]
        without = (rows[-1].samples - rows[0].samples) / (rows[-1].at - rows[0].at)
    share = statistics.mean(writes) / statistics.mean(gaps)
    print(f"checkpoint overhead: a write takes {statistics.mean(writes) * 1000:.1f} ms every "
          f"{statistics.mean(gaps):.2f} s (10 steps): {share:.1%} of step time; throughput {with_ckpt:,.0f} "
          f"samples/s with checkpoints, {without:,.0f} without (noise of a shared 2-core machine included)")


TORCHRUN_SCRIPT = textwrap.dedent("""
    import json, os, time, torch, torch.distributed as dist
    from geotrain.train.workloads import WORKLOADS
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    w = WORKLOADS["tiny-cnn"]
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(w.build_model())
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    M, m = int(os.environ["MICRO"]), w.samples_per_step
    mine = [j for j in range(M) if j % world == rank]
    steps, warm = int(os.environ["STEPS"]), 20
    for step in range(steps):
        if step == warm:
            dist.barrier(); start = time.perf_counter()
        batches = [w.batch(0, step * M * m + j * m, m) for j in mine]
        x = torch.cat([b[0] for b in batches]); y = torch.cat([b[1] for b in batches])
        opt.zero_grad(); loss = w.loss(model, x, y); loss.backward(); opt.step()
    dist.barrier()
    if rank == 0:
        print(json.dumps({"samples_per_s": (steps - warm) * M * m / (time.perf_counter() - start)}))
    dist.destroy_process_group()
""")


def throughput(plan) -> None:  # noqa: ANN001
    from geotrain.ledger import Ledger

    steps = 220
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "ddp.py"
        script.write_text(TORCHRUN_SCRIPT)
        env = dict(os.environ, OMP_NUM_THREADS="1", MICRO=str(MICRO), STEPS=str(steps))
        out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                              f"--nproc-per-node={WORLD}", str(script)], env=env, capture_output=True, text=True,
                             check=True)
        plain = json.loads(out.stdout.strip().splitlines()[-1])["samples_per_s"]
    with tempfile.TemporaryDirectory() as tmp:
        run_id, _ = launch(plan, Path(tmp), steps=steps, checkpoint_every=10_000)
        rows = [r for r in Ledger().progress_rows(run_id) if r.step >= 20]
        ours = (rows[-1].samples - rows[0].samples) / (rows[-1].at - rows[0].at)
    print(f"step throughput, {WORLD} processes, tiny-cnn, global batch {MICRO * 32}: geotrain {ours:,.0f} samples/s, "
          f"plain torchrun DDP {plain:,.0f}: ratio {ours / plain:.3f} (target ≥ 0.95)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["1", "2", "3"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        os.environ.setdefault("GEOTRAIN_HOME", home)
        plan = make_plan()
        started = time.time()
        if args.part in (None, "1"):
            recovery(plan)
        if args.part in (None, "2"):
            overhead(plan)
        if args.part in (None, "3"):
            throughput(plan)
        print(f"({time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()

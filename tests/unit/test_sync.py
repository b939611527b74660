"""Step synchronisation in real gloo process groups: DDP equals single-process training, local SGD
keeps regions apart between averaging rounds, and the byte counts follow the ring formulas."""

from __future__ import annotations

import os
import socket
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from geotrain.train.runtime import pick_backend
from geotrain.domain import WAN_STREAMS
from geotrain.train.sync import ByteCounter, DDPSync, LocalSGDSync, StepInput, parameter_bytes
from geotrain.train.sync.streams import HEADER
from geotrain.train.workloads import WORKLOADS

pytestmark = pytest.mark.slow

WORKLOAD = WORKLOADS["tiny-cnn"]
M = 4  # micro-batches per global batch
STEPS = 3


def test_backend_is_nccl_only_with_a_gpu_per_rank_on_every_host():
    assert pick_backend(1, [0]) == "gloo"
    assert pick_backend(4, [2]) == "gloo"  # four ranks on a host with two GPUs: NCCL cannot share one
    assert pick_backend(4, [4]) == "nccl"
    assert pick_backend(1, [1, 1, 0]) == "gloo"  # one CPU host makes the whole generation gloo
    assert pick_backend(1, [8, 1]) == "nccl"
    assert pick_backend(1, []) == "gloo"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _batches(step: int, mine: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    m = WORKLOAD.samples_per_step
    return [WORKLOAD.batch(0, step * M * m + j * m, m) for j in mine]


def _worker(rank: int, world: int, port: int, kind: str, out: str, regions: list[str]) -> None:
    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0, timeout=timedelta(seconds=30))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    torch.manual_seed(0)
    model = WORKLOAD.build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    counter = ByteCounter()
    if kind == "ddp":
        sync = DDPSync(model, WORKLOAD.loss, rank, world, counter, "fp32")
    else:
        sync = LocalSGDSync(model, WORKLOAD.loss, rank, world, counter, regions, local_steps=2, precision="fp32",
                            store=store)
    mine = [j for j in range(M) if j % world == rank]
    snapshots = []
    for step in range(STEPS):
        sync.step(StepInput(_batches(step, mine), mine, M * WORKLOAD.samples_per_step, M), optimizer)
        if kind != "ddp":
            sync.after_step(step + 1)
        snapshots.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    torch.save({"params": snapshots, "sent": counter.drain()}, os.path.join(out, f"rank{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()


def _run(world: int, kind: str, tmp_path, regions: list[str] | None = None) -> list[dict]:
    mp.spawn(_worker, args=(world, _free_port(), kind, str(tmp_path), regions or []), nprocs=world, join=True)
    return [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]


def test_ddp_matches_single_process_training_on_the_global_batch(tmp_path):
    results = _run(2, "ddp", tmp_path)
    torch.manual_seed(0)
    model = WORKLOAD.build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(STEPS):
        optimizer.zero_grad()
        x, y = (torch.cat(t) for t in zip(*_batches(step, list(range(M))), strict=True))
        WORKLOAD.loss(model, x, y).backward()
        optimizer.step()
    expected = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    for r in results:
        torch.testing.assert_close(r["params"][-1], expected, rtol=1e-4, atol=1e-5)
    payload = parameter_bytes(WORKLOAD.build_model())
    assert results[0]["sent"] == {1: STEPS * int(2 * (2 - 1) / 2 * payload)}


def test_local_sgd_averages_inside_regions_every_step_and_across_every_h_steps(tmp_path):
    regions = ["east", "east", "west", "west"]
    results = _run(4, "local-sgd", tmp_path, regions)
    params = [r["params"] for r in results]
    after_one, after_two, after_three = 0, 1, 2
    # step 1: ranks of one region agree (gradients all-reduced inside it), the regions differ
    assert torch.equal(params[0][after_one], params[1][after_one])
    assert torch.equal(params[2][after_one], params[3][after_one])
    assert not torch.allclose(params[0][after_one], params[2][after_one])
    # step 2 = H: the parameters of all ranks are averaged
    for r in range(1, 4):
        torch.testing.assert_close(params[r][after_two], params[0][after_two], rtol=0, atol=1e-6)
    assert not torch.allclose(params[0][after_three], params[2][after_three])
    payload = parameter_bytes(WORKLOAD.build_model())
    in_region = STEPS * int(2 * (2 - 1) / 2 * payload)  # to the region peer, every step
    # one averaging round: the region's mean (an all-reduce inside it), the leaders' butterfly over the
    # WAN transport (two pieces of half the parameters, each over its streams with a header each) and
    # the leader's broadcast inside its region
    parameters = sum(p.numel() for p in WORKLOAD.build_model().parameters())
    across = 2 * (-(-parameters // 2) * 4 + WAN_STREAMS * HEADER.size)
    assert results[0]["sent"] == {1: in_region + payload + payload, 2: across}
    assert results[1]["sent"] == {0: in_region + payload}
    assert results[2]["sent"] == {3: in_region + payload + payload, 0: across}

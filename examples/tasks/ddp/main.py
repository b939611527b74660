"""A small DDP training script: what torchrun runs on each node of examples/tasks/ddp.yaml."""

import torch
import torch.distributed as dist

from geotrain.train import api

dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                                                      torch.nn.Linear(64, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
torch.manual_seed(1 + dist.get_rank())
batch = 64
for step in range(50):
    x = torch.randn(batch, 32)
    loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    api.report_progress(samples=batch * dist.get_world_size())  # status and cost-report count the work
weights = sum(p.double().sum().item() for p in model.parameters())  # the same on every rank: DDP
print(f"rank {dist.get_rank()}/{dist.get_world_size()} trained 50 steps, loss {loss.item():.4f}, "
      f"weights {weights:.6f}", flush=True)
dist.destroy_process_group()
api.finish()  # exit 0 without the interpreter teardown that races gloo's threads (see its docstring)

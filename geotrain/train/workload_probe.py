"""Train one of the built-in workloads alone on this machine, as the built-in runtime trains it, and
report every step's samples (``geotrain profile --workload NAME`` without a command).

``python -m geotrain.train.workload_probe NAME`` builds the workload's model
(:mod:`geotrain.train.workloads`: the planned models' architectures, random weights, synthetic data
of the runtime's sizes), the runtime's optimizer (SGD with momentum) and micro-batch, and trains
until stopped: forward, backward and step on the first CUDA device (else the CPU), data generation
included, as a launched node would. Each step calls :func:`geotrain.train.api.report_progress`, so
the profiler times it like any reporting script.
"""

from __future__ import annotations

import os
import sys

LR = 1e-3  # the step's rate does not change its speed
MOMENTUM = 0.9  # momentum keeps one more buffer per parameter: the runtime's default (LaunchOptions.momentum)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        raise SystemExit("usage: python -m geotrain.train.workload_probe WORKLOAD")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    from geotrain.train.api import report_progress
    from geotrain.train.workloads import workload_named

    try:
        workload = workload_named(argv[0])
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = workload.build_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    m, position = workload.samples_per_step, 0
    while True:
        x, y = (t.to(device) for t in workload.batch(0, position, m))
        optimizer.zero_grad(set_to_none=True)
        workload.loss(model, x, y).backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        report_progress(m)
        position += m


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

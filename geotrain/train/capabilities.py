"""What the built-in training runtime can train here, without importing torch (the launcher asks
before anything starts). ``geotrain.train.workloads`` and ``geotrain.train.sync`` implement these."""

from __future__ import annotations

WORKLOADS = ("tiny-cnn", "tiny-lm")  # built-in workloads (synthetic data, small models, CPU in seconds)
STRATEGIES = ("hivemind", "allreduce", "local-sgd", "asgd-ga", "ma")  # every sync strategy (geotrain.train.sync)
PRECISIONS = ("fp32", "fp16", "bf16")  # gradients and parameters on the wire (int8: not yet)

"""What the built-in training runtime can train here, without importing torch (the launcher asks
before anything starts). ``geotrain.train.workloads`` and ``geotrain.train.sync`` implement these."""

from __future__ import annotations

# built-in workloads on synthetic data: two small ones a CPU trains in seconds, then the planned models
# (torchvision's and Hugging Face's architectures, random weights)
WORKLOADS = ("tiny-cnn", "tiny-lm", "resnet18", "resnet50", "resnet152", "wide-resnet101-2", "convnext-large",
             "roberta-base", "roberta-large", "roberta-xlm")
STRATEGIES = ("hivemind", "allreduce", "local-sgd", "asgd-ga", "ma")  # every sync strategy (geotrain.train.sync)
PRECISIONS = ("fp32", "fp16", "bf16")  # gradients and parameters on the wire (int8: not yet)

"""Compute Engine's accelerator types, as the price source and the provider both name them."""

from __future__ import annotations

# GCE accelerator type -> canonical accelerator name of the offer schema
ACCELERATORS = {
    "nvidia-tesla-t4": "T4", "nvidia-tesla-v100": "V100", "nvidia-tesla-p100": "P100", "nvidia-tesla-p4": "P4",
    "nvidia-tesla-k80": "K80", "nvidia-tesla-a100": "A100", "nvidia-a100-80gb": "A100-80GB", "nvidia-l4": "L4",
    "nvidia-h100-80gb": "H100", "nvidia-h100-mega-80gb": "H100", "nvidia-h200-141gb": "H200", "nvidia-b200": "B200",
}
N1_ATTACHABLE = frozenset({"nvidia-tesla-t4", "nvidia-tesla-v100", "nvidia-tesla-p100", "nvidia-tesla-p4",
                           "nvidia-tesla-k80"})

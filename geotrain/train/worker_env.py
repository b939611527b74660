"""What a training process gets from whoever starts it (the launcher, ``geotrain profile``): a free
rendezvous port on this machine, and this process's environment with the torchrun-style rank
variables replaced by the caller's own."""

from __future__ import annotations

import os
import socket

RANK_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment without its own rank variables (a geotrain started under torchrun
    must not hand its rank to a worker), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(RANK_VARIABLES)}
    env.update(extra)
    return env

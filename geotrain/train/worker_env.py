"""What a training process gets from whoever starts it (the launcher, ``geotrain profile``): a free
rendezvous port on this machine, and this process's environment with the torchrun-style rank
variables replaced by the caller's own."""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

JOINING_ENV = "GEOTRAIN_JOINING"  # "1": this process replaces a lost peer in a running generation
DHT_PEERS_ENV = "GEOTRAIN_DHT_PEERS"  # hivemind: where this node reaches the launcher's DHT (a JSON list)
ELASTIC_KEY = "elastic"  # in the generation's store: its workers train through an elastic strategy's runtime
DATA_FAILED = "geotrain: the training data: "  # a worker's last line where it cannot train on --data (not retried)
RANK_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")


PORT_RANGE = (20000, 32767)  # below Linux's default ephemeral range (32768-60999)
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def free_port() -> int:
    """A port free now, chosen outside the kernel's ephemeral range: the port stays unbound until the
    worker binds it, and a port the kernel hands out for outgoing connections (gloo's, a peer's) could
    be taken meanwhile; one below that range is only ever taken by a process that binds it by number."""
    low, high = PORT_RANGE
    try:
        eph_low = int(EPHEMERAL_RANGE.read_text().split()[0])
        high = min(high, eph_low - 1)
    except (OSError, ValueError, IndexError):
        pass
    rng = random.SystemRandom()
    for _ in range(64):
        port = rng.randint(low, high) if high > low else 0
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    with socket.socket() as s:  # everything tried was taken: any port the kernel gives
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment without its own rank variables (a geotrain started under torchrun
    must not hand its rank to a worker), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(RANK_VARIABLES)}
    env.update(extra)
    return env


NODE_PASSED = ("LANG", "LC_ALL", "TZ", "PYTHONUNBUFFERED")  # what a node on another machine gets of this environment


def node_env(extra: dict[str, str]) -> dict[str, str]:
    """What a command on a node of *another* machine gets from here: ``extra`` and the locale, nothing
    else (not this machine's paths, home or credentials); the node's agent adds the node user's own
    ``HOME``, ``USER``, ``SHELL`` and ``PATH``."""
    env = {k: os.environ[k] for k in NODE_PASSED if k in os.environ}
    env.update(extra)
    return env


def outbound_address() -> str:
    """This machine's address on the route to the internet (no packet is sent); 127.0.0.1 without one.
    Behind NAT the nodes need the public address instead: ``--control-address``."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: a route lookup only
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"

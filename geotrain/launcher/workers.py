"""What a run's workers need from the launcher's host: the rendezvous store, a checked checkpoint
location, their node directory, and the workers a dead launcher left behind, killed (their
environment and port: ``geotrain.train.worker_env``)."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path

from geotrain.errors import InputError
from geotrain.procs import environ_has
from geotrain.providers.base import NodeDirs, Provider


def open_store(dist, shared_host: bool, network=None, *, tunneled: bool = False):  # noqa: ANN001, ANN201
    """The launcher's rendezvous store, listening where the nodes need it and nowhere else: on loopback
    when every node is a process on this machine, or reaches it through the launcher's own SSH
    connection (``tunneled``: a port forwarded back to this loopback; no inbound port here); in the
    coordinator's namespace when the nodes talk over emulated links (``network``:
    ``geotrain.providers.netns.EmulatedNetwork``). torch's TCPStore has no authentication, so its keys
    also live under a per-run random prefix that only the run's (private) generation files carry."""
    if network is not None:
        address = network.coordinator().address
        return network.inside_coordinator(_listening_store, dist, address, address)
    return _listening_store(dist, "127.0.0.1" if shared_host or tunneled else "0.0.0.0", "127.0.0.1")


def _listening_store(dist, bind: str, connect: str):  # noqa: ANN001, ANN202
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((bind, 0))
    listener.listen(512)
    try:
        store = dist.TCPStore(connect, listener.getsockname()[1], is_master=True, wait_for_workers=False,
                              master_listen_fd=listener.fileno())
    except BaseException:
        listener.close()
        raise
    listener.detach()  # the store owns the socket now (it closes it when it goes)
    return store


def check_checkpoint_url(url: str) -> None:
    """Refuse a checkpoint location the workers cannot share, before any node starts: one that cannot
    be written (a probe is written, read back and deleted), or this process's own memory."""
    from geotrain.train.checkpoint import CheckpointStore

    store = CheckpointStore(url)
    if store.in_process_memory:
        raise InputError(f"--checkpoint-url {url!r}: memory:// lives in one process's memory, and every worker "
                         "is a process of its own; give a directory or an object store URL (s3://, gs://, az://)")
    store.probe()


NODE_PROBE_S = 120.0  # how long a node may take to write, read back and delete a probe in the store
_PROBE = ("import sys; from geotrain.train.checkpoint import CheckpointStore\n"
          "try:\n    CheckpointStore(sys.argv[1]).probe()\n"
          "except Exception as exc:\n    print(f'GEOTRAIN-PROBE-FAILED {exc}', flush=True); sys.exit(3)")


def check_from_nodes(provider: Provider, nodes, url: str, logs: Path, *,  # noqa: ANN001 - NodeInfo
                     stop: Callable[[], bool], envs: dict[str, str] | None = None) -> None:
    """Each node writes, reads back and deletes a probe in the checkpoint store with its own
    credentials and mounts (all at once), before any worker starts: a store a node cannot use is an
    InputError naming the node and what it said. ``envs``: the task's, which its commands get too."""
    import time

    from geotrain.train.worker_env import node_env

    started = [(node, provider.start(node.node_id, ["python", "-c", _PROBE, url], node_env(dict(envs or {})),
                                     logs / f"probe-{node.node_id}.log")) for node in nodes]
    deadline = time.monotonic() + NODE_PROBE_S
    for node, proc in started:
        while (code := proc.poll()) is None and time.monotonic() < deadline and not stop():
            time.sleep(0.1)
        if code is None:
            proc.kill()
            if stop():
                return
            raise InputError(f"node {node.node_id} did not finish writing a probe to the checkpoint store {url} "
                             f"within {NODE_PROBE_S:.0f} s; check that the nodes can reach it")
        if code != 0:
            said = (logs / f"probe-{node.node_id}.log").read_text(errors="replace").strip().splitlines()
            why = next((line.split(" ", 1)[1] for line in reversed(said) if line.startswith("GEOTRAIN-PROBE-FAILED")),
                       said[-1] if said else f"exit {code}")
            raise InputError(f"node {node.node_id} ({node.location.zone_scope}) cannot use the checkpoint store: {why}; "
                             "give --checkpoint-url a location every node can write (object storage the nodes have "
                             "credentials for, or file:///PATH on a file system every node mounts)")


def node_dir(provider: Provider, node_id: str) -> Path | None:
    return provider.node_dir(node_id) if isinstance(provider, NodeDirs) else None


def kill_stale_workers(pids: dict[str, int], run_id: str) -> None:
    """Kill workers of the previous launcher's last generation that still run (checked by run id)."""
    for pid in pids.values():
        if environ_has(pid, "GEOTRAIN_RUN_ID", run_id):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def last_words(logs: Path, generation: int, codes: object, lines: int = 3) -> dict[str, list[str]]:
    """The last lines of each failed worker's log (``codes``: node id → exit code), for the ledger: the
    log itself may not outlive the run."""
    said: dict[str, list[str]] = {}
    for node_id in codes if isinstance(codes, dict) else ():
        for log in logs.glob(f"gen{generation:03d}-rank*-{node_id}.log"):
            try:
                text = log.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            said[node_id] = [line[:300] for line in text.splitlines()[-lines:]]
    return said


def data_failure(said: dict[str, list[str]]) -> str | None:
    """The message of a run whose workers cannot train on the user's data (``said``: node id → the
    last lines of its worker's log, one of them ``DATA_FAILED`` and the reason), or None. Every retry
    would fail the same way, so the run stops at once."""
    from geotrain.train.worker_env import DATA_FAILED

    for node_id, lines in sorted(said.items()):
        for line in reversed(lines):
            if line.startswith(DATA_FAILED):
                return (f"the worker on node {node_id} cannot train on the data given with --data: "
                        f"{line[len(DATA_FAILED):]}; the run is stopped and its nodes released. Fix --data and "
                        "launch again")
    return None


def store_host(shared_host: bool, control_address: str | None, network=None) -> str:  # noqa: ANN001
    """Where the nodes reach the launcher's rendezvous store: the coordinator's address with emulated
    links, loopback when every node is a process here, else ``--control-address`` or this machine's
    outbound address."""
    if network is not None:
        return network.coordinator().address
    if shared_host:
        return "127.0.0.1"
    from geotrain.train.worker_env import outbound_address

    return control_address or outbound_address()


def generation_backend(provider: Provider, command: tuple[str, ...], world: int) -> str:
    """nccl when every rank gets a GPU of its own, else gloo (see ``pick_backend``)."""
    from geotrain.train.runtime import pick_backend

    if command:
        return "gloo"  # a user's script picks its own
    if not provider.capabilities.shared_host:
        return "gloo"  # a provider of separate hosts does not report their CUDA devices yet
    import torch

    return pick_backend(world, [torch.cuda.device_count() if torch.cuda.is_available() else 0])

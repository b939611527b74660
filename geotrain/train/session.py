"""One generation's place for a training process on a node: what the launcher's generation file and
the environment say, the store, the process group and the ledger.

The built-in runtime (:mod:`geotrain.train.runtime`) and a user's script through
:mod:`geotrain.train.api` open it the same way: :meth:`Session.open` reads the generation's config
(``GEOTRAIN_GENERATION_FILE``, in the node's directory), connects to the launcher's TCP store under
the generation's prefix and joins the process group (gloo on the CPU, nccl where every rank has a GPU).

Environment: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``GEOTRAIN_NODE_ID``, ``GEOTRAIN_NODE_DIR``,
``GEOTRAIN_NODE_ADDRESS`` (the WAN transport's address), ``GEOTRAIN_STORE`` (where this node reaches
the store, when the launcher's connection forwards it), ``GEOTRAIN_LEDGER`` (``store``: the records
go through the store) or ``GEOTRAIN_HOME`` (the ledger's file on this machine).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from geotrain.domain import Continent, Location, SyncSettings, link_class
from geotrain.strategies import entry
from geotrain.train.ledger_relay import RELAY_ENV, RELAY_STORE, STORE_ENV, StoreLedger
from geotrain.train.sync import ByteCounter, Sync
from geotrain.train.worker_env import DHT_PEERS_ENV, JOINING_ENV

GENERATION_FILE_ENV = "GEOTRAIN_GENERATION_FILE"


def config_path(name: str) -> Path:
    """The generation's config: ``name`` as given, else in the node's directory (where the node agent
    writes what the launcher sent with the command)."""
    path = Path(name)
    if not path.is_absolute() and not path.exists() and os.environ.get("GEOTRAIN_NODE_DIR"):
        return Path(os.environ["GEOTRAIN_NODE_DIR"]) / name
    return path


@dataclass
class Session:
    """A training process's generation: its config, rank, store, ledger and byte counter."""

    config: dict[str, Any]
    rank: int
    world: int
    node_id: str
    device: torch.device
    store: Any  # the generation's PrefixStore
    ledger: Any  # geotrain.ledger.Ledger, or a StoreLedger through the store
    counter: ByteCounter
    wire_metered: bool

    @property
    def run_id(self) -> str:
        return self.config["run_id"]

    @property
    def generation(self) -> int:
        return int(self.config["generation"])

    @property
    def nodes(self) -> list[dict]:
        return self.config["nodes"]

    @property
    def sync_settings(self) -> SyncSettings:
        return SyncSettings.from_mapping(self.config["sync"])

    @property
    def address(self) -> str:
        return os.environ.get("GEOTRAIN_NODE_ADDRESS", "127.0.0.1")

    @property
    def dht_peers(self) -> list[str]:
        """The launcher's DHT bootstrap peer, as this node reaches it (hivemind)."""
        if os.environ.get(DHT_PEERS_ENV):
            return json.loads(os.environ[DHT_PEERS_ENV])
        return list(self.config.get("dht_peers", []))

    @property
    def joining(self) -> bool:
        """This process replaces a lost peer in a running generation (an elastic strategy)."""
        return os.environ.get(JOINING_ENV) == "1"

    @property
    def timeout_s(self) -> float:
        return float(self.config.get("collective_timeout_s", 60))

    @classmethod
    def open(cls, config: dict[str, Any]) -> Session:
        """Connect to the generation's store and join its process group."""
        from geotrain.ledger import Ledger

        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        backend = config.get("backend", "gloo")
        device = torch.device(f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if backend == "nccl" else "cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
        store_cfg = config["store"]
        if os.environ.get(STORE_ENV):  # where this node reaches the store (a port its SSH link forwards back)
            host, _, port = os.environ[STORE_ENV].rpartition(":")
            store_cfg = {**store_cfg, "host": host, "port": int(port)}
        base_store = dist.TCPStore(store_cfg["host"], store_cfg["port"], is_master=False,
                                   timeout=timedelta(seconds=60))
        store = dist.PrefixStore(f"{store_cfg.get('prefix', '')}/gen{config['generation']}/", base_store)
        # a node that is another machine sends its records through the launcher's store
        ledger = StoreLedger(store, rank) if os.environ.get(RELAY_ENV) == RELAY_STORE else Ledger()
        if world > 1 and not entry(config["sync"]["strategy"]).elastic:  # an elastic strategy has no fixed group
            dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                                    timeout=timedelta(seconds=config.get("collective_timeout_s", 60)))
        return cls(config, rank, world, os.environ["GEOTRAIN_NODE_ID"], device, store, ledger, ByteCounter(),
                   os.environ.get("GEOTRAIN_WIRE_METERED") == "1")

    @classmethod
    def from_environment(cls) -> Session:
        """The session of a script the launcher started (``GEOTRAIN_GENERATION_FILE`` names its config)."""
        name = os.environ.get(GENERATION_FILE_ENV)
        if not name:
            raise RuntimeError(f"{GENERATION_FILE_ENV} is not set: is this script running under `geotrain launch`?")
        return cls.open(json.loads(config_path(name).read_text()))

    def flush_bytes(self, sync: Sync) -> None:
        """The bytes this rank sent since the last flush (by link class) and the strategy's rounds, to the ledger."""
        from geotrain.ledger import EventKind

        sent = self.counter.drain()
        me = self.nodes[self.rank]
        src = Location(me["cloud"], me["region_name"], me["zone"], Continent(me["continent"]))
        rows = []
        for dst_rank, nbytes in sent.items():
            other = self.nodes[dst_rank]
            dst = Location(other["cloud"], other["region_name"], other["zone"], Continent(other["continent"]))
            rows.append((self.node_id, other["node_id"], link_class(src, dst).value, nbytes))
        if not self.wire_metered:  # with emulated links the launcher records what the wire counted
            self.ledger.add_link_bytes(self.run_id, self.generation, rows)
        rounds = sync.clock.drain()
        if rounds["steps"]:
            self.ledger.event(self.run_id, EventKind.SYNC_ROUNDS, node_id=self.node_id, generation=self.generation,
                              rank=self.rank, strategy=sync.name, **rounds)

    def close(self) -> None:
        """Leave the process group (after a barrier: every rank is done with it)."""
        if self.world > 1 and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()

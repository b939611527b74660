"""The launcher's side of the Hivemind DHT bootstrap peer (:mod:`geotrain.train.dht`), for a plan
whose strategy is elastic (hivemind): started with the run, stopped with it, and named to each node
as that node reaches it (this machine's loopback, or a port the launcher's connection forwards)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from geotrain.errors import RunError
from geotrain.train.worker_env import free_port

READY_S = 60.0


class DhtBootstrap:
    """A running bootstrap peer: ``port`` on ``host``, its ``peer_id``."""

    def __init__(self, run_dir: Path, host: str = "127.0.0.1") -> None:
        self.host, self.port = host, free_port()
        out = run_dir / "dht.json"
        out.unlink(missing_ok=True)
        log = (run_dir / "logs" / "dht.log")
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as sink:
            self.proc = subprocess.Popen([sys.executable, "-m", "geotrain.train.dht", str(out), host, str(self.port)],
                                         stdin=subprocess.PIPE, stdout=sink, stderr=sink, start_new_session=True)
        deadline = time.monotonic() + READY_S
        while not out.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RunError(f"the run's Hivemind DHT bootstrap peer did not start (see {log}); is hivemind "
                               "installed (pip install 'hivemind==1.1.12' 'grpcio-tools<1.77')?")
            time.sleep(0.1)
        self.peer_id = json.loads(out.read_text())["peer_id"]

    def address(self, host: str | None = None, port: int | None = None) -> list[str]:
        """The bootstrap peer as a node reaches it (default: where it listens)."""
        return [f"/ip4/{host or self.host}/tcp/{port or self.port}/p2p/{self.peer_id}"]

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(timeout=5)

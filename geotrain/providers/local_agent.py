"""The "VM" of a local node: a process that does nothing but exist. Standard library only.

``python -m geotrain.providers.local_agent <node_dir>``. The local provider starts it as the leader
of a new process group and puts every command it runs on the node into that group, so that killing
the group is pulling the plug on the whole node.

It ignores SIGUSR1 (the preemption notice, meant for the training workers in its group) and SIGHUP
(it outlives the terminal of the launcher that started it, as a VM would), and exits on SIGTERM or
SIGINT. It writes its pid to ``<node_dir>/agent.pid`` once its signal handlers are in place; the
provider waits for that file before it calls the node running.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

PID_FILE = "agent.pid"


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(0)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m geotrain.providers.local_agent <node_dir>", file=sys.stderr)
        return 2
    node_dir = Path(argv[0])
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit)
    signal.signal(signal.SIGINT, _exit)
    node_dir.mkdir(parents=True, exist_ok=True)
    tmp = node_dir / f".{PID_FILE}.tmp"
    tmp.write_text(f"{os.getpid()}\n")
    os.replace(tmp, node_dir / PID_FILE)  # readers see no file or a whole one
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The run's Hivemind DHT bootstrap peer: a process of the launcher's that outlives every node, so a
peer that replaces a lost one always has a peer to join through (Hivemind's peers find each other
through the DHT; the first peer they know must be up).

    python -m geotrain.train.dht OUT HOST PORT

It listens on ``HOST:PORT``, writes its peer id and addresses to ``OUT`` (JSON, atomically) and
serves until its standard input closes (the launcher ended, or died)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    out, host, port = Path(argv[0]), argv[1], int(argv[2])
    from geotrain.train.sync.hivemind import library

    dht = library().DHT(start=True, host_maddrs=[f"/ip4/{host}/tcp/{port}"])
    record = {"peer_id": str(dht.peer_id), "maddrs": [str(a) for a in dht.get_visible_maddrs()]}
    partial = out.with_suffix(".partial")
    partial.write_text(json.dumps(record))
    os.chmod(partial, 0o600)
    partial.replace(out)
    try:
        sys.stdin.read()  # until the launcher closes the pipe
    finally:
        dht.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

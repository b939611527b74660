"""The startup script a cloud VM runs at first boot (AWS user data, GCP ``startup-script`` metadata,
Azure custom data): install geotrain at the launcher's version if the image lacks it (into a virtual environment of its
own: images whose Python the OS manages refuse a plain pip install), then start the
node agent (``geotrain.node.agent``) with the run's token, listening on the agent port, watching the
cloud's instance metadata for preemption notices.

The script reads a few variables, unset on a real VM, that let a test run it as a local "VM":
``GEOTRAIN_NODE_ROOT`` (the node directory, default /var/lib/geotrain-node), ``GEOTRAIN_PYTHON``
(tried first; then python3.13 … python3, the first that is 3.11 or newer; on an image with none, a
standalone Python through uv), ``GEOTRAIN_AGENT_BIND`` (default 0.0.0.0) and ``GEOTRAIN_METADATA_URL`` (default:
the cloud's link-local metadata endpoint).
"""

from __future__ import annotations

import os
import shlex

import geotrain

ENV_INSTALL_SPEC = "GEOTRAIN_INSTALL_SPEC"  # what pip installs on a VM without geotrain (a wheel URL, a git URL)


def install_spec() -> str:
    return os.environ.get(ENV_INSTALL_SPEC) or f"geotrain[train]=={geotrain.__version__}"


def startup_script(*, cloud: str, token: str, agent_port: int) -> str:
    """The bash script; ``token`` is written to a 0600 file on the VM, never onto a command line."""
    if not token or "\n" in token or "GEOTRAIN_TOKEN" in token:
        raise ValueError("a run token is one line of text")
    version = geotrain.__version__
    return f"""#!/bin/bash
# geotrain {version}: start the node agent of a training run ({cloud})
set -euo pipefail
umask 077
ROOT="${{GEOTRAIN_NODE_ROOT:-/var/lib/geotrain-node}}"
mkdir -p "$ROOT"
pick_python() {{  # geotrain needs Python 3.11 or newer
  for c in "${{GEOTRAIN_PYTHON:-}}" python3.13 python3.12 python3.11 python3; do
    if [ -n "$c" ] && command -v "$c" > /dev/null && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2> /dev/null
    then echo "$c"; return; fi
  done
}}
PY="$(pick_python)"
if [ -z "$PY" ]; then  # an image with an older Python only: a standalone one, through uv
  curl -LsSf https://astral.sh/uv/install.sh | env UV_INSTALL_DIR="$ROOT/bin" UV_NO_MODIFY_PATH=1 sh >> "$ROOT/install.log" 2>&1
  "$ROOT/bin/uv" venv --seed --python 3.12 "$ROOT/venv" >> "$ROOT/install.log" 2>&1
  PY="$ROOT/venv/bin/python"
fi
cat > "$ROOT/token" <<'GEOTRAIN_TOKEN'
{token}
GEOTRAIN_TOKEN
if ! "$PY" -c 'import sys, geotrain; sys.exit(geotrain.__version__ != "{version}")' 2>/dev/null; then
  # the image's Python may be managed by the OS (PEP 668): geotrain gets a virtual environment of its own
  "$PY" -m venv --system-site-packages "$ROOT/venv" >> "$ROOT/install.log" 2>&1 || \
    {{ apt-get install -y -q python3-venv >> "$ROOT/install.log" 2>&1 && "$PY" -m venv --system-site-packages "$ROOT/venv"; }}
  PY="$ROOT/venv/bin/python"
  "$PY" -m pip install --quiet {shlex.quote(install_spec())} >> "$ROOT/install.log" 2>&1
fi
exec "$PY" -m geotrain.node.agent --bind "${{GEOTRAIN_AGENT_BIND:-0.0.0.0}}" --port {int(agent_port)} \\
  --root "$ROOT" --token-file "$ROOT/token" --cloud {shlex.quote(cloud)} \\
  ${{GEOTRAIN_METADATA_URL:+--metadata-url "$GEOTRAIN_METADATA_URL"}} >> "$ROOT/agent.log" 2>&1
"""

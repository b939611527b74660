"""The startup scripts a cloud VM runs at first boot. :func:`ssh_startup_script`: an sshd of geotrain's
own, through which the launcher does everything else (``geotrain.providers.cloudnodes``).
:func:`startup_script` (the older way, still used by the GCP and Azure providers): the startup script (AWS user data, GCP ``startup-script`` metadata,
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


NODE_UID = 3847  # the node user's uid where the image has it free (the same on every VM of a run)


def ssh_startup_script(*, cloud: str, login_public: str, host_private: str, ssh_port: int,
                       node_user: str = "geotrain") -> str:
    """A VM's first boot when the launcher reaches it over SSH (``geotrain.providers.cloudnodes``): make
    the node's user if the image lacks one (unlocked for key login, no password), and start an sshd of
    geotrain's own on ``ssh_port`` with the node's host key, that lets in only that user with the run's
    login key. Nothing is installed and nothing else is started: the launcher does the rest over SSH.

    Variables, unset on a real VM, let a test run it as a "VM" on this machine: ``GEOTRAIN_NODE_USER``
    (a user of this machine instead of ``node_user``), ``GEOTRAIN_NODE_ROOT`` (the VM's folder: sshd's
    files go in its ``ssh/``, not /etc/geotrain-ssh, and sshd does not insist on its parents' modes,
    such as a shared /tmp's), ``GEOTRAIN_SSH_BIND`` (the address sshd listens
    on, default all), and ``GEOTRAIN_METADATA_URL`` (the fake metadata endpoint, handed to the node's
    commands by sshd).
    """
    for name, text in (("login key", login_public), ("host key", host_private)):
        if "GEOTRAIN_" in text:
            raise ValueError(f"a {name} cannot contain GEOTRAIN_")
    if "\n" in login_public.strip() or not login_public.startswith("ssh-"):
        raise ValueError("the login key is one public key line")
    return f"""#!/bin/bash
# geotrain {geotrain.__version__}: an sshd of its own for the launcher ({cloud})
set -euo pipefail
U="${{GEOTRAIN_NODE_USER:-{node_user}}}"
if ! id -u "$U" > /dev/null 2>&1; then  # one uid on every VM, so that a shared file system (EFS, NFS) sees one owner
  if getent passwd {NODE_UID} > /dev/null || getent group {NODE_UID} > /dev/null; then
    useradd --create-home --shell /bin/bash "$U"
  else
    useradd --create-home --shell /bin/bash --uid {NODE_UID} --user-group "$U"
    groupmod -g {NODE_UID} "$U" 2> /dev/null || true
  fi
fi
[ "$U" = root ] || usermod -p '*' "$U"  # sshd refuses a locked user; there is no password
D="${{GEOTRAIN_NODE_ROOT:+$GEOTRAIN_NODE_ROOT/ssh}}"
D="${{D:-/etc/geotrain-ssh}}"
install -d -m 755 "$D"
umask 077
cat > "$D/host_ed25519" <<'GEOTRAIN_HOST_KEY'
{host_private.strip()}
GEOTRAIN_HOST_KEY
umask 022
printf '%s\\n' {shlex.quote(login_public.strip())} > "$D/authorized_keys"
if [ "$U" = root ]; then ROOT_LOGIN=prohibit-password; else ROOT_LOGIN=no; fi
cat > "$D/sshd_config" <<GEOTRAIN_SSHD
Port {int(ssh_port)}
ListenAddress ${{GEOTRAIN_SSH_BIND:-0.0.0.0}}
HostKey $D/host_ed25519
AuthorizedKeysFile $D/authorized_keys
AllowUsers $U
PermitRootLogin $ROOT_LOGIN
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AllowTcpForwarding yes
X11Forwarding no
PidFile $D/sshd.pid
${{GEOTRAIN_METADATA_URL:+SetEnv GEOTRAIN_METADATA_URL=$GEOTRAIN_METADATA_URL}}
${{GEOTRAIN_NODE_ROOT:+StrictModes no}}
GEOTRAIN_SSHD
if [ ! -x /usr/sbin/sshd ]; then  # an image without OpenSSH's server
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssh-server > "$D/install.log" 2>&1 || \\
    {{ echo "geotrain: no sshd on this image and it could not be installed" >&2; exit 1; }}
fi
mkdir -p /run/sshd
# in the foreground: the script's process is the node's sshd (cloud-init's last stage waits on it)
exec /usr/sbin/sshd -D -e -f "$D/sshd_config"
"""

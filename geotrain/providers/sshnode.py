"""A node on another machine, set up over the launcher's SSH link: geotrain shipped and installed,
the node agent started on the machine's loopback and reached through a forwarded socket, stopped.

What the on-prem provider does on the user's machines and the cloud providers do on their VMs, once
SSH answers (``geotrain.providers.sshlink``); the scripts run as the node's user, never as root.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from geotrain.errors import ProviderError
from geotrain.providers.sshlink import SSHFailure, SshLink, control_dir

DEFAULT_ROOT = "~/.geotrain-node"  # where node directories go on a machine
WHEELS = "~/.geotrain-node/wheels"  # where shipped wheels land
AGENT_MODULE = "geotrain.node.agent"


@dataclass(frozen=True, slots=True)
class Installed:
    python: str  # the Python that has this geotrain (in its venv on the machine)
    torch_installed: str | None  # "<version> from <index>" when the machine's Python had no torch


def install(link: SshLink, python: str | None, *, torch_index: str | None, timeout_s: float,
            hint: str) -> Installed:
    """Ship this geotrain's wheel over ``link`` and install it (once per version) into a venv that sees
    ``python``'s own packages (a command, or words such as "env X=1 /opt/py"; None: the machine's
    Python with torch, looked for where deep-learning images keep it)."""
    from geotrain.files import geotrain_home
    from geotrain.providers.shipping import build_wheel, install_script, parse_install_output

    wheel = build_wheel(geotrain_home() / "wheels")
    link.upload([(wheel.path, f"{WHEELS}/{wheel.path.name}")], timeout_s=timeout_s)
    words = shlex.split(python) if python else []
    if len(words) > 1:  # a one-word wrapper for the install script
        wrapper = f"exec {' '.join(shlex.quote(w) for w in words)} \"$@\""
        made = link.run(f"mkdir -p {remote_path(DEFAULT_ROOT)} && w={remote_path(DEFAULT_ROOT)}/image-python && "
                        f"printf '#!/bin/sh\\n%s\\n' {shlex.quote(wrapper)} > \"$w\" && chmod 700 \"$w\" && "
                        'printf %s "$w"', timeout_s=timeout_s)
        python = made.stdout.strip()
    script = f"cd {remote_path(WHEELS)} && " + install_script(wheel.path.name, python=python, torch_index=torch_index)
    result = link.run(script, timeout_s=timeout_s + 600)
    try:
        installed = parse_install_output(result.stdout)
    except ProviderError as exc:
        raise ProviderError(f"installing geotrain on {link.target.describe()} failed: {exc}; {hint}",
                            scope=link.scope) from exc
    torch = installed.torch_installed
    return Installed(installed.python, f"{torch.version} from {torch.index}" if torch else None)


def install_dry_run(python: str, torch_index: str | None) -> str:
    """The install script :func:`install` would run (nothing is built or sent)."""
    from geotrain.providers.shipping import install_script, wheel_name

    one = python if len(shlex.split(python)) == 1 else f"{DEFAULT_ROOT}/image-python"
    return f"cd {remote_path(WHEELS)} && " + install_script(wheel_name(), python=one, torch_index=torch_index)


def start_agent(link: SshLink, node_id: str, token: str, python: str, *, root: str, agent_module: str,
                ready_timeout_s: float, timeout_s: float, cloud: str, hint: str) -> dict:
    """Start the node's agent (or find it running) under ``root``/``node_id``; its node_dir, pid, pgid
    and port. The token goes on ssh's stdin into a 0600 file; it is on no command line."""
    script = start_script(root, node_id, python, agent_module=agent_module, ready_timeout_s=ready_timeout_s,
                          cloud=cloud)
    result = link.run(script, stdin=token + "\n", timeout_s=timeout_s)
    out = result.stdout
    fields = dict(line.split(" ", 1) for line in out.splitlines() if line.startswith("GEOTRAIN-") and " " in line)
    where = link.target.describe()
    if result.returncode == 0 and "GEOTRAIN-AGENT" in fields:
        try:
            agent = json.loads(fields["GEOTRAIN-AGENT"])
            return {"node_dir": fields["GEOTRAIN-NODE-DIR"], "pid": int(agent["pid"]),
                    "pgid": int(fields.get("GEOTRAIN-PGID") or agent["pid"]), "port": int(agent["port"])}
        except (KeyError, ValueError, TypeError) as exc:
            raise ProviderError(f"the node agent on {where} wrote an unreadable agent.json: {out[-500:]}",
                                scope=link.scope) from exc
    tail = out.split("GEOTRAIN-LOG\n", 1)[-1].strip()[-1500:] or result.stderr.strip()[-1500:] or "(nothing)"
    what = {73: "exited at once", 74: f"did not listen within {ready_timeout_s:.0f} s",
            71: "has no node directory", 72: "has no node directory"}.get(
        result.returncode, f"could not be started (exit {result.returncode})")
    if "No module named" in tail or "not found" in tail:
        advice = hint
    elif result.returncode in (71, 72):
        advice = f"give the node a root directory {link.target.user} may write"
    else:
        advice = "fix what the log says and launch again"
    raise ProviderError(f"the node agent on {where} {what}; its log says: {tail}; {advice}",
                        scope=link.scope) from SSHFailure(link.argv(""), result.returncode, result.stderr)


def start_script(root: str, node_id: str, python: str, *, agent_module: str = AGENT_MODULE,
                 ready_timeout_s: float = 60.0, cloud: str = "none") -> str:
    """The script that starts a node's agent on its machine's loopback (or finds it running)."""
    python = shlex.quote(python)
    ticks = max(1, int(ready_timeout_s * 20))
    return f"""set -u
umask 077
d={remote_path(root)}/{shlex.quote(node_id)}
mkdir -p "$d" && cd "$d" || {{ echo "cannot create $d" >&2; exit 71; }}
cat > token.new && mv -f token.new token || {{ echo "cannot write $d/token" >&2; exit 72; }}
d=$(pwd -P)
echo "GEOTRAIN-NODE-DIR $d"
{ALIVE}
pid=$(cat agent.pid 2>/dev/null)
if [ -n "$pid" ] && alive "$pid" && ours "$pid"; then :; else
  rm -f agent.json
  setsid nohup {python} -m {shlex.quote(agent_module)} --bind 127.0.0.1 --port 0 \
--root "$d" --token-file "$d/token" --cloud {shlex.quote(cloud)} >> agent.log 2>&1 < /dev/null &
  pid=$!
  echo "$pid" > agent.pid
fi
i=0
while [ ! -s agent.json ]; do
  if ! alive "$pid"; then echo "GEOTRAIN-LOG"; tail -c 1500 agent.log; exit 73; fi
  i=$((i + 1))
  if [ "$i" -gt {ticks} ]; then
    kill -KILL -- "-$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null
    echo "GEOTRAIN-LOG"; tail -c 1500 agent.log; exit 74
  fi
  sleep 0.05
done
pg=$(ps -o pgid= -p "$pid" 2>/dev/null | tr -d " ")
echo "GEOTRAIN-PGID ${{pg:-$pid}}"
echo "GEOTRAIN-AGENT $(cat agent.json)"
"""


def stop_script(node_dir: str | None, root: str, node_id: str, pid: int | None, stop_wait_s: float) -> str:
    """The script that stops a node's agent and every command it ran (what left their groups too)."""
    d = shlex.quote(node_dir) if node_dir else f"{remote_path(root)}/{shlex.quote(node_id)}"
    ticks = max(1, int(stop_wait_s * 20))
    return f"""set -u
d={d}
[ -d "$d" ] || {{ echo "GEOTRAIN-GONE"; exit 0; }}
cd "$d" && d=$(pwd -P)
{ALIVE}
rm -f "$d/token"
pid=$(cat agent.pid 2>/dev/null)
pid=${{pid:-{int(pid or 0)}}}
if [ "$pid" -gt 0 ] && alive "$pid" && ours "$pid"; then
  pg=$(ps -o pgid= -p "$pid" 2>/dev/null | tr -d " ")
  kill -TERM "$pid" 2>/dev/null
  i=0
  while alive "$pid" && [ "$i" -lt {ticks} ]; do sleep 0.05; i=$((i + 1)); done
  kill -KILL -- "-${{pg:-$pid}}" 2>/dev/null
  kill -KILL "$pid" 2>/dev/null
fi
for f in $(grep -lzxF -- "GEOTRAIN_NODE_DIR=$d" /proc/[0-9]*/environ 2>/dev/null); do
  p=${{f#/proc/}}; p=${{p%/environ}}
  kill -KILL -- "-$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null
done
rm -f agent.json agent.pid
echo "GEOTRAIN-STOPPED"
"""


def agent_endpoint(link: SshLink, node_id: str, port: int, token: str, *, fresh: bool = False):  # noqa: ANN201
    """The agent's endpoint: a Unix socket here that ``link`` forwards to the agent's loopback port
    (``fresh``: check the link and the forward first, and make them again if gone)."""
    from geotrain.providers.remote import AgentEndpoint

    path = control_dir() / f"{link.name}-{node_id}-{int(port)}.sock"
    if fresh or not path.exists():
        if not link.up():
            path.unlink(missing_ok=True)
        link.forward_local(path, int(port))
    return AgentEndpoint("127.0.0.1", int(port), token, socket=str(path))


# sh functions of both scripts: a live (non-zombie) process, and one that is this node's agent.
ALIVE = """alive() {
  kill -0 "$1" 2>/dev/null || return 1
  [ -r "/proc/$1/stat" ] || return 0
  s=$(sed "s/.*) //" "/proc/$1/stat" | cut -c1)
  [ "$s" != Z ] && [ "$s" != X ]
}
ours() { [ ! -d "/proc/$1" ] || tr "\\000" "\\n" < "/proc/$1/cmdline" | grep -qxF -- "$d"; }"""



def remote_path(path: str) -> str:
    """``path`` for the remote shell, quoted, with a leading ``~`` as the remote $HOME."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)



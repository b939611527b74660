"""A fake hypervisor: runs a fake cloud instance's startup script as a local "VM".

Each VM gets a loopback address of its own (127.0.X.Y: Linux routes all of 127/8 to lo), which its
fake cloud reports as the instance's public IP, and a directory under ``root``. ``boot`` runs the
startup script with bash exactly as the cloud handed it over, with the variables the script reads
for a local run (``geotrain.providers.startup``): the node directory, this Python, the address to
bind, and the fake metadata endpoint of this VM (``tests.fakes.metadata``). ``kill`` pulls the plug:
every process descended from the VM is stopped, then killed, as a VM that disappears takes them.
"""

from __future__ import annotations

import contextlib
import getpass
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

# The VM's first process adopts what its processes leave behind (PR_SET_CHILD_SUBREAPER, kept across exec):
# a daemon started over SSH (`setsid nohup` of the node agent) stays a descendant, so `kill` ends it too.
SUBREAPER = "import ctypes, os, sys; ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0); " \
            "os.execvp(sys.argv[1], sys.argv[1:])"

_addresses = itertools.count(0)
_lock = threading.Lock()


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if fields[0] not in "ZX":
                tree.setdefault(int(fields[1]), []).append(int(name))
    return tree


def descendants(pid: int) -> list[int]:
    tree, out, todo = _children(), [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(tree.get(p, []))
    return out


class Hypervisor:
    def __init__(self, root: Path, metadata: object | None = None) -> None:
        self.root = Path(root)
        self.metadata = metadata  # a tests.fakes.metadata.FakeMetadata, or None
        self.vms: dict[str, subprocess.Popen[bytes]] = {}
        self.addresses: dict[str, str] = {}
        self.booted: list[str] = []

    @staticmethod
    def new_address() -> str:
        with _lock:
            n = next(_addresses) % (250 * 250)
        return f"127.0.{n // 250}.{n % 250 + 2}" if n >= 248 else f"127.0.0.{n + 2 + 8}"

    def node_dir(self, vm_id: str) -> Path:
        return self.root / vm_id / "node"

    def boot(self, vm_id: str, cloud: str, script: str, address: str) -> None:
        if vm_id in self.vms:
            return
        home = self.root / vm_id
        home.mkdir(parents=True, exist_ok=True)
        (home / "startup.sh").write_text(script)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
               "GEOTRAIN_NODE_ROOT": str(self.node_dir(vm_id)), "GEOTRAIN_PYTHON": sys.executable,
               "GEOTRAIN_AGENT_BIND": address,
               # a startup script that starts an sshd (geotrain.providers.startup.ssh_startup_script): this
               # machine's user, on this VM's address only
               "GEOTRAIN_NODE_USER": getpass.getuser(), "GEOTRAIN_SSH_BIND": address}
        if self.metadata is not None:
            env["GEOTRAIN_METADATA_URL"] = self.metadata.base_url(vm_id)  # type: ignore[attr-defined]
        with open(home / "console.log", "ab") as console:
            self.vms[vm_id] = subprocess.Popen([sys.executable, "-c", SUBREAPER, "bash", str(home / "startup.sh")],
                                               env=env, cwd=home,
                                               stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
                                               start_new_session=True)
        self.addresses[vm_id] = address
        self.booted.append(vm_id)

    def alive(self, vm_id: str) -> bool:
        proc = self.vms.get(vm_id)
        return proc is not None and proc.poll() is None

    def kill(self, vm_id: str) -> None:
        proc = self.vms.get(vm_id)
        if proc is None:
            return
        for _ in range(3):  # stop the whole tree first, so that nothing forks or is reparented meanwhile
            pids = descendants(proc.pid) if proc.poll() is None else []
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if not pids:
                break
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)

    def running(self) -> list[str]:
        return [vm_id for vm_id in self.vms if self.alive(vm_id)]

    def close(self) -> None:
        for vm_id in list(self.vms):
            self.kill(vm_id)

    def wait_agent(self, vm_id: str, timeout_s: float = 20.0) -> dict:
        import json

        path = self.node_dir(vm_id) / "agent.json"
        deadline = time.monotonic() + timeout_s
        while not path.exists():
            if time.monotonic() > deadline or not self.alive(vm_id):
                raise AssertionError(f"VM {vm_id}: no agent ({(self.root / vm_id / 'console.log').read_text()[-500:]})")
            time.sleep(0.02)
        return json.loads(path.read_text())

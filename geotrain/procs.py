"""Looking at processes through /proc (Linux), with portable fallbacks: alive, zombie, group, environment."""

from __future__ import annotations

import os
from pathlib import Path

HAS_PROC = Path("/proc/self/stat").exists()


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, process group, start time in clock ticks) from /proc, or None if there is no such pid."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = data[data.rindex(")") + 2:].split()  # after "pid (comm) "; comm may hold spaces
    # fields[0] is field 3 of proc(5): state; 5 pgrp → [2]; 22 starttime → [19]
    return fields[0], int(fields[2]), int(fields[19])


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    if HAS_PROC:
        stat = proc_stat(pid)
        return stat is not None and stat[0] not in "ZX"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` still runs (zombies do not count)."""
    if not HAS_PROC:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = proc_stat(int(name))
            if stat is not None and stat[1] == pgid and stat[0] not in "ZX":
                return True
    return False


def environ_has(pid: int, variable: str, value: str) -> bool:
    """Whether process ``pid`` was started with ``variable=value`` (False when it cannot be read)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{variable}={value}".encode() in environ.split(b"\0")


def processes_with(variable: str, value: str) -> list[int]:
    """Processes (other than this one) started with ``variable=value``: what carries a node's or run's
    mark wherever its session or parent is."""
    me = os.getpid()
    return [int(name) for name in os.listdir("/proc")
            if name.isdigit() and int(name) != me and environ_has(int(name), variable, value)] if HAS_PROC else []

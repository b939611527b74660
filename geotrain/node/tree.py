"""The processes a node's agent is responsible for: its descendants, whatever session they are in.

Commands started on a node are killed by process group, but a command may start children in
sessions of their own (torchrun starts its workers with ``start_new_session=True``), which no
``killpg`` reaches. An agent that is a child subreaper (``PR_SET_CHILD_SUBREAPER``) keeps such
processes as descendants even when their parent dies, so walking the parent links from the agent
finds all of them. Standard library only; Linux ``/proc``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Orphans among this process's descendants are reparented to it (Linux; elsewhere nothing)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def descendants(root: int) -> list[int]:
    """Every live descendant of ``root`` (children first), read from /proc; [] where there is none."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read().decode("ascii", "replace")
        except OSError:
            continue
        parent = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(parent, []).append(int(name))
    out, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop(0)
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def kill_descendants(root: int) -> int:
    """SIGKILL every descendant of ``root``; how many were signalled."""
    found = descendants(root)
    for pid in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(found)


def signal_outside_group(root: int, signum: int) -> None:
    """Send ``signum`` to the descendants of ``root`` outside its process group (the group gets it by
    ``killpg``): the preemption notice reaches torchrun's workers too. Commands start with the notice
    signal ignored, an inherited disposition, so a process that has not asked for it is not ended."""
    try:
        group = os.getpgid(root)
    except OSError:
        return
    for pid in descendants(root):
        with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
            if os.getpgid(pid) != group:
                os.kill(pid, signum)

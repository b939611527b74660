"""The owner's record of a running emulation, so that leftovers of a crashed run can be found.

One JSON file per run, ``<state_dir>/<tag>.json`` (0600, in a 0700 directory), written atomically
whenever the run's namespaces change. A process is named by its pid *and* its start time (clock ticks
since boot, from /proc), so a recycled pid is not taken for the process that once had it.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from geotrain.files import PRIVATE_DIR, PRIVATE_FILE, atomic_write_text, geotrain_home
from geotrain.procs import proc_stat


@dataclass(frozen=True)
class ProcessId:
    """A process as it was when recorded: pid and start time (clock ticks since boot)."""

    pid: int
    start_ticks: int

    @classmethod
    def of(cls, pid: int) -> ProcessId | None:
        """The running process ``pid``, or None when there is none."""
        stat = proc_stat(pid)
        return None if stat is None else cls(pid, stat[2])

    def alive(self) -> bool:
        """Whether this very process still runs (not a zombie, not a later process with its pid)."""
        stat = proc_stat(self.pid)
        return stat is not None and stat[0] not in "ZX" and stat[2] == self.start_ticks


@dataclass(frozen=True)
class RunRecord:
    """What the owner of one emulation records: its tag, itself, its delay line, its namespaces."""

    tag: str
    owner: ProcessId
    delayline: ProcessId | None = None
    namespaces: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> str:
        """The record as the JSON text stored on disk."""
        data = asdict(self)
        data["namespaces"] = list(self.namespaces)
        return json.dumps(data, indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> RunRecord:
        """The record stored as ``text``; ValueError/KeyError/TypeError when it is not one."""
        data = json.loads(text)
        delayline = data.get("delayline")
        return cls(tag=str(data["tag"]), owner=ProcessId(**data["owner"]),
                   delayline=ProcessId(**delayline) if delayline else None,
                   namespaces=tuple(str(name) for name in data.get("namespaces", ())))


def default_state_dir() -> Path:
    """Where runs are recorded unless told otherwise: ``<geotrain home>/wan``."""
    return geotrain_home() / "wan"


def _ensure_dir(state_dir: Path) -> Path:
    state_dir.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    with contextlib.suppress(OSError):
        os.chmod(state_dir, PRIVATE_DIR)
    return state_dir


def record_path(state_dir: Path, tag: str) -> Path:
    """The file that records run ``tag``."""
    return state_dir / f"{tag}.json"


def write(state_dir: Path, record: RunRecord) -> None:
    """Store ``record`` (atomically, 0600)."""
    path = record_path(_ensure_dir(state_dir), record.tag)
    with contextlib.suppress(FileExistsError):  # the atomic write keeps the mode of the file it replaces
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))
    atomic_write_text(path, record.to_json())


def forget(state_dir: Path, tag: str) -> None:
    """Delete run ``tag``'s record (nothing when there is none)."""
    with contextlib.suppress(FileNotFoundError):
        record_path(state_dir, tag).unlink()


def read_all(state_dir: Path) -> list[RunRecord]:
    """Every readable record in ``state_dir``; unreadable files are skipped."""
    if not state_dir.is_dir():
        return []
    out = []
    for path in sorted(state_dir.glob("*.json")):
        try:
            out.append(RunRecord.from_json(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out

"""Where geotrain keeps its state, and the one way it writes files.

``GEOTRAIN_HOME`` (environment variable) overrides the per-user data directory that platformdirs
picks (e.g. ``~/.local/share/geotrain`` on Linux). Every write goes through
:func:`atomic_write_bytes`: a temporary file in the same directory, fsync, rename, fsync of the
directory. A reader therefore sees the old file or the new one, never a torn one, and a failed write
leaves what was on disk untouched. The new file keeps the mode of the one it replaces, or gets the
mode a plain ``open`` would give it (0666 less the umask).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

ENV_HOME = "GEOTRAIN_HOME"


def geotrain_home() -> Path:
    """The state directory (created on first use)."""
    override = os.environ.get(ENV_HOME)
    if override:
        home = Path(override).expanduser()
    else:
        import platformdirs

        home = Path(platformdirs.user_data_dir("geotrain", appauthor=False))
    home.mkdir(parents=True, exist_ok=True)
    return home


def atomic_write_bytes(path: Path, data: bytes, *, temp_path: str | Path | None = None) -> None:
    """Write ``data`` to ``path`` so that readers see either the old or the new content.

    ``temp_path``: where the temporary file goes (same directory), for callers that sweep their own
    leftovers by name; by default a fresh ``.<name>.*.tmp`` beside ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if temp_path is None:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    else:
        tmp_name = str(temp_path)
        fd = os.open(tmp_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, _mode_for(path))
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    fsync_dir(path.parent)


def _mode_for(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0o022)
        os.umask(umask)
        return 0o666 & ~umask


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def fsync_dir(directory: Path | str) -> None:
    """Make a rename in ``directory`` durable (best effort where the file system cannot)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # some file systems do not allow opening a directory
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)

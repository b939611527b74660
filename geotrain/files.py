"""Where geotrain keeps its state, and the one way it writes files.

``GEOTRAIN_HOME`` (environment variable) overrides the per-user data directory that platformdirs
picks (e.g. ``~/.local/share/geotrain`` on Linux). It is private: created (or tightened) to 0700, so
nothing beneath it — ledger, runs, logs, default checkpoints, node state — is open to other users,
whatever the modes of the files in it; files geotrain writes there are 0600 as well.

Every write goes through :func:`atomic_write_bytes`: a temporary file in the same directory, fsync,
rename, fsync of the directory. A reader therefore sees the old file or the new one, never a torn one,
and a failed write leaves what was on disk untouched. The new file keeps the mode of the one it
replaces, or gets 0600 under GEOTRAIN_HOME and elsewhere the mode a plain ``open`` would give it (0666
less the umask).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

ENV_HOME = "GEOTRAIN_HOME"


PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def home_path() -> Path:
    """Where the state directory is (nothing is created)."""
    override = os.environ.get(ENV_HOME)
    if override:
        return Path(override).expanduser()
    try:
        import platformdirs
    except ImportError:  # a node, where geotrain is installed without its dependencies: the XDG default
        return Path(os.environ.get("XDG_DATA_HOME") or "~/.local/share").expanduser() / "geotrain"
    return Path(platformdirs.user_data_dir("geotrain", appauthor=False))


def geotrain_home() -> Path:
    """The state directory, created on first use, private (0700) to its owner."""
    home = home_path()
    home.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    with contextlib.suppress(OSError):  # tighten one made by an older geotrain, or by hand
        st = home.stat()
        if st.st_uid == os.getuid() and st.st_mode & 0o077:
            os.chmod(home, PRIVATE_DIR)
    return home


def is_private_path(path: Path) -> bool:
    """Whether ``path`` lies under GEOTRAIN_HOME."""
    try:
        Path(os.path.abspath(path)).relative_to(os.path.abspath(home_path()))
    except ValueError:
        return False
    return True


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
        if is_private_path(path):
            return PRIVATE_FILE
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


def write_png(fig, path: str | Path) -> None:  # noqa: ANN001 - a matplotlib figure (imported by the caller)
    """Save a matplotlib figure as a PNG at ``path`` (atomically), and close it."""
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    import matplotlib.pyplot as plt

    plt.close(fig)
    atomic_write_bytes(Path(path), buffer.getvalue())

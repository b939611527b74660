"""Copy a task's cloud-storage mounts onto this node: ``python -m geotrain.node.fetch``.

``GEOTRAIN_TASK_FETCH`` holds ``[[destination, url], …]`` (a task's ``file_mounts`` whose source is
``s3://``, ``gs://`` or ``az://``/``abfs://``: SkyPilot's mode ``COPY``). Each URL is read through fsspec
with the node's own credentials (its instance role, ``--instance-role``, or the task's envs), so the
node needs fsspec and the scheme's filesystem (s3fs, gcsfs, adlfs) in the Python that runs it; a
missing one, a missing object or a denied read ends the copy with one line saying which and what to
do, and the task's setup counts as failed. A destination is under the node's home (``~/x`` or a
relative path). A directory URL (a prefix) is copied whole; a copy goes to a hidden folder beside
its destination and is renamed into place, so a half copy is never taken for a whole one.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

_PACKAGES = {"s3": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs", "abfss": "adlfs"}


def destination(home: Path, dest: str) -> Path:
    """Where a mount goes on this node: under ``home``."""
    rel = dest[2:] if dest.startswith("~/") else dest
    parts = Path(rel).parts
    if not parts or ".." in parts or rel.startswith("/"):
        raise ValueError(f"{dest!r} is not a path inside the node's home")
    return home.joinpath(*parts)


def copy_one(url: str, target: Path) -> None:
    """Copy ``url`` (an object or a prefix) to ``target`` through fsspec."""
    scheme = url.split("://", 1)[0]
    try:
        import fsspec
    except ImportError:
        raise RuntimeError(f"fsspec is not installed in this node's Python ({sys.executable}); install fsspec and "
                           f"{_PACKAGES.get(scheme, 'its filesystem')} on the node image, or copy it in setup") from None
    try:
        fs, path = fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:
        raise RuntimeError(f"{url}: no filesystem for {scheme}:// on this node ({exc}); install "
                           f"{_PACKAGES.get(scheme, 'its fsspec package')} on the node image, or copy it in setup") from None
    partial = target.with_name(f".{target.name}.partial")
    if partial.is_dir():
        shutil.rmtree(partial)
    elif partial.exists():
        partial.unlink()
    partial.parent.mkdir(parents=True, exist_ok=True)
    if fs.isdir(path):
        fs.get(path.rstrip("/") + "/", str(partial), recursive=True)
    elif fs.exists(path):
        fs.get(path, str(partial))
    else:
        raise RuntimeError(f"{url}: no such object or prefix (or this node may not list it)")
    os.replace(partial, target)


def main() -> int:
    mounts = json.loads(os.environ.get("GEOTRAIN_TASK_FETCH") or "[]")
    home = Path(os.environ.get("HOME") or Path.home())
    for dest, url in mounts:
        try:
            target = destination(home, dest)
            if target.exists():
                continue  # copied by an earlier generation on this node
            copy_one(url, target)
        except Exception as exc:  # noqa: BLE001 - every failure of a copy is one line for the user
            print(f"geotrain: file_mounts.{dest}: could not copy {url}: {str(exc)[:400]}", file=sys.stderr)
            return 3
        print(f"geotrain: copied {url} to {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

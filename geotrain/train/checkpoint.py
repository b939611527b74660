"""Atomic, verifiable training checkpoints on any fsspec URL.

A preemption loses at most the work since the last *committed* checkpoint, and a torn or corrupt
checkpoint is never loaded.

Layout under the base URL (a local path, ``file://...``, ``memory://...``, or ``s3://`` / ``gs://`` /
``az://`` where s3fs / gcsfs / adlfs is installed)::

    ckpt-0000000042/
        state.pt        torch.save(state) -- the data
        manifest.json   {"format": 1, "step", "sha256", "size_bytes", "created_at", "meta", "data"}
        COMMITTED       {"format": 1, "step", "sha256"} -- the data's sha256; written LAST

Write protocol: data, then manifest, then marker, each to ``<name>.tmp-<uuid>`` in the checkpoint's
directory and renamed into place (local: write, flush, fsync, ``os.replace``, fsync of the directory;
remote: put to the temp name, then ``mv``). Only the marker makes a checkpoint visible: a reader
accepts a directory only if its marker exists, the manifest parses and names this step, the marker
and the manifest name the same data sha256, and the data's size and sha256 match. Any interleaving of
crashes therefore yields either a consistent checkpoint or a rejected one. Two writers of the same
step with the same state (identical bytes) converge on one valid checkpoint whatever the interleaving;
writers of the same step with *different* states may clobber each other (``save`` retries, then
raises ``OSError``), so only one rank should own a given step's contents.

Loading uses ``torch.load(weights_only=True)``. Model and optimizer state dicts, tensors (including
``torch.get_rng_state()``), ``random.getstate()`` (a tuple of ints), and nested dicts / lists / tuples
of primitives all load that way. ``numpy.random.get_state()`` does NOT (it holds an ndarray): store
``numpy.random.default_rng().bit_generator.state`` (a dict of ints and strings) or convert arrays to
tensors / lists. :meth:`CheckpointStore.save` trial-loads the state before writing anything and
raises ``TypeError`` for a state that would not load, so an unloadable checkpoint is never committed.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import posixpath
import re
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import fsspec
import fsspec.core
import torch
from fsspec.implementations.local import LocalFileSystem

from geotrain.errors import InputError
from geotrain.files import atomic_write_bytes

FORMAT_VERSION = 1
DATA_NAME = "state.pt"
MANIFEST_NAME = "manifest.json"
MARKER_NAME = "COMMITTED"
TMP_INFIX = ".tmp-"
_DIR_RE = re.compile(r"^ckpt-(\d{10})$")
_MAX_STEP = 10**10 - 1
_HASH_CHUNK = 8 << 20
_SAVE_ATTEMPTS = 3
_NO_MARKER = f"torn: no {MARKER_NAME} marker (the writer stopped before committing)"
# fsspec protocol -> the package that implements it, for the "install X" hint.
_BACKENDS = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs",
             "abfss": "adlfs", "adl": "adlfs"}


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """One committed, verified checkpoint.

    ``url`` is the checkpoint's directory URL (with protocol, e.g. ``file:///runs/r1/ckpt-0000000042``),
    ``sha256`` and ``size_bytes`` describe its data file, ``created_at`` is ISO 8601 UTC, and ``meta``
    is the JSON-able metadata the caller gave to :meth:`CheckpointStore.save`.
    """

    step: int
    url: str
    sha256: str
    size_bytes: int
    created_at: str
    meta: dict


class CheckpointStore:
    """Checkpoints of one run under one base URL (see the module docstring for layout and protocol).

    ``write_delay_s`` sleeps between writing the data and the manifest, so that tests can preempt a
    node in the middle of a checkpoint write. ``on_phase(phase, step)`` is called with ``"data"``
    (before writing the data), ``"manifest"`` (after the data, before the manifest), ``"marker"``
    (after the manifest, before the marker) and ``"committed"`` (after the marker). The store does
    nothing else from these hooks; an exception a hook raises propagates unchanged and leaves what was
    written so far, as a crash at that point would. ``storage_options`` go to the fsspec file system.

    ``rejected`` lists ``(checkpoint dir URL, reason)`` for each damaged checkpoint the last
    :meth:`latest` or :meth:`list` skipped. A directory without a marker is reported as torn even when
    another writer is still writing it: readers cannot tell the two apart, and need not.

    Raises :class:`InputError` if the base URL's protocol is unknown or its backend is not installed,
    or the base location cannot be created or written.
    """

    rejected: list[tuple[str, str]]

    def __init__(self, url: str, *, write_delay_s: float = 0.0,
                 on_phase: Callable[[str, int], None] | None = None,
                 storage_options: dict | None = None) -> None:
        if write_delay_s < 0:
            raise ValueError(f"write_delay_s must be >= 0, got {write_delay_s}")
        self._write_delay_s = write_delay_s
        self._on_phase = on_phase
        self.rejected = []
        self._fs, root = _open_fs(url, storage_options or {})
        self._root = root.rstrip("/") or "/"
        self._local = isinstance(self._fs, LocalFileSystem)
        self._ensure_root(url)

    # -- public API -----------------------------------------------------------------------------

    def save(self, step: int, state: dict, *, meta: dict | None = None) -> CheckpointInfo:
        """Write and commit checkpoint ``step``; return its info once it is committed and verifies.

        Idempotent per step: if ``ckpt-{step}`` is already committed and verifies, its info is returned
        and nothing is rewritten (two ranks may save the same step). A damaged or uncommitted directory
        for ``step`` is rewritten. On success, leftovers are removed: ``*.tmp-*`` files in checkpoints
        up to the newest committed one, and uncommitted checkpoint directories older than it.

        Raises ``ValueError`` for a step outside ``0..9_999_999_999``, ``TypeError`` for a ``state``
        that is not a dict, ``meta`` that is not JSON-able, or a state that ``torch.load(weights_only
        =True)`` would refuse (nothing is written then). Storage failures (``OSError`` and the
        backend's own errors) propagate; a failed save never damages an earlier checkpoint.
        """
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= _MAX_STEP:
            raise ValueError(f"checkpoint step must be an int in 0..{_MAX_STEP}, got {step!r}")
        if not isinstance(state, dict):
            raise TypeError(f"checkpoint state must be a dict, got {type(state).__name__}")
        meta = {} if meta is None else meta
        try:
            meta = json.loads(json.dumps(meta, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"checkpoint meta must be JSON-serialisable: {exc}") from exc
        if not isinstance(meta, dict):
            raise TypeError(f"checkpoint meta must be a dict, got {type(meta).__name__}")

        ckpt_dir = self._dir(step)
        result = self._verify(step, ckpt_dir)
        if isinstance(result, CheckpointInfo):
            self._sweep()
            return result
        data = _serialise(state)

        for attempt in range(_SAVE_ATTEMPTS):
            if result != _NO_MARKER:
                # Uncommit a damaged checkpoint before rewriting it, so that a crash while rewriting
                # leaves it torn rather than committed with mixed files.
                self._rm(posixpath.join(ckpt_dir, MARKER_NAME))
            try:
                self._write(step, ckpt_dir, data, meta)
            except FileNotFoundError:
                # Another writer of this step swept our temp file after committing its own copy.
                if attempt == _SAVE_ATTEMPTS - 1:
                    raise
            result = self._verify(step, ckpt_dir)
            if isinstance(result, CheckpointInfo):
                self._sweep()
                return result
            # Lost a race with a writer of the same step and a different state: write again.
        raise OSError(f"checkpoint {self._fs.unstrip_protocol(ckpt_dir)} did not verify after "
                      f"{_SAVE_ATTEMPTS} writes ({result}); is something else writing to it?")

    def probe(self) -> None:
        """Write, read back and delete a small object under the base URL: InputError naming the URL
        if the location cannot hold checkpoints (the launcher asks before any node starts)."""
        name = posixpath.join(self._root, f".probe-{uuid.uuid4().hex}")
        payload = f"geotrain checkpoint probe {uuid.uuid4().hex}".encode()
        url = self._fs.unstrip_protocol(self._root)
        try:
            with self._fs.open(name, "wb") as handle:
                handle.write(payload)
            back = self._fs.cat_file(name)
            self._fs.rm(name)
        except Exception as exc:  # the backends raise their own types
            raise InputError(f"cannot use checkpoint location {url!r}: writing a probe failed "
                             f"({type(exc).__name__}: {exc}); give a directory or bucket path that is "
                             "writable") from exc
        if back != payload:
            raise InputError(f"cannot use checkpoint location {url!r}: a probe read back differently")

    @property
    def in_process_memory(self) -> bool:
        """The location is this process's memory (``memory://``): other processes cannot see it."""
        return "memory" in (self._fs.protocol if isinstance(self._fs.protocol, tuple) else (self._fs.protocol,))

    def latest(self) -> CheckpointInfo | None:
        """The newest checkpoint that verifies, or None. Never raises for a damaged checkpoint.

        Newer checkpoints that fail verification are skipped and recorded in :attr:`rejected`.
        """
        self.rejected = []
        for step, path in reversed(self._scan()):
            result = self._verify(step, path)
            if isinstance(result, CheckpointInfo):
                return result
            self.rejected.append((self._fs.unstrip_protocol(path), result))
        return None

    def load(self, info: CheckpointInfo) -> dict:
        """The state saved in ``info``'s checkpoint, with every tensor on the CPU.

        Re-reads the data and checks its size and sha256 against ``info``; raises :class:`InputError`
        naming the checkpoint if they differ or the data is missing (call :meth:`latest` again to fall
        back to an older checkpoint).
        """
        path = posixpath.join(self._fs._strip_protocol(info.url).rstrip("/"), DATA_NAME)
        try:
            data = self._fs.cat_file(path)
        except FileNotFoundError as exc:
            raise InputError(f"checkpoint {info.url} has no {DATA_NAME}; it was deleted after it was "
                             "listed, call latest() again") from exc
        if len(data) != info.size_bytes or hashlib.sha256(data).hexdigest() != info.sha256:
            raise InputError(f"checkpoint {info.url} is corrupt: its {DATA_NAME} no longer matches its "
                             "manifest (size or sha256); call latest() again to fall back to an older one")
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)

    def list(self) -> list[CheckpointInfo]:
        """Every checkpoint that verifies, oldest first; damaged ones are recorded in :attr:`rejected`."""
        self.rejected = []
        found = []
        for step, path in self._scan():
            result = self._verify(step, path)
            if isinstance(result, CheckpointInfo):
                found.append(result)
            else:
                self.rejected.append((self._fs.unstrip_protocol(path), result))
        return found

    def prune(self, keep: int = 3) -> None:
        """Delete all but the newest ``keep`` verified checkpoints, and leftovers.

        ``keep`` must be at least 2: the previous checkpoint is what a run falls back to if the newest
        turns out damaged. Leftovers are ``*.tmp-*`` files and damaged or uncommitted directories older
        than the newest verified checkpoint; anything newer may still be being written and is kept.
        """
        if keep < 2:
            raise ValueError(f"prune keeps at least the newest 2 checkpoints, got keep={keep}")
        verified = self.list()
        doomed = [self._dir(info.step) for info in verified[:-keep]]
        if verified:
            newest = verified[-1].step
            doomed += [self._fs._strip_protocol(url) for url, _ in self.rejected
                       if _step_of(url) < newest]
        for path in doomed:
            self._rm(path, recursive=True)
        self._sweep()

    # -- writing --------------------------------------------------------------------------------

    def _write(self, step: int, ckpt_dir: str, data: bytes, meta: dict) -> None:
        marker = posixpath.join(ckpt_dir, MARKER_NAME)
        self._phase("data", step)
        self._fs.makedirs(ckpt_dir, exist_ok=True)
        self._put(posixpath.join(ckpt_dir, DATA_NAME), data)
        if self._write_delay_s:
            time.sleep(self._write_delay_s)
        self._phase("manifest", step)
        manifest = _json_bytes({
            "format": FORMAT_VERSION, "step": step, "sha256": hashlib.sha256(data).hexdigest(),
            "size_bytes": len(data), "created_at": _utc_now(), "meta": meta, "data": DATA_NAME,
        })
        self._put(posixpath.join(ckpt_dir, MANIFEST_NAME), manifest)
        self._phase("marker", step)
        self._put(marker, _json_bytes({"format": FORMAT_VERSION, "step": step,
                                       "sha256": hashlib.sha256(data).hexdigest()}))
        self._phase("committed", step)

    def _put(self, path: str, data: bytes) -> None:
        """Replace ``path`` with ``data`` so that readers see the old file or the new, never a torn one."""
        tmp = f"{path}{TMP_INFIX}{uuid.uuid4().hex}"
        if self._local:
            atomic_write_bytes(Path(path), data, temp_path=tmp)
        else:
            try:
                self._fs.pipe_file(tmp, data)
                self._fs.mv(tmp, path)
            except BaseException:
                self._rm(tmp)
                raise

    def _phase(self, phase: str, step: int) -> None:
        if self._on_phase is not None:
            self._on_phase(phase, step)

    def _sweep(self) -> None:
        """Remove temp files and uncommitted directories that no live writer can still own.

        Anything at or below the newest committed step is debris of a killed writer (steps only grow),
        except a concurrent writer of that same step, which survives losing its temp file (``save``
        retries). Newer directories may be in progress and are left alone.
        """
        entries = self._scan()
        committed = [step for step, path in entries if self._exists(posixpath.join(path, MARKER_NAME))]
        if not committed:
            return
        newest = max(committed)
        for step, path in entries:
            if step > newest:
                continue
            if step < newest and step not in committed:
                self._rm(path, recursive=True)
                continue
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                for name in self._fs.ls(path, detail=False):
                    if TMP_INFIX in posixpath.basename(name):
                        self._rm(name)

    # -- reading --------------------------------------------------------------------------------

    def _scan(self) -> list[tuple[int, str]]:
        """(step, directory path) of every ``ckpt-*`` entry under the base, oldest first."""
        self._fs.invalidate_cache()  # remote listings are cached; other writers change them
        try:
            names = self._fs.ls(self._root, detail=False)
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            match = _DIR_RE.match(posixpath.basename(name.rstrip("/")))
            if match:
                found.append((int(match.group(1)), self._dir(int(match.group(1)))))
        return sorted(found)

    def _verify(self, step: int, path: str) -> CheckpointInfo | str:
        """The checkpoint's info if it is committed and intact, else the reason it is not."""
        try:
            marker_bytes = self._fs.cat_file(posixpath.join(path, MARKER_NAME))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return _NO_MARKER
        try:
            manifest_bytes = self._fs.cat_file(posixpath.join(path, MANIFEST_NAME))
        except (FileNotFoundError, IsADirectoryError):
            return f"unreadable manifest: {MANIFEST_NAME} is missing"
        try:
            manifest = json.loads(manifest_bytes)
            if not isinstance(manifest, dict):
                raise ValueError("not a JSON object")
            if manifest.get("format") != FORMAT_VERSION:
                raise ValueError(f"unknown format version {manifest.get('format')!r}")
            if manifest.get("step") != step:
                raise ValueError(f"step {manifest.get('step')!r} does not match the directory")
            sha256, size = manifest["sha256"], manifest["size_bytes"]
            created_at, meta = manifest["created_at"], manifest["meta"]
            if not (isinstance(sha256, str) and isinstance(size, int) and isinstance(created_at, str)
                    and isinstance(meta, dict)):
                raise ValueError("a field has the wrong type")
        except (ValueError, KeyError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            return f"unreadable manifest: {exc}"
        try:
            marker = json.loads(marker_bytes)
            marker_sha = marker.get("sha256") if isinstance(marker, dict) else None
        except ValueError:
            marker_sha = None
        if marker_sha != sha256:
            return f"torn: {MARKER_NAME} marker does not match {MANIFEST_NAME}"
        try:
            actual_size, actual_sha = self._hash(posixpath.join(path, DATA_NAME))
        except (FileNotFoundError, IsADirectoryError):
            return f"corrupt: {DATA_NAME} is missing"
        if actual_size != size:
            return f"corrupt: {DATA_NAME} is {actual_size} bytes, the manifest says {size}"
        if actual_sha != sha256:
            return f"corrupt: {DATA_NAME} sha256 mismatch"
        return CheckpointInfo(step=step, url=self._fs.unstrip_protocol(path), sha256=sha256,
                              size_bytes=size, created_at=created_at, meta=meta)

    def _hash(self, path: str) -> tuple[int, str]:
        digest, size = hashlib.sha256(), 0
        with self._fs.open(path, "rb") as handle:
            while chunk := handle.read(_HASH_CHUNK):
                digest.update(chunk)
                size += len(chunk)
        return size, digest.hexdigest()

    # -- plumbing -------------------------------------------------------------------------------

    def _dir(self, step: int) -> str:
        return posixpath.join(self._root, f"ckpt-{step:010d}")

    def _exists(self, path: str) -> bool:
        try:
            return bool(self._fs.exists(path))
        except FileNotFoundError:
            return False

    def _rm(self, path: str, *, recursive: bool = False) -> None:
        # Two sweepers (ranks) may race to delete the same debris; losing that race is fine.
        with contextlib.suppress(FileNotFoundError):
            if recursive:
                self._fs.rm(path, recursive=True)
            else:
                self._fs.rm_file(path)

    def _ensure_root(self, url: str) -> None:
        try:
            self._fs.makedirs(self._root, exist_ok=True)
            if not self._fs.isdir(self._root) and self._local:
                raise NotADirectoryError(self._root)
            if self._local and not os.access(self._root, os.W_OK | os.X_OK):
                raise PermissionError(self._root)
        except Exception as exc:
            raise InputError(f"cannot use checkpoint location {url!r}: {type(exc).__name__}: {exc}; "
                             "give a directory (or bucket path) that exists or can be created and is "
                             "writable") from exc


def _open_fs(url: str, storage_options: dict) -> tuple[Any, str]:
    protocol = url.split("://", 1)[0].lower() if "://" in url else "file"
    try:
        return fsspec.core.url_to_fs(url, **storage_options)
    except ImportError as exc:
        package = _BACKENDS.get(protocol, f"the fsspec backend for {protocol}://")
        raise InputError(f"cannot open checkpoint location {url!r}: install {package} for "
                         f"{protocol}:// URLs") from exc
    except ValueError as exc:
        raise InputError(f"cannot open checkpoint location {url!r}: {exc}; use a local path, file://, "
                         "memory://, s3:// (s3fs), gs:// (gcsfs) or az:// (adlfs)") from exc


def _serialise(state: dict) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getvalue()
    # Fail before writing anything rather than commit a checkpoint that load() would refuse. The
    # tensors go to the meta device: the check unpickles everything but copies no data (a second
    # copy of a large model's state is what would run a host out of memory).
    try:
        torch.load(io.BytesIO(data), map_location="meta", weights_only=True)
    except Exception as exc:  # torch raises UnpicklingError (or RuntimeError) naming the type
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        detail = next((line for line in lines if "Unsupported global" in line), lines[0] if lines else "")
        raise TypeError("checkpoint state must load with torch.load(weights_only=True): tensors, state "
                        "dicts and nested dicts/lists/tuples of primitives (e.g. store numpy RNG state "
                        f"as lists or tensors); {detail}") from exc
    return data


def _step_of(url: str) -> int:
    match = _DIR_RE.match(posixpath.basename(url.rstrip("/")))
    return int(match.group(1)) if match else -1


def _json_bytes(value: dict) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode("utf-8")


def _utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")

"""Shipping geotrain to a node that does not have it: the exact code this process runs, as a wheel.

A remote node (a cloud VM, an on-prem machine) never installs geotrain from a package index: the
launcher builds a wheel of the ``geotrain`` package it imports itself (:func:`build_wheel`), uploads
it, and runs :func:`install_script` on the node, which installs that wheel into a venv of its own on
top of the image's Python (so the image's torch and numpy are used, not reinstalled) and answers in
``GEOTRAIN-*`` lines that :func:`parse_install_output` reads.

The wheel's version is ``geotrain.__version__`` plus a PEP 440 local label naming the code exactly:
``0.1.0+g<first 12 hex of the content hash>``, where the content hash is a sha256 over the package's
files (paths and bytes; ``__pycache__``, ``*.pyc`` and dot-files left out). The same code gives the
same label, the same file name and byte-identical wheel (fixed timestamps), so the label decides the
launcher's cache and the node's venv; a commit, where the package sits in a git checkout, is only
reported beside it.

The node's side speaks in lines on stdout (everything else it prints goes to stderr)::

    GEOTRAIN-TORCH-INSTALLED <torch version> <index>   torch was missing and was installed just now
    GEOTRAIN-WHEEL <wheel file name>                   the wheel the venv holds
    GEOTRAIN-PYTHON <absolute path of the venv's python>
    GEOTRAIN-VERSION <installed geotrain version>
    GEOTRAIN-ERROR <what went wrong and what to do>    (and a non-zero exit)

Standard library only.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import hashlib
import io
import os
import re
import shlex
import subprocess
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from geotrain.errors import ProviderError

DIST_NAME = "geotrain"
REQUIRES_PYTHON = ">=3.11"
# What a node needs for training when its image has no torch (pyproject.toml's `train` extra; torch
# brings fsspec with it).
TORCH_REQUIREMENT = "torch>=2.13,<2.15"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PYPI_INDEX = "https://pypi.org/simple"  # torch's CUDA build, for a node with nvidia-smi
DEFAULT_VENV_DIR = "~/.geotrain-node/venv-{label}"  # {label}: the wheel's local label, g<12 hex>
# The node's Pythons, in order: on PATH, then where deep-learning images keep theirs.
PYTHON_NAMES = ("python3.13", "python3.12", "python3.11", "python3")
PYTHON_PATHS = ("/opt/conda/bin/python3", "/opt/pytorch/bin/python3", "/usr/local/bin/python3")
NODE_IMPORTS = ("geotrain.node.agent", "geotrain.train.runtime")  # what a node must import
LOCK_WAIT_S = 3600  # how long a second install waits for the first on the same node

_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # every entry's timestamp: the same code gives the same bytes
_WHEEL_NAME = re.compile(r"^geotrain-(?P<version>[0-9][0-9A-Za-z.!+]*)-py3-none-any\.whl$")
_LABEL = re.compile(r"\+(?:[0-9A-Za-z.]*\.)?(?P<label>g[0-9a-f]{12})(?:\.|$)")


@dataclass(frozen=True)
class Wheel:
    """A built wheel of this process's geotrain.

    ``path``: the wheel file (mode 0600) in the cache directory; ``version``: ``<base>+g<12 hex>``;
    ``content_sha256``: the sha256 over the package's files that the label abbreviates; ``commit``:
    the git HEAD of the checkout whose top level holds the package directory (None for an installed
    package; informational: the working tree may differ from it, the label is what names the code); ``sha256``: hex digest of
    the wheel file itself (for the node to check the upload).
    """

    path: Path
    version: str
    content_sha256: str
    commit: str | None
    sha256: str

    @property
    def name(self) -> str:
        """The wheel's file name, ``geotrain-<version>-py3-none-any.whl``."""
        return self.path.name

    @property
    def label(self) -> str:
        """The local label, ``g<12 hex>``: the code's identity."""
        return self.version.rsplit("+", 1)[1]

    @property
    def size_bytes(self) -> int:
        """The wheel file's size in bytes."""
        return self.path.stat().st_size


@dataclass(frozen=True)
class TorchInstalled:
    """torch that the install script installed into the node's venv (the image had none)."""

    version: str
    index: str  # the package index it came from


@dataclass(frozen=True)
class Installed:
    """What the node's install script reported: the venv's python (absolute path on the node), the
    installed geotrain version (with its local label), and torch when it had to be installed."""

    python: str
    version: str
    torch_installed: TorchInstalled | None


# --- the wheel ------------------------------------------------------------------------------------


def package_dir() -> Path:
    """The directory of the ``geotrain`` package this process imports (a checkout's ``geotrain/`` for
    an editable install, ``site-packages/geotrain`` otherwise)."""
    import geotrain

    return Path(geotrain.__file__).resolve().parent


def package_files(root: Path) -> list[tuple[str, Path]]:
    """Every file of the package under ``root`` as ``(archive name, path)``, sorted by archive name:
    ``geotrain/...`` with ``/`` separators; ``__pycache__`` directories, ``*.pyc``/``*.pyo``, editor
    backups (``*~``) and dot-files left out; symlinks to files are followed, to directories not."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
        for name in filenames:
            if name.startswith(".") or name.endswith((".pyc", ".pyo", "~")):
                continue
            path = Path(dirpath, name)
            if not path.is_file():
                continue
            rel = path.relative_to(root).as_posix()
            out.append((f"{DIST_NAME}/{rel}", path))
    return sorted(out)


def content_hash(files: list[tuple[str, Path]]) -> str:
    """Hex sha256 over ``files`` (as :func:`package_files` gives them): each name, its size and its
    bytes, in order. A renamed, added, removed or edited file changes it; timestamps do not."""
    h = hashlib.sha256()
    for name, path in files:
        data = path.read_bytes()
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def base_version() -> str:
    """``geotrain.__version__`` without any local label of its own."""
    import geotrain

    return geotrain.__version__.split("+", 1)[0]


def git_commit(directory: Path) -> str | None:
    """The HEAD commit of the git checkout whose top level holds ``directory`` (a checkout's
    ``geotrain/``), or None: no git, not a checkout, or a package installed somewhere inside one
    (a venv in a checkout is not that checkout's code)."""
    try:
        done = subprocess.run(["git", "-C", str(directory), "rev-parse", "--show-toplevel", "HEAD"],
                              capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.split()
    if done.returncode != 0 or len(lines) != 2 or Path(lines[0]).resolve() != directory.resolve().parent:
        return None
    return lines[1] if re.fullmatch(r"[0-9a-f]{40,64}", lines[1]) else None


def wheel_file_name(version: str) -> str:
    """``geotrain-<version>-py3-none-any.whl``."""
    return f"{DIST_NAME}-{version}-py3-none-any.whl"


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _metadata(version: str) -> str:
    return (f"Metadata-Version: 2.1\nName: {DIST_NAME}\nVersion: {version}\n"
            f"Summary: shipped by the geotrain launcher (exact code {version})\n"
            f"Requires-Python: {REQUIRES_PYTHON}\n")


def _wheel_entries(files: list[tuple[str, Path]], version: str) -> Iterator[tuple[str, bytes]]:
    """The wheel's members in order: the package, then ``.dist-info`` with RECORD last. No console
    script: the node installs without geotrain's dependencies, so its CLI would not run there."""
    dist_info = f"{DIST_NAME}-{version}.dist-info"
    record = io.StringIO()
    rows = csv.writer(record, lineterminator="\n")
    members: list[tuple[str, bytes]] = [(name, path.read_bytes()) for name, path in files]
    members += [
        (f"{dist_info}/METADATA", _metadata(version).encode()),
        (f"{dist_info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: geotrain.providers.shipping\n"
                               b"Root-Is-Purelib: true\nTag: py3-none-any\n"),
    ]
    for name, data in members:
        rows.writerow([name, _record_hash(data), len(data)])
        yield name, data
    rows.writerow([f"{dist_info}/RECORD", "", ""])
    yield f"{dist_info}/RECORD", record.getvalue().encode()


def _write_wheel(target: Path, files: list[tuple[str, Path]], version: str) -> None:
    """Write the wheel to a temporary file beside ``target`` (mode 0600) and rename it into place."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, data in _wheel_entries(files, version):
                info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
                info.external_attr = 0o644 << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, data)
        os.chmod(tmp, 0o600)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def wheel_name() -> str:
    """The file name :func:`build_wheel` gives this geotrain's wheel (nothing is written)."""
    return wheel_file_name(f"{base_version()}+g{content_hash(package_files(package_dir()))[:12]}")


def build_wheel(cache_dir: Path) -> Wheel:
    """A wheel of the geotrain this process imports, built into ``cache_dir`` or taken from it.

    The wheel holds every file of :func:`package_dir` (package data too) under ``geotrain/`` and a
    ``geotrain-<version>.dist-info`` (METADATA, WHEEL: py3-none-any, RECORD with sha256 digests); ``version`` is ``<geotrain.__version__>+g<12 hex of the content hash>``. A file
    of that name already in ``cache_dir`` is the same code and is reused as it is (not rewritten);
    otherwise it is written to a temporary file and renamed into place, so a reader never sees half
    a wheel. ``cache_dir`` is created mode 0700 when missing (an existing one is left as it is); the
    wheel is mode 0600. Cost: one read of the package (about 3 MB), plus the zip when not cached.
    """
    root = package_dir()
    files = package_files(root)
    digest = content_hash(files)
    version = f"{base_version()}+g{digest[:12]}"
    cache_dir = Path(cache_dir)
    if not cache_dir.is_dir():
        cache_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(cache_dir, 0o700)
    target = cache_dir / wheel_file_name(version)
    if not target.is_file():
        _write_wheel(target, files, version)
    return Wheel(path=target, version=version, content_sha256=digest, commit=git_commit(root),
                 sha256=_file_sha256(target))


# --- the node's side ------------------------------------------------------------------------------


def wheel_label(wheel_name: str) -> str:
    """The ``g<12 hex>`` label of a wheel name as :func:`build_wheel` makes them; ValueError for any
    other name."""
    m = _WHEEL_NAME.match(wheel_name)
    label = _LABEL.search(m.group("version")) if m else None
    if label is None:
        raise ValueError(f"{wheel_name!r} is not a wheel name of build_wheel "
                         "(geotrain-<version>+g<12 hex>-py3-none-any.whl)")
    return label.group("label")


def _sh_path(path: str) -> str:
    """``path`` as a shell word: a leading ``~/`` becomes ``"$HOME"/``, the rest is quoted."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    if not path.startswith("/"):
        raise ValueError(f"venv_dir {path!r} must be absolute or start with ~/")
    return shlex.quote(path)


# The part that runs on the node's chosen Python (>= 3.11), as `python -I - ARGS` (its stdin is the
# program; every child gets /dev/null). argv: wheel, version, venv dir, torch index ('' = choose).
_NODE_PY = r'''
import fcntl, os, shutil, site, subprocess, sys, time

WHEEL, VERSION, VENV, TORCH_INDEX = sys.argv[1:5]
TORCH_REQ, CPU_INDEX, PYPI_INDEX, IMPORTS, LOCK_WAIT_S = sys.argv[5:10]
VENV = os.path.abspath(VENV)
PY = os.path.join(VENV, "bin", "python")
MARKER = os.path.join(VENV, "geotrain-install.txt")
STAMP = os.path.join(VENV, ".geotrain-node-venv")


def say(line):
    print(line, flush=True)


def fail(message):
    say("GEOTRAIN-ERROR " + " ".join(str(message).split()))
    sys.exit(1)


def run(argv, tail=20):
    """Run argv from /, its output to stderr as it comes; (exit code, its last lines)."""
    try:
        proc = subprocess.Popen(argv, cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace")
    except OSError as e:
        return 127, [str(e)]
    last = []
    for line in proc.stdout:
        sys.stderr.write(line)
        last = (last + [line.rstrip()])[-tail:]
    return proc.wait(), last


def probe(code):
    """Run code on the venv's python from /; (ok, stdout stripped, last stderr line)."""
    done = subprocess.run([PY, "-c", code], cwd="/", stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, errors="replace")
    err = [l for l in done.stderr.strip().splitlines() if l.strip()]
    return done.returncode == 0, done.stdout.strip(), err[-1] if err else ""


def why(lines):
    wanted = [l for l in lines if "ERROR" in l or "rror:" in l] or [l for l in lines if l.strip()]
    return wanted[-1].strip() if wanted else "no output"


def installed_lines():
    return ["GEOTRAIN-WHEEL " + WHEEL, "GEOTRAIN-PYTHON " + PY, "GEOTRAIN-VERSION " + VERSION]


def done_already():
    try:
        with open(MARKER) as fh:
            return fh.read().split("\n")[0] == "GEOTRAIN-WHEEL " + WHEEL
    except OSError:
        return False


def lock():
    os.makedirs(os.path.dirname(VENV), mode=0o700, exist_ok=True)
    fd = os.open(VENV + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + float(LOCK_WAIT_S)
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                fail(f"another geotrain install into {VENV} has held its lock for {LOCK_WAIT_S} s; "
                     "if no install is running on this node, remove " + VENV + ".lock and retry")
            time.sleep(0.5)


def make_venv():
    if os.path.lexists(VENV):
        if not (os.path.isdir(VENV) and (os.path.exists(STAMP) or not os.listdir(VENV))):
            fail(f"{VENV} exists and is not a geotrain node venv; remove it or choose another venv_dir")

    def fresh():
        shutil.rmtree(VENV, ignore_errors=True)
        os.makedirs(VENV, mode=0o700)
        open(STAMP, "w").close()  # first: a venv this run leaves unfinished is known as ours

    fresh()
    code, out = run([sys.executable, "-m", "venv", "--system-site-packages", VENV])
    if code != 0:  # e.g. Debian's python3 without python3-venv: no ensurepip; a venv without pip
        fresh()
        code, out2 = run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", VENV])
        if code != 0:
            fail(f"{sys.executable} -m venv could not create {VENV}: {why(out + out2)}; "
                 "install the Python's venv module (Debian/Ubuntu: python3-venv) or use another image")
    # The image's own site-packages, also when its Python is a venv or a conda env (a venv made from
    # a venv sees the base interpreter's, not the image venv's): processed as site dirs, after ours.
    ours = subprocess.run([PY, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          cwd="/", stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if ours.returncode != 0:
        fail(f"the new venv's python {PY} does not run: {why(ours.stderr.splitlines())}")
    dirs = [d for d in site.getsitepackages() if os.path.isdir(d)]
    user = site.getusersitepackages()  # where `pip install --user` put the image's packages
    if os.path.isdir(user) and sys.prefix == sys.base_prefix:
        dirs.append(user)
    with open(os.path.join(ours.stdout.strip(), "geotrain-image-site.pth"), "w") as fh:
        for d in dirs:
            fh.write(f"import site; site.addsitedir({d!r})\n")


def pip():
    """The argv prefix of a pip that installs into the venv, or None."""
    if subprocess.run([PY, "-m", "pip", "--version"], cwd="/", stdin=subprocess.DEVNULL,
                      capture_output=True).returncode == 0:
        return [PY, "-m", "pip"]
    if subprocess.run([sys.executable, "-m", "pip", "--python", PY, "--version"], cwd="/",
                      stdin=subprocess.DEVNULL, capture_output=True).returncode == 0:
        return [sys.executable, "-m", "pip", "--python", PY]  # pip >= 22.3 of the image
    return None


PIP_QUIET = ["--disable-pip-version-check", "--no-input", "--no-warn-script-location"]


def install_wheel(pip_argv):
    wheel = os.path.abspath(WHEEL)
    if pip_argv is not None:
        code, out = run(pip_argv + ["install", *PIP_QUIET, "--no-index", "--no-deps",
                                    "--ignore-installed", "--no-cache-dir", wheel])
        if code != 0:
            fail(f"pip could not install {WHEEL} into {VENV}: {why(out)}")
        return
    # No pip anywhere: a pure wheel installs by unpacking it into the venv's site-packages.
    code, out = run([PY, "-c", "import sys, sysconfig, zipfile; "
                     "zipfile.ZipFile(sys.argv[1]).extractall(sysconfig.get_paths()['purelib'])", wheel])
    if code != 0:
        fail(f"could not unpack {WHEEL} into {VENV} (no pip on this node): {why(out)}")


def check_geotrain():
    ok, out, err = probe(
        "import importlib.metadata as m, os, sys, geotrain\n"
        + "".join(f"import {name}\n" for name in IMPORTS.split(","))
        + "print(m.version('geotrain')); print(os.path.realpath(geotrain.__file__))")
    if not ok:
        fail(f"geotrain {VERSION} was installed into {VENV} but does not import: {err}")
    version, _, where = out.partition("\n")
    if version != VERSION or not where.startswith(os.path.realpath(VENV) + os.sep):
        fail(f"the venv's python imports geotrain {version} from {where}, not {VERSION} from {VENV}; "
             "unset PYTHONPATH or remove the other geotrain from it")


def torch_state():
    """'ok <version>', 'missing', or 'broken <error>'."""
    ok, out, err = probe("import importlib.util as u, sys\n"
                         "if u.find_spec('torch') is None: print('missing'); sys.exit(0)\n"
                         "import torch; print('ok', torch.__version__)")
    return out.splitlines()[-1] if ok and out else "broken " + err


def torch_scripts():
    """torch's commands (torchrun) in the venv, run by the venv's python: a task's `torchrun main.py`
    then starts workers that import this geotrain (the image's own torchrun would run the image's
    python, which has none)."""
    for name, module in (("torchrun", "torch.distributed.run"),):
        path = os.path.join(VENV, "bin", name)
        with open(path + ".tmp", "w") as fh:
            fh.write(f"#!{PY}\nimport sys\nfrom {module} import main\nsys.exit(main())\n")
        os.chmod(path + ".tmp", 0o755)
        os.replace(path + ".tmp", path)


def ensure_torch(pip_argv):
    state = torch_state()
    if state.startswith("ok "):
        return
    if state.startswith("broken"):
        fail(f"torch of this node's Python {sys.executable} does not import ({state[7:]}); "
             "fix the image's torch or use another image")
    index = TORCH_INDEX or (PYPI_INDEX if shutil.which("nvidia-smi") else CPU_INDEX)
    if pip_argv is None:
        fail(f"torch is missing in this node's Python {sys.executable} and there is no pip to "
             f"install it; install {TORCH_REQ} in the image or use an image with torch")
    code, out = run(pip_argv + ["install", *PIP_QUIET, "--index-url", index, TORCH_REQ])
    state = torch_state() if code == 0 else "missing"
    if not state.startswith("ok "):
        fail(f"torch is missing in this node's Python {sys.executable} and pip could not install "
             f"{TORCH_REQ} from {index}: {why(out)}; install torch in the image, or let the node "
             "reach that index or give the launcher a torch index it can reach")
    say(f"GEOTRAIN-TORCH-INSTALLED {state[3:]} {index}")


def main():
    if not os.path.isfile(WHEEL):
        fail(f"the wheel {WHEEL} is not in {os.getcwd()}; upload it there and run this script again")
    fd = lock()
    try:
        if not done_already():
            if os.path.exists(MARKER):
                os.unlink(MARKER)
            make_venv()
            pip_argv = pip()
            install_wheel(pip_argv)
            check_geotrain()
            ensure_torch(pip_argv)
            torch_scripts()
            with open(MARKER + ".tmp", "w") as fh:
                fh.write("\n".join(installed_lines()) + "\n")
            os.replace(MARKER + ".tmp", MARKER)
        for line in installed_lines():
            say(line)
    finally:
        os.close(fd)


try:
    main()
except Exception as e:  # a GEOTRAIN-ERROR line for the launcher, whatever went wrong
    import traceback
    traceback.print_exc()
    fail(f"the geotrain install script failed unexpectedly: {type(e).__name__}: {e}; "
         "its traceback is on stderr")
'''

_NODE_SH = r'''#!/bin/sh
# Installs geotrain on this node from the wheel in the current directory (generated by
# geotrain.providers.shipping.install_script). Runs as the node's unprivileged user; never sudo.
set -u
umask 077
WHEEL=@WHEEL@
VERSION=@VERSION@
TORCH_INDEX=@TORCH_INDEX@
if [ -z "${HOME:-}" ]; then
  echo "GEOTRAIN-ERROR HOME is not set; run the geotrain install script as a user with a home directory"
  exit 1
fi
VENV=@VENV@

# Fast path: this wheel is installed already and its venv still imports geotrain.
if [ -f "$VENV/geotrain-install.txt" ] && [ -x "$VENV/bin/python" ] \
   && [ "$(head -n 1 "$VENV/geotrain-install.txt")" = "GEOTRAIN-WHEEL $WHEEL" ] \
   && (cd / && "$VENV/bin/python" -c 'import importlib.util as u, sys, geotrain.node.agent
sys.exit(u.find_spec("torch") is None)') >/dev/null 2>&1; then
  cat "$VENV/geotrain-install.txt"
  exit 0
fi

# The image's Python: the first >= 3.11 that has torch, else the first >= 3.11.
PY=
FIRST=
for c in @CANDIDATES@; do
  case "$c" in
    /*) [ -x "$c" ] || continue; p="$c" ;;
    *) p=$(command -v "$c" 2>/dev/null) || continue ;;
  esac
  r=$(cd / && "$p" -c 'import sys, importlib.util as u; print(sys.version_info >= (3, 11), u.find_spec("torch") is not None)' 2>/dev/null) || continue
  case "$r" in
    "True True") PY="$p"; break ;;
    "True False") [ -n "$FIRST" ] || FIRST="$p" ;;
  esac
done
[ -n "$PY" ] || PY="$FIRST"
if [ -z "$PY" ]; then
  echo "GEOTRAIN-ERROR no Python 3.11 or newer on this node (looked for @LOOKED@); use an image with Python >= 3.11 or put one on PATH"
  exit 1
fi
exec "$PY" -I - "$WHEEL" "$VERSION" "$VENV" "$TORCH_INDEX" @TORCH_REQ@ @CPU_INDEX@ @PYPI_INDEX@ @IMPORTS@ @LOCK_WAIT_S@ <<'GEOTRAIN_PY_EOF'
@NODE_PY@
GEOTRAIN_PY_EOF
'''


def install_script(wheel_name: str, *, venv_dir: str = DEFAULT_VENV_DIR, torch_index: str | None = None,
                   python: str | None = None) -> str:
    """A POSIX sh script (bash or dash) that installs geotrain on a node from the uploaded wheel.

    It runs on the node as its unprivileged user with the wheel ``wheel_name`` in its working
    directory, and never uses sudo. It picks the image's Python (``python``, a command or path, when
    given; else the first of ``PYTHON_NAMES`` on PATH, then ``PYTHON_PATHS``, that is >= 3.11,
    preferring one that has torch); creates
    ``venv_dir`` (``{label}`` is the wheel's label; ``~/`` is the node user's home) with
    ``--system-site-packages`` and a ``.pth`` that adds the image Python's own site-packages, so
    the image's torch and numpy are used even when its Python is a venv or conda env; installs the
    wheel with ``pip install --no-index --no-deps`` (by unpacking it where the node has no pip);
    checks that the venv imports ``NODE_IMPORTS`` at the wheel's version; and, when the image has no
    torch, installs ``TORCH_REQUIREMENT`` from ``torch_index`` (None: PyPI's CUDA build where
    ``nvidia-smi`` is on PATH, else ``TORCH_CPU_INDEX``) and prints ``GEOTRAIN-TORCH-INSTALLED``.
    On success it prints ``GEOTRAIN-WHEEL``, ``GEOTRAIN-PYTHON`` and ``GEOTRAIN-VERSION`` lines and
    exits 0; on failure one ``GEOTRAIN-ERROR`` line and exits 1. Installs into the same venv are
    serialized by a lock beside it (``flock``; a dead holder frees it); a run that finds this wheel
    installed only prints the lines (tens of milliseconds); a venv left unfinished is rebuilt.
    """
    label = wheel_label(wheel_name)
    version = _WHEEL_NAME.match(wheel_name).group("version")  # type: ignore[union-attr]
    venv = _sh_path(venv_dir.replace("{label}", label))
    if torch_index is not None and (not torch_index or any(c.isspace() for c in torch_index)):
        raise ValueError(f"torch_index {torch_index!r} must be a URL without spaces")
    q = shlex.quote
    if python is not None and (not python or any(c.isspace() for c in python)):
        raise ValueError(f"python {python!r} must be one command or path (wrap words in a script)")
    candidates = q(python) if python else " ".join(PYTHON_NAMES + PYTHON_PATHS)
    looked = f"{python}, as configured" if python else \
        f"{' '.join(PYTHON_NAMES)} on PATH and {' '.join(PYTHON_PATHS)}"
    subst = {
        "@WHEEL@": q(wheel_name), "@VERSION@": q(version), "@TORCH_INDEX@": q(torch_index or ""),
        "@VENV@": venv, "@CANDIDATES@": candidates, "@LOOKED@": looked.replace('"', "'"),
        "@TORCH_REQ@": q(TORCH_REQUIREMENT), "@CPU_INDEX@": q(TORCH_CPU_INDEX), "@PYPI_INDEX@": q(PYPI_INDEX),
        "@IMPORTS@": q(",".join(NODE_IMPORTS)), "@LOCK_WAIT_S@": str(LOCK_WAIT_S),
        "@NODE_PY@": _NODE_PY.strip("\n"),
    }
    return re.sub("|".join(re.escape(k) for k in subst), lambda m: subst[m.group(0)], _NODE_SH)


def parse_install_output(stdout: str) -> Installed:
    """What the install script's stdout says: :class:`Installed`, or :class:`ProviderError` carrying
    the node's ``GEOTRAIN-ERROR`` message (or saying that the script ended without its lines)."""
    fields: dict[str, str] = {}
    torch = None
    for raw in stdout.splitlines():
        key, _, value = raw.strip().partition(" ")
        if key == "GEOTRAIN-ERROR":
            raise ProviderError(f"installing geotrain on the node failed: {value.strip()}")
        if key == "GEOTRAIN-TORCH-INSTALLED":
            version, _, index = value.strip().partition(" ")
            torch = TorchInstalled(version=version, index=index.strip())
        elif key in ("GEOTRAIN-PYTHON", "GEOTRAIN-VERSION"):
            fields[key] = value.strip()
    if "GEOTRAIN-PYTHON" not in fields or "GEOTRAIN-VERSION" not in fields:
        tail = " | ".join(line for line in stdout.strip().splitlines()[-3:]) or "nothing"
        raise ProviderError("the node's geotrain install script ended without saying where it installed "
                            f"geotrain (its last output: {tail}); run it again, or read its log on the node")
    return Installed(python=fields["GEOTRAIN-PYTHON"], version=fields["GEOTRAIN-VERSION"], torch_installed=torch)

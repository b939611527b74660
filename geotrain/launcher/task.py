"""A task file's commands on the nodes: ``setup`` once per node, ``run`` in every generation.

Each node's worker is ``bash -c WRAPPER``: the wrapper runs the task's ``setup`` the first time it
starts on a node (a marker in the node's directory says it succeeded; a failed setup fails the worker,
which the restart budget counts), then replaces itself with ``bash -c RUN``, whose exit code is the
worker's. Both start in the task's working directory. The environment is the worker's (``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``, ``GEOTRAIN_*``), the task's ``envs``, and what SkyPilot
gives a task, so its multi-node scripts run unchanged:

- ``SKYPILOT_NODE_RANK`` (0 = the head), ``SKYPILOT_NUM_NODES``, ``SKYPILOT_NODE_IPS`` (one address
  per line, the head first), ``SKYPILOT_TASK_ID`` (the run id);
- ``SKYPILOT_NUM_GPUS_PER_NODE``: the node's accelerators on a cloud; 1 on the local provider, where a
  node is a process group of this machine (one process per node).

Before setup, a node copies the task's cloud-storage mounts (``s3://``, ``gs://``, ``az://`` sources, SkyPilot's
mode ``COPY``) from storage to their destinations itself (``geotrain.node.fetch``, through fsspec with the
node's own credentials); a failed copy is a failed setup. The workdir is copied to ``~/sky_workdir`` on each node (as SkyPilot syncs it) and local ``file_mounts``
to their destinations (``~/x`` or a relative path: under the node's home; other absolute paths are
refused), once per node and launcher. On the local provider (one host) the launcher's Python
environment comes first on ``PATH`` (its ``torchrun``, ``pip``), and a node's directory is its home
(``HOME`` is set to it). A node on another machine gets them through the launcher's own connection
(``NodeLink.ship``: a tar stream over SSH); its home is its user's, and its agent puts the Python
that has geotrain (and sees the machine's torch) first on ``PATH``. A provider whose nodes can be
given no files (none now) refuses such a task before anything is bought.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from geotrain.domain import TaskRun
from geotrain.errors import InputError
from geotrain.launcher.workers import node_dir

SETUP_DONE = "task-setup.done"
WORKDIR_NAME = "sky_workdir"
_IGNORED = shutil.ignore_patterns(".git", ".venv", "__pycache__", ".mypy_cache", ".pytest_cache", "node_modules")
MAX_COPY_BYTES = 1 << 30  # a workdir or mount larger than this is refused (it would be copied per node)

SETUP_FAILED = "geotrain: the task's setup failed (exit "  # the wrapper's last line when setup fails
WRAPPER = r"""
if [ ! -e "${GEOTRAIN_NODE_DIR:-.}/task-setup.done" ]; then
  if [ -n "${GEOTRAIN_TASK_FETCH:-}" ]; then
    echo "geotrain: copying the task's storage mounts onto node ${GEOTRAIN_NODE_ID:-}" >&2
    python -m geotrain.node.fetch || { rc=$?; echo "geotrain: the task's setup failed (exit $rc)" >&2; exit $rc; }
  fi
  if [ -n "${GEOTRAIN_TASK_SETUP:-}" ]; then
    echo "geotrain: running the task's setup on node ${GEOTRAIN_NODE_ID:-}" >&2
    bash -c "$GEOTRAIN_TASK_SETUP" || { rc=$?; echo "geotrain: the task's setup failed (exit $rc)" >&2; exit $rc; }
  fi
  : > "${GEOTRAIN_NODE_DIR:-.}/task-setup.done"
fi
exec bash -c "${GEOTRAIN_TASK_RUN:-true}"
""".strip()


def setup_failure(said: dict[str, list[str]]) -> str | None:
    """The message of a run whose task setup failed on a node (``said``: node id → the last lines of its
    worker's log, which end with the wrapper's ``SETUP_FAILED`` line), or None when no setup failed."""
    for node_id, lines in sorted(said.items()):
        marks = [i for i, line in enumerate(lines) if line.startswith(SETUP_FAILED)]
        if not marks:
            continue
        mark = lines[marks[-1]]
        code = mark[len(SETUP_FAILED):].rstrip(")")
        before = [line for line in lines[:marks[-1]] if not line.startswith("geotrain: ")][-6:]
        shown = "".join(f"\n  | {line}" for line in before) or "\n  | (it printed nothing)"
        return (f"the task's setup failed on node {node_id} (exit {code}); the run is stopped and its nodes "
                f"released (a setup is not retried). Its last lines:{shown}\nFix setup (try it with "
                "`geotrain exec RUN 'bash -c ...'` on a live node, or locally) and launch again")
    return None


def task_argv() -> list[str]:
    return ["bash", "-c", WRAPPER, "geotrain-task"]


def check_task(task: TaskRun, *, shared_host: bool, ships: bool = False) -> None:
    """Refuse before any node starts what the nodes of this launch cannot be given (``ships``: the
    provider copies files to its nodes, ``NodeLink``)."""
    if not task.run:
        raise InputError("the task has no run: nothing to train; add run: (the command each node runs)")
    if task.container:
        raise InputError(f"image_id: {task.container}: geotrain runs a task on its VMs' own image, not in a "
                         "container; install what the task needs in setup (or boot an image that has it: image_id "
                         "of the cloud, or launch --image); nothing was launched")
    for dest, bucket, mode in task.storage_mounts_to_mount:
        raise InputError(f"file_mounts: {dest}: mode {mode} ({bucket}): geotrain does not FUSE-mount storage (a "
                         "mounter on the node image cannot be verified before anything is bought); write mode: COPY "
                         "to copy it onto each node before setup, or read the bucket from your script (e.g. "
                         "checkpoint_store()); nothing was launched")
    if not (shared_host or ships) and (task.workdir or task.local_mounts):
        raise InputError("this provider's nodes cannot be given the workdir and file_mounts; fetch the code in "
                         "setup (e.g. git clone, pip install) and read data from storage (checkpoint_url, dataset)")
    for dest, _ in task.storage_mounts:
        _mount_target(Path("/node"), dest)
    for dest, source in task.local_mounts:
        _mount_target(Path("/node"), dest)  # refuses destinations outside the node's home
        if not Path(source).exists():
            raise InputError(f"file_mounts: {dest}: {source} does not exist")
    if task.workdir and not Path(task.workdir).is_dir():
        raise InputError(f"workdir: {task.workdir} is not a directory")
    for path in [task.workdir, *(s for _, s in task.local_mounts)]:
        if path and _size(Path(path)) > MAX_COPY_BYTES:
            raise InputError(f"{path} holds more than {MAX_COPY_BYTES >> 20} MiB, which would be copied to every "
                             "node; put large data in storage and read it from the task")


def task_env(task: TaskRun, *, rank: int, addresses: list[str], accelerators: int, shared_host: bool,
             run_id: str, node_home: Path | None) -> dict[str, str]:
    """What a task's command gets beside the worker's environment."""
    gpus = 1 if shared_host else accelerators
    env = {
        **dict(task.envs),
        "SKYPILOT_NODE_RANK": str(rank), "SKYPILOT_NUM_NODES": str(len(addresses)),
        "SKYPILOT_NODE_IPS": "\n".join(addresses), "SKYPILOT_NUM_GPUS_PER_NODE": str(max(1, gpus)),
        "SKYPILOT_TASK_ID": run_id,
        "GEOTRAIN_TASK_RUN": task.run or "", "GEOTRAIN_TASK_SETUP": task.setup or "",
    }
    if task.storage_mounts:  # copied onto the node before setup (geotrain.node.fetch), with the node's credentials
        env["GEOTRAIN_TASK_FETCH"] = json.dumps([[dest, url] for dest, url in task.storage_mounts])
    if node_home is not None:
        env["HOME"] = str(node_home)
    if shared_host:  # a local node runs in the launcher's Python environment: its scripts (torchrun, pip) first
        here = os.path.dirname(sys.executable)
        env["PATH"] = os.pathsep.join([here, *(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != here)])
    return env


def task_command(la, node, rank: int, env: dict[str, str]) -> Path | None:  # noqa: ANN001 - Launcher, NodeInfo
    """Add the task's environment to a worker's ``env`` (in place) and prepare a local node's home;
    the directory the command starts in (None: the node agent's own)."""
    task = la.plan.job.task
    shared = la.provider.capabilities.shared_host
    home = node_dir(la.provider, node.node_id) if shared else None
    offer = la.offers.get(node.offer_id)
    env.update(task_env(task, rank=rank, addresses=list(la.peers) or [m.address for m in la.members],
                        accelerators=offer.shape.accelerator_count if offer else 0, shared_host=shared,
                        run_id=la.run_id, node_home=home))
    if home is not None:
        return prepare_node(task, home)
    sources = [(Path(source), _remote_mount(dest)) for dest, source in task.local_mounts]
    if task.workdir:
        sources.append((Path(task.workdir), f"~/{WORKDIR_NAME}"))
    _ship(la, node, sources)
    return f"~/{WORKDIR_NAME}" if task.workdir else "~"


def script_workdir(la, node) -> str:  # noqa: ANN001 - Launcher, NodeInfo
    """A user's script (``launch PLAN -- CMD``) on a node of another machine: the launcher's directory,
    copied to ``~/sky_workdir`` there (caches and version control left out), where the script starts."""
    from geotrain.providers.base import NodeLink

    if not isinstance(la.provider, NodeLink):
        return "~"
    if _size(la.workdir) > MAX_COPY_BYTES:
        raise InputError(f"{la.workdir} holds more than {MAX_COPY_BYTES >> 20} MiB, which would be copied to every "
                         "node to run your script there; start the launch from a smaller folder (your code), with "
                         "data in storage")
    _ship(la, node, [(la.workdir, f"~/{WORKDIR_NAME}")])
    return f"~/{WORKDIR_NAME}"


def _ship(la, node, sources: list[tuple[Path, str]]) -> None:  # noqa: ANN001 - Launcher, NodeInfo
    """Copy ``sources`` onto the node once per launcher (a resumed launcher copies them again)."""
    if node.node_id in la.shipped or not sources:
        return
    la.provider.ship(node.node_id, sources)
    la.shipped.add(node.node_id)


def _remote_mount(dest: str) -> str:
    """A file mount's destination on a node of another machine, under its user's home."""
    return "~/" + "/".join(_mount_target(Path("/"), dest).parts[1:])


def _ignore(skip: Path):  # noqa: ANN202 - a copytree ignore function
    """Leave out caches and version control, and ``skip`` (geotrain's own home, where the nodes live: a
    workdir that holds it would otherwise be copied into itself)."""
    def ignore(directory: str, names: list[str]) -> set[str]:
        out = set(_IGNORED(directory, names))
        for name in names:
            try:
                if Path(directory, name).resolve() == skip:
                    out.add(name)
            except OSError:
                out.add(name)
        return out

    return ignore


def _copy(src: Path, target: Path) -> None:
    from geotrain.files import geotrain_home

    try:
        if src.is_dir():
            shutil.copytree(src, target, ignore=_ignore(geotrain_home().resolve()), symlinks=True)
        else:
            shutil.copy2(src, target)
    except (OSError, shutil.Error) as exc:
        first = exc.args[0][0] if isinstance(exc, shutil.Error) and exc.args and exc.args[0] else exc
        raise InputError(f"could not copy {src} to the node: {str(first)[:300]}") from None


def prepare_node(task: TaskRun, node_home: Path) -> Path:
    """Copy the workdir and file mounts into a local node's home (once; later generations reuse them);
    the directory setup and run start in."""
    node_home.mkdir(parents=True, exist_ok=True)
    for dest, source in task.local_mounts:
        target = _mount_target(node_home, dest)
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        _copy(Path(source), target)
    if not task.workdir:
        return node_home
    workdir = node_home / WORKDIR_NAME
    if not workdir.exists():
        partial = node_home / f".{WORKDIR_NAME}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        _copy(Path(task.workdir), partial)
        os.replace(partial, workdir)  # a half-copied workdir is never taken for a whole one
    return workdir


def _mount_target(home: Path, dest: str) -> Path:
    if dest.startswith("~/"):
        rel = dest[2:]
    elif dest.startswith("/"):
        raise InputError(f"file_mounts: {dest}: a local node cannot write outside its home; mount it at ~/"
                         f"{dest.strip('/')} (a node's home on the local provider is its own directory)")
    else:
        rel = dest
    parts = Path(rel).parts
    if not parts or ".." in parts:
        raise InputError(f"file_mounts: {dest!r}: not a path inside the node's home")
    return home.joinpath(*parts)


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d not in (".git", ".venv", "__pycache__", "node_modules")]
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
        if total > MAX_COPY_BYTES:
            break
    return total


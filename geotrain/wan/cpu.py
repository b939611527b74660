"""CPU shares for emulated nodes: each node's processes in a control group of their own, held to a fixed
CPU quota (``cfs_quota``), so that a node computes at the same rate whether the others compute or
wait for the network, as separate machines do. Without it, nodes that share a few cores run faster
while their peers wait on a WAN round than when all of them compute, and a rate measured with all of
them computing does not hold while they train together.

One group per node under ``geotrain-<tag>`` in the ``cpu`` controller: cgroup v1
(``/sys/fs/cgroup/cpu``, ``cpu.cfs_quota_us``) or v2 (``cpu.max``), a quota per period of
:data:`PERIOD_US`. :func:`cpu_shares` says why not
where neither can be written (not root, a read-only cgroup file system, no ``cpu`` controller).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from collections.abc import Iterable, Sequence
from pathlib import Path

from geotrain.wan.namespaces import check_tag
from geotrain.wan.system import WanError

CGROUP_ROOT = Path("/sys/fs/cgroup")
# The quota's period: short, so that a node held to a share computes at that share's rate in bursts
# too (with the kernel's default 100 ms, a node idle on a WAN round computed its next steps at the
# full core until that period's quota ran out: bursty nodes together outran their rate alone by
# 1.3-1.7x), and a quota of at least two of the kernel's bandwidth slices (5 ms by default; at a
# 2 ms period a 0.9 share trained at 45 % of a core, and unevenly). Measured with tiny-lm on this
# 2-core machine: shares of 0.9, 0.6 and 0.45 of a core trained at 0.81, 0.51 and 0.41 of its rate
# unheld, within ±5 % from second to second (a rate alone is measured in the same share).
PERIOD_US = 20_000
MIN_QUOTA_US = 10_000
# cores left to what is not a node: the delay line forwarding every packet, the rendezvous store
RESERVED_CORES = 0.2
MIN_CORES_PER_NODE = 0.05


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cores_per_node(nodes: int, cores: int | None = None) -> float:
    """Each of ``nodes`` nodes' equal share of this machine's cores, what the delay line needs kept back."""
    total = usable_cores() if cores is None else cores
    return max(MIN_CORES_PER_NODE, (total - RESERVED_CORES) / max(1, nodes))


@dataclass(frozen=True, slots=True)
class CpuShares:
    """The run's control groups: ``folder/<node>``, each at ``cores`` cores."""

    folder: Path
    version: int  # 1 or 2
    cores: float

    def add(self, node: str, pid: int) -> None:
        """Put process ``pid`` (its threads, and the processes it starts from now on) into ``node``'s group."""
        try:
            (self.folder / node / "cgroup.procs").write_text(str(pid))
        except OSError as exc:
            raise WanError(f"cannot put process {pid} into the cpu control group {self.folder / node}: "
                           f"{exc.strerror or exc}; run without CPU shares or as root", scope=node) from exc

    def group(self, node: str) -> None:
        """Make ``node``'s group, held to ``cores`` cores (a quota of at least :data:`MIN_QUOTA_US` per
        period of at least :data:`PERIOD_US`)."""
        period_us = max(PERIOD_US, math.ceil(MIN_QUOTA_US / self.cores))
        quota_us = round(self.cores * period_us)
        group = self.folder / node
        try:
            group.mkdir(exist_ok=True)
            if self.version == 1:
                (group / "cpu.cfs_period_us").write_text(str(period_us))
                (group / "cpu.cfs_quota_us").write_text(str(quota_us))
            else:
                (group / "cpu.max").write_text(f"{quota_us} {period_us}")
        except OSError as exc:
            raise WanError(f"cannot make the cpu control group {group}: {exc.strerror or exc}; run without "
                           "CPU shares or as root", scope=node) from exc

    def close(self) -> None:
        """Remove the groups (their processes must have exited; a group still holding one stays, empty
        groups cost nothing)."""
        for group in sorted(self.folder.glob("*/"), reverse=True):
            try:
                group.rmdir()
            except OSError:
                pass
        try:
            self.folder.rmdir()
        except OSError:
            pass


def _controller() -> tuple[Path, int] | str:
    """The ``cpu`` controller's folder and cgroup version, or why there is none to write to."""
    v1 = CGROUP_ROOT / "cpu"
    if (v1 / "cpu.cfs_quota_us").exists():
        return v1, 1
    controllers = CGROUP_ROOT / "cgroup.controllers"
    if controllers.exists():
        if "cpu" not in controllers.read_text().split():
            return "the cgroup v2 hierarchy has no cpu controller"
        return CGROUP_ROOT, 2
    return f"no cpu controller under {CGROUP_ROOT}"


def cpu_shares(tag: str, nodes: Sequence[str], cores: float) -> CpuShares | str:
    """Control groups for one run's ``nodes`` (``tag``: the emulated WAN's), each held to ``cores`` cores,
    or why they cannot be made (the caller runs its nodes unshared then). More nodes' groups can be
    made later (:meth:`CpuShares.group`)."""
    check_tag(tag)
    found = _controller()
    if isinstance(found, str):
        return found
    root, version = found
    shares = CpuShares(root / f"geotrain-{tag}", version, cores)
    try:
        shares.folder.mkdir(exist_ok=True)
        if version == 2:  # a v2 child's cpu.max exists only where its parent hands the controller down
            (root / "cgroup.subtree_control").write_text("+cpu")
            (shares.folder / "cgroup.subtree_control").write_text("+cpu")
    except OSError as exc:
        shares.close()
        return f"cannot make cpu control groups under {root}: {exc.strerror or exc}"
    try:
        for node in nodes:
            shares.group(node)
    except WanError as exc:
        shares.close()
        return str(exc)
    return shares


def remove_groups(tags: Iterable[str] | None = None) -> list[str]:
    """Remove the control groups of the runs ``tags`` (None: of every run) whose processes are gone,
    as ``geotrain cleanup`` does after a crash; returns the folders removed."""
    found = _controller()
    if isinstance(found, str):
        return []
    root, version = found
    wanted = None if tags is None else {f"geotrain-{t}" for t in tags}
    removed = []
    for folder in sorted(root.glob("geotrain-*/")):
        if wanted is not None and folder.name not in wanted:
            continue
        CpuShares(folder, version, 0.0).close()
        if not folder.exists():
            removed.append(str(folder))
    return removed


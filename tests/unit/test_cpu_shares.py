"""CPU shares of emulated nodes (``geotrain.wan.cpu``): a process in a node's group gets its quota of a
core and no more, whatever else the machine runs; the groups go with ``close``. Needs root and a
writable cpu controller; skipped otherwise (CI runs as root)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from geotrain.wan import privileges
from geotrain.wan.cpu import RESERVED_CORES, CpuShares, cores_per_node, cpu_shares
from geotrain.wan.namespaces import new_tag

REASON = privileges()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"no emulated WAN here: {REASON}")

# a busy loop for a second of wall time; prints the share of one core it got
SPIN = """
import time
wall, cpu = time.monotonic(), time.process_time()
while time.monotonic() - wall < 1.0:
    pass
print((time.process_time() - cpu) / (time.monotonic() - wall))
"""


def test_equal_shares_leave_the_reserve():
    assert cores_per_node(2, cores=2) == pytest.approx((2 - RESERVED_CORES) / 2)
    assert cores_per_node(3, cores=2) == pytest.approx((2 - RESERVED_CORES) / 3)
    assert cores_per_node(1000, cores=2) > 0


def test_a_node_gets_its_quota_and_the_groups_go_with_close():
    shares = cpu_shares(new_tag(), ["a", "b"], 0.3)
    assert isinstance(shares, CpuShares), shares
    try:
        assert sorted(p.name for p in shares.folder.iterdir() if p.is_dir()) == ["a", "b"]
        procs = []
        for node in ("a", "b"):
            proc = subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE, text=True)
            shares.add(node, proc.pid)
            procs.append(proc)
        used = [float(proc.communicate(timeout=30)[0]) for proc in procs]
    finally:
        shares.close()
    # the interpreter's start-up runs before the move: a little above the quota at most
    assert all(0.15 < u < 0.45 for u in used), used
    assert not shares.folder.exists()


def test_cleanup_removes_a_crashed_runs_groups_and_no_other():
    from geotrain.wan.cpu import remove_groups

    crashed, live = new_tag(), new_tag()
    left = cpu_shares(crashed, ["a"], 0.5)
    kept = cpu_shares(live, ["a"], 0.5)
    assert isinstance(left, CpuShares) and isinstance(kept, CpuShares)
    try:
        assert remove_groups([crashed]) == [str(left.folder)]
        assert not left.folder.exists() and (kept.folder / "a").is_dir()
    finally:
        kept.close()
        left.close()

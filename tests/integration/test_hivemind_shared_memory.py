"""A hivemind peer that dies leaves no memory behind: the tensors it shares with its averager process
are unlinked as they are made (torch's file_descriptor strategy), not files in /dev/shm that only a
clean exit removes (the strategy Hivemind would pick)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("hivemind")

PEER = """
import sys, torch
from geotrain.train.sync.hivemind import library
library()
shared = torch.zeros(1 << 20).share_memory_()  # 4 MiB, as Hivemind shares a model's tensors
print(torch.multiprocessing.get_sharing_strategy(), flush=True)
sys.stdin.read()
"""


def test_a_killed_peer_leaves_nothing_in_dev_shm():
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm on this host")
    env = {k: v for k, v in os.environ.items() if k != "HIVEMIND_MEMORY_SHARING_STRATEGY"}
    peer = subprocess.Popen([sys.executable, "-c", PEER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=env)
    try:
        assert peer.stdout.readline().strip() == "file_descriptor"
    finally:
        peer.send_signal(signal.SIGKILL)  # a preemption: no exit handler runs
        peer.wait(timeout=30)
    left = sorted(p.name for p in shm.glob(f"torch_{peer.pid}_*"))
    assert not left, f"a killed peer left {len(left)} files in /dev/shm: {left[:5]}"


def test_a_user_who_picks_the_strategy_keeps_it():
    env = {**os.environ, "HIVEMIND_MEMORY_SHARING_STRATEGY": "file_system"}
    out = subprocess.run([sys.executable, "-c", "import torch\nfrom geotrain.train.sync.hivemind import library\n"
                          "library()\nprint(torch.multiprocessing.get_sharing_strategy())"],
                         capture_output=True, text=True, env=env, timeout=120, check=True)
    assert out.stdout.strip() == "file_system"

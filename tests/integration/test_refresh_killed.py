"""A ``geotrain catalog refresh`` killed half-way (SIGKILL, from outside) leaves the current snapshot as
it was, and every stored snapshot whole: the real CLI in its own process, AWS through boto3 pointed
at the local fake by ``AWS_ENDPOINT_URL``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from geotrain.pricing.snapshot import SnapshotStore
from tests.fakes.aws import FakeAws

pytestmark = pytest.mark.slow


def test_a_refresh_killed_half_way_leaves_the_current_snapshot(geotrain_home, tmp_path):
    store = SnapshotStore()
    before_id, before_ids = store.current_id(), store.ids()
    with FakeAws() as fake:
        env = {**os.environ, "AWS_ENDPOINT_URL": fake.endpoint_url, "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"), "AWS_CONFIG_FILE": str(tmp_path / "none"),
               "GEOTRAIN_AWS_SPOT_ADVISOR_URL": fake.spot_advisor_url, "GEOTRAIN_HOME": str(geotrain_home)}
        proc = subprocess.Popen([sys.executable, "-m", "geotrain", "catalog", "refresh", "--cloud", "aws"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        regions_seen: set[str] = set()
        deadline = time.time() + 120
        while time.time() < deadline and len(regions_seen) < 3:
            line = proc.stderr.readline()
            if not line:
                break
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "aws":
                regions_seen.add(parts[1].rstrip(":"))
        assert proc.poll() is None, "the refresh ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    assert len(regions_seen) >= 3  # killed while it walked the regions
    assert store.current_id() == before_id and store.ids() == before_ids
    assert len(store.current()) > 0
    # a second refresh, not killed, completes and becomes current
    with FakeAws() as fake:
        env.update(AWS_ENDPOINT_URL=fake.endpoint_url, GEOTRAIN_AWS_SPOT_ADVISOR_URL=fake.spot_advisor_url)
        done = subprocess.run([sys.executable, "-m", "geotrain", "catalog", "refresh", "--cloud", "aws", "--regions",
                               "us-east-1"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert store.current_id() != before_id and store.ids() == [store.current_id()]
    leftovers = [p.name for p in store.root.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []

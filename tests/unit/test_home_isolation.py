"""The tests never touch the user's home: geotrain's state, and every library's, live under the tests'
own root from before collection on (``tests/conftest.py``), in module-scoped fixtures too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import _fingerprint, _user_geotrain_dirs

SEEN: dict[str, str] = {}


@pytest.fixture(scope="module")
def module_home() -> str:
    """What a module-scoped fixture (which runs before the per-test home) sees."""
    SEEN["module"] = os.environ["GEOTRAIN_HOME"]
    return SEEN["module"]


def test_a_module_fixture_and_a_test_see_homes_under_the_tests_root(module_home, request, tmp_path_factory):
    roots = (request.config._geotrain_test_root.resolve(), tmp_path_factory.getbasetemp().resolve())
    for path in (module_home, os.environ["GEOTRAIN_HOME"], os.environ["HOME"], os.environ["XDG_DATA_HOME"],
                 os.environ["MPLCONFIGDIR"]):
        assert any(Path(path).resolve().is_relative_to(r) for r in roots), path
    user = request.config._geotrain_user_env
    assert os.environ["GEOTRAIN_HOME"] != user.get("GEOTRAIN_HOME") and os.environ["HOME"] != user.get("HOME")


def test_a_command_that_writes_state_writes_it_under_the_tests_home_and_never_the_users(request, tmp_path):
    dirs = request.config._geotrain_user_dirs
    before = _fingerprint(dirs)
    offers = tmp_path / "offers.csv"
    offers.write_text("cloud,region,instance_type,vcpus,memory_gib,market,price_usd_per_hour\n"
                      "aws,us-east-1,m5.large,2,8,on_demand,0.096\n")
    geotrain = str(Path(sys.executable).with_name("geotrain"))
    done = subprocess.run([geotrain, "catalog", "import", str(offers)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert any((Path(os.environ["GEOTRAIN_HOME"]) / "snapshots").iterdir())
    assert _fingerprint(dirs) == before
    assert not any(Path(os.environ["GEOTRAIN_HOME"]).resolve().is_relative_to(d.resolve()) for d in dirs if d.exists())
    assert _user_geotrain_dirs(request.config._geotrain_user_env) == dirs

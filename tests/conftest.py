"""Shared fixtures. Every test gets its own GEOTRAIN_HOME, so nothing touches the user's state."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session", autouse=True)
def _session_home(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN202
    """A GEOTRAIN_HOME for what runs before the per-test one (module fixtures): never the user's."""
    import os

    old = os.environ.get("GEOTRAIN_HOME")
    os.environ["GEOTRAIN_HOME"] = str(tmp_path_factory.mktemp("geotrain-session-home"))
    yield
    if old is None:
        os.environ.pop("GEOTRAIN_HOME", None)
    else:
        os.environ["GEOTRAIN_HOME"] = old


@pytest.fixture(autouse=True)
def geotrain_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("geotrain-home")
    monkeypatch.setenv("GEOTRAIN_HOME", str(home))
    return home


@pytest.fixture
def shared_data() -> Path:
    """The public data folder beside the checkout; tests that need it skip where it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} is not present")
    return SHARED_DATA

"""Shared fixtures. Every test gets its own GEOTRAIN_HOME, so nothing touches the user's state."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"
USER_HOME_KEYS = ("HOME", "GEOTRAIN_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "MPLCONFIGDIR")


def _user_geotrain_dirs(env: dict[str, str | None]) -> list[Path]:
    """Where geotrain keeps its state for the user who runs the tests (before the tests' isolation)."""
    home = Path(env.get("HOME") or Path.home())
    dirs = [home / ".local" / "share" / "geotrain"]
    if env.get("XDG_DATA_HOME"):
        dirs.append(Path(env["XDG_DATA_HOME"]) / "geotrain")
    if env.get("GEOTRAIN_HOME"):
        dirs.append(Path(env["GEOTRAIN_HOME"]))
    return dirs


def _fingerprint(dirs: list[Path]) -> dict[str, tuple[int, int]]:
    out = {}
    for d in dirs:
        if d.is_dir():
            for p in d.rglob("*"):
                try:
                    st = p.lstat()
                except OSError:
                    continue
                out[str(p)] = (st.st_mtime_ns, st.st_size)
    return out


def pytest_configure(config: pytest.Config) -> None:
    """Before anything is collected or imported: a home of the tests' own for geotrain and for every
    library that writes under the user's home, so no test (nor a module-level or module-scoped
    fixture) can touch the user's ledger, snapshots or caches. The user's geotrain directories are
    fingerprinted here and checked again when the session ends (``pytest_sessionfinish``)."""
    import os
    import tempfile

    config._geotrain_user_env = {k: os.environ.get(k) for k in USER_HOME_KEYS}  # type: ignore[attr-defined]
    config._geotrain_user_dirs = _user_geotrain_dirs(config._geotrain_user_env)  # type: ignore[attr-defined]
    config._geotrain_user_state = _fingerprint(config._geotrain_user_dirs)  # type: ignore[attr-defined]
    root = Path(tempfile.mkdtemp(prefix="geotrain-tests-"))
    os.environ["HOME"] = str(root / "home")
    os.environ["GEOTRAIN_HOME"] = str(root / "geotrain-home")
    for key, sub in (("XDG_DATA_HOME", "share"), ("XDG_CONFIG_HOME", "config"), ("XDG_CACHE_HOME", "cache"),
                     ("MPLCONFIGDIR", "matplotlib")):
        os.environ[key] = str(root / "home" / sub)
    (root / "home").mkdir()
    # ssh's control sockets (geotrain.providers.sshlink): the tests' own, ended when the session ends
    os.environ["XDG_RUNTIME_DIR"] = str(root / "run")
    (root / "run").mkdir(mode=0o700)
    config._geotrain_test_root = root  # type: ignore[attr-defined]


def _end_ssh_connections(root: Path | None) -> None:
    """End the shared SSH connections the tests opened (their masters outlive the test process)."""
    import subprocess

    if root is None:
        return
    for control in (root / "run" / "geotrain-ssh").glob("*.ctl"):
        subprocess.run(["ssh", "-o", f"ControlPath={control}", "-O", "exit", "geotrain-test"], capture_output=True,
                       timeout=10, check=False)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the session if the user's own geotrain state changed while the tests ran."""
    config = session.config
    _end_ssh_connections(getattr(config, "_geotrain_test_root", None))
    dirs = getattr(config, "_geotrain_user_dirs", None)
    if dirs is None:
        return
    before, after = config._geotrain_user_state, _fingerprint(dirs)  # type: ignore[attr-defined]
    changed = sorted(set(before.items()) ^ set(after.items()))
    if changed:
        print(f"\nerror: the tests changed the user's geotrain state: {sorted({p for p, _ in changed})[:5]}")
        session.exitstatus = 1


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
    """A GEOTRAIN_HOME of the test's own, and output as it is off a terminal: no terminal size from the
    environment (pytest-xdist's workers set COLUMNS=80; a pipe gets geotrain's own width)."""
    home = tmp_path_factory.mktemp("geotrain-home")
    monkeypatch.setenv("GEOTRAIN_HOME", str(home))
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)
    return home


@pytest.fixture
def shared_data() -> Path:
    """The public data folder beside the checkout; tests that need it skip where it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} is not present")
    return SHARED_DATA

"""The wheel the launcher ships to a node (geotrain.providers.shipping): a valid wheel of exactly the
code this process runs, cached by its content, private; the node's install script and its answer."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import shutil
import stat
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import geotrain
from geotrain.errors import ProviderError
from geotrain.providers import shipping

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> shipping.Wheel:
    return shipping.build_wheel(tmp_path_factory.mktemp("wheels") / "cache")


@pytest.fixture
def package_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the geotrain package (sources and data, no caches) that build_wheel ships instead."""
    copy = tmp_path / "src" / "geotrain"
    shutil.copytree(shipping.package_dir(), copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    monkeypatch.setattr(shipping, "package_dir", lambda: copy)
    return copy


def _record(zf: zipfile.ZipFile, dist_info: str) -> dict[str, tuple[str, str]]:
    rows = csv.reader(io.StringIO(zf.read(f"{dist_info}/RECORD").decode()))
    return {name: (digest, size) for name, digest, size in rows}


def test_the_wheel_is_a_valid_wheel_of_this_package(wheel: shipping.Wheel) -> None:
    base = geotrain.__version__.split("+")[0]
    assert wheel.version == f"{base}+{wheel.label}" and wheel.label == "g" + wheel.content_sha256[:12]
    assert wheel.name == f"geotrain-{wheel.version}-py3-none-any.whl" == wheel.path.name
    assert wheel.sha256 == hashlib.sha256(wheel.path.read_bytes()).hexdigest()
    dist_info = f"geotrain-{wheel.version}.dist-info"
    with zipfile.ZipFile(wheel.path) as zf:
        assert zf.testzip() is None
        names = zf.namelist()
        assert len(names) == len(set(names))
        assert all(n.startswith(("geotrain/", f"{dist_info}/")) for n in names)
        assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".pyo"))]
        metadata = zf.read(f"{dist_info}/METADATA").decode().splitlines()
        assert {"Name: geotrain", f"Version: {wheel.version}", "Requires-Python: >=3.11"} <= set(metadata)
        assert {"Root-Is-Purelib: true", "Tag: py3-none-any", "Wheel-Version: 1.0"} <= set(
            zf.read(f"{dist_info}/WHEEL").decode().splitlines())
        record = _record(zf, dist_info)
        assert set(record) == set(names) and record[f"{dist_info}/RECORD"] == ("", "")
        for name in names:
            if name.endswith("/RECORD"):
                continue
            data = zf.read(name)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert record[name] == (f"sha256={digest}", str(len(data))), name
    # Every file of the package, its data too (csv, json, md, licence texts), and nothing else.
    expected = {name for name, _ in shipping.package_files(shipping.package_dir())}
    assert {n for n in names if n.startswith("geotrain/")} == expected
    assert {"geotrain/__init__.py", "geotrain/node/agent.py", "geotrain/train/runtime.py"} <= expected
    for suffix in (".csv", ".json", ".md"):
        assert any(n.endswith(suffix) for n in expected), suffix


def test_pip_installs_the_wheel_and_it_imports_at_the_same_version(wheel: shipping.Wheel, tmp_path: Path) -> None:
    target = tmp_path / "target"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                    "--disable-pip-version-check", "--target", str(target), str(wheel.path)], check=True,
                   cwd=tmp_path)
    # -S -I: no site-packages (so not the checkout's editable install), no PYTHONPATH, no cwd.
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import geotrain, geotrain.node.agent;"
            "import importlib.metadata as m; print(geotrain.__version__); print(geotrain.__file__);"
            "print(m.version('geotrain'))")
    out = subprocess.run([sys.executable, "-S", "-I", "-c", code, str(target)], check=True, cwd="/",
                         capture_output=True, text=True).stdout.split()
    assert out[0] == geotrain.__version__
    assert Path(out[1]).resolve().is_relative_to(target.resolve())
    assert out[2] == wheel.version
    assert (target / "geotrain" / "pricing" / "data").is_dir()
    # Shipped again from that regular (non-editable) install: the same code, so the same wheel.
    rebuild = ("import sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path;"
               "from geotrain.providers import shipping; w = shipping.build_wheel(Path(sys.argv[2]));"
               "print(w.version, w.sha256, w.commit)")
    out = subprocess.run([sys.executable, "-S", "-I", "-c", rebuild, str(target), str(tmp_path / "again")],
                         check=True, cwd="/", capture_output=True, text=True).stdout.split()
    assert out == [wheel.version, wheel.sha256, "None"]


def test_the_same_code_gives_the_same_file_reused_from_the_cache(tmp_path: Path, package_copy: Path) -> None:
    cache = tmp_path / "cache"
    first = shipping.build_wheel(cache)
    mtime = first.path.stat().st_mtime_ns
    again = shipping.build_wheel(cache)
    assert again == first and again.path.stat().st_mtime_ns == mtime
    assert [p.name for p in cache.iterdir()] == [first.name]  # no temporary file left behind
    # Byte-identical when built again elsewhere: fixed timestamps and order.
    other = shipping.build_wheel(tmp_path / "other")
    assert other.sha256 == first.sha256 and other.version == first.version
    # Timestamps and caches do not change the code's identity.
    os.utime(package_copy / "__init__.py", (1, 1))
    (package_copy / "__pycache__").mkdir(exist_ok=True)
    (package_copy / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"junk")
    (package_copy / "node" / "agent.pyc").write_bytes(b"junk")
    assert shipping.build_wheel(cache) == first


@pytest.mark.parametrize("change", ["edit", "add", "rename", "remove"])
def test_a_changed_file_gives_a_new_label(tmp_path: Path, package_copy: Path, change: str) -> None:
    cache = tmp_path / "cache"
    first = shipping.build_wheel(cache)
    target = package_copy / "node" / "tree.py"
    if change == "edit":
        target.write_text(target.read_text() + "\n# changed\n")
    elif change == "add":
        (package_copy / "perf" / "data" / "extra.json").write_text("{}")
    elif change == "rename":
        target.rename(target.with_name("tree2.py"))
    else:
        target.unlink()
    second = shipping.build_wheel(cache)
    assert second.label != first.label and second.path != first.path
    assert second.version.split("+")[0] == first.version.split("+")[0]
    assert first.path.is_file()  # the older build stays for runs that still use it
    with zipfile.ZipFile(second.path) as zf:
        names = set(zf.namelist())
    assert ("geotrain/perf/data/extra.json" in names) == (change == "add")
    assert ("geotrain/node/tree.py" in names) == (change in ("edit", "add"))


def test_wheel_and_cache_dir_are_private(tmp_path: Path) -> None:
    cache = tmp_path / "deep" / "cache"
    old = os.umask(0o022)
    try:
        built = shipping.build_wheel(cache)
    finally:
        os.umask(old)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert stat.S_IMODE(built.path.stat().st_mode) == 0o600


def test_a_checkout_reports_its_commit_and_an_install_inside_one_does_not(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("no git")
    checkout = tmp_path / "checkout"
    (checkout / "geotrain").mkdir(parents=True)
    (checkout / "nested" / "site-packages" / "geotrain").mkdir(parents=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for argv in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "x"]):
        subprocess.run(["git", "-C", str(checkout), *argv], check=True, env=env, capture_output=True)
    head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()
    assert shipping.git_commit(checkout / "geotrain") == head
    assert shipping.git_commit(checkout / "nested" / "site-packages" / "geotrain") is None
    assert shipping.git_commit(tmp_path) is None


def test_the_torch_requirement_is_the_train_extra() -> None:
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["train"]
    assert shipping.TORCH_REQUIREMENT.replace(" ", "") in [r.replace(" ", "") for r in extra]


# --- the install script ----------------------------------------------------------------------------

NAME = "geotrain-0.1.0+g0123456789ab-py3-none-any.whl"


@pytest.mark.parametrize("shell", ["sh", "bash", "dash"])
def test_the_install_script_parses_in_posix_shells(shell: str) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"no {shell}")
    for kwargs in ({}, {"torch_index": "http://127.0.0.1:9/simple"}, {"venv_dir": "/opt/my venv's/{label}"}):
        script = shipping.install_script(NAME, **kwargs)
        subprocess.run([shell, "-n"], input=script, text=True, check=True)


def test_the_install_script_quotes_its_paths_and_names_the_venv_by_label() -> None:
    script = shipping.install_script(NAME)
    assert 'VENV="$HOME"/.geotrain-node/venv-g0123456789ab\n' in script
    assert not [line for line in script.splitlines() if "sudo" in line and not line.startswith("#")]
    odd = shipping.install_script(NAME, venv_dir="~/it's $(here)/{label}")
    assert "VENV=\"$HOME\"/'it'\"'\"'s $(here)/g0123456789ab'\n" in odd
    assert "TORCH_INDEX='http://x/simple?a=1&b=2'" in shipping.install_script(
        NAME, torch_index="http://x/simple?a=1&b=2")


@pytest.mark.parametrize("name", ["geotrain-0.1.0-py3-none-any.whl", "geotrain-0.1.0+g0123-py3-none-any.whl",
                                  "other-0.1.0+g0123456789ab-py3-none-any.whl", "../" + NAME,
                                  "geotrain-0.1.0+g0123456789ab-cp311-cp311-linux_x86_64.whl"])
def test_the_install_script_takes_only_wheel_names_of_build_wheel(name: str) -> None:
    with pytest.raises(ValueError):
        shipping.install_script(name)


@pytest.mark.parametrize("kwargs", [{"torch_index": ""}, {"torch_index": "http://a b"}, {"venv_dir": "rel/v"}])
def test_the_install_script_refuses_bad_arguments(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        shipping.install_script(NAME, **kwargs)


def test_a_missing_wheel_is_a_geotrain_error_line(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    env = {"HOME": str(tmp_path / "home"), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    done = subprocess.run(["sh", "-c", shipping.install_script(NAME)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    with pytest.raises(ProviderError, match=f"the wheel {NAME.replace('+', '[+]')} is not in"):
        shipping.parse_install_output(done.stdout)
    assert not (tmp_path / "home" / ".geotrain-node" / "venv-g0123456789ab").exists()


def test_parse_install_output() -> None:
    ok = "noise\nGEOTRAIN-WHEEL w.whl\nGEOTRAIN-PYTHON /home/u/v/bin/python\nGEOTRAIN-VERSION 0.1.0+gabc\n"
    assert shipping.parse_install_output(ok) == shipping.Installed("/home/u/v/bin/python", "0.1.0+gabc", None)
    torch = "GEOTRAIN-TORCH-INSTALLED 2.13.0+cpu https://download.pytorch.org/whl/cpu\n" + ok
    assert shipping.parse_install_output(torch).torch_installed == shipping.TorchInstalled(
        "2.13.0+cpu", "https://download.pytorch.org/whl/cpu")
    with pytest.raises(ProviderError, match="failed: torch is missing; do this"):
        shipping.parse_install_output("x\nGEOTRAIN-ERROR torch is missing; do this\n")
    with pytest.raises(ProviderError, match="ended without") as info:
        shipping.parse_install_output("Killed\n")
    assert "Killed" in str(info.value)

"""geotrain shipped to a node that does not have it: the wheel of this checkout, installed by the node's
install script as an unprivileged user on an "image" (a venv of /usr/bin/python3.11 with torch, as
deep-learning images carry it), with a clean environment and nothing reachable but loopback.

The images are built once per machine under ``IMAGE_ROOT`` (under a lock, renamed into place when
complete) from the pip sources on this machine's disk; torch's install takes tens of seconds the
first time. Needs root (to create and remove the node user), ``runuser`` and ``/usr/bin/python3.11``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urljoin

import pytest

from geotrain.errors import ProviderError
from geotrain.providers import shipping

pytestmark = pytest.mark.slow  # `make test-all` runs the integration suite

IMAGE_ROOT = Path("/var/cache/geotrain-test-image-shipping")
IMAGE_PYTHON = "/usr/bin/python3.11"
TORCH_IMAGE = ("torch-2.13.0-py3.11", ["torch==2.13.0", "numpy", "fsspec"])
BARE_IMAGE = ("bare-py3.11", [])
# pip's sources on this machine's disk (so building an image contacts nothing); where they are
# missing, pip's own configuration decides.
LOCAL_PIP_SOURCES = (("--index-url", "/opt/pypi/simple"), ("--extra-index-url", "/opt/pypi-more/simple"),
                     ("--find-links", "/opt/wheels"))
CLOSED_INDEX = "http://127.0.0.1:9/simple"  # the discard port: nothing listens, nothing leaves

if os.geteuid() != 0 or not shutil.which("runuser") or not shutil.which("useradd"):
    pytest.skip("needs root, runuser and useradd (to install as an unprivileged node user)",
                allow_module_level=True)
if not os.access(IMAGE_PYTHON, os.X_OK):
    pytest.skip(f"needs {IMAGE_PYTHON} for the node image", allow_module_level=True)


def _pip_sources() -> list[str]:
    out = []
    for flag, path in LOCAL_PIP_SOURCES:
        if Path(path).is_dir():
            out += [flag, path if flag == "--find-links" else f"file://{path}"]
    return out if out and out[0] == "--index-url" else []


def image(kind: tuple[str, list[str]]) -> Path:
    """The image venv ``IMAGE_ROOT/<name>``: built once per machine (under a lock, in a temporary
    directory renamed into place when complete), readable by every user."""
    name, packages = kind
    final = IMAGE_ROOT / name
    old_umask = os.umask(0o022)
    try:
        IMAGE_ROOT.mkdir(parents=True, exist_ok=True)
        with open(IMAGE_ROOT / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if (final / "image-ready").is_file():
                return final
            shutil.rmtree(final, ignore_errors=True)
            tmp = IMAGE_ROOT / f".{name}.{os.getpid()}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            try:
                subprocess.run([IMAGE_PYTHON, "-m", "venv", str(tmp)], check=True, capture_output=True)
                if packages:
                    done = subprocess.run([str(tmp / "bin" / "python"), "-m", "pip", "install", "--quiet",
                                           "--disable-pip-version-check", *_pip_sources(), *packages],
                                          capture_output=True, text=True)
                    if done.returncode != 0:
                        pytest.fail(f"could not build the node image {name}: {done.stdout}{done.stderr}")
                (tmp / "image-ready").write_text(" ".join(packages) + "\n")
                os.rename(tmp, final)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            return final
    finally:
        os.umask(old_umask)


@pytest.fixture(scope="module")
def node_user() -> Iterator[pwd.struct_passwd]:
    """An unprivileged user with a home of its own, removed (with its home) at the end."""
    name = f"gtship-{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "-m", "-s", "/bin/sh", name], check=True, capture_output=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)  # only that user's processes
        subprocess.run(["userdel", "-r", name], capture_output=True)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> shipping.Wheel:
    return shipping.build_wheel(tmp_path_factory.mktemp("launcher") / "wheels")


def as_node(user: pwd.struct_passwd, img: Path, argv: list[str], cwd: str, **kw) -> subprocess.CompletedProcess:
    """Run argv as the node user with a clean environment: HOME, a PATH with the image's bin first,
    and no pip configuration (this machine's local package mirrors are not the node's)."""
    env = [f"HOME={user.pw_dir}", f"USER={user.pw_name}", f"PATH={img / 'bin'}:/usr/bin:/bin",
           "LANG=C.UTF-8", f"PIP_CONFIG_FILE={os.devnull}"]
    return subprocess.run(["runuser", "-u", user.pw_name, "--", "env", "-i", *env, *argv], cwd=cwd,
                          capture_output=True, text=True, timeout=900, **kw)


def upload(user: pwd.struct_passwd, wheel: shipping.Wheel, script: str, dirname: str) -> Path:
    """The wheel and the install script in a directory of the node user's, as the launcher uploads them."""
    where = Path(user.pw_dir) / dirname
    where.mkdir(mode=0o700)
    shutil.copy2(wheel.path, where / wheel.name)
    (where / "install.sh").write_text(script)
    for path in (where, where / wheel.name, where / "install.sh"):
        os.chown(path, user.pw_uid, user.pw_gid)
    return where


def timed(fn, *args, **kw) -> tuple[subprocess.CompletedProcess, float]:  # noqa: ANN001
    start = time.monotonic()
    done = fn(*args, **kw)
    return done, time.monotonic() - start


def geotrain_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("GEOTRAIN-")]


def test_a_node_with_torch_gets_the_shipped_geotrain_on_the_images_torch(
        node_user: pwd.struct_passwd, wheel: shipping.Wheel) -> None:
    img = image(TORCH_IMAGE)
    where = upload(node_user, wheel, shipping.install_script(wheel.name), "upload")
    first, first_s = timed(as_node, node_user, img, ["bash", "install.sh"], cwd=str(where))
    assert first.returncode == 0, first.stdout + first.stderr
    installed = shipping.parse_install_output(first.stdout)
    venv = Path(node_user.pw_dir) / ".geotrain-node" / f"venv-{wheel.label}"
    assert installed == shipping.Installed(str(venv / "bin" / "python"), wheel.version, None)
    assert "Successfully installed" in first.stderr

    probe = ("import geotrain, importlib.metadata as m, torch, numpy, os\n"
             "print(m.version('geotrain')); print(os.path.realpath(geotrain.__file__));"
             "print(os.path.realpath(torch.__file__)); print(torch.ones(2).sum().item())")
    done = as_node(node_user, img, [installed.python, "-c", probe], cwd="/")
    assert done.returncode == 0, done.stderr
    version, geotrain_file, torch_file, two = done.stdout.split()
    assert version == wheel.version and two == "2.0"
    assert Path(geotrain_file).is_relative_to(venv.resolve())
    assert Path(torch_file).is_relative_to(img.resolve()) and not Path(torch_file).is_relative_to(venv.resolve())
    # torch is the image's: nothing but geotrain went into the venv.
    site = next((venv / "lib").glob("python3*/site-packages"))
    assert not list(site.glob("torch*")) and not list(site.glob("numpy*"))
    helped = as_node(node_user, img, [installed.python, "-m", "geotrain.node.agent", "--help"], cwd="/")
    assert helped.returncode == 0 and "--port" in helped.stdout, helped.stderr

    # Again with the same wheel: nothing is done, the same lines come, quickly.
    cfg_mtime = (venv / "pyvenv.cfg").stat().st_mtime_ns
    again, again_s = timed(as_node, node_user, img, ["bash", "install.sh"], cwd=str(where))
    assert again.returncode == 0, again.stdout + again.stderr
    assert geotrain_lines(again.stdout) == geotrain_lines(first.stdout) and again.stderr == ""
    assert (venv / "pyvenv.cfg").stat().st_mtime_ns == cfg_mtime
    assert again_s < max(2.0, first_s / 3)
    print(f"\nnode install: first {first_s:.2f} s, repeat {again_s:.2f} s; wheel {wheel.size_bytes} bytes")


def test_two_installs_at_once_install_once(node_user: pwd.struct_passwd, wheel: shipping.Wheel) -> None:
    img = image(TORCH_IMAGE)
    script = shipping.install_script(wheel.name, venv_dir="~/.geotrain-node/both-{label}")
    where = upload(node_user, wheel, script, "upload-both")
    env = [f"HOME={node_user.pw_dir}", f"PATH={img / 'bin'}:/usr/bin:/bin", f"PIP_CONFIG_FILE={os.devnull}"]
    argv = ["runuser", "-u", node_user.pw_name, "--", "env", "-i", *env, "bash", "install.sh"]
    procs = [subprocess.Popen(argv, cwd=where, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=900) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert geotrain_lines(outs[0][0]) == geotrain_lines(outs[1][0])
    assert sum("Successfully installed" in err for _, err in outs) == 1
    assert shipping.parse_install_output(outs[0][0]).python == f"{node_user.pw_dir}/.geotrain-node/both-{wheel.label}/bin/python"


def test_a_node_without_torch_and_no_index_says_torch_is_missing(
        node_user: pwd.struct_passwd, wheel: shipping.Wheel) -> None:
    img = image(BARE_IMAGE)
    script = shipping.install_script(wheel.name, venv_dir="~/.geotrain-node/bare-{label}",
                                     torch_index=CLOSED_INDEX)
    where = upload(node_user, wheel, script, "upload-bare")
    done, took = timed(as_node, node_user, img, ["bash", "install.sh"], cwd=str(where))
    assert done.returncode != 0
    errors = [line for line in done.stdout.splitlines() if line.startswith("GEOTRAIN-ERROR ")]
    assert len(errors) == 1, done.stdout + done.stderr
    assert "torch is missing" in errors[0] and CLOSED_INDEX in errors[0] and "\n" not in errors[0]
    with pytest.raises(ProviderError, match="torch is missing"):
        shipping.parse_install_output(done.stdout)
    print(f"\nno torch, no index: failed in {took:.2f} s: {errors[0]}")


def local_torch_index(root: Path) -> str | None:
    """A simple index on this machine's disk that serves as a CPU torch index: torch from
    ``/opt/wheels``, its dependencies from the local mirror ``/opt/pypi/simple`` (hrefs made
    absolute); None where those are missing."""
    mirror, wheels = Path("/opt/pypi/simple"), sorted(Path("/opt/wheels").glob("torch-2.13.0+cpu-*.whl"))
    if not mirror.is_dir() or not wheels:
        return None
    for project in ("filelock", "typing-extensions", "setuptools", "sympy", "mpmath", "networkx", "jinja2",
                    "markupsafe", "fsspec"):
        page = mirror / project / "index.html"
        if not page.is_file():
            return None
        html = re.sub(r'href="([^"]+)"', lambda m: f'href="{urljoin(page.as_uri(), m.group(1))}"', page.read_text())
        (root / project).mkdir(parents=True)
        (root / project / "index.html").write_text(html)
    (root / "torch").mkdir()
    (root / "torch" / "index.html").write_text(
        "".join(f'<a href="{w.as_uri()}">{w.name}</a>\n' for w in wheels))
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root.as_uri()


def test_a_node_without_torch_gets_it_from_the_torch_index(
        node_user: pwd.struct_passwd, wheel: shipping.Wheel) -> None:
    index_root = Path(node_user.pw_dir) / "torch-index"
    index = local_torch_index(index_root)
    if index is None:
        pytest.skip("no local copy of torch 2.13.0+cpu and its dependencies to serve as a torch index")
    img = image(BARE_IMAGE)
    script = shipping.install_script(wheel.name, venv_dir="~/.geotrain-node/gets-torch-{label}", torch_index=index)
    where = upload(node_user, wheel, script, "upload-gets-torch")
    done, took = timed(as_node, node_user, img, ["bash", "install.sh"], cwd=str(where))
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    installed = shipping.parse_install_output(done.stdout)
    assert installed.torch_installed == shipping.TorchInstalled("2.13.0+cpu", index)
    venv = Path(installed.python).parent.parent
    probe = "import torch, os; print(os.path.realpath(torch.__file__))"
    torch_file = as_node(node_user, img, [installed.python, "-c", probe], cwd="/").stdout.strip()
    assert Path(torch_file).is_relative_to(venv.resolve())
    again, again_s = timed(as_node, node_user, img, ["bash", "install.sh"], cwd=str(where))
    assert again.returncode == 0 and "GEOTRAIN-TORCH-INSTALLED" not in again.stdout
    assert shipping.parse_install_output(again.stdout) == shipping.Installed(installed.python, wheel.version, None)
    print(f"\nno torch in the image: installed torch from the index in {took:.2f} s, repeat {again_s:.2f} s")

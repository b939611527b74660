"""A task's cloud-storage mounts in COPY mode are copied onto the node by ``python -m geotrain.node.fetch``
through fsspec, against references geotrain did not write: s3fs (fsspec's S3 filesystem, in a Python of its
own as on a node: it cannot share this environment's botocore) reading moto's S3 server. An object and a
prefix arrive whole; a missing object, or a node without the scheme's filesystem, fails with one line that
says which and what to do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import boto3
import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def node_python(tmp_path_factory) -> Path:
    """A Python like a node's: fsspec and s3fs from the package index, no geotrain installed."""
    where = tmp_path_factory.mktemp("node-venv")
    venv.create(where, with_pip=True)
    python = where / "bin" / "python"
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "s3fs"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return python


@pytest.fixture(scope="module")
def s3():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    client = boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")
    client.create_bucket(Bucket="ckpts")
    client.put_object(Bucket="ckpts", Key="run1/step-10.pt", Body=b"weights-10")
    client.put_object(Bucket="ckpts", Key="run1/meta/config.json", Body=b'{"lr": 0.1}')
    client.put_object(Bucket="ckpts", Key="vocab.txt", Body=b"a\nb\n")
    yield url
    server.stop()


def fetch(python: Path, home: Path, mounts: list[list[str]], url: str) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "PYTHONPATH": str(REPO),
           "GEOTRAIN_TASK_FETCH": json.dumps(mounts), "AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    return subprocess.run([str(python), "-m", "geotrain.node.fetch"], env=env, capture_output=True, text=True,
                          timeout=120, cwd=home)


def test_an_object_and_a_prefix_are_copied_whole_under_the_nodes_home(node_python, s3, tmp_path):
    done = fetch(node_python, tmp_path, [["~/data/vocab.txt", "s3://ckpts/vocab.txt"], ["ckpt", "s3://ckpts/run1"]],
                 s3)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "data" / "vocab.txt").read_bytes() == b"a\nb\n"
    assert (tmp_path / "ckpt" / "step-10.pt").read_bytes() == b"weights-10"
    assert (tmp_path / "ckpt" / "meta" / "config.json").read_bytes() == b'{"lr": 0.1}'
    assert not list(tmp_path.rglob(".*.partial"))
    again = fetch(node_python, tmp_path, [["ckpt", "s3://ckpts/run1"]], s3)  # a later generation: already there
    assert again.returncode == 0 and "copied" not in again.stderr


def test_a_missing_object_or_filesystem_fails_with_one_line_naming_it(node_python, s3, tmp_path):
    missing = fetch(node_python, tmp_path, [["x", "s3://ckpts/nope.pt"]], s3)
    assert missing.returncode == 3 and "file_mounts.x: could not copy s3://ckpts/nope.pt" in missing.stderr
    assert "Traceback" not in missing.stderr and not (tmp_path / "x").exists()
    bare = fetch(Path(sys.executable), tmp_path, [["y", "s3://ckpts/vocab.txt"]], s3)  # this Python: no s3fs
    assert bare.returncode == 3 and "install s3fs on the node image" in bare.stderr, bare.stderr

"""CheckpointStore: round trips, idempotence, writers killed in each phase, corruption, pruning, URLs."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path

import fsspec
import pytest
import torch
from torch import nn

from geotrain.errors import InputError
from geotrain.train.checkpoint import CheckpointInfo, CheckpointStore

REPO = Path(__file__).resolve().parents[2]
PHASES = ("data", "manifest", "marker")


class Crash(Exception):
    """Raised from on_phase to leave on disk what a writer killed at that phase would leave."""


def crash_at(phase: str):
    def hook(current: str, step: int) -> None:
        if current == phase:
            raise Crash(phase)
    return hook


def ckpt_dir(base: Path, step: int) -> Path:
    return base / f"ckpt-{step:010d}"


def leftovers(base: Path, newest_committed: int) -> list[str]:
    """Temp files anywhere, and uncommitted checkpoint directories older than the newest committed."""
    found = [str(p) for p in base.rglob("*.tmp-*")]
    for d in base.glob("ckpt-*"):
        if int(d.name[5:]) < newest_committed and not (d / "COMMITTED").exists():
            found.append(str(d))
    return found


def small_state(value: float) -> dict:
    return {"w": torch.full((4,), value), "step": int(value)}


def training_state() -> dict:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(5, 4)).pow(2).sum().backward()
    optimizer.step()
    random.seed(7)
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "python_rng": random.getstate(),
        "samples_seen": 1234,
        "loss": 0.125,
        "history": [{"step": 1, "losses": [1.0, 0.5]}, {"step": 2, "tags": ("a", "b")}],
    }


def assert_same(a, b) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b)
        for key in a:
            assert_same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        assert a == b


# -- round trip and idempotence ----------------------------------------------------------------


def test_round_trip_with_optimizer_rng_and_nested_meta(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path))
    assert store.latest() is None and store.rejected == []
    state = training_state()
    meta = {"run_id": "r-1", "world_size": 4, "samples_seen": 1234, "nested": {"a": [1, 2, {"b": None}]}}

    info = store.save(5, state, meta=meta)

    assert isinstance(info, CheckpointInfo)
    assert info.step == 5 and info.meta == meta
    assert info.url == f"file://{tmp_path}/ckpt-0000000005"
    assert datetime.fromisoformat(info.created_at).utcoffset().total_seconds() == 0
    assert sorted(p.name for p in ckpt_dir(tmp_path, 5).iterdir()) == ["COMMITTED", "manifest.json", "state.pt"]
    assert info.size_bytes == (ckpt_dir(tmp_path, 5) / "state.pt").stat().st_size
    manifest = json.loads((ckpt_dir(tmp_path, 5) / "manifest.json").read_text())
    assert manifest["sha256"] == info.sha256 and manifest["step"] == 5 and manifest["format"] == 1

    assert store.latest() == info
    loaded = store.load(info)
    assert_same(state, loaded)
    random.setstate(loaded["python_rng"])  # a usable Python RNG state after weights_only loading
    torch.set_rng_state(loaded["torch_rng"])
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    model.load_state_dict(loaded["model"])
    torch.optim.AdamW(model.parameters(), lr=1e-3).load_state_dict(loaded["optimizer"])


def test_phases_are_reported_in_order(tmp_path: Path) -> None:
    seen: list[tuple[str, int]] = []
    store = CheckpointStore(str(tmp_path), on_phase=lambda phase, step: seen.append((phase, step)))
    store.save(3, small_state(3))
    assert seen == [("data", 3), ("manifest", 3), ("marker", 3), ("committed", 3)]


def test_save_is_idempotent_per_step(tmp_path: Path) -> None:
    seen: list[str] = []
    store = CheckpointStore(str(tmp_path), on_phase=lambda phase, step: seen.append(phase))
    first = store.save(1, small_state(1.0), meta={"rank": 0})
    data = ckpt_dir(tmp_path, 1) / "state.pt"
    before = (data.stat().st_ino, data.stat().st_mtime_ns)
    seen.clear()

    again = CheckpointStore(str(tmp_path), on_phase=lambda phase, step: seen.append(phase)).save(
        1, small_state(9.0), meta={"rank": 1})

    assert again == first and seen == []
    assert (data.stat().st_ino, data.stat().st_mtime_ns) == before
    assert_same(store.load(store.latest()), small_state(1.0))


def test_state_that_weights_only_refuses_is_rejected_before_writing(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    store = CheckpointStore(str(tmp_path))
    with pytest.raises(TypeError, match="weights_only"):
        store.save(1, {"numpy_rng": np.random.get_state()})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", ["local", "memory"])
def test_concurrent_writers_of_the_same_state_converge(tmp_path: Path, kind: str) -> None:
    """Ranks with replicated state may all save the same step at once; each gets the one checkpoint."""
    base = str(tmp_path) if kind == "local" else f"memory://geotrain-race-{uuid.uuid4().hex}/run"
    jitter = random.Random(0)

    def pause(phase: str, step: int) -> None:
        time.sleep(jitter.choice([0, 0, 0.001]))  # shuffle the interleavings

    errors: list[BaseException] = []

    def rank(step: int) -> None:
        try:
            assert CheckpointStore(base, on_phase=pause).save(step, small_state(step)).step == step
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    for step in range(1, 11):
        threads = [threading.Thread(target=rank, args=(step,)) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []
    store = CheckpointStore(base)
    assert [info.step for info in store.list()] == list(range(1, 11)) and store.rejected == []
    if kind == "local":
        assert leftovers(tmp_path, 10) == []
    else:
        fs = fsspec.filesystem("memory")
        root = fs._strip_protocol(base)
        assert not [p for p in fs.find(root) if ".tmp-" in p]
        fs.rm(root.rsplit("/", 1)[0], recursive=True)


@pytest.mark.parametrize("bad", [-1, 10**10, 1.0, True])
def test_bad_step_is_refused(tmp_path: Path, bad) -> None:
    with pytest.raises(ValueError, match="step"):
        CheckpointStore(str(tmp_path)).save(bad, small_state(1))


def test_meta_must_be_json(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="JSON"):
        CheckpointStore(str(tmp_path)).save(1, small_state(1), meta={"t": torch.ones(1)})


# -- writers killed in each phase ----------------------------------------------------------------

CHILD = """
import os, sys, torch
from geotrain.train.checkpoint import CheckpointStore
url, stop_at, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])
def hook(phase, step):
    print(phase, flush=True)
    if phase == stop_at:
        os._exit(1)
store = CheckpointStore(url, on_phase=hook, write_delay_s=delay)
store.save(2, {"w": torch.full((4,), 2.0), "step": 2}, meta={"who": "child"})
os._exit(0)
"""


@pytest.fixture(scope="module")
def killed_writers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One base per way of dying, each holding committed checkpoint 1 and a writer of 2 that died.

    "data"/"manifest"/"marker": the child os._exit()s from on_phase at that phase. "sigkill": the
    child is SIGKILLed while it sleeps (write_delay_s) between writing the data and the manifest,
    the way a preempted node dies in the middle of a checkpoint write. All children run at once.
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    bases, children = {}, {}
    for how in (*PHASES, "sigkill"):
        base = tmp_path_factory.mktemp(f"killed-{how}")
        CheckpointStore(str(base)).save(1, small_state(1.0), meta={"who": "parent"})
        stop_at, delay = (how, 0.0) if how in PHASES else ("never", 60.0)
        children[how] = subprocess.Popen([sys.executable, "-c", CHILD, str(base), stop_at, str(delay)],
                                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        bases[how] = base
    victim = children["sigkill"]
    deadline = time.monotonic() + 60
    while not (ckpt_dir(bases["sigkill"], 2) / "state.pt").exists():
        assert victim.poll() is None, victim.communicate()
        assert time.monotonic() < deadline, "the child never wrote its data"
        time.sleep(0.02)
    victim.send_signal(signal.SIGKILL)
    for how, child in children.items():
        out, err = child.communicate(timeout=60)
        expected = -signal.SIGKILL if how == "sigkill" else 1
        assert child.returncode == expected, (how, out, err)
    return bases


@pytest.mark.parametrize("how", [*PHASES, "sigkill"])
def test_killed_writer_leaves_previous_checkpoint_and_no_leftovers(killed_writers, how: str) -> None:
    base = killed_writers[how]
    torn = ckpt_dir(base, 2)
    assert torn.exists() == (how != "data")  # killed before the data: no directory yet
    store = CheckpointStore(str(base))

    latest = store.latest()

    assert latest is not None and latest.step == 1 and latest.meta == {"who": "parent"}
    assert_same(store.load(latest), small_state(1.0))
    if torn.exists():
        assert store.rejected == [(f"file://{torn}", store.rejected[0][1])]
        assert store.rejected[0][1].startswith("torn")
    else:
        assert store.rejected == []
    # Debris of a writer killed in the middle of a write() call itself.
    if torn.exists():
        (torn / "manifest.json.tmp-0123abcd").write_bytes(b"{")
    (ckpt_dir(base, 1) / "state.pt.tmp-4567ef").write_bytes(b"half")

    store.save(3, small_state(3.0))

    assert leftovers(base, 3) == []
    assert not torn.exists()
    assert [info.step for info in store.list()] == [1, 3] and store.rejected == []
    assert store.latest().step == 3


@pytest.mark.parametrize("phase", PHASES)
def test_torn_step_is_rewritten_when_the_run_resaves_it(tmp_path: Path, phase: str) -> None:
    CheckpointStore(str(tmp_path)).save(1, small_state(1.0))
    with pytest.raises(Crash):
        CheckpointStore(str(tmp_path), on_phase=crash_at(phase)).save(2, small_state(2.0))
    if ckpt_dir(tmp_path, 2).exists():
        (ckpt_dir(tmp_path, 2) / "state.pt.tmp-dead").write_bytes(b"x")
    store = CheckpointStore(str(tmp_path))
    assert store.latest().step == 1

    info = store.save(2, small_state(2.5))  # the resumed run reaches step 2 again

    assert store.latest() == info and store.rejected == []
    assert_same(store.load(info), small_state(2.5))
    assert leftovers(tmp_path, 2) == []


@pytest.mark.parametrize("phase", PHASES)
def test_prune_clears_a_killed_writers_debris(tmp_path: Path, phase: str) -> None:
    store = CheckpointStore(str(tmp_path))
    store.save(1, small_state(1.0))
    store.save(2, small_state(2.0))
    for step in (3, 4):  # an older torn step gets removed; the newest may still be being written
        with pytest.raises(Crash):
            CheckpointStore(str(tmp_path), on_phase=crash_at(phase)).save(step, small_state(step))
    (ckpt_dir(tmp_path, 2) / "state.pt.tmp-dead").write_bytes(b"x")
    store.save(3, small_state(3.0))  # commits 3, over the torn one

    store.prune(keep=2)

    assert leftovers(tmp_path, 3) == []
    assert [info.step for info in store.list()] == [2, 3]
    assert store.latest().step == 3


# -- corruption ----------------------------------------------------------------------------------


def two_checkpoints(base: Path) -> tuple[CheckpointStore, CheckpointInfo, CheckpointInfo]:
    store = CheckpointStore(str(base))
    return store, store.save(1, small_state(1.0)), store.save(2, small_state(2.0))


def test_flipped_data_bytes_are_rejected_and_previous_returned(tmp_path: Path) -> None:
    store, first, second = two_checkpoints(tmp_path)
    data = ckpt_dir(tmp_path, 2) / "state.pt"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))

    assert store.latest() == first
    assert store.rejected == [(second.url, "corrupt: state.pt sha256 mismatch")]
    with pytest.raises(InputError, match="corrupt"):
        store.load(second)
    assert [info.step for info in store.list()] == [1]


def test_truncated_data_is_rejected(tmp_path: Path) -> None:
    store, first, second = two_checkpoints(tmp_path)
    data = ckpt_dir(tmp_path, 2) / "state.pt"
    data.write_bytes(data.read_bytes()[:10])
    assert store.latest() == first
    assert "corrupt" in store.rejected[0][1] and "bytes" in store.rejected[0][1]


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b'{"format": 1}', b"\xff\xfe"])
def test_unparsable_manifest_is_rejected(tmp_path: Path, content: bytes) -> None:
    store, first, second = two_checkpoints(tmp_path)
    (ckpt_dir(tmp_path, 2) / "manifest.json").write_bytes(content)
    assert store.latest() == first
    assert store.rejected[0][0] == second.url and store.rejected[0][1].startswith("unreadable manifest")


@pytest.mark.parametrize("marker", ["other", b"", b"not json"])
def test_marker_that_does_not_match_the_manifest_is_rejected(tmp_path: Path, marker) -> None:
    store, first, _ = two_checkpoints(tmp_path)
    if marker == "other":  # e.g. files from two different writers interleaved
        marker = (ckpt_dir(tmp_path, 1) / "COMMITTED").read_bytes()
    (ckpt_dir(tmp_path, 2) / "COMMITTED").write_bytes(marker)
    assert store.latest() == first
    assert "marker does not match" in store.rejected[0][1]


def test_missing_marker_or_data_is_rejected(tmp_path: Path) -> None:
    store, first, _ = two_checkpoints(tmp_path)
    store.save(3, small_state(3.0))
    (ckpt_dir(tmp_path, 3) / "COMMITTED").unlink()
    (ckpt_dir(tmp_path, 2) / "state.pt").unlink()
    assert store.latest() == first
    assert [reason.split(":")[0] for _, reason in store.rejected] == ["torn", "corrupt"]


def test_corrupt_committed_step_is_rewritten_by_save(tmp_path: Path) -> None:
    store, _, _ = two_checkpoints(tmp_path)
    (ckpt_dir(tmp_path, 2) / "state.pt").write_bytes(b"garbage")
    info = store.save(2, small_state(2.0))
    assert store.latest() == info and store.rejected == []


# -- pruning ---------------------------------------------------------------------------------------


def test_prune_keeps_the_newest(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path))
    for step in range(1, 6):
        store.save(step, small_state(step))
    store.prune(keep=2)
    assert [info.step for info in store.list()] == [4, 5]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-0000000004", "ckpt-0000000005"]
    store.prune()  # fewer than keep: nothing to do
    assert [info.step for info in store.list()] == [4, 5]
    with pytest.raises(ValueError, match="at least"):
        store.prune(keep=1)


def test_prune_removes_damaged_older_checkpoints_but_never_the_newest_two_verified(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path))
    for step in range(1, 5):
        store.save(step, small_state(step))
    (ckpt_dir(tmp_path, 4) / "state.pt").write_bytes(b"bad")  # newest is corrupt
    (ckpt_dir(tmp_path, 1) / "state.pt").write_bytes(b"bad")
    store.prune(keep=2)
    assert [info.step for info in store.list()] == [2, 3]
    assert not ckpt_dir(tmp_path, 1).exists()
    assert ckpt_dir(tmp_path, 4).exists()  # newer than every verified one: left for the run to rewrite


# -- URLs ------------------------------------------------------------------------------------------


def test_file_urls_and_plain_paths_see_the_same_store(tmp_path: Path) -> None:
    info = CheckpointStore(f"file://{tmp_path}/run").save(1, small_state(1.0))
    plain = CheckpointStore(str(tmp_path / "run"))
    assert plain.latest() == info
    assert_same(plain.load(info), small_state(1.0))
    assert info.url == f"file://{tmp_path}/run/ckpt-0000000001"


def test_memory_url_exercises_the_remote_path() -> None:
    base = f"memory://geotrain-test-{uuid.uuid4().hex}/run"
    fs = fsspec.filesystem("memory")
    try:
        store = CheckpointStore(base)
        first = store.save(1, training_state(), meta={"run_id": "m"})
        assert first.url == f"{base.replace('memory://', 'memory:///')}/ckpt-0000000001"
        assert store.save(1, small_state(0)) == first
        with pytest.raises(Crash):
            CheckpointStore(base, on_phase=crash_at("marker")).save(2, small_state(2.0))
        assert store.latest() == first and store.rejected[0][1].startswith("torn")
        assert_same(store.load(first), training_state())
        store.save(3, small_state(3.0))
        store.save(4, small_state(4.0))
        store.prune(keep=2)
        root = fs._strip_protocol(base)
        assert [p.rsplit("/", 1)[1] for p in fs.ls(root, detail=False)] == ["ckpt-0000000003", "ckpt-0000000004"]
        assert not [p for p in fs.find(root) if ".tmp-" in p]
        raw = bytearray(fs.cat_file(f"{root}/ckpt-0000000004/state.pt"))
        raw[-5] ^= 0xFF
        fs.pipe_file(f"{root}/ckpt-0000000004/state.pt", bytes(raw))
        assert store.latest().step == 3
    finally:
        fs.rm(fs._strip_protocol(base).split("/run")[0], recursive=True)


def test_unknown_protocol_is_an_input_error() -> None:
    with pytest.raises(InputError, match="nosuchproto"):
        CheckpointStore("nosuchproto://bucket/run")


def test_missing_backend_names_the_package_to_install() -> None:
    for protocol, package in (("s3", "s3fs"), ("gs", "gcsfs"), ("az", "adlfs")):
        if importlib.util.find_spec(package) is None:
            with pytest.raises(InputError, match=f"install {package} for {protocol}://"):
                CheckpointStore(f"{protocol}://bucket/run")
            return
    pytest.skip("s3fs, gcsfs and adlfs are all installed")


def test_base_that_is_a_file_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match=str(tmp_path / "file")):
        CheckpointStore(str(tmp_path / "file"))
    with pytest.raises(InputError):
        CheckpointStore(str(tmp_path / "file" / "below"))

"""The user's data for the built-in workloads (``geotrain.train.userdata``): what a batch holds, that
sample i is a pure function of (seed, i) and an epoch visits every item once, that a URL is copied
to the node (fsspec's own memory filesystem), and that data the workload cannot train on is refused
with the reason."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from geotrain.train.userdata import DataError, data_batches


def image_folder(root, classes: int = 2, per_class: int = 3):
    rng = np.random.default_rng(0)
    for c in range(classes):
        folder = root / f"class{c:02d}"
        folder.mkdir(parents=True)
        for k in range(per_class):
            size = (40 + 7 * k, 50 + 3 * c)  # any size: resized and cropped to the workload's side
            Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(folder / f"{k}.png")
    return root


def test_an_image_folder_gives_every_image_once_an_epoch_with_its_class(tmp_path):
    batch, what = data_batches("tiny-cnn", str(image_folder(tmp_path / "images")))
    assert what.endswith("6 images of 2 classes at 32x32")
    x, y = batch(0, 0, 6)
    assert x.shape == (6, 3, 32, 32) and x.dtype == torch.float32
    assert sorted(y.tolist()) == [0, 0, 0, 1, 1, 1]
    assert len({tuple(row.flatten()[:64].tolist()) for row in x}) == 6  # six different images
    again, labels = batch(0, 2, 3)  # a resumed reader at sample 2
    assert torch.equal(again, x[2:5]) and torch.equal(labels, y[2:5])
    second, _ = batch(0, 6, 6)  # the next epoch: the same images in another order
    assert sorted(second.sum(dim=(1, 2, 3)).tolist()) == pytest.approx(sorted(x.sum(dim=(1, 2, 3)).tolist()))
    assert not torch.equal(second, x)


def test_a_planned_vision_model_takes_the_folder_at_its_side(tmp_path):
    batch, _ = data_batches("resnet18", str(image_folder(tmp_path / "images", classes=3, per_class=1)))
    x, y = batch(0, 0, 3)
    assert x.shape == (3, 3, 32, 32) and sorted(y.tolist()) == [0, 1, 2]


def test_a_token_file_gives_next_token_sequences_for_tiny_lm(tmp_path):
    tokens = (np.arange(1000) * 7 % 256).astype(np.int32)
    path = tmp_path / "tokens.npy"
    np.save(path, tokens)
    batch, what = data_batches("tiny-lm", str(path))
    assert "1000 tokens, 31 sequences of 32" in what
    x, y = batch(3, 0, 4)
    assert x.shape == y.shape == (4, 32) and x.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    for row in x:  # each a window of the file at a multiple of the context
        windows = [k for k in range(0, len(tokens) - 32, 32) if np.array_equal(tokens[k:k + 32], row.numpy())]
        assert windows, row
    assert torch.equal(batch(3, 1, 2)[0], x[1:3])


def test_roberta_masks_fifteen_percent_of_the_users_tokens(tmp_path):
    tokens = np.random.default_rng(1).integers(5, 50_000, 32 * 200).astype(np.int64)
    path = tmp_path / "tokens.npy"
    np.save(path, tokens)
    batch, _ = data_batches("roberta-base", str(path))
    inputs, labels = batch(0, 0, 64)
    masked = labels != -100
    assert 0.10 < masked.float().mean() < 0.20
    assert (inputs[masked] == 4).all()  # RoBERTa's <mask>
    assert (inputs[~masked] >= 5).all() and set(labels[masked].tolist()) <= set(tokens.tolist())


def test_a_url_is_copied_to_the_node_once(tmp_path):
    import fsspec

    fs = fsspec.filesystem("memory")
    local = image_folder(tmp_path / "src")
    for png in local.rglob("*.png"):
        fs.pipe_file(f"/userdata-test/images/{png.parent.name}/{png.name}", png.read_bytes())
    np.save(tmp_path / "t.npy", np.arange(100, dtype=np.int16))
    fs.pipe_file("/userdata-test/tokens.npy", (tmp_path / "t.npy").read_bytes())
    try:
        batch, what = data_batches("tiny-cnn", "memory://userdata-test/images", cache_dir=tmp_path / "node")
        assert "6 images of 2 classes" in what and str(tmp_path / "node") in what
        assert batch(0, 0, 2)[0].shape == (2, 3, 32, 32)
        batch, what = data_batches("tiny-lm", "memory://userdata-test/tokens.npy", cache_dir=tmp_path / "node")
        assert "100 tokens" in what
        fs.rm("/userdata-test", recursive=True)  # copied once: the node reads its own copy from now on
        assert "100 tokens" in data_batches("tiny-lm", "memory://userdata-test/tokens.npy", tmp_path / "node")[1]
    finally:
        if fs.exists("/userdata-test"):
            fs.rm("/userdata-test", recursive=True)


@pytest.mark.parametrize("case, workload, message", [
    ("missing", "tiny-cnn", "does not exist"),
    ("file", "tiny-cnn", "is not a folder"),
    ("empty", "tiny-cnn", "is not an image folder"),
    ("classes", "tiny-cnn", "has 11 classes; the model predicts 10"),
    ("folder", "tiny-lm", "is not a token file"),
    ("vocab", "tiny-lm", "vocabulary is 0..255"),
    ("matrix", "roberta-base", "give a 1-D array of integer token ids"),
    ("short", "tiny-lm", "fewer than one sequence"),
    ("url", "tiny-lm", "cannot copy memory://userdata-test-none/x.npy"),
])
def test_data_the_workload_cannot_train_on_is_refused_with_the_reason(tmp_path, case, workload, message):
    where = {"missing": tmp_path / "nothing", "file": tmp_path / "a.npy", "empty": tmp_path / "empty",
             "classes": tmp_path / "many", "folder": tmp_path / "empty", "vocab": tmp_path / "big.npy",
             "matrix": tmp_path / "m.npy", "short": tmp_path / "s.npy"}.get(case)
    np.save(tmp_path / "a.npy", np.arange(10))
    (tmp_path / "empty").mkdir()
    if case == "classes":
        image_folder(where, classes=11, per_class=1)
    np.save(tmp_path / "big.npy", np.arange(300))
    np.save(tmp_path / "m.npy", np.zeros((4, 8), dtype=np.int64))
    np.save(tmp_path / "s.npy", np.arange(20))
    location = "memory://userdata-test-none/x.npy" if case == "url" else str(where)
    with pytest.raises(DataError, match=message.replace(".", r"\.").replace("(", r"\(")):
        data_batches(workload, location, cache_dir=tmp_path / "node")

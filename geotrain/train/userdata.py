"""The user's own data for the built-in workloads, in place of their synthetic data
(``geotrain launch PLAN --data LOCATION``).

- **An image folder** for the vision workloads (``tiny-cnn`` and the torchvision models): torchvision's
  ``ImageFolder`` layout, one subfolder per class (the labels are the subfolders' indices in sorted
  order). Each image is resized and centre-cropped to the workload's side and normalised with
  ImageNet's mean and standard deviation.
- **A token file** for the language workloads (``tiny-lm`` and the RoBERTa models): a 1-D array of
  integer token ids in NumPy's ``.npy`` format, made with the model's own tokenizer (nothing is
  downloaded here). It is cut into consecutive sequences of the workload's length: ``tiny-lm``
  predicts each next token; the RoBERTa models predict the masked 15 % (as on the synthetic data).

Sample ``i`` of the run is item ``perm_e[i mod n]`` of the ``n`` items, where ``e = i div n`` and
``perm_e`` is a permutation seeded by (seed, e): as with the synthetic data, a pure function of
(seed, i), so a resumed run reads what an uninterrupted run would have read, whichever node reads it,
and every epoch visits every item once.

``LOCATION`` is a path on the node (the launcher's own machine for the local provider) or any fsspec
URL (``s3://``, ``gs://``, ``az://``, ...): a URL is copied once into the node's own directory, since
a node shares no disk with the launcher.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Callable
from pathlib import Path

import torch

from geotrain.train.workloads import IMAGE_SIDE, IMAGENET_CLASSES, ROBERTA, SEQUENCE, TORCHVISION, TinyLM, masks

IMAGE_WORKLOADS = {"tiny-cnn": (32, 10), **{name: (IMAGE_SIDE, IMAGENET_CLASSES) for name in TORCHVISION}}
TOKEN_WORKLOADS = {"tiny-lm": TinyLM.VOCAB, **{name: cfg["vocab_size"] for name, cfg in ROBERTA.items()}}
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

Batch = Callable[[int, int, int], tuple[torch.Tensor, torch.Tensor]]  # (seed, first index, size)


class DataError(ValueError):
    """The data cannot be what the workload trains on (the message says why and what to give)."""


def local_copy(location: str, cache_dir: Path | None) -> Path:
    """``location`` as a path on this machine: itself if it is a path (or ``file://``), else a copy of
    the URL in ``cache_dir`` (made once: the copy is named after the URL)."""
    if "://" not in location or location.startswith("file://"):
        path = Path(location.removeprefix("file://")).expanduser()
        if not path.exists():
            raise DataError(f"{location} does not exist on this machine; give a path every node has, or a URL "
                            "(s3://, gs://, az://) they can all read")
        return path
    import fsspec

    if cache_dir is None:
        raise DataError(f"{location} is a URL, and this process has no directory of its own to copy it into")
    dest = cache_dir / "data" / hashlib.sha256(location.encode()).hexdigest()[:16]
    done = dest.with_name(dest.name + ".done")  # holds what the copy is: "." (a folder) or the file's name
    if not done.exists():
        try:
            fs, root = fsspec.core.url_to_fs(location)
            if fs.isdir(root):
                fs.get(root.rstrip("/") + "/", str(dest) + "/", recursive=True)
                made = "."
            else:
                made = posixpath.basename(root.rstrip("/"))
                dest.mkdir(parents=True, exist_ok=True)
                fs.get(root, str(dest / made))
        except (OSError, ValueError, ImportError) as exc:
            raise DataError(f"cannot copy {location} to this node: {exc}") from exc
        done.write_text(made)
    return dest / done.read_text()


def data_batches(workload: str, location: str, cache_dir: Path | None = None) -> tuple[Batch, str]:
    """The workload's batch function on the data at ``location``, and a line that says what it is."""
    path = local_copy(location, cache_dir)
    if workload in IMAGE_WORKLOADS:
        side, classes = IMAGE_WORKLOADS[workload]
        return image_folder(path, side, classes)
    if workload in TOKEN_WORKLOADS:
        return token_file(path, workload, TOKEN_WORKLOADS[workload])
    raise DataError(f"{workload} trains on its synthetic data only")


def _permuted(seed: int, n: int) -> Callable[[int], int]:
    """Sample index -> item: a fresh permutation of the ``n`` items every epoch, seeded by (seed, epoch)."""
    cache: dict[int, torch.Tensor] = {}

    def item(index: int) -> int:
        epoch, k = divmod(index, n)
        if epoch not in cache:
            cache.clear()
            cache[epoch] = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))
        return int(cache[epoch][k])

    return item


def image_folder(path: Path, side: int, classes: int) -> tuple[Batch, str]:
    from torchvision import datasets, transforms

    if not path.is_dir():
        raise DataError(f"{path} is not a folder: the vision workloads train on an image folder (one subfolder "
                        "of images per class)")
    shape = transforms.Compose([transforms.Resize(side), transforms.CenterCrop(side), transforms.ToTensor(),
                                transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    try:
        folder = datasets.ImageFolder(str(path), transform=lambda image: shape(image.convert("RGB")))
    except (FileNotFoundError, RuntimeError) as exc:  # no class folders, or no images in them
        raise DataError(f"{path} is not an image folder (one subfolder of images per class): {exc}") from None
    if len(folder.classes) > classes:
        raise DataError(f"{path} has {len(folder.classes)} classes; the model predicts {classes}")
    orders: dict[int, Callable[[int], int]] = {}

    def batch(seed: int, first: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        order = orders.setdefault(seed, _permuted(seed, len(folder)))
        pairs = [folder[order(first + k)] for k in range(size)]
        return torch.stack([x for x, _ in pairs]), torch.tensor([y for _, y in pairs])

    return batch, f"image folder {path}: {len(folder)} images of {len(folder.classes)} classes at {side}x{side}"


def token_file(path: Path, workload: str, vocab: int) -> tuple[Batch, str]:
    import numpy as np

    try:
        tokens = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DataError(f"{path} is not a token file (a 1-D NumPy .npy array of token ids): {exc}") from None
    if tokens.ndim != 1 or tokens.dtype.kind not in "iu":
        raise DataError(f"{path} holds a {tokens.dtype} array of shape {tokens.shape}; give a 1-D array of integer "
                        "token ids")
    causal = workload == "tiny-lm"
    length = TinyLM.CONTEXT if causal else SEQUENCE
    n = (len(tokens) - 1) // length if causal else len(tokens) // length
    if n < 1:
        raise DataError(f"{path} holds {len(tokens)} tokens, fewer than one sequence of {length + causal}")
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0 or high >= vocab:
        raise DataError(f"{path} holds token ids {low}..{high}; {workload}'s vocabulary is 0..{vocab - 1} (tokenize "
                        "with the model's own tokenizer)")
    orders: dict[int, Callable[[int], int]] = {}

    def batch(seed: int, first: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        order = orders.setdefault(seed, _permuted(seed, n))
        rows = torch.stack([torch.from_numpy(np.array(tokens[order(first + k) * length:
                                                            order(first + k) * length + length + causal],
                                                     dtype=np.int64)) for k in range(size)])
        if causal:
            return rows[:, :-1], rows[:, 1:]
        return masks(rows, vocab, seed, first)

    kind = "next token" if causal else "masked tokens"
    return batch, f"token file {path}: {len(tokens)} tokens, {n} sequences of {length} ({kind})"

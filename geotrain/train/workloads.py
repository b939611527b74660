"""Built-in workloads that train on a CPU in seconds, with deterministic synthetic data.

- ``tiny-cnn``: a small CNN on synthetic 3x32x32 images of 10 classes (labels are a fixed random
  linear function of the pixels, so the loss falls as it learns).
- ``tiny-lm``: a small causal transformer language model on synthetic tokens drawn from a fixed
  random bigram table (so there is something to learn).

Sample ``i`` of a dataset is a pure function of (seed, i): a resumed run reads exactly the samples
an uninterrupted run would have read, whichever node reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn


@dataclass(frozen=True)
class TrainWorkload:
    name: str
    build_model: Callable[[], nn.Module]
    batch: Callable[[int, int, int], tuple[torch.Tensor, torch.Tensor]]  # (seed, first index, size)
    loss: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]
    samples_per_step: int


class TinyCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(32 * 8 * 8, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class TinyLM(nn.Module):
    VOCAB = 256
    CONTEXT = 32

    def __init__(self, d_model: int = 64, layers: int = 2, heads: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(self.VOCAB, d_model)
        self.position = nn.Parameter(torch.zeros(self.CONTEXT, d_model))
        layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=2 * d_model, dropout=0.0,
                                           batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.out = nn.Linear(d_model, self.VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(self.CONTEXT), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens) + self.position[: tokens.shape[1]]
        h = self.blocks(h, mask=self.mask[: tokens.shape[1], : tokens.shape[1]], is_causal=True)
        return self.out(h)


def _generator(seed: int, index: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + index)


def image_batch(seed: int, first: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    teacher = torch.randn(3 * 32 * 32, 10, generator=torch.Generator().manual_seed(seed))
    images = torch.stack([torch.randn(3, 32, 32, generator=_generator(seed, first + k)) for k in range(size)])
    labels = (images.flatten(1) @ teacher).argmax(dim=1)
    return images, labels


def token_batch(seed: int, first: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    table = torch.rand(TinyLM.VOCAB, TinyLM.VOCAB, generator=torch.Generator().manual_seed(seed)) ** 8
    cdf = torch.cumsum(table / table.sum(dim=1, keepdim=True), dim=1)
    cdf[:, -1] = 1.0
    uniforms = torch.stack([torch.rand(TinyLM.CONTEXT + 1, generator=_generator(seed, first + k)) for k in range(size)])
    tokens = torch.empty(size, TinyLM.CONTEXT + 1, dtype=torch.long)
    tokens[:, 0] = (uniforms[:, 0] * TinyLM.VOCAB).long().clamp(max=TinyLM.VOCAB - 1)
    for t in range(1, TinyLM.CONTEXT + 1):
        rows = cdf[tokens[:, t - 1]]
        tokens[:, t] = torch.searchsorted(rows, uniforms[:, t : t + 1].contiguous()).squeeze(1).clamp(max=TinyLM.VOCAB - 1)
    return tokens[:, :-1], tokens[:, 1:]


def _classification_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(model(x), y)


def _lm_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())


WORKLOADS = {
    "tiny-cnn": TrainWorkload("tiny-cnn", TinyCNN, image_batch, _classification_loss, 32),
    "tiny-lm": TrainWorkload("tiny-lm", TinyLM, token_batch, _lm_loss, 16),
}


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())

"""Built-in workloads, with deterministic synthetic data (or the user's: ``geotrain.train.userdata``).

- ``tiny-cnn``: a small CNN on synthetic 3x32x32 images of 10 classes (labels are a fixed random
  linear function of the pixels, so the loss falls as it learns).
- ``tiny-lm``: a small causal transformer language model on synthetic tokens drawn from a fixed
  random bigram table (so there is something to learn).
- The models the planner plans (``geotrain/perf/data/workloads.csv``), as their libraries define them,
  with random weights (nothing is downloaded): torchvision's ``resnet18``, ``resnet50``,
  ``resnet152``, ``wide-resnet101-2`` and ``convnext-large`` (1000 classes) on synthetic images of
  ``IMAGE_SIDE`` pixels (small, so that a CPU trains them; the architecture is the same at any side);
  Hugging Face's ``roberta-base``, ``roberta-large`` and ``roberta-xlm`` (XLM-RoBERTa-large) masked
  language models, built from their published configs, on synthetic token sequences of
  ``SEQUENCE`` tokens, 15% of them masked.

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


def image_batch(seed: int, first: int, size: int, side: int = 32, classes: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    teacher = torch.randn(3 * side * side, classes, generator=torch.Generator().manual_seed(seed))
    images = torch.stack([torch.randn(3, side, side, generator=_generator(seed, first + k)) for k in range(size)])
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


IMAGE_SIDE = 32  # pixels of the planned vision models' synthetic images
IMAGENET_CLASSES = 1000
SEQUENCE = 32  # tokens of the planned language models' synthetic sequences
MASKED = 0.15  # the share of tokens a masked language model predicts (RoBERTa's)

# the published configs (config.json of the Hugging Face models of these names), without the weights
ROBERTA = {
    "roberta-base": dict(vocab_size=50265, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                         intermediate_size=3072),
    "roberta-large": dict(vocab_size=50265, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                          intermediate_size=4096),
    "roberta-xlm": dict(vocab_size=250002, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                        intermediate_size=4096),  # xlm-roberta-large
}
TORCHVISION = {"resnet18": "resnet18", "resnet50": "resnet50", "resnet152": "resnet152",
               "wide-resnet101-2": "wide_resnet101_2", "convnext-large": "convnext_large"}


def torchvision_model(name: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import torchvision

        return getattr(torchvision.models, TORCHVISION[name])(weights=None, num_classes=IMAGENET_CLASSES)

    return build


def roberta_model(name: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        from transformers import RobertaConfig, RobertaForMaskedLM, XLMRobertaConfig, XLMRobertaForMaskedLM

        config_class, model_class = ((XLMRobertaConfig, XLMRobertaForMaskedLM) if name == "roberta-xlm"
                                     else (RobertaConfig, RobertaForMaskedLM))
        config = config_class(max_position_embeddings=514, type_vocab_size=1, layer_norm_eps=1e-5, bos_token_id=0,
                              pad_token_id=1, eos_token_id=2, **ROBERTA[name])
        return model_class(config)

    return build


def planned_image_batch(seed: int, first: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    return image_batch(seed, first, size, IMAGE_SIDE, IMAGENET_CLASSES)


FIRST_ORDINARY = 5  # the RoBERTa vocabularies' first token that is not a special one


def masks(tokens: torch.Tensor, vocab: int, seed: int, first: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked-LM inputs and labels for the sequences ``tokens`` (samples ``first``, ``first + 1``, ...):
    ``MASKED`` of the tokens, drawn per sample from (seed, index), replaced by the vocabulary's mask
    token; labels -100 where not masked."""
    mask_id = 4 if vocab < 100_000 else 250001
    picks = torch.stack([torch.rand(tokens.shape[1], generator=_generator(seed + 1, first + k))
                         for k in range(tokens.shape[0])])
    masked = picks < MASKED
    inputs = torch.where(masked, torch.full_like(tokens, mask_id), tokens)
    labels = torch.where(masked, tokens, torch.full_like(tokens, -100))
    return inputs, labels


def masked_token_batch(vocab: int) -> Callable[[int, int, int], tuple[torch.Tensor, torch.Tensor]]:
    """Synthetic sequences (the bigram tokens of ``tiny-lm``, spread over the model's vocabulary past its
    special tokens), masked (:func:`masks`)."""

    def batch(seed: int, first: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        tokens, _ = token_batch(seed, first, size)
        tokens = (tokens[:, :SEQUENCE] * ((vocab - FIRST_ORDINARY - 1) // TinyLM.VOCAB)) + FIRST_ORDINARY
        return masks(tokens, vocab, seed, first)

    return batch


def _masked_lm_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return model(input_ids=x, labels=y).loss


WORKLOADS = {
    "tiny-cnn": TrainWorkload("tiny-cnn", TinyCNN, image_batch, _classification_loss, 32),
    "tiny-lm": TrainWorkload("tiny-lm", TinyLM, token_batch, _lm_loss, 16),
    **{name: TrainWorkload(name, torchvision_model(name), planned_image_batch, _classification_loss, 32)
       for name in TORCHVISION},
    **{name: TrainWorkload(name, roberta_model(name), masked_token_batch(cfg["vocab_size"]), _masked_lm_loss, 32)
       for name, cfg in ROBERTA.items()},
}


def workload_named(name: str) -> TrainWorkload:
    """A built-in workload (``geotrain.train.capabilities.WORKLOADS`` names them all)."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise ValueError(f"{name!r} is not a built-in workload; choices: {', '.join(WORKLOADS)}") from None


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())

"""Train a small Hugging Face transformer (a masked language model built from a config: random
weights, nothing downloaded) with the plan's sync strategy (geotrain.train.api).

    geotrain launch plan.json -- python examples/train/transformer.py [--steps 30]

The data: synthetic token sequences, or a text file of yours with --text FILE (its bytes as tokens).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from transformers import BertConfig, BertForMaskedLM

from geotrain.train import api

VOCAB, MASK, LENGTH = 260, 259, 32  # bytes, then special tokens; the mask is the last


def sequences(args: argparse.Namespace) -> torch.Tensor:
    if args.text:
        raw = torch.tensor(list(Path(args.text).read_bytes()), dtype=torch.long)
        return raw[: len(raw) // LENGTH * LENGTH].view(-1, LENGTH)
    g = torch.Generator().manual_seed(0)
    start = torch.randint(0, 256, (512, 1), generator=g)
    return (start + torch.arange(LENGTH)) % 256  # runs of counting bytes: something to learn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--text", help="a text file to train on instead of synthetic sequences")
    args = parser.parse_args()

    data = sequences(args)
    torch.manual_seed(0)  # every peer starts from the same weights
    config = BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, max_position_embeddings=LENGTH)
    model = BertForMaskedLM(config)
    opt = api.optimizer(model, torch.optim.AdamW(model.parameters(), lr=args.lr),
                        batch_size=args.batch_size, steps=args.steps)
    print(f"rank {opt.rank}/{opt.world_size}: transformer with {opt.strategy}, from step {opt.step_count}", flush=True)
    masking = torch.Generator().manual_seed(1 + opt.rank)
    while not opt.done:
        tokens = data[opt.batch_indices(len(data))]
        masked = torch.rand(tokens.shape, generator=masking) < 0.15
        inputs = torch.where(masked, torch.full_like(tokens, MASK), tokens)
        labels = torch.where(masked, tokens, torch.full_like(tokens, -100))
        loss = model(input_ids=inputs, labels=labels).loss
        loss.backward()
        if opt.step(loss) and opt.step_count % 10 == 0:
            print(f"step {opt.step_count} loss {loss.item():.3f}", flush=True)
        opt.zero_grad()
    opt.close()
    checksum = float(sum(p.detach().double().sum() for p in model.parameters()))  # the same on every peer
    print(f"done: {opt.step_count} steps, {opt.samples} samples, parameters sum {checksum:.6f}", flush=True)
    api.finish()


if __name__ == "__main__":
    main()

"""Train a torchvision ResNet with the plan's sync strategy (geotrain.train.api).

    geotrain launch plan.json -- python examples/train/resnet.py [--model resnet18] [--steps 30]

The data: CIFAR-sized synthetic images (3x32x32, 10 classes, labels a fixed function of the pixels),
or an image folder of yours with --images DIR (torchvision.datasets.ImageFolder).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
import torchvision

from geotrain.train import api


def synthetic(size: int, seed: int = 0) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(size, 3, 32, 32, generator=g)
    teacher = torch.randn(3 * 32 * 32, 10, generator=g)
    return torch.utils.data.TensorDataset(images, (images.flatten(1) @ teacher).argmax(dim=1))


def checksum(model: torch.nn.Module) -> float:
    """The sum of the parameters: the same on every peer after a round."""
    return float(sum(p.detach().double().sum() for p in model.parameters()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--log-every", type=int, default=10, help="steps between two lines of progress")
    parser.add_argument("--images", help="an image folder (one sub-folder per class) instead of synthetic data")
    args = parser.parse_args()

    if args.images:
        transform = torchvision.transforms.Compose([torchvision.transforms.Resize((32, 32)),
                                                    torchvision.transforms.ToTensor()])
        data = torchvision.datasets.ImageFolder(args.images, transform=transform)
        classes = len(data.classes)
    else:
        data, classes = synthetic(1024), 10
    torch.manual_seed(0)  # every peer starts from the same weights
    model = getattr(torchvision.models, args.model)(weights=None, num_classes=classes)
    opt = api.optimizer(model, torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9),
                        batch_size=args.batch_size, steps=args.steps)
    print(f"rank {opt.rank}/{opt.world_size}: {args.model} with {opt.strategy}, from step {opt.step_count}", flush=True)
    while not opt.done:
        batch = [data[i] for i in opt.batch_indices(len(data))]
        x = torch.stack([b[0] for b in batch])
        y = torch.tensor([int(b[1]) for b in batch])
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if opt.step(loss) and opt.step_count % args.log_every == 0:
            print(f"step {opt.step_count} loss {loss.item():.3f} parameters sum {checksum(model):.6f}", flush=True)
        opt.zero_grad()
    opt.close()
    print(f"done: {opt.step_count} steps, {opt.samples} samples, parameters sum {checksum(model):.6f}", flush=True)
    api.finish()


if __name__ == "__main__":
    main()

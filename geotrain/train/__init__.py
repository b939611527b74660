"""The training runtime that runs on each node (torch.distributed). Imports torch: load lazily."""

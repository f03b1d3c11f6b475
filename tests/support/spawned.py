"""What the pickling tests (tests/test_kernel_pickling.py) send to other processes:
a module holding a kernel, and the function a spawned process runs."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn


class KernelHolder(nn.Module):
    """A model that holds a one-dimensional two-input kernel as an attribute."""

    def __init__(self, kernel) -> None:
        super().__init__()
        self.kernel = kernel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return launch(self.kernel, x, x)


def launch(kernel, *args: torch.Tensor) -> torch.Tensor:
    n = args[0].shape[0]
    return kernel(
        *args, threads_per_grid=(n, 1, 1), threads_per_thread_group=(4, 1, 1), result_shapes=[[n]]
    )


def run_unpickled(rank: int, kernel, model_file: str, out_file: str) -> None:
    """Runs the kernel it was sent and the model torch.load reads; saves both results."""
    model = torch.load(model_file, weights_only=False)
    x = torch.arange(8.0)
    torch.save(
        {
            "same_object": model.kernel is kernel,
            "direct": launch(kernel, x, x),
            "model": model(x),
        },
        Path(out_file),
    )

"""Shared by the corpus of real public kernels (tests/corpus/test_*.py).

Each ported kernel keeps its original Metal code; only its signature is
adapted to the TorchMetalKernel body convention (buffers become tensor views,
launch-time constants become values read from the tensors' extents). Longer
helper code sits in a .metal file next to the test module, with the original
repository, path and function named at its top.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from kernel_testing import run_checked

from coreai_torch import TorchMetalKernel

HERE = Path(__file__).resolve().parent


def helper_source(*relative: str) -> str:
    """The ported helper code: the files concatenated, their repository-relative
    #include lines dropped (the files are given in dependency order)."""
    parts = []
    for name in relative:
        lines = (HERE / name).read_text().splitlines()
        parts.append(
            "\n".join(
                "" if line.startswith('#include "') or line.strip() == "#pragma once" else line
                for line in lines
            )
        )
    return "\n".join(parts) + "\n"


def launch(
    kernel: TorchMetalKernel,
    *args: Any,
    grid: tuple[int, int, int],
    group: tuple[int, int, int],
    shapes: list[list[int]],
    opcheck: bool = True,
) -> Any:
    """Runs a corpus kernel on CPU tensors (dispatchThreads semantics) and,
    unless told not to, passes its op through torch.library.opcheck."""
    return run_checked(
        kernel,
        *args,
        opcheck=opcheck,
        threads_per_grid=grid,
        threads_per_thread_group=group,
        result_shapes=shapes,
    )


def randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)

"""Helpers for tests that run kernels: call, compare, and opcheck in one go."""

from __future__ import annotations

from typing import Any

import torch

from coreai_torch import TorchMetalKernel


def run_checked(kernel: TorchMetalKernel, *args: Any, opcheck: bool = True, **call: Any) -> Any:
    """Calls ``kernel`` and, unless told not to, passes its op through torch.library.opcheck.

    opcheck checks the schema, the fake (Meta) implementation against the real
    one, and that the op traces under AOT dispatch with dynamic shapes.
    """
    out = kernel(*args, **call)
    if opcheck:
        grid = list(call["threads_per_grid"])
        group = list(call["threads_per_thread_group"])
        shapes = [list(s) for s in call["result_shapes"]]
        torch.library.opcheck(kernel.op, (*args, grid, group, *shapes))
    return out

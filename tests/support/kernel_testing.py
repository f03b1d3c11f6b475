"""Helpers for tests that run kernels: call, compare, and opcheck in one go."""

from __future__ import annotations

from typing import Any

import torch

from coreai_torch import TorchMetalKernel


def run_checked(kernel: TorchMetalKernel, *args: Any, opcheck: bool = True, **call: Any) -> Any:
    """Calls ``kernel`` and, unless told not to, passes its op through torch.library.opcheck.

    opcheck checks the schema, the fake (Meta) implementation against the real
    one, and that the op traces under AOT dispatch with dynamic shapes. When
    the kernel takes and returns floating-point tensors it runs a second time
    with those inputs requiring grad, which checks the op's autograd
    registration and compares the gradients of the traced op with eager ones.
    (opcheck adds up all results in the first one's dtype, so it cannot take
    integer results there.)
    """
    out = kernel(*args, **call)
    if opcheck:
        grid = list(call["threads_per_grid"])
        group = list(call["threads_per_thread_group"])
        shapes = [list(s) for s in call["result_shapes"]]
        torch.library.opcheck(kernel.op, (*args, grid, group, *shapes))
        results = [out] if isinstance(out, torch.Tensor) else list(out)
        if any(map(_floating, args)) and all(map(_floating, results)):
            differentiable = [a.detach().requires_grad_() if _floating(a) else a for a in args]
            torch.library.opcheck(kernel.op, (*differentiable, grid, group, *shapes))
    return out


def _floating(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point()

"""Test kernels that more than one test module uses (the seed kernels live in
``coreai_torch.examples``)."""

from __future__ import annotations

import torch

from coreai_torch import MetalParameter, TorchMetalKernel


def total_plus(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return x.sum() + bias


# One thread sums a vector into a rank-0 result (written `total.set(v)`, the
# Metal tensor member for any rank); bias is a 0-d input, read as a value.
rank0_sum = TorchMetalKernel(
    "rank0_sum",
    ["x", "bias"],
    ["total"],
    src="""
        static_assert(total.get_rank() == 0, "a rank-0 result");
        float s = bias;
        for (int i = 0; i < x.get_extent(0); ++i) s += x[i];
        total.set(s);
    """,
    torch_defn=total_plus,
    metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")],
)


def axpy(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    return alpha * x + y


# alpha * x + y, one element per thread; threads past the end do nothing.
AXPY_SRC = "if (id < out.get_extent(0)) out[id] = alpha * x[id] + y[id];"


def axpy_kernel(name: str, src: str = AXPY_SRC) -> TorchMetalKernel:
    """An axpy kernel (inputs x, y, alpha; result out) named ``name`` (test kernels
    need names of their own: a kernel's name is its op's)."""
    return TorchMetalKernel(
        name,
        ["x", "y", "alpha"],
        ["out"],
        src,
        axpy,
        metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")],
    )

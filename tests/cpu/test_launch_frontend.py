"""Fiber-mode kernels through the public API (TorchMetalKernel) on CPU tensors."""

from __future__ import annotations

import torch
from support.kernel_testing import run_checked

from coreai_torch import MetalParameter, TorchMetalKernel


def _softmax_reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


# One SIMD-group per row: each lane strides over the row, then the lanes
# combine their partial maxima and sums with simd_max / simd_sum.
SOFTMAX = TorchMetalKernel(
    "simd_softmax",
    ["x"],
    ["out"],
    """
    const uint n = x.get_extent(0);
    const uint row = tg.y;
    float m = -INFINITY;
    for (uint i = lane; i < n; i += 32) m = max(m, x[i, row]);
    m = simd_max(m);
    float s = 0.0f;
    for (uint i = lane; i < n; i += 32) s += exp(x[i, row] - m);
    s = simd_sum(s);
    for (uint i = lane; i < n; i += 32) out[i, row] = exp(x[i, row] - m) / s;
    """,
    _softmax_reference,
    metal_params=[
        MetalParameter("tg", "uint2", "threadgroup_position_in_grid"),
        MetalParameter("lane", "uint", "thread_index_in_simdgroup"),
    ],
)


def test_simd_softmax_through_torch_metal_kernel() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, 300, generator=g) * 3
    x[2, :100] = -float("inf")  # masked entries: exp(-inf) must be 0
    out = run_checked(  # also torch.library.opcheck
        SOFTMAX,
        x,
        threads_per_grid=(32, 7, 1),
        threads_per_thread_group=(32, 1, 1),
        result_shapes=[list(x.shape)],
    )
    # exp and the reduction order differ from torch's: a few float32 ulps.
    torch.testing.assert_close(out, _softmax_reference(x), rtol=1e-5, atol=1e-7)


def _scaled_sum_reference(x: torch.Tensor, scale: float) -> torch.Tensor:
    return (x.view(-1, 128).sum(dim=1) * scale).contiguous()


# A threadgroup-memory tree reduction with barriers, one group of 128 per row.
BLOCK_SUM = TorchMetalKernel(
    "block_sum",
    ["x", "scale"],
    ["out"],
    """
    threadgroup float partial[128];
    partial[lid] = x[gid];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint half_size = 64; half_size > 0; half_size /= 2) {
        if (lid < half_size) partial[lid] += partial[lid + half_size];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (lid == 0) out[group] = partial[0] * scale;
    """,
    _scaled_sum_reference,
    metal_params=[
        MetalParameter("gid", "uint", "thread_position_in_grid"),
        MetalParameter("lid", "uint", "thread_position_in_threadgroup"),
        MetalParameter("group", "uint", "threadgroup_position_in_grid"),
    ],
)


def test_threadgroup_reduction_with_a_scalar_through_torch_metal_kernel() -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(10 * 128, generator=g)
    for scale in (1.0, -0.5):  # one compiled kernel serves every scalar value
        out = run_checked(  # also torch.library.opcheck
            BLOCK_SUM,
            x,
            scale,
            threads_per_grid=(x.numel(), 1, 1),
            threads_per_thread_group=(128, 1, 1),
            result_shapes=[[10]],
        )
        # A tree of 127 float32 additions against torch's own order.
        torch.testing.assert_close(out, _scaled_sum_reference(x, scale), rtol=1e-5, atol=1e-5)

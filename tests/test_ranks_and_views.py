"""Rank-0 results, 0-d inputs and the strided view for int64, uint64 and bool tensors.

A rank-0 result (``result_shapes=[[]]``) is written as ``out[]``; a 0-d tensor
input is read as a value, as in Apple's package; tensors whose dtype Metal
tensors lack are viewed through coreai::strided_view with the tensor surface.
"""

from __future__ import annotations

import pytest
import torch
from support.kernel_testing import run_checked
from support.kernels import rank0_sum

from coreai_torch import MetalParameter, TorchMetalKernel

ID = [MetalParameter("id", "uint", "thread_position_in_grid")]


def test_a_rank_zero_result_is_written_and_returned():
    x, bias = torch.arange(10.0), torch.tensor(0.5)
    call = {"threads_per_grid": (1, 1, 1), "threads_per_thread_group": (1, 1, 1)}
    for _ in range(2):  # the second call takes the fast path
        out = rank0_sum(x, bias, **call, result_shapes=[[]])
        assert out.shape == () and out.dtype == torch.float32
        assert out.item() == 45.5  # exact: small integers and a half
    run_checked(rank0_sum, x, bias, **call, result_shapes=[[]])


def transpose_ops(m: torch.Tensor, flags: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return m.t() * 3, ~flags


# m is viewed strided (a transposed input), indexed both ways; flags is bool.
views = TorchMetalKernel(
    "strided_views",
    ["m", "flags"],
    ["mt", "inverted"],
    src="""
        static_assert(m.get_rank() == 2, "rank 2");
        if (gid.x < uint(m.get_extent(0)) && gid.y < uint(m.get_extent(1))) {
            metal::array<uint, m.get_rank()> at = {gid.x, gid.y};
            mt[gid.y, gid.x] = m[at] * 3;
        }
        if (gid.x == 0 && gid.y < uint(flags.get_extent(0))) inverted[gid.y] = !flags[gid.y];
    """,
    torch_defn=transpose_ops,
    metal_params=[MetalParameter("gid", "uint2", "thread_position_in_grid")],
)


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint64])
def test_64_bit_and_bool_tensors_through_the_strided_view(dtype):
    base = torch.arange(15, dtype=torch.int64).reshape(3, 5) * (2**40) + 7  # beyond 32 bits
    m = base.to(dtype).t()  # torch [5, 3], strides (1, 5): not contiguous
    flags = torch.tensor([True, False, False, True, True])
    call = {"threads_per_grid": (3, 5, 1), "threads_per_thread_group": (3, 5, 1)}
    for _ in range(2):
        mt, inverted = views(m, flags, **call, result_shapes=[[3, 5], [5]])
        assert mt.dtype == dtype and inverted.dtype == torch.bool
        assert torch.equal(mt, (base * 3).to(dtype))
        assert torch.equal(inverted, ~flags)


def test_debug_mode_checks_strided_view_accesses():
    def first(x: torch.Tensor) -> torch.Tensor:
        return x[:1].clone()

    reader = TorchMetalKernel(
        "strided_view_bounds", ["x"], ["out"], "out[0] = x[id + 4];", first, metal_params=ID
    )
    reader.debug = True
    with pytest.raises(RuntimeError, match=r"'strided_view_bounds'.*'x'.*index \[4\]"):
        reader(
            torch.arange(4, dtype=torch.int64),
            threads_per_grid=(1, 1, 1),
            threads_per_thread_group=(1, 1, 1),
            result_shapes=[[1]],
        )

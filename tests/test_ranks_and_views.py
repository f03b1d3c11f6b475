"""Rank-0 results, 0-d inputs and the strided view for int64, uint64 and bool tensors.

A rank-0 result (``result_shapes=[[]]``) is written as ``out.set(v)`` and read as
``out.get()`` (the Metal tensor's get and set with no index); a 0-d tensor input
is read as a value, as in Apple's package; tensors whose dtype Metal tensors
lack are viewed through coreai::strided_view with the tensor surface.
"""

from __future__ import annotations

import pytest
import torch
from support.kernel_testing import run_checked
from support.kernels import rank0_sum

from coreai_torch import MetalCompileError, MetalParameter, TorchMetalKernel

ID = [MetalParameter("id", "uint", "thread_position_in_grid")]


def test_a_rank_zero_result_is_written_and_returned():
    x, bias = torch.arange(10.0), torch.tensor(0.5)
    call = {"threads_per_grid": (1, 1, 1), "threads_per_thread_group": (1, 1, 1)}
    for _ in range(2):  # the second call takes the fast path
        out = rank0_sum(x, bias, **call, result_shapes=[[]])
        assert out.shape == () and out.dtype == torch.float32
        assert out.item() == 45.5  # exact: small integers and a half
    run_checked(rank0_sum, x, bias, **call, result_shapes=[[]])


def test_an_empty_subscript_is_refused_with_the_spelling_to_use():
    def zero(x: torch.Tensor) -> torch.Tensor:
        return x.sum() * 0

    empty_subscript = TorchMetalKernel("empty_subscript", ["x"], ["total"], "total[] = 0.0f;", zero)
    spelling = r"read with x\.get\(\) and written with x\.set\(v\)"
    with pytest.raises(MetalCompileError, match=spelling):
        empty_subscript(
            torch.ones(3),
            threads_per_grid=(1, 1, 1),
            threads_per_thread_group=(1, 1, 1),
            result_shapes=[[]],
        )


def row_and_sum(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x[0].clone(), x.sum() * 2


# One thread. x is a torch [1, n] tensor: Metal extents (n, 1). get broadcasts
# a positive index into the extent-1 dimension to 0 and reads 0 outside the
# extents; set drops stores outside them (debug mode, which reports any access
# outside a tensor, sees none); the rank-0 result is written, read back and
# written again.
checked = TorchMetalKernel(
    "checked_get_set",
    ["x"],
    ["row", "total"],
    src="""
        const int n = x.get_extent(0);
        for (int i = 0; i < n; ++i) {
            row.set(x.get(i, 5) + x.get(i + n, 0) + x.get(-1, 0), i);
        }
        row.set(x.get(0, 0), n);
        row.set(x.get(0, 0), -1);
        for (int i = 0; i < n; ++i) total.set(total.get() * (i > 0) + row.get(i));
        total.set(total.get() * 2);
    """,
    torch_defn=row_and_sum,
)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])  # a Metal tensor, a strided view
def test_get_and_set_are_checked_and_broadcast(dtype):
    x = torch.arange(1, 6, dtype=dtype).reshape(1, 5)
    checked.debug = True
    call = {"threads_per_grid": (1, 1, 1), "threads_per_thread_group": (1, 1, 1)}
    row, total = checked(x, **call, result_shapes=[[5], []])
    assert torch.equal(row, x[0]) and total.item() == 30  # 2 * (1 + 2 + 3 + 4 + 5)


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

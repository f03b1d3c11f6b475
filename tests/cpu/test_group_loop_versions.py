"""The loop-mode group loop's versions give the same bits.

The compiled group loop has a copy for views whose dimension-0 strides are all
1 (vectorized; on x86-64 compiled for AVX2 or AVX-512 where the CPU has it,
with masked stores for a bounds check) and a copy for any strides; a kernel
whose metadata buffer is too long to copy (more than 128 entries, fixed by its
tensors' ranks) has instead one loop that reads the buffer in place.
Each launch below goes down one of them; the results are compared bit for bit
with torch, which does the same single float32 rounding per element.
"""

from __future__ import annotations

import torch
from support.cpu_launch import Scalar, Tensor, kernel

GID = [("id", "uint", "thread_position_in_grid")]
GID2 = [("gid", "uint2", "thread_position_in_grid")]


def _add_kernel():
    return kernel(
        "loop_versions_add",
        [Tensor("x"), Tensor("y")],
        [Tensor("out")],
        "if (id < out.get_extent(0)) out[id] = x[id] + y[id];",
        GID,
    )


def test_contiguous_views_with_a_rounded_up_grid() -> None:
    add = _add_kernel()
    n = 5000  # not a multiple of the group nor of any vector width
    x, y = torch.randn(n), torch.randn(n)
    (out,) = add(x, y, grid=(n + 120, 1, 1), group=(256, 1, 1), shapes=[[n]])
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)


def test_strided_view_takes_the_general_loop() -> None:
    add = _add_kernel()
    n = 3001
    x = torch.randn(3 * n)[::3]
    y = torch.randn(n)
    (out,) = add(x, y, grid=(n, 1, 1), group=(128, 1, 1), shapes=[[n]])
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)


def test_scalar_argument_and_two_dimensional_grid() -> None:
    axpy = kernel(
        "loop_versions_axpy",
        [Tensor("x", rank=2), Tensor("y", rank=2), Scalar("a", "float")],
        [Tensor("out", rank=2)],
        "if (gid.x < out.get_extent(0) && gid.y < out.get_extent(1))\n"
        "    out[gid.x, gid.y] = a * x[gid.x, gid.y] + y[gid.x, gid.y];",
        GID2,
    )
    x, y = torch.randn(37, 61), torch.randn(37, 61)
    for xs in (x, torch.randn(61, 37).t()):  # contiguous, then a transposed view
        (out,) = axpy(xs, y, 1.5, grid=(64, 40, 1), group=(16, 8, 1), shapes=[[37, 61]])
        # a * x rounds, then + y rounds: no fused multiply-add on either side.
        torch.testing.assert_close(out, torch.tensor(1.5) * xs + y, rtol=0, atol=0)


def test_metadata_longer_than_the_held_copy() -> None:
    # 17 rank-4 inputs and one result: 18 * 8 = 144 metadata entries.
    names = [f"t{i}" for i in range(17)]
    total = " + ".join(f"{name}[i, j, k, l]" for name in names)
    body = (
        "const uint i = id % 3, j = (id / 3) % 2, k = (id / 6) % 2, l = id / 12;\n"
        f"if (l < out.get_extent(3)) out[i, j, k, l] = {total};"
    )
    many = kernel(
        "loop_versions_many",
        [Tensor(name, rank=4) for name in names],
        [Tensor("out", rank=4)],
        body,
        GID,
    )
    inputs = [torch.randn(5, 2, 2, 3) for _ in names]
    (out,) = many(*inputs, grid=(64, 1, 1), group=(32, 1, 1), shapes=[[5, 2, 2, 3]])
    expected = inputs[0]
    for t in inputs[1:]:
        expected = expected + t  # the kernel adds left to right too
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_no_copy_fuses_a_multiply_add() -> None:
    # a = 1 + 2^-12: a * a = 1 + 2^-11 + 2^-24 exactly. A float product rounds
    # the 2^-24 away (a tie, to even), so a * a - 1 is 2^-11; a fused
    # multiply-add keeps it: 2^-11 + 2^-24. AVX-512 (on CPUs that have it)
    # and aarch64 have FMA instructions; none may be used.
    fmadd = kernel(
        "loop_versions_fmadd",
        [Tensor("x"), Tensor("y")],
        [Tensor("out")],
        "if (id < out.get_extent(0)) out[id] = x[id] * x[id] + y[id];",
        GID,
    )
    n = 1000
    x, y = torch.full((n,), 1 + 2**-12), torch.full((n,), -1.0)
    (out,) = fmadd(x, y, grid=(1024, 1, 1), group=(256, 1, 1), shapes=[[n]])
    torch.testing.assert_close(out, torch.full((n,), 2**-11), rtol=0, atol=0)
    torch.testing.assert_close(out, x * x + y, rtol=0, atol=0)

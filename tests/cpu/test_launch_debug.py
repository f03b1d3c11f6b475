"""Debug mode (option bit 0): bounds-checked tensor views and unwritten results."""

from __future__ import annotations

import pytest
import torch
from support.cpu_launch import Tensor, kernel

F32 = torch.float32
GID = [("id", "uint", "thread_position_in_grid")]


def test_out_of_bounds_read_names_the_tensor_index_and_extents() -> None:
    k = kernel("oob_read", [Tensor("x")], [Tensor("out")], "out[id] = x[id + 1];", GID, debug=True)
    pattern = (
        r"kernel 'oob_read': out-of-bounds access to tensor 'x': index \[8\] is outside its "
        r"extents \[8\] .*by the thread at thread_position_in_grid \(7, 0, 0\)"
    )
    with pytest.raises(RuntimeError, match=pattern):
        k(torch.ones(8), grid=(8, 1, 1), group=(4, 1, 1), shapes=[[8]])


def test_out_of_bounds_write_in_two_dimensions() -> None:
    k = kernel(
        "oob_write",
        [Tensor("x", rank=2)],
        [Tensor("out", rank=2)],
        "out[gid.x, gid.y + 1] = x[gid.x, gid.y];",
        [("gid", "uint2", "thread_position_in_grid")],
        debug=True,
    )
    # torch [3, 5]: Metal extents [5, 3]; the row gid.y = 2 writes to Metal index [x, 3].
    pattern = (
        r"tensor 'out': index \[0, 3\] is outside its extents \[5, 3\] \(Metal order: .* torch "
        r"shape is \[3, 5\]\), by the thread at thread_position_in_grid \(0, 2, 0\)\. The access "
        r"was skipped\. \(and 4 more"
    )
    with pytest.raises(RuntimeError, match=pattern):
        k(torch.ones(3, 5), grid=(5, 3, 1), group=(8, 1, 1), shapes=[[3, 5]])


def test_out_of_bounds_in_fiber_mode() -> None:
    k = kernel(
        "oob_fibers",
        [Tensor("x")],
        [Tensor("out")],
        """
        threadgroup float tile[16];
        tile[lid] = x[id];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        out[id] = tile[(lid + 1) % 16] + x[id * 2];
        """,
        [*GID, ("lid", "uint", "thread_index_in_threadgroup")],
        debug=True,
    )
    with pytest.raises(
        RuntimeError,
        match=r"tensor 'x': index \[(?P<i>\d+)\] is outside its extents \[16\].*position_in_grid "
        r"\((8|9|1[0-5]), 0, 0\)",
    ):
        k(torch.ones(16), grid=(16, 1, 1), group=(16, 1, 1), shapes=[[16]])


def test_unwritten_results_are_reported_with_their_first_indices() -> None:
    k = kernel(
        "partial",
        [Tensor("x", rank=2)],
        [Tensor("out", rank=2), Tensor("full")],
        "if (gid.y < 2) out[gid.x, gid.y] = x[gid.x, gid.y];\nfull[gid.x + gid.y * 4] = 1.0f;",
        [("gid", "uint2", "thread_position_in_grid")],
        debug=True,
    )
    pattern = (
        r"kernel 'partial': result 'out' \(shape \[3, 4\]\) has 4 of 12 elements that the kernel "
        r"never wrote; first at torch index \[2, 0\], \[2, 1\], \[2, 2\], \[2, 3\]"
    )
    with pytest.raises(RuntimeError, match=pattern) as info:
        k(torch.ones(3, 4), grid=(4, 3, 1), group=(4, 1, 1), shapes=[[3, 4], [12]])
    assert "'full'" not in str(info.value)


def test_a_kernel_that_writes_the_poison_pattern_is_not_blamed() -> None:
    # 0xA5A5A5A5 is the first run's fill; the second run's fill differs.
    k = kernel(
        "writes_poison",
        [],
        [Tensor("out", torch.int32)],
        "out[id] = int(0xA5A5A5A5u);",
        GID,
        debug=True,
    )
    (out,) = k(grid=(10, 1, 1), group=(4, 1, 1), shapes=[[10]])
    assert (out == torch.tensor(0xA5A5A5A5 - 2**32, dtype=torch.int32)).all()


def test_a_correct_kernel_runs_unchanged_in_debug_mode() -> None:
    k = kernel(
        "debug_ok",
        [Tensor("x", torch.float16, 2)],
        [Tensor("out", torch.float16, 2)],
        "out[gid.x, gid.y] = x[gid.x, gid.y] * x[gid.x, gid.y];",
        [("gid", "uint2", "thread_position_in_grid")],
        debug=True,
    )
    x = torch.randn(5, 7).to(torch.float16)
    (out,) = k(x, grid=(7, 5, 1), group=(4, 4, 1), shapes=[[5, 7]])
    torch.testing.assert_close(out, x * x, rtol=0, atol=0)

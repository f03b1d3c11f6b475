"""SIMD-group matrices on the CPU backend (coreai_msl/simdgroup_matrix.h).

The lane-to-element layout of thread_elements() is the one MLX's steel GEMM
relies on, written out in MLX's BaseMMAFrag<T, 8, 8>::get_coord
(mlx/backend/metal/kernels/steel/gemm/mma.h): for lane L, qid = L / 4, the
lane holds row (qid & 4) + (L / 2) % 4 and columns c, c + 1 with
c = (qid & 2) * 2 + (L % 2) * 2. The loads and stores follow the MSL
specification ("SIMD-group Matrix Functions"): elements_per_row is the source's
row length, matrix_origin is (column, row) of the block's first element, and a
transposed load reads the block as its transpose.
"""

from __future__ import annotations

import pytest
import torch
from support.kernel_testing import run_checked

from coreai_torch import MetalParameter, TorchMetalKernel

LANE = MetalParameter("lane", "uint", "thread_index_in_simdgroup")
SIMD_GROUP = MetalParameter("sg", "uint", "simdgroup_index_in_threadgroup")


def mlx_coord(lane: int) -> tuple[int, int]:
    """(row, first column) of lane's elements, as MLX's get_coord computes them."""
    qid = lane // 4
    return (qid & 4) + (lane // 2) % 4, (qid & 2) * 2 + (lane % 2) * 2


def _one_simdgroup(kernel: TorchMetalKernel, *args, shapes, opcheck: bool = False):
    return run_checked(
        kernel,
        *args,
        opcheck=opcheck,
        threads_per_grid=(32, 1, 1),
        threads_per_thread_group=(32, 1, 1),
        result_shapes=shapes,
    )


def _layout_shapes(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty(32, 2, dtype=x.dtype), torch.empty(8, 8)


def _strided_shapes(
    src: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.empty(8, 8), torch.empty(8, 8), torch.empty(16, 12), torch.empty(16, 12)


def _like_a(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(a)


layout_kernel = TorchMetalKernel(
    "sgm_layout",
    ["x"],
    ["elements", "stored"],
    src="""
    simdgroup_float8x8 m;
    simdgroup_load(m, x.get_data_ptr(), 8);
    elements[0, lane] = m.thread_elements()[0];
    elements[1, lane] = m.thread_elements()[1];
    // The other way: elements set by lane, then stored.
    simdgroup_float8x8 n;
    n.thread_elements() = float2(2 * lane, 2 * lane + 1);
    simdgroup_store(n, stored.get_data_ptr(), 8);
    """,
    torch_defn=_layout_shapes,
    metal_params=[LANE],
)


def test_thread_elements_follow_apples_lane_layout() -> None:
    x = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    elements, stored = _one_simdgroup(layout_kernel, x, shapes=[[32, 2], [8, 8]], opcheck=True)
    for lane in range(32):
        row, col = mlx_coord(lane)
        assert elements[lane].tolist() == [x[row, col].item(), x[row, col + 1].item()]
        assert stored[row, col].item() == 2 * lane
        assert stored[row, col + 1].item() == 2 * lane + 1


strided_kernel = TorchMetalKernel(
    "sgm_strided",
    ["src"],
    ["plain", "transposed", "stored", "stored_t"],
    src="""
    const ulong epr = src.get_extent(0);  // 12 elements per row
    simdgroup_float8x8 a, b;
    simdgroup_load(a, src.get_data_ptr(), epr, ulong2(3, 5));
    simdgroup_load(b, src.get_data_ptr(), epr, ulong2(3, 5), true);
    simdgroup_store(a, plain.get_data_ptr(), 8);
    simdgroup_store(b, transposed.get_data_ptr(), 8);
    // Stores at an origin of a 16 x 12 destination, then transposed, over
    // zeros (so that every element of the results is defined).
    for (uint i = lane; i < 16 * 12; i += 32) {
      stored.get_data_ptr()[i] = 0.0f;
      stored_t.get_data_ptr()[i] = 0.0f;
    }
    simdgroup_barrier(mem_flags::mem_device);
    simdgroup_store(a, stored.get_data_ptr(), 12, ulong2(2, 4));
    simdgroup_store(a, stored_t.get_data_ptr(), 12, ulong2(2, 4), true);
    """,
    torch_defn=_strided_shapes,
    metal_params=[LANE],
)


def test_load_and_store_with_stride_origin_and_transpose() -> None:
    src = torch.arange(16 * 12, dtype=torch.float32).reshape(16, 12)
    plain, transposed, stored, stored_t = _one_simdgroup(
        strided_kernel, src, shapes=[[8, 8], [8, 8], [16, 12], [16, 12]]
    )
    block = src[5:13, 3:11]  # origin (x=3, y=5): rows 5.., columns 3..
    torch.testing.assert_close(plain, block, rtol=0, atol=0)
    torch.testing.assert_close(transposed, block.T, rtol=0, atol=0)
    expected, expected_t = torch.zeros(16, 12), torch.zeros(16, 12)
    expected[4:12, 2:10] = block
    expected_t[4:12, 2:10] = block.T
    torch.testing.assert_close(stored, expected, rtol=0, atol=0)
    torch.testing.assert_close(stored_t, expected_t, rtol=0, atol=0)


def _mma_reference(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return (a.float() @ b.float() + c.float()).to(c.dtype)


mma_kernel = TorchMetalKernel(
    "sgm_mma",
    ["a", "b", "c"],
    ["d"],
    src="""
    simdgroup_matrix<AB, 8, 8> ma, mb;
    simdgroup_matrix<CD, 8, 8> mc;
    simdgroup_load(ma, a.get_data_ptr());
    simdgroup_load(mb, b.get_data_ptr());
    simdgroup_load(mc, c.get_data_ptr());
    simdgroup_multiply_accumulate(mc, ma, mb, mc);  // the destination aliases c
    simdgroup_store(mc, d.get_data_ptr());
    """,
    torch_defn=_mma_reference,
    metal_params=[LANE],
    template_dtypes={"a": "AB", "c": "CD"},
)


@pytest.mark.parametrize(
    ("ab", "cd"),
    [
        (torch.float32, torch.float32),
        (torch.float16, torch.float16),
        (torch.float16, torch.float32),  # ggml's kernel_mul_mm: half operands, float sums
        (torch.bfloat16, torch.float32),
        (torch.bfloat16, torch.bfloat16),
    ],
)
def test_multiply_accumulate(ab: torch.dtype, cd: torch.dtype) -> None:
    g = torch.Generator().manual_seed(3)
    a, b = (torch.randn(8, 8, generator=g).to(ab) for _ in range(2))
    c = torch.randn(8, 8, generator=g).to(cd)
    (d,) = [_one_simdgroup(mma_kernel, a, b, c, shapes=[[8, 8]], opcheck=ab == torch.float16)]
    # Each element is 8 products summed in float and rounded once to the
    # result type: within float32 reordering error for float results, and one
    # rounding of the result type otherwise.
    tol = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}[cd]
    torch.testing.assert_close(d, _mma_reference(a, b, c), rtol=tol, atol=tol)


products_kernel = TorchMetalKernel(
    "sgm_products",
    ["a", "b"],
    ["products"],
    src="""
    // Two SIMD-groups, each with its own pair of matrices.
    simdgroup_float8x8 ma, mb, mc;
    simdgroup_load(ma, a.get_data_ptr() + 64 * sg);
    simdgroup_load(mb, b.get_data_ptr() + 64 * sg);
    simdgroup_multiply(mc, ma, mb);
    simdgroup_float8x8 twice = simdgroup_float8x8(2.0f);  // 2 on the diagonal
    simdgroup_float8x8 ones = make_filled_simdgroup_matrix<float, 8>(1.0f);
    simdgroup_multiply_accumulate(mc, mc, twice, ones);    // 2 * a * b + 1
    simdgroup_store(mc, products.get_data_ptr() + 64 * sg);
    """,
    torch_defn=_like_a,
    metal_params=[LANE, SIMD_GROUP],
)


def test_simdgroups_multiply_independently_and_constructors() -> None:
    g = torch.Generator().manual_seed(4)
    a, b = (torch.randint(-4, 5, (2, 8, 8), generator=g).float() for _ in range(2))
    out = run_checked(
        products_kernel,
        a,
        b,
        threads_per_grid=(64, 1, 1),
        threads_per_thread_group=(64, 1, 1),
        result_shapes=[[2, 8, 8]],
    )
    # Small integers: every product and sum is exact.
    torch.testing.assert_close(out, 2 * (a @ b) + 1, rtol=0, atol=0)

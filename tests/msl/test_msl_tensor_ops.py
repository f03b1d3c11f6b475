"""Metal 4 tensor views and MetalPerformancePrimitives on the CPU backend.

What is pinned, and where it comes from:
- Slices (Apple's MPPTensorOpsMatMul2d.h documentation): `A.slice(x, y)` has
  A's extents with its origin moved, so mA[x, y] == A[x0 + x, y0 + y];
  `slice<W, H>(x, y)` / `static_slice` give static extents, a dynamic_extent
  taking what remains. A view built from a pointer deduces its element type
  (`tensor(ptr, dextents<int32_t, 2>(...))`, as llama.cpp's kernel_mul_mm does).
- matmul2d (the same header): C (m x n) = A (m x k) * B (k x n) with tensors
  in Metal order, A's extents (k, m) or (m, k) when transposed, B's (n, k) or
  (k, n), the destination's (n, m); k = dynamic_extent reads K from A;
  multiply_accumulate adds to the destination; execution_thread,
  execution_simdgroup and execution_simdgroups<N> scopes.
- Cooperative tensors: the accessors Apple documents (get_capacity, get_mask,
  is_valid_element, operator[], get_multidimensional_index as {column, row},
  begin/end, load, store, reduce_rows, reduce_columns) and the ownership this
  implementation defines (coreai_msl/cooperative_tensor.h): the scope's T
  threads own linear tile elements t, t + T, ... in row-major order.
"""

from __future__ import annotations

import math

import pytest
import torch
from support.kernel_testing import backend_defined_results, run_checked

from coreai_torch import MetalParameter, TorchMetalKernel

TG = MetalParameter("tg", "uint2", "threadgroup_position_in_grid")
TID = MetalParameter("tid", "uint", "thread_index_in_threadgroup")
SG = MetalParameter("sg", "uint", "simdgroup_index_in_threadgroup")

# float32 sums of products of values drawn from randn, K <= 40: reordering
# between the reference and the kernel moves each result by a few ulps of the
# largest partial sum (|sum| < ~30), well under 1e-4.
FLOAT_TOL = {"rtol": 1e-5, "atol": 1e-4}


def _three_like(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)


slice_kernel = TorchMetalKernel(
    "tensor_slices",
    ["x"],
    ["dyn", "win", "deduced"],
    src="""
    // x is torch [6, 10]: Metal extents (10, 6).
    auto s = x.slice(3, 2);                         // extents (7, 4)
    auto w = x.slice<4, dynamic_extent>(5, 1);      // extents (4, 5)
    auto t = tensor(x.get_data_ptr(), dextents<int32_t, 2>(5, 12));  // a packed 5 x 12 view
    for (int j = 0; j < 6; ++j)
      for (int i = 0; i < 10; ++i) {
        dyn[i, j] = (i < int(s.get_extent(0)) && j < int(s.get_extent(1))) ? s[i, j] : -1.0f;
        win[i, j] = (i < int(w.get_extent(0)) && j < int(w.get_extent(1))) ? w[i, j] : -1.0f;
        deduced[i, j] = t[(j * 10 + i) % 5, (j * 10 + i) / 5];
      }
    """,
    torch_defn=_three_like,
)


def test_slices_and_deduced_views() -> None:
    x = torch.arange(60, dtype=torch.float32).reshape(6, 10)
    dyn, win, deduced = run_checked(
        slice_kernel,
        x,
        threads_per_grid=(1, 1, 1),
        threads_per_thread_group=(1, 1, 1),
        result_shapes=[[6, 10]] * 3,
    )
    want_dyn = torch.full((6, 10), -1.0)
    want_dyn[:4, :7] = x[2:, 3:]
    want_win = torch.full((6, 10), -1.0)
    want_win[:5, :4] = x[1:, 5:9]
    torch.testing.assert_close(dyn, want_dyn, rtol=0, atol=0)
    torch.testing.assert_close(win, want_win, rtol=0, atol=0)
    torch.testing.assert_close(deduced, x, rtol=0, atol=0)


# ---------------------------------------------------------------- matmul2d


def _matmul_kernel(name: str, transpose_a: bool, transpose_b: bool, scope: str) -> TorchMetalKernel:
    tl, tr = ("true" if t else "false" for t in (transpose_a, transpose_b))
    return TorchMetalKernel(
        name,
        ["a", "b"],
        ["c"],
        src=f"""
        constexpr auto desc = matmul2d_descriptor(16, 8, static_cast<int>(dynamic_extent),
                                                  {tl}, {tr});
        matmul2d<desc, {scope}> op;
        auto mA = {tl} ? a.slice(tg.y * 16, 0) : a.slice(0, tg.y * 16);
        auto mB = {tr} ? b.slice(0, tg.x * 8) : b.slice(tg.x * 8, 0);
        auto mC = c.slice(tg.x * 8, tg.y * 16);
        op.run(mA, mB, mC);
        """,
        torch_defn=_transposed_matmul(transpose_a, transpose_b),
        metal_params=[TG],
    )


def _transposed_matmul(transpose_a: bool, transpose_b: bool):
    def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a.T if transpose_a else a).float() @ (b.T if transpose_b else b).float()

    return reference


# Each scope, its threads per group and a short name for the kernel.
SCOPES = {
    "execution_simdgroups<2>": (64, "two_sg"),
    "execution_simdgroup": (32, "one_sg"),
    "execution_thread": (1, "thread"),
}
MATMUL_CASES = {
    (ta, tb, scope): _matmul_kernel(f"mpp_mm_{ta:d}{tb:d}_{SCOPES[scope][1]}", ta, tb, scope)
    for ta, tb, scope in [
        (False, False, "execution_simdgroups<2>"),
        (True, False, "execution_simdgroups<2>"),
        (False, True, "execution_simdgroups<2>"),
        (True, True, "execution_simdgroups<2>"),
        (False, False, "execution_simdgroup"),
        (False, False, "execution_thread"),
    ]
}


@pytest.mark.parametrize("case", list(MATMUL_CASES), ids=lambda c: f"{c[0]:d}{c[1]:d}-{c[2]}")
@pytest.mark.parametrize(("m", "n", "k"), [(32, 16, 24), (21, 13, 7)])
def test_matmul2d_into_a_tensor(case: tuple, m: int, n: int, k: int) -> None:
    transpose_a, transpose_b, scope = case
    g = torch.Generator().manual_seed(m * n + k)
    a = torch.randn(m, k, generator=g)
    b = torch.randn(k, n, generator=g)
    a_in = a.T.contiguous() if transpose_a else a
    b_in = b.T.contiguous() if transpose_b else b
    threads = SCOPES[scope][0]
    c = run_checked(
        MATMUL_CASES[case],
        a_in,
        b_in,
        opcheck=case == (False, False, "execution_simdgroups<2>"),
        threads_per_grid=(threads * math.ceil(n / 8), math.ceil(m / 16), 1),
        threads_per_thread_group=(threads, 1, 1),
        result_shapes=[[m, n]],
    )
    torch.testing.assert_close(c, a @ b, **FLOAT_TOL)


k_loop_kernel = TorchMetalKernel(
    "mpp_k_loop",
    ["a", "b"],
    ["c"],
    src="""
    // Apple's documented K loop: a static tile k of 8, multiply_accumulate,
    // the last partial tile read as zeros past K. C starts as the first tile's product.
    constexpr auto first = matmul2d_descriptor(16, 8, 8, false, false, false);
    constexpr auto rest = matmul2d_descriptor(16, 8, 8, false, false, false,
                                              matmul2d_descriptor::mode::multiply_accumulate);
    matmul2d<first, execution_simdgroups<2>> op0;
    matmul2d<rest, execution_simdgroups<2>> op;
    auto mC = c.slice(tg.x * 8, tg.y * 16);
    op0.run(a.slice(0, tg.y * 16), b.slice(tg.x * 8, 0), mC);
    for (int k = 8; k < int(a.get_extent(0)); k += 8) {
      op.run(a.slice(k, tg.y * 16), b.slice(tg.x * 8, k), mC);
    }
    """,
    torch_defn=_transposed_matmul(False, False),
    metal_params=[TG],
)


def test_matmul2d_accumulates_over_a_k_loop() -> None:
    g = torch.Generator().manual_seed(7)
    a, b = torch.randn(20, 21, generator=g), torch.randn(21, 11, generator=g)
    c = run_checked(
        k_loop_kernel,
        a,
        b,
        opcheck=False,
        threads_per_grid=(128, 2, 1),
        threads_per_thread_group=(64, 1, 1),
        result_shapes=[[20, 11]],
    )
    torch.testing.assert_close(c, a @ b, **FLOAT_TOL)


def _ownership_shapes(
    a: torch.Tensor, b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (
        torch.empty(64, 2, 3, dtype=torch.int32),
        torch.empty(a.shape[0], b.shape[1]),
        torch.empty(a.shape[0], b.shape[1]),
    )


ownership_kernel = TorchMetalKernel(
    "coop_ownership",
    ["a", "b"],
    ["owned", "c", "epilogue"],
    src="""
    constexpr auto desc = matmul2d_descriptor(16, 8, static_cast<int>(dynamic_extent));
    matmul2d<desc, execution_simdgroups<2>> op;
    auto mA = a.slice(0, tg.y * 16);
    auto mB = b.slice(tg.x * 8, 0);
    auto cT = op.get_destination_cooperative_tensor<decltype(mA), decltype(mB), float>();
    op.run(mA, mB, cT);
    if (tg.x == 1 && tg.y == 1) {  // the edge tile: rows 16..19, columns 8..11
      for (int i = 0; i < 2; ++i) {
        owned[0, i, tid] = i < cT.get_capacity() ? int(cT.get_mask(i)) : -1;
        owned[1, i, tid] = cT.get_multidimensional_index(i)[0];
        owned[2, i, tid] = cT.get_multidimensional_index(i)[1];
      }
    }
    cT.store(c.slice(tg.x * 8, tg.y * 16));
    // Apple's epilogue example: load a bias with the same layout, add, store.
    auto bias = op.get_destination_cooperative_tensor<decltype(mA), decltype(mB), float>();
    bias.load(c.slice(tg.x * 8, tg.y * 16));
    for (auto it = cT.begin(); it != cT.end(); ++it) {
      const int i = it.index();
      if (cT.is_valid_element(i)) *it = 2.0f * (*it) + bias[i] + it.get_multidimensional_index()[1];
    }
    cT.store(epilogue.slice(tg.x * 8, tg.y * 16));
    """,
    torch_defn=_ownership_shapes,
    metal_params=[TG, TID],
)


def test_cooperative_tensor_ownership_masks_and_epilogue() -> None:
    g = torch.Generator().manual_seed(11)
    a, b = torch.randn(20, 9, generator=g), torch.randn(9, 12, generator=g)
    # Which thread owns which element is each backend's choice: the checks
    # below hold for any valid ownership.
    with backend_defined_results(0):
        owned, c, epilogue = run_checked(
            ownership_kernel,
            a,
            b,
            opcheck=False,
            threads_per_grid=(128, 2, 1),
            threads_per_thread_group=(64, 1, 1),
            result_shapes=[[64, 2, 3], [20, 12], [20, 12]],
        )
    want = a @ b
    torch.testing.assert_close(c, want, **FLOAT_TOL)
    rows = torch.arange(20, dtype=torch.float32)[:, None]
    torch.testing.assert_close(epilogue, 3 * want + (rows % 16), **FLOAT_TOL)

    # 16 x 8 tile over 64 threads: capacity 2; every tile element belongs to
    # exactly one (thread, slot), and a thread's two elements are 64 apart.
    linear = owned[:, :, 2] * 8 + owned[:, :, 1]
    assert sorted(linear.flatten().tolist()) == list(range(128))
    assert (linear[:, 1] - linear[:, 0]).eq(64).all()
    # The edge tile holds 4 x 4 valid elements (rows 16..19, columns 8..11).
    valid = (owned[:, :, 2] < 4) & (owned[:, :, 1] < 4)
    assert owned[:, :, 0].bool().eq(valid).all()


def _reduction_shapes(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty(a.shape[0]), torch.empty(b.shape[1])


def _reduction_kernel(scope: str, threads_name: str) -> TorchMetalKernel:
    return TorchMetalKernel(
        f"coop_reductions_{threads_name}",
        ["a", "b"],
        ["row_sums", "column_max"],
        src=f"""
        constexpr auto desc = matmul2d_descriptor(16, 8, static_cast<int>(dynamic_extent));
        matmul2d<desc, {scope}> op;
        auto mA = a.slice(0, 0);
        auto mB = b.slice(0, 0);
        auto cT = op.get_destination_cooperative_tensor<decltype(mA), decltype(mB), float>();
        op.run(mA, mB, cT);
        using A = decltype(mA);
        using B = decltype(mB);
        auto rows = op.get_row_reduction_destination_cooperative_tensor<A, B, float>();
        auto cols = op.get_column_reduction_destination_cooperative_tensor<A, B, float>();
        reduce_rows(cT, rows);
        reduce_columns(cT, cols, reduction_operation::max,
                       reduction_operation_identity<float>::max_identity);
        rows.store(row_sums);
        cols.store(column_max);
        """,
        torch_defn=_reduction_shapes,
    )


REDUCTIONS = {
    scope: (_reduction_kernel(scope, name), threads) for scope, (threads, name) in SCOPES.items()
}


@pytest.mark.parametrize("scope", list(REDUCTIONS))
def test_cooperative_reductions(scope: str) -> None:
    kernel, threads = REDUCTIONS[scope]
    g = torch.Generator().manual_seed(5)
    # A 13 x 6 product in a 16 x 8 tile: rows and columns past it are invalid
    # and take no part.
    a, b = torch.randn(13, 5, generator=g), torch.randn(5, 6, generator=g)
    row_sums, column_max = run_checked(
        kernel,
        a,
        b,
        opcheck=False,
        threads_per_grid=(threads, 1, 1),
        threads_per_thread_group=(threads, 1, 1),
        result_shapes=[[13], [6]],
    )
    torch.testing.assert_close(row_sums, (a @ b).sum(1), **FLOAT_TOL)
    torch.testing.assert_close(column_max, (a @ b).amax(0), **FLOAT_TOL)

"""MLX's Metal kernels on the CPU backend: steel GEMM, affine quantization,
block sort and scatter with an atomic maximum.

Source: github.com/ml-explore/mlx at 846d176227a0ac13d2667e58d2bb68b322109ab0
(MIT license), mlx/backend/metal/kernels/. The helper code of each kernel is
in tests/corpus/mlx/*.metal, unchanged; each kernel's body below is MLX's own
with its signature adapted to the TorchMetalKernel convention: the buffers
become the tensor views' data, the parameter structs MLX's host code fills in
are filled in from the tensors' extents the same way, and function constants
become values (constexpr where MLX's host sets them per kernel, plain values
where they depend on the shape).
"""

from __future__ import annotations

import math

import pytest
import torch
from corpus_support import helper_source, launch, randn

from coreai_torch import MetalParameter, TorchMetalKernel

# ------------------------------------------------------------------ steel GEMM
#
# mlx/backend/metal/kernels/steel/gemm/kernels/steel_gemm_fused.h, kernel
# `gemm<T, BM, BN, BK, WM, WN, transpose_a, transpose_b, AccumType>`, as
# instantiated by steel_gemm_fused.metal (bm 32, bn 32, bk 16, wm 2, wn 2,
# float accumulators) for float32, float16 and bfloat16. MLX also instantiates
# it for complex64, a dtype TorchMetalKernel does not take.

GEMM_HELPERS = helper_source("mlx/steel_gemm.metal")

GEMM_PROLOGUE = """
using namespace mlx::steel;  // steel_gemm_fused.h's first line
// The kernel's template arguments and function constants, as MLX's host code
// (mlx/backend/metal/matmul.cpp) sets them for a plain matmul.
using T = ELEM;
constexpr int BM = 32, BN = 32, BK = 16, WM = 2, WN = 2;
constexpr bool transpose_a = TRANSPOSE_A, transpose_b = TRANSPOSE_B;
using AccumType = float;
constexpr bool has_batch = false, use_out_source = false, do_axpby = false;
const int M = d.get_extent(1), N = d.get_extent(0);
const int K = transpose_a ? a.get_extent(1) : a.get_extent(0);
const bool align_M = (M % BM) == 0, align_N = (N % BN) == 0, align_K = (K % BK) == 0;
// The buffers.
const device T* A = a.get_data_ptr();
const device T* B = b.get_data_ptr();
const device T* C = nullptr;
device T* D = d.get_data_ptr();
const GEMMParams params_value = {
    M, N, K, int(a.get_extent(0)), int(b.get_extent(0)), N,
    (N + BN - 1) / BN, (M + BM - 1) / BM, 0, 0, 0, /*swizzle_log=*/0, K / BK, 0};
thread const GEMMParams* params = &params_value;
const GEMMAddMMParams addmm_value = {0, 0, 0, 1.0f, 0.0f};
thread const GEMMAddMMParams* addmm_params = &addmm_value;
const constant int* batch_shape = nullptr;
const constant int64_t* batch_strides = nullptr;
"""

GEMM_BODY = """
  // Pacifying compiler
  (void)lid;

  using gemm_kernel = GEMMKernel<
      T,
      T,
      BM,
      BN,
      BK,
      WM,
      WN,
      transpose_a,
      transpose_b,
      true,
      true,
      AccumType>;

  using loader_a_t = typename gemm_kernel::loader_a_t;
  using loader_b_t = typename gemm_kernel::loader_b_t;
  using mma_t = typename gemm_kernel::mma_t;

  // Find block
  const int tid_y = ((tid.y) << params->swizzle_log) +
      ((tid.x) & ((1 << params->swizzle_log) - 1));
  const int tid_x = (tid.x) >> params->swizzle_log;

  // Exit early if out of bounds
  if (params->tiles_n <= tid_x || params->tiles_m <= tid_y) {
    return;
  }

  // Adjust for batch
  if (has_batch) {
    const constant auto* A_bstrides = batch_strides;
    const constant auto* B_bstrides = batch_strides + params->batch_ndim;

    ulong2 batch_offsets = elem_to_loc_broadcast(
        tid.z, batch_shape, A_bstrides, B_bstrides, params->batch_ndim);

    A += batch_offsets.x;
    B += batch_offsets.y;

    if (use_out_source) {
      const constant auto* C_bstrides = B_bstrides + params->batch_ndim;
      C += elem_to_loc(tid.z, batch_shape, C_bstrides, params->batch_ndim);
    }
  } else {
    A += params->batch_stride_a * tid.z;
    B += params->batch_stride_b * tid.z;

    if (use_out_source) {
      C += addmm_params->batch_stride_c * tid.z;
    }
  }

  D += params->batch_stride_d * tid.z;

  // Prepare threadgroup memory
  threadgroup T As[gemm_kernel::tgp_mem_size_a];
  threadgroup T Bs[gemm_kernel::tgp_mem_size_b];

  threadgroup_barrier(mem_flags::mem_none);

  // Find block in A, B, C
  const int c_row = tid_y * BM;
  const int c_col = tid_x * BN;
  const size_t c_row_long = size_t(c_row);
  const size_t c_col_long = size_t(c_col);

  A += transpose_a ? c_row_long : c_row_long * params->lda;
  B += transpose_b ? c_col_long * params->ldb : c_col_long;
  D += c_row_long * params->ldd + c_col_long;

  if (use_out_source) {
    C += c_row_long * addmm_params->ldc + c_col_long * addmm_params->fdc;
  }

  // Prepare threadgroup mma operation
  thread mma_t mma_op(simd_group_id, simd_lane_id);

  // Prepare threadgroup loading operations
  thread loader_a_t loader_a(A, params->lda, As, simd_group_id, simd_lane_id);
  thread loader_b_t loader_b(B, params->ldb, Bs, simd_group_id, simd_lane_id);

  // Prepare threadgroup bounds
  const short tgp_bm = align_M ? BM : short(min(BM, params->M - c_row));
  const short tgp_bn = align_N ? BN : short(min(BN, params->N - c_col));

  // Prepare iterations
  int gemm_k_iterations = params->gemm_k_iterations_aligned;

  // Do unaligned K iterations first
  if (!align_K) {
    const int k_last = params->gemm_k_iterations_aligned * BK;
    const int k_remain = params->K - k_last;
    const size_t k_jump_a =
        transpose_a ? params->lda * size_t(k_last) : size_t(k_last);
    const size_t k_jump_b =
        transpose_b ? size_t(k_last) : params->ldb * size_t(k_last);

    // Move loader source ahead to end
    loader_a.src += k_jump_a;
    loader_b.src += k_jump_b;

    // Load tile
    const short2 tile_dims_A =
        transpose_a ? short2(tgp_bm, k_remain) : short2(k_remain, tgp_bm);
    const short2 tile_dims_B =
        transpose_b ? short2(k_remain, tgp_bn) : short2(tgp_bn, k_remain);

    loader_a.load_safe(tile_dims_A);
    loader_b.load_safe(tile_dims_B);

    threadgroup_barrier(mem_flags::mem_threadgroup);

    // Do matmul
    mma_op.mma(As, Bs);

    // Reset source back to start
    loader_a.src -= k_jump_a;
    loader_b.src -= k_jump_b;
  }

  const TransformAdd<AccumType, AccumType> epilogue_op_add(
      addmm_params->alpha, addmm_params->beta);
  const TransformAxpby<AccumType, AccumType> epilogue_op_axpby(
      addmm_params->alpha, addmm_params->beta);

  ///////////////////////////////////////////////////////////////////////////////
  // MNK aligned loop
  if (align_M && align_N) {
    // Do gemm
    for (int k = 0; k < gemm_k_iterations; k++) {
      threadgroup_barrier(mem_flags::mem_threadgroup);
      // Load elements into threadgroup
      loader_a.load_unsafe();
      loader_b.load_unsafe();

      threadgroup_barrier(mem_flags::mem_threadgroup);

      // Multiply and accumulate threadgroup elements
      mma_op.mma(As, Bs);

      // Prepare for next iteration
      loader_a.next();
      loader_b.next();
    }

    threadgroup_barrier(mem_flags::mem_none);

    // Do epilogue
    if (use_out_source) {
      if (do_axpby) {
        mma_op.apply_epilogue(
            C, addmm_params->ldc, addmm_params->fdc, epilogue_op_axpby);
      } else {
        mma_op.apply_epilogue(
            C, addmm_params->ldc, addmm_params->fdc, epilogue_op_add);
      }
    }

    // Store results to device memory
    return mma_op.store_result(D, params->ldd);

  }
  ///////////////////////////////////////////////////////////////////////////////
  // MN unaligned loop
  else { // Loop over K - unaligned case
    const int leftover_bk = 0;

    if ((align_M || tgp_bm == BM) && (align_N || tgp_bn == BN)) {
      // Do gemm
      gemm_kernel::gemm_loop(
          As,
          Bs,
          gemm_k_iterations,
          loader_a,
          loader_b,
          mma_op,
          tgp_bm,
          tgp_bn,
          leftover_bk,
          LoopAlignment<true, true, true>{});

      // Do epilogue
      if (use_out_source) {
        if (do_axpby) {
          mma_op.apply_epilogue(
              C, addmm_params->ldc, addmm_params->fdc, epilogue_op_axpby);
        } else {
          mma_op.apply_epilogue(
              C, addmm_params->ldc, addmm_params->fdc, epilogue_op_add);
        }
      }

      // Store results to device memory
      return mma_op.store_result(D, params->ldd);

    } else if (align_N || tgp_bn == BN) {
      gemm_kernel::gemm_loop(
          As,
          Bs,
          gemm_k_iterations,
          loader_a,
          loader_b,
          mma_op,
          tgp_bm,
          tgp_bn,
          leftover_bk,
          LoopAlignment<false, true, true>{});

      // Do epilogue
      if (use_out_source) {
        if (do_axpby) {
          mma_op.apply_epilogue_safe(
              C,
              addmm_params->ldc,
              addmm_params->fdc,
              short2(tgp_bn, tgp_bm),
              epilogue_op_axpby);
        } else {
          mma_op.apply_epilogue_safe(
              C,
              addmm_params->ldc,
              addmm_params->fdc,
              short2(tgp_bn, tgp_bm),
              epilogue_op_add);
        }
      }

      // Store results to device memory
      return mma_op.store_result_safe(D, params->ldd, short2(tgp_bn, tgp_bm));

    } else if (align_M || tgp_bm == BM) {
      gemm_kernel::gemm_loop(
          As,
          Bs,
          gemm_k_iterations,
          loader_a,
          loader_b,
          mma_op,
          tgp_bm,
          tgp_bn,
          leftover_bk,
          LoopAlignment<true, false, true>{});

      // Do epilogue
      if (use_out_source) {
        if (do_axpby) {
          mma_op.apply_epilogue_safe(
              C,
              addmm_params->ldc,
              addmm_params->fdc,
              short2(tgp_bn, tgp_bm),
              epilogue_op_axpby);
        } else {
          mma_op.apply_epilogue_safe(
              C,
              addmm_params->ldc,
              addmm_params->fdc,
              short2(tgp_bn, tgp_bm),
              epilogue_op_add);
        }
      }

      // Store results to device memory
      return mma_op.store_result_safe(D, params->ldd, short2(tgp_bn, tgp_bm));

    } else {
      gemm_kernel::gemm_loop(
          As,
          Bs,
          gemm_k_iterations,
          loader_a,
          loader_b,
          mma_op,
          tgp_bm,
          tgp_bn,
          leftover_bk,
          LoopAlignment<false, false, true>{});

      // Do epilogue
      if (use_out_source) {
        if (do_axpby) {
          mma_op.apply_epilogue_safe(
              C,
              addmm_params->ldc,
              addmm_params->fdc,
              short2(tgp_bn, tgp_bm),
              epilogue_op_axpby);
        } else {
          mma_op.apply_epilogue_safe(
              C,
              addmm_params->ldc,
              addmm_params->fdc,
              short2(tgp_bn, tgp_bm),
              epilogue_op_add);
        }
      }

      // Store results to device memory
      return mma_op.store_result_safe(D, params->ldd, short2(tgp_bn, tgp_bm));
    }
  }
"""


def _gemm_reference(transpose_a: bool, transpose_b: bool):
    def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a32 = (a.T if transpose_a else a).float()
        b32 = (b.T if transpose_b else b).float()
        return (a32 @ b32).to(a.dtype)

    return reference


def _gemm_kernel(transpose_a: bool, transpose_b: bool) -> TorchMetalKernel:
    flags = {"TRANSPOSE_A": transpose_a, "TRANSPOSE_B": transpose_b}
    prologue = GEMM_PROLOGUE
    for name, value in flags.items():
        prologue = prologue.replace(name, "true" if value else "false")
    return TorchMetalKernel(
        f"mlx_steel_gemm_{'tn'[transpose_a]}{'tn'[transpose_b]}",
        ["a", "b"],
        ["d"],
        src=prologue + GEMM_BODY,
        helper_src=GEMM_HELPERS,
        torch_defn=_gemm_reference(transpose_a, transpose_b),
        metal_params=[
            MetalParameter("simd_lane_id", "uint", "thread_index_in_simdgroup"),
            MetalParameter("simd_group_id", "uint", "simdgroup_index_in_threadgroup"),
            MetalParameter("tid", "uint3", "threadgroup_position_in_grid"),
            MetalParameter("lid", "uint3", "thread_position_in_threadgroup"),
        ],
        template_dtypes={"a": "ELEM"},
    )


GEMM_KERNELS = {(ta, tb): _gemm_kernel(ta, tb) for ta in (False, True) for tb in (False, True)}

# float32: sums of K products of randn values accumulated in float32 in
# another order than torch's. float16/bfloat16: the same float sums, then one
# rounding of the result to the element type (2^-11 / 2^-8 relative).
GEMM_TOL = {
    torch.float32: {"rtol": 1e-5, "atol": 1e-4},
    torch.float16: {"rtol": 1e-3, "atol": 2e-3},
    torch.bfloat16: {"rtol": 8e-3, "atol": 1.6e-2},
}


def _run_gemm(m: int, n: int, k: int, dtype: torch.dtype, ta: bool, tb: bool, opcheck: bool):
    a = randn(m, k, dtype=dtype, seed=m + k)
    b = randn(k, n, dtype=dtype, seed=n + k)
    a_in = a.T.contiguous() if ta else a
    b_in = b.T.contiguous() if tb else b
    # MLX's grid: (tiles_n, tiles_m) threadgroups of (32, wn, wm) threads.
    d = launch(
        GEMM_KERNELS[ta, tb],
        a_in,
        b_in,
        grid=(32 * math.ceil(n / 32), 2 * math.ceil(m / 32), 2),
        group=(32, 2, 2),
        shapes=[[m, n]],
        opcheck=opcheck,
    )
    want = (a.float() @ b.float()).to(dtype)
    torch.testing.assert_close(d, want, **GEMM_TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("m", "n", "k"), [(64, 64, 32), (50, 37, 29)])
def test_mlx_steel_gemm(dtype: torch.dtype, m: int, n: int, k: int) -> None:
    _run_gemm(m, n, k, dtype, False, False, opcheck=(m, dtype) == (64, torch.float32))


@pytest.mark.parametrize(("ta", "tb"), [(True, False), (False, True), (True, True)])
def test_mlx_steel_gemm_transposed(ta: bool, tb: bool) -> None:
    _run_gemm(45, 70, 33, torch.float32, ta, tb, opcheck=False)

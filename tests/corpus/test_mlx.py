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

# Every kernel here also runs clean under debug mode's checks (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("default_and_debug_mode")

# ------------------------------------------------------------------ steel GEMM
#
# mlx/backend/metal/kernels/steel/gemm/kernels/steel_gemm_fused.h, kernel
# `gemm<T, BM, BN, BK, WM, WN, transpose_a, transpose_b, AccumType>`, as
# instantiated by steel_gemm_fused.metal (bm 32, bn 32, bk 16, wm 2, wn 2,
# float accumulators) for float32, float16 and bfloat16. MLX also instantiates
# it for complex64, a dtype TorchMetalKernel does not take.

GEMM_HELPERS = helper_source("mlx/common.metal", "mlx/steel_gemm.metal")

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


# ------------------------------------------------------- affine quantization
#
# mlx/backend/metal/kernels/quantized.h, kernels `affine_quantize` and
# `affine_dequantize<T, group_size, bits>`, as quantized.metal instantiates
# them for float32, float16 and bfloat16, group sizes 32, 64 and 128 and 2 to 8
# bits. The reference below is MLX's documented affine scheme (w ~ scale * q +
# bias per group, scale and bias from the group's range with 0 exactly
# representable), computed in float32 as the kernel computes it.

QUANT_HELPERS = helper_source("mlx/common.metal", "mlx/quantized.metal")

QUANTIZE_BODY = """
using T = ELEM;
constexpr int group_size = GROUP_SIZE, bits = BITS;
const device T* w = w_in.get_data_ptr();
device uint8_t* out = packed.get_data_ptr();
device T* scales = scales_out.get_data_ptr();
device T* biases = biases_out.get_data_ptr();
  constexpr float eps = 1e-7;
  constexpr int simd_size = 32;
  constexpr float n_bins = (1 << bits) - 1;
  constexpr int pack_factor = get_pack_factor<bits, 8>();
  constexpr int bytes_per_pack = get_bytes_per_pack<bits>();
  constexpr int values_per_reduce = group_size / simd_size;
  constexpr int writes_per_reduce = pack_factor / values_per_reduce;
  constexpr int writes_per_pack =
      writes_per_reduce > 1 ? 1 : values_per_reduce / pack_factor;
  constexpr int power_of_2_bits = (bits & (bits - 1)) == 0;

  static_assert(
      group_size % simd_size == 0,
      "Group size must be divisible by simd size.");

  size_t offset = index.x + grid_dim.x * size_t(index.y);
  size_t in_index = offset * values_per_reduce;
  size_t out_index = power_of_2_bits
      ? offset * writes_per_pack
      : offset * bytes_per_pack / writes_per_reduce;

  float w_thread[values_per_reduce];
  float w_min = Limits<T>::max;
  float w_max = 0;

#pragma clang loop unroll(full)
  for (int i = 0; i < values_per_reduce; i++) {
    float val = w[in_index + i];
    w_thread[i] = val;
    w_min = min(w_min, val);
    w_max = max(w_max, val);
  }

  w_min = simd_min(w_min);
  w_max = simd_max(w_max);

  float scale = max((w_max - w_min) / n_bins, eps);
  bool side = abs(w_min) > abs(w_max);
  scale = side ? scale : -scale;
  float edge = side ? w_min : w_max;
  float q0 = round(edge / scale);
  bool at_zero = q0 == 0.0f;
  scale = at_zero ? scale : edge / q0;
  float bias = at_zero ? 0 : edge;

  // Write out the scales and biases
  size_t gindex = in_index / group_size;
  if (in_index % group_size == 0) {
    scales[gindex] = static_cast<T>(scale);
    biases[gindex] = static_cast<T>(bias);
  }

  using OutType = metal::conditional_t<bits == 5, uint64_t, uint32_t>;
  OutType output = 0;

#pragma clang loop unroll(full)
  for (int i = 0; i < values_per_reduce; i++) {
    uint8_t val = min(round((w_thread[i] - bias) / scale), n_bins);
    if (bits == 8) {
      output = val;
    } else {
      output |= val << (bits * (i % pack_factor));
    }

    if (pack_factor < values_per_reduce && i % pack_factor == pack_factor - 1) {
      out[out_index + i / pack_factor] = output;
      output = 0;
    } else {
#pragma clang loop unroll(full)
      for (int j = 1; j < writes_per_reduce; j++) {
        uint8_t sval = simd_shuffle_down(val, j);
        output |= static_cast<OutType>(sval)
            << (bits * (j * values_per_reduce + i));
      }
    }
  }
  if (bits == 3 || bits == 6) {
    if (in_index % pack_factor == 0 && out_index % bytes_per_pack == 0) {
      out[out_index] = output & 0xff;
      out[out_index + 1] = (output & 0xff00) >> 8;
      out[out_index + 2] = (output & 0xff0000) >> 16;
    }
  } else if (bits == 5) {
    if (in_index % pack_factor == 0 && out_index % bytes_per_pack == 0) {
      out[out_index] = output & 0xff;
      out[out_index + 1] = (output & 0xff00) >> 8;
      out[out_index + 2] = (output & 0xff0000) >> 16;
      out[out_index + 3] = (output & 0xff000000) >> 24;
      out[out_index + 4] = (output & 0xff00000000) >> 32;
    }
  } else {
    if (writes_per_reduce > 0 && out_index % writes_per_reduce == 0) {
      out[out_index / writes_per_reduce] = output;
    }
  }
"""

DEQUANTIZE_BODY = """
using T = ELEM;
constexpr int group_size = GROUP_SIZE, bits = BITS;
const device uint8_t* w = packed.get_data_ptr();
const device T* scales = scales_in.get_data_ptr();
const device T* biases = biases_in.get_data_ptr();
device T* out = w_out.get_data_ptr();
  constexpr int pack_factor = get_pack_factor<bits, 8>();
  constexpr int bytes_per_pack = get_bytes_per_pack<bits>();

  size_t offset = index.x + grid_dim.x * size_t(index.y);
  size_t oindex = offset * pack_factor;
  size_t gindex = oindex / group_size;
  T scale = scales[gindex];
  T bias = biases[gindex];

  out += oindex;

  if (bits == 3) {
    w += offset * bytes_per_pack;
    out[0] = (w[0] & 0x7) * scale + bias;
    out[1] = ((w[0] & 0x38) >> 3) * scale + bias;
    out[2] = (((w[0] & 0xc0) >> 6) + ((w[1] & 0x1) << 2)) * scale + bias;
    out[3] = ((w[1] & 0xe) >> 1) * scale + bias;
    out[4] = ((w[1] & 0x70) >> 4) * scale + bias;
    out[5] = (((w[1] & 0x80) >> 7) + ((w[2] & 0x3) << 1)) * scale + bias;
    out[6] = ((w[2] & 0x1c) >> 2) * scale + bias;
    out[7] = ((w[2] & 0xe0) >> 5) * scale + bias;
  } else if (bits == 5) {
    w += offset * bytes_per_pack;
    out[0] = (w[0] & 0x1f) * scale + bias;
    out[1] = (((w[0] & 0xe0) >> 5) + ((w[1] & 0x3) << 3)) * scale + bias;
    out[2] = ((w[1] & 0x7c) >> 2) * scale + bias;
    out[3] = (((w[1] & 0x80) >> 7) + ((w[2] & 0xf) << 1)) * scale + bias;
    out[4] = (((w[2] & 0xf0) >> 4) + ((w[3] & 0x1) << 4)) * scale + bias;
    out[5] = ((w[3] & 0x3e) >> 1) * scale + bias;
    out[6] = (((w[3] & 0xc0) >> 6) + ((w[4] & 0x7) << 2)) * scale + bias;
    out[7] = ((w[4] & 0xf8) >> 3) * scale + bias;
  } else if (bits == 6) {
    w += offset * bytes_per_pack;
    out[0] = (w[0] & 0x3f) * scale + bias;
    out[1] = (((w[0] >> 6) & 0x03) + ((w[1] & 0x0f) << 2)) * scale + bias;
    out[2] = (((w[1] >> 4) & 0x0f) + ((w[2] & 0x03) << 4)) * scale + bias;
    out[3] = ((w[2] >> 2) & 0x3f) * scale + bias;
  } else {
    uint val = w[offset];
#pragma clang loop unroll(full)
    for (int i = 0; i < pack_factor; i++) {
      uint8_t d;
      if (bits == 2) {
        d = (val >> (bits * i)) & 0x03;
      } else if (bits == 4) {
        d = (val >> (bits * i)) & 0x0f;
      } else if (bits == 8) {
        d = val;
      }
      out[i] = scale * d + bias;
    }
  }
"""

QUANT_PARAMS = [
    MetalParameter("index", "uint2", "thread_position_in_grid"),
    MetalParameter("grid_dim", "uint2", "threads_per_grid"),
]


def _specialise(body: str, group_size: int, bits: int) -> str:
    return body.replace("GROUP_SIZE", str(group_size)).replace("BITS", str(bits))


def _quantize_kernels(group_size: int, bits: int) -> tuple[TorchMetalKernel, TorchMetalKernel]:
    def quantize_reference(w_in: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        packed, scales, biases = mlx_affine_quantize(w_in, group_size, bits)
        return packed, scales, biases

    def dequantize_reference(
        packed: torch.Tensor, scales_in: torch.Tensor, biases_in: torch.Tensor
    ) -> torch.Tensor:
        return mlx_affine_dequantize(packed, scales_in, biases_in, group_size, bits)

    quantize = TorchMetalKernel(
        f"mlx_affine_quantize_gs{group_size}_b{bits}",
        ["w_in"],
        ["packed", "scales_out", "biases_out"],
        src=_specialise(QUANTIZE_BODY, group_size, bits),
        helper_src=QUANT_HELPERS,
        torch_defn=quantize_reference,
        metal_params=QUANT_PARAMS,
        template_dtypes={"w_in": "ELEM"},
    )
    dequantize = TorchMetalKernel(
        f"mlx_affine_dequantize_gs{group_size}_b{bits}",
        ["packed", "scales_in", "biases_in"],
        ["w_out"],
        src=_specialise(DEQUANTIZE_BODY, group_size, bits),
        helper_src=QUANT_HELPERS,
        torch_defn=dequantize_reference,
        metal_params=QUANT_PARAMS,
        template_dtypes={"scales_in": "ELEM"},
    )
    return quantize, dequantize


def _round_away(x: torch.Tensor) -> torch.Tensor:
    """Metal's round: halfway cases away from zero (exact here: |x| < 2^8)."""
    return torch.sign(x) * torch.floor(x.abs() + 0.5)


def mlx_affine_quantize(
    w: torch.Tensor, group_size: int, bits: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rows = w.shape[0]
    groups = w.float().reshape(-1, group_size)
    n_bins = float(2**bits - 1)
    w_min = groups.amin(dim=1)
    w_max = groups.amax(dim=1).clamp(min=0.0)  # the kernel starts w_max at 0
    scale = ((w_max - w_min) / n_bins).clamp(min=1e-7)
    side = w_min.abs() > w_max.abs()
    scale = torch.where(side, scale, -scale)
    edge = torch.where(side, w_min, w_max)
    q0 = _round_away(edge / scale)
    at_zero = q0 == 0
    scale = torch.where(at_zero, scale, edge / torch.where(at_zero, 1.0, q0))
    bias = torch.where(at_zero, 0.0, edge)
    q = _round_away((groups - bias[:, None]) / scale[:, None]).clamp(max=n_bins)
    packed = _pack(q.to(torch.int64).reshape(rows, -1), bits)
    return packed, scale.reshape(rows, -1).to(w.dtype), bias.reshape(rows, -1).to(w.dtype)


def _pack(q: torch.Tensor, bits: int) -> torch.Tensor:
    """Little-endian bit packing: value c occupies bits c * bits .. c * bits + bits - 1."""
    rows, cols = q.shape
    bit_values = (q[:, :, None] >> torch.arange(bits, device=q.device)) & 1  # [rows, cols, bits]
    stream = bit_values.reshape(rows, cols * bits // 8, 8)
    return (stream << torch.arange(8, device=q.device)).sum(dim=2).to(torch.uint8)


def _unpack(packed: torch.Tensor, bits: int) -> torch.Tensor:
    rows, nbytes = packed.shape
    stream = (
        packed.to(torch.int64)[:, :, None] >> torch.arange(8, device=packed.device)
    ) & 1  # [rows, bytes, 8]
    bit_values = stream.reshape(rows, nbytes * 8 // bits, bits)
    return (bit_values << torch.arange(bits, device=packed.device)).sum(dim=2)


def mlx_affine_dequantize(
    packed: torch.Tensor, scales: torch.Tensor, biases: torch.Tensor, group_size: int, bits: int
) -> torch.Tensor:
    q = _unpack(packed, bits).to(scales.dtype)
    scale = scales.repeat_interleave(group_size, dim=1)
    bias = biases.repeat_interleave(group_size, dim=1)
    return scale * q + bias  # rounded to the element type after each operation


# Every packing path (2, 4 and 8 bits pack whole values per byte; 3, 5 and 6
# bits span bytes), every dtype and every group size.
QUANT_CASES = [
    (torch.float32, 64, 3),
    (torch.float32, 64, 4),
    (torch.float32, 64, 5),
    (torch.float32, 64, 6),
    (torch.float16, 32, 2),
    (torch.bfloat16, 128, 8),
]
QUANT_KERNELS = {(gs, bits): _quantize_kernels(gs, bits) for _, gs, bits in QUANT_CASES}


@pytest.mark.parametrize(("dtype", "group_size", "bits"), QUANT_CASES)
def test_mlx_affine_quantize_and_dequantize(dtype: torch.dtype, group_size: int, bits: int) -> None:
    quantize, dequantize = QUANT_KERNELS[group_size, bits]
    rows, cols = 3, 4 * group_size
    w = randn(rows, cols, dtype=dtype, seed=bits) * 2
    w[0, :group_size] = 0  # a group of zeros: scale eps, bias 0
    w[1, group_size : 2 * group_size] = w[1, group_size : 2 * group_size].abs()  # all positive
    # One thread per group_size / 32 values, SIMD-groups aligned with groups.
    threads = rows * cols * 32 // group_size
    opcheck = (dtype, bits) == (torch.float32, 4)
    packed, scales, biases = launch(
        quantize,
        w,
        grid=(threads, 1, 1),
        group=(64, 1, 1),
        shapes=[[rows, cols * bits // 8], [rows, cols // group_size], [rows, cols // group_size]],
        opcheck=opcheck,
    )
    want_packed, want_scales, want_biases = mlx_affine_quantize(w, group_size, bits)
    # Each step is float32 arithmetic the reference repeats exactly.
    torch.testing.assert_close(scales, want_scales, rtol=0, atol=0)
    torch.testing.assert_close(biases, want_biases, rtol=0, atol=0)
    torch.testing.assert_close(packed, want_packed, rtol=0, atol=0)

    pack_factor = {3: 8, 5: 8, 6: 4}.get(bits, 8 // bits)
    out = launch(
        dequantize,
        packed,
        scales,
        biases,
        grid=(rows * cols // pack_factor, 1, 1),
        group=(32, 1, 1),
        shapes=[[rows, cols]],
        opcheck=opcheck,
    )
    # scale * q + bias, each operation rounded to the element type, as torch
    # computes it in that type.
    torch.testing.assert_close(
        out, mlx_affine_dequantize(packed, scales, biases, group_size, bits), rtol=0, atol=0
    )
    # The scheme itself: every value comes back within one quantization step
    # (half a step of rounding, more at the end of the range that moved so that
    # zero is representable), plus the element type's rounding: of the scale
    # (times q, up to 2^bits - 1) and of the product and sum.
    eps = torch.finfo(dtype).eps
    step = scales.float().abs().repeat_interleave(group_size, dim=1)
    bound = step * (1.01 + (2**bits - 1) * eps) + 4 * eps * w.float().abs()
    assert ((out.float() - w.float()).abs() <= bound).all()


# ------------------------------------------------------------------ block sort
#
# mlx/backend/metal/kernels/sort.h, kernel `block_sort<T, U, ARG_SORT,
# BLOCK_THREADS, N_PER_THREAD>` (a merge sort of one row per threadgroup, NaNs
# last), as sort.metal instantiates it: sort (U = T) and argsort (U = uint32)
# for uint8 ... int64, float16, float32 and bfloat16 (and complex64, a dtype
# TorchMetalKernel does not take), here with 32 threads of 4 values. The body
# is the kernel's own, once for the sort and once for the argsort.

SORT_HELPERS = helper_source("mlx/common.metal", "mlx/sort.metal")

BLOCK_SORT_BODY = """
  using sort_kernel =
      KernelMergeSort<T, U, ARG_SORT, BLOCK_THREADS, N_PER_THREAD>;
  using ValT = typename sort_kernel::ValT;
  using IdxT = typename sort_kernel::IdxT;

  if (ARG_SORT) {
    threadgroup ValT tgp_vals[sort_kernel::N_PER_BLOCK];
    threadgroup IdxT tgp_idxs[sort_kernel::N_PER_BLOCK];
    sort_kernel::block_sort(
        inp,
        out,
        size_sorted_axis,
        in_stride_sorted_axis,
        out_stride_sorted_axis,
        in_stride_segment_axis,
        out_stride_segment_axis,
        tgp_vals,
        tgp_idxs,
        tid,
        lid);
  } else {
    threadgroup ValT tgp_vals[sort_kernel::N_PER_BLOCK];
    sort_kernel::block_sort(
        inp,
        out,
        size_sorted_axis,
        in_stride_sorted_axis,
        out_stride_sorted_axis,
        in_stride_segment_axis,
        out_stride_segment_axis,
        tgp_vals,
        nullptr,
        tid,
        lid);
  }
"""

SORT_SOURCE = f"""
using T = ELEM;
constexpr short BLOCK_THREADS = 32, N_PER_THREAD = 4;
const device T* inp = x.get_data_ptr();
// Rows of x are the segments, contiguous.
const int size_sorted_axis = x.get_extent(0);
const int in_stride_sorted_axis = 1, out_stride_sorted_axis = 1;
const int in_stride_segment_axis = x.get_stride(1), out_stride_segment_axis = x.get_extent(0);
{{
using U = T;
constexpr bool ARG_SORT = false;
device U* out = values.get_data_ptr();
{BLOCK_SORT_BODY}
}}
{{
using U = uint32_t;
constexpr bool ARG_SORT = true;
device U* out = indices.get_data_ptr();
{BLOCK_SORT_BODY}
}}
"""


def _sort_reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    values, indices = torch.sort(x, dim=-1, stable=True)
    return values, indices.to(torch.uint32)


block_sort = TorchMetalKernel(
    "mlx_block_sort",
    ["x"],
    ["values", "indices"],
    src=SORT_SOURCE,
    helper_src=SORT_HELPERS,
    torch_defn=_sort_reference,
    metal_params=[
        MetalParameter("tid", "uint3", "threadgroup_position_in_grid"),
        MetalParameter("lid", "uint3", "thread_position_in_threadgroup"),
    ],
    template_dtypes={"x": "ELEM"},
)

SORT_DTYPES = [
    torch.uint8,
    torch.uint16,
    torch.uint32,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.uint64,
    torch.int64,
    torch.float16,
    torch.float32,
    torch.bfloat16,
]


def _sort_input(dtype: torch.dtype, rows: int, n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(n)
    if dtype.is_floating_point:
        x = (torch.randn(rows, n, generator=g) * 4).round().to(dtype)  # duplicates
        x[0, 3] = float("nan")
        x[0, n - 1] = float("inf")
        x[-1, 1] = float("-inf")
        x[-1, n // 2] = float("nan")
        return x
    info = torch.iinfo(dtype)
    low, high = max(info.min, -100), min(info.max, 100)
    return torch.randint(low, high, (rows, n), generator=g).to(dtype)


# Every dtype on rows of 100; a full block (128) and a short row on two dtypes.
SORT_CASES = [(dtype, 3, 100) for dtype in SORT_DTYPES] + [
    (torch.float32, 2, 128),
    (torch.int32, 4, 7),
]


@pytest.mark.parametrize(("dtype", "rows", "n"), SORT_CASES, ids=str)
def test_mlx_block_sort(dtype: torch.dtype, rows: int, n: int) -> None:
    x = _sort_input(dtype, rows, n)
    values, indices = launch(
        block_sort,
        x,
        grid=(32, rows, 1),
        group=(32, 1, 1),
        shapes=[[rows, n], [rows, n]],
        # opcheck compares runs with NaN != NaN: check the op on integers.
        opcheck=(dtype, n) == (torch.int32, 100),
    )
    want_values, want_indices = _sort_reference(x)
    # A stable merge sort: equal keys keep their order, NaNs go last.
    torch.testing.assert_close(values, want_values, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(indices.to(torch.int64), want_indices.to(torch.int64))


# ------------------------------------------------------ scatter, atomic max
#
# mlx/backend/metal/kernels/indexing/scatter.h, `scatter_impl`, behind the
# kernel MLX's JIT writes from its template `scatter_kernels`
# (mlx/backend/metal/jit/indexing.h) for one index array, row-contiguous
# updates, NWORK 1 and Op = Max<T>: out[idx[i], :] = max(out[idx[i], :],
# upd[i, :]) with atomic updates, native for int and a compare-and-swap loop
# for float (atomic.h) and for the narrow types packed in 32-bit words.
#
# MLX's host code copies the destination into `out` before the launch; here
# one threadgroup does that copy first, then the scatter, behind a barrier.
# The parameter arrays MLX binds as constant buffers are constant arrays
# written into the source per shape, as MLX's JIT writes its parameters in.

SCATTER_HELPERS = helper_source("mlx/common.metal", "mlx/scatter.metal")

# MLX's scatter takes updates of shape idx.shape + (the slice of out's
# dimensions): here [I, 1, D], the memory of the [I, D] tensor passed in.
SCATTER_PARAMETERS = """
constant int upd_shape_c[3] = {{{I}, 1, {D}}};
constant int64_t upd_strides_c[3] = {{{D}, {D}, 1}};
constant size_t upd_ndim_c = 3;
constant size_t upd_size_c = {D};
constant int out_shape_c[2] = {{{M}, {D}}};
constant int64_t out_strides_c[2] = {{{D}, 1}};
constant size_t out_ndim_c = 2;
constant int axes_c[1] = {{0}};
constant int idx_shapes_c[1] = {{{I}}};
constant int64_t idx_strides_c[1] = {{1}};
constant bool idx_contigs_c[1] = {{true}};
constant int idx_ndim_c = 1;
constant size_t idx_size_c = {I};
"""

SCATTER_SOURCE = """
using T = ELEM;
{
  const uint threads = tg_size.x * tg_size.y;
  for (uint i = lid; i < uint(src.get_extent(0) * src.get_extent(1)); i += threads) {
    result.get_data_ptr()[i] = src.get_data_ptr()[i];
  }
}
threadgroup_barrier(mem_flags::mem_device);
const device T* updates = upd.get_data_ptr();
device mlx_atomic<T>* out = (device mlx_atomic<T>*)result.get_data_ptr();
const constant int* upd_shape = upd_shape_c;
const constant int64_t* upd_strides = upd_strides_c;
const constant size_t& upd_ndim = upd_ndim_c;
const constant size_t& upd_size = upd_size_c;
const constant int* out_shape = out_shape_c;
const constant int64_t* out_strides = out_strides_c;
const constant size_t& out_ndim = out_ndim_c;
const constant int* axes = axes_c;
const constant int* idx_shapes = idx_shapes_c;
const constant int64_t* idx_strides = idx_strides_c;
const constant bool* idx_contigs = idx_contigs_c;
const constant int& idx_ndim = idx_ndim_c;
const constant size_t& idx_size = idx_size_c;
const device int32_t* idx0 = idx.get_data_ptr();
  Indices<int32_t, 1> idxs{ { {idx0} }, idx_shapes, idx_strides, idx_contigs, idx_ndim};

  return scatter_impl<T, int32_t, Max<T>, 1, true, 1, int>(
      updates,
      out,
      upd_shape,
      upd_strides,
      upd_ndim,
      upd_size,
      out_shape,
      out_strides,
      out_ndim,
      axes,
      idx_size,
      idxs,
      gid);
"""


def _scatter_max_reference(src: torch.Tensor, idx: torch.Tensor, upd: torch.Tensor) -> torch.Tensor:
    index = idx.long()[:, None].expand_as(upd)
    return src.scatter_reduce(0, index, upd, reduce="amax", include_self=True)


def _scatter_kernel(m: int, d: int, i: int) -> TorchMetalKernel:
    return TorchMetalKernel(
        f"mlx_scatter_max_{m}x{d}_{i}",
        ["src", "idx", "upd"],
        ["result"],
        src=SCATTER_SOURCE,
        helper_src=SCATTER_HELPERS + SCATTER_PARAMETERS.format(M=m, D=d, I=i),
        torch_defn=_scatter_max_reference,
        metal_params=[
            MetalParameter("gid", "uint2", "thread_position_in_grid"),
            MetalParameter("lid", "uint", "thread_index_in_threadgroup"),
            MetalParameter("tg_size", "uint3", "threads_per_threadgroup"),
        ],
        template_dtypes={"src": "ELEM"},
    )


SCATTER_SHAPES = {(10, 8, 40): _scatter_kernel(10, 8, 40), (7, 5, 90): _scatter_kernel(7, 5, 90)}


@pytest.mark.parametrize(
    ("dtype", "shape"),
    [
        (torch.float32, (10, 8, 40)),  # compare-and-swap on float
        (torch.float32, (7, 5, 90)),
        (torch.int32, (10, 8, 40)),  # the native atomic maximum
        (torch.float16, (7, 5, 90)),  # two halves per 32-bit word
        (torch.uint8, (10, 8, 40)),  # four bytes per word
    ],
    ids=str,
)
def test_mlx_scatter_max(dtype: torch.dtype, shape: tuple[int, int, int]) -> None:
    m, d, i = shape
    g = torch.Generator().manual_seed(i)
    if dtype.is_floating_point:
        src = torch.randn(m, d, generator=g).to(dtype)
        upd = torch.randn(i, d, generator=g).mul(2).to(dtype)
    else:
        src = torch.randint(0, 100, (m, d), generator=g).to(dtype)
        upd = torch.randint(0, 200, (i, d), generator=g).to(dtype)
    # Many updates per row: contention on every destination element.
    idx = torch.randint(0, m, (i,), generator=g, dtype=torch.int32)
    out = launch(
        SCATTER_SHAPES[shape],
        src,
        idx,
        upd,
        grid=(d, i, 1),
        group=(d, i, 1),
        shapes=[[m, d]],
        opcheck=(dtype, shape) == (torch.float32, (10, 8, 40)),
    )
    # A maximum is exact in any order.
    torch.testing.assert_close(out, _scatter_max_reference(src, idx, upd), rtol=0, atol=0)

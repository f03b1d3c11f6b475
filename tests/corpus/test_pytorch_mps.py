"""PyTorch's MPS kernels on the CPU backend: the MPP (matmul2d) GEMM and the
SIMD-group scans behind cummin / cummax.

Source: github.com/pytorch/pytorch (BSD-3-Clause license),
aten/src/ATen/native/mps/kernels/ and c10/metal/ (commits named in each
.metal file under tests/corpus/pytorch/). Helper code is there, unchanged;
each kernel body is PyTorch's own with its signature adapted: the buffers are
the tensor views' data, the constant structs PyTorch's host code fills in are
filled in from the tensors' extents and strides the same way, and the
template arguments become declarations in front of the body.

PyTorch's MPS kernels have no radix scan (Sort.metal: "Multi-block merge and
radix paths are planned"); its scans are ScanKernel.metal's, MLX-derived
SIMD-group scans with a threadgroup pass over the SIMD-group totals, which
this module runs along the innermost and along an outer dimension.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch
from corpus_support import HERE, helper_source, launch, randn

from coreai_torch import MetalParameter, TorchMetalKernel

# Every kernel here also runs clean under debug mode's checks (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("default_and_debug_mode")

C10_HELPERS = helper_source("pytorch/c10_metal.metal")

# ------------------------------------------------------------------ MPP GEMM
#
# aten/src/ATen/native/mps/kernels/mpp_gemm.h, kernel
# `mpp_gemm<IN_T, OUT_T, BM, BN, NSG, TRANS_A, TRANS_B, RELAXED, EPI, BATCHED>`,
# as Gemm.metal instantiates it (host names gemm_mpp_{dt}_{BM}_{BN}_{NSG}_ta*_tb*
# _{relaxed|full}_{none|ab}_{b0|b1}): float, half and bfloat with
# IN_T == OUT_T; tiles (BM, BN, NSG) among (32, 32, 4), (64, 64, 2) and
# (16, 64, 2); every transpose pair; relaxed precision (and full for float);
# the plain and the alpha/beta (addmm) epilogue; unbatched and batched.

GEMM_HELPERS = helper_source("pytorch/c10_metal.metal", "pytorch/gemm_common.metal")

GEMM_PROLOGUE = """
using namespace at_gemm;  // the kernel's namespace
// The template arguments, as a gemm_mpp_* host name selects them.
using IN_T = ELEM;
using OUT_T = ELEM;
constexpr int BM = @BM, BN = @BN, NSG = @NSG;
constexpr bool TRANS_A = @TA, TRANS_B = @TB, RELAXED = @RELAXED;
constexpr GemmEpilogue EPI = GemmEpilogue::@EPI;
constexpr bool BATCHED = @BATCHED;
// The buffers: A (M x K, or K x M with TRANS_A), B (K x N, or N x K with
// TRANS_B) and C (M x N), each with a leading batch dimension when BATCHED.
device IN_T* A = a.get_data_ptr();
device IN_T* B = b.get_data_ptr();
device OUT_T* C = c.get_data_ptr();
// The constant buffer PyTorch's host code fills in: element strides of the
// rows (ld*), of the addend (self_r, self_c) and of the batches.
const GemmDimsStrided gP_value = {
    int(c.get_extent(1)), int(c.get_extent(0)),
    int(TRANS_A ? a.get_extent(1) : a.get_extent(0)),
    int(a.get_stride(1)), int(b.get_stride(1)), int(c.get_stride(1)),
    SELF_R, SELF_C, /*swizzle_log=*/0,
    BATCH_A, BATCH_B, BATCH_C, BATCH_SELF};
constant GemmDimsStrided& gP = gP_value;
@ADDEND
constant ::c10::metal::array<::c10::metal::opmath_t<OUT_T>, 2>& alpha_beta = alpha_beta_value;
"""

# The addend and alpha/beta: addmm's `self` (a row of N values broadcast over
# the rows, as a linear layer's bias is), alpha and beta; none for EPI None.
ADDEND_NONE = """
device const OUT_T* self = nullptr;
const ::c10::metal::array<::c10::metal::opmath_t<OUT_T>, 2> alpha_beta_value = {1, 0};
"""
ADDEND_ALPHA_BETA = """
device const OUT_T* self = bias.get_data_ptr();
const ::c10::metal::array<::c10::metal::opmath_t<OUT_T>, 2> alpha_beta_value = {alpha_in, beta_in};
"""

GEMM_BODY = (HERE / "pytorch" / "mpp_gemm.metal").read_text()


def _gemm_reference(ta: bool, tb: bool, alpha_beta: bool):
    def product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a = a.float().transpose(-1, -2) if ta else a.float()
        b = b.float().transpose(-1, -2) if tb else b.float()
        return a @ b

    if alpha_beta:

        def addmm(
            a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, alpha_in: float, beta_in: float
        ) -> torch.Tensor:
            return (alpha_in * product(a, b) + beta_in * bias.float()).to(a.dtype)

        return addmm

    def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return product(a, b).to(a.dtype)

    return mm


@functools.cache
def _gemm_kernel(
    tile: tuple[int, int, int], ta: bool, tb: bool, relaxed: bool, alpha_beta: bool, batched: bool
) -> TorchMetalKernel:
    bm, bn, nsg = tile
    values = {
        "@BM": str(bm),
        "@BN": str(bn),
        "@NSG": str(nsg),
        "@TA": str(ta).lower(),
        "@TB": str(tb).lower(),
        "@RELAXED": str(relaxed).lower(),
        "@EPI": "AlphaBeta" if alpha_beta else "None",
        "@BATCHED": str(batched).lower(),
        "@ADDEND": ADDEND_ALPHA_BETA if alpha_beta else ADDEND_NONE,
        "SELF_R": "0",
        "SELF_C": "int(bias.get_stride(0))" if alpha_beta else "0",
        "BATCH_A": "int(a.get_stride(2))" if batched else "0",
        "BATCH_B": "int(b.get_stride(2))" if batched else "0",
        "BATCH_C": "int(c.get_stride(2))" if batched else "0",
        "BATCH_SELF": "0",
    }
    prologue = GEMM_PROLOGUE
    for key, value in values.items():
        prologue = prologue.replace(key, value)
    name = (
        f"pytorch_gemm_mpp_{bm}_{bn}_{nsg}_ta{int(ta)}_tb{int(tb)}"
        f"_{'relaxed' if relaxed else 'full'}_{'ab' if alpha_beta else 'none'}_b{int(batched)}"
    )
    return TorchMetalKernel(
        name,
        # Not alpha and beta: the kernel's body declares locals of those names,
        # and the body shares the function's scope with the inputs (as in
        # Apple's rendering).
        ["a", "b", "bias", "alpha_in", "beta_in"] if alpha_beta else ["a", "b"],
        ["c"],
        src=prologue + GEMM_BODY,
        helper_src=GEMM_HELPERS,
        torch_defn=_gemm_reference(ta, tb, alpha_beta),
        metal_params=[MetalParameter("tgid", "uint3", "threadgroup_position_in_grid")],
        template_dtypes={"a": "ELEM"},
    )


# float: sums of K products accumulated in float32 in another order than
# torch's (relaxed precision may round the inputs to half first, 2^-11
# relative). float16 / bfloat16: the same float sums, then one rounding of the
# result to the element type (2^-11 / 2^-8 relative).
GEMM_TOL = {
    (torch.float32, False): {"rtol": 1e-5, "atol": 1e-4},
    (torch.float32, True): {"rtol": 2e-3, "atol": 1e-2},
    (torch.float16, True): {"rtol": 1e-3, "atol": 2e-3},
    (torch.bfloat16, True): {"rtol": 8e-3, "atol": 1.6e-2},
}


def _run_gemm(
    dtype: torch.dtype,
    m: int,
    n: int,
    k: int,
    *,
    tile: tuple[int, int, int] = (32, 32, 4),
    ta: bool = False,
    tb: bool = False,
    relaxed: bool = True,
    alpha_beta: bool = False,
    batch: int = 0,
    opcheck: bool = False,
) -> None:
    kernel = _gemm_kernel(tile, ta, tb, relaxed, alpha_beta, batch > 0)
    lead = (batch,) if batch else ()
    a = randn(*lead, m, k, dtype=dtype, seed=m + k)
    b = randn(*lead, k, n, dtype=dtype, seed=n + k)
    a_in = a.transpose(-1, -2).contiguous() if ta else a
    b_in = b.transpose(-1, -2).contiguous() if tb else b
    args: list = [a_in, b_in]
    if alpha_beta:
        args += [randn(n, dtype=dtype, seed=k), 1.5, -0.5]
    bm, bn, nsg = tile
    # Gemm's host code: a threadgroup of NSG SIMD-groups per BM x BN tile of C,
    # tgid.x walking N, tgid.y walking M and tgid.z the batch.
    grid = (32 * nsg * math.ceil(n / bn), math.ceil(m / bm), max(batch, 1))
    c = launch(
        kernel,
        *args,
        grid=grid,
        group=(32 * nsg, 1, 1),
        shapes=[[*lead, m, n]],
        opcheck=opcheck,
    )
    want = _gemm_reference(ta, tb, alpha_beta)(*args)
    torch.testing.assert_close(c, want, **GEMM_TOL[dtype, relaxed])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("m", "n", "k"), [(64, 64, 32), (50, 70, 37)])
def test_pytorch_mpp_gemm(dtype: torch.dtype, m: int, n: int, k: int) -> None:
    # Whole tiles take the static-extent fast path, edge tiles the masked one.
    _run_gemm(dtype, m, n, k, opcheck=(m, dtype) == (64, torch.float32))


def test_pytorch_mpp_gemm_full_precision_float() -> None:
    _run_gemm(torch.float32, 50, 70, 37, tile=(64, 64, 2), relaxed=False)


@pytest.mark.parametrize(
    ("dtype", "ta", "tb"),
    [(torch.float16, True, False), (torch.float32, False, True), (torch.bfloat16, True, True)],
)
def test_pytorch_mpp_gemm_transposed(dtype: torch.dtype, ta: bool, tb: bool) -> None:
    _run_gemm(dtype, 45, 70, 33, ta=ta, tb=tb)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_pytorch_mpp_gemm_batched_addmm(dtype: torch.dtype) -> None:
    _run_gemm(
        dtype,
        40,
        75,
        24,
        tile=(16, 64, 2),
        alpha_beta=True,
        batch=2,
        opcheck=dtype == torch.float32,
    )


def test_pytorch_mpp_gemm_strided_operand() -> None:
    # A row-strided view of A (lda > K): the {1, lda} strides absorb it.
    kernel = _gemm_kernel((32, 32, 4), False, False, True, False, False)
    wide = randn(50, 48, seed=3)
    a, b = wide[:, :37], randn(37, 40, seed=4)
    c = launch(
        kernel, a, b, grid=(128 * 2, 2, 1), group=(128, 1, 1), shapes=[[50, 40]], opcheck=False
    )
    torch.testing.assert_close(c, a @ b, **GEMM_TOL[torch.float32, True])


# ---------------------------------------------------------------- cummin/cummax
#
# aten/src/ATen/native/mps/kernels/ScanKernel.metal (Metal 3.1 and later),
# kernels `scan_with_indices_innermost_dim<T, Op, N_READS>` and
# `scan_with_indices_outer_dim<T, Op, N_READS>`, as REGISTER_SCAN_WITH_INDICES_OP
# instantiates them: CumMinOp and CumMaxOp for float, half, bfloat, long
# (N_READS 2), int, short, char, uchar and bool (N_READS 4). The values and
# the int64 indices of torch.cummin / torch.cummax, NaN propagating and ties
# going to the later index, as torch's own kernels do.

SCAN_HELPERS = helper_source("pytorch/c10_metal.metal", "pytorch/scan.metal")

SCAN_PROLOGUE = """
// The template arguments.
using T = ELEM;
using Op = @OP<T>;
constexpr int N_READS = sizeof(T) == 8 ? 2 : 4;
using acc_t = accum_t<T>;
// The buffers.
const device T* in = x.get_data_ptr();
device T* out_values = cum_values.get_data_ptr();
device int64_t* out_indices = indices.get_data_ptr();
"""

SCAN_INNERMOST = """
const size_t axis_size_value = x.get_extent(0);
const constant size_t& axis_size = axis_size_value;
// scan_with_indices_innermost_dim's body:
  constexpr int simd_size = 32;
  Op op;
  using pair_t = typename Op::pair_t;

  // Position the pointers
  size_t offset = (gid.y + gsize.y * size_t(gid.z)) * axis_size;
  in += offset;
  out_values += offset;
  out_indices += offset;

  // Compute the number of simd_groups
  uint simd_groups = lsize.x / simd_size;

  // Allocate memory
  pair_t prefix = op.get_init();
  pair_t values[N_READS];
  threadgroup pair_t simdgroup_sums[32];

  for (uint r = 0; r < ceildiv(axis_size, N_READS * lsize.x); r++) {
    // Compute the block offset
    uint offset_idx = r * lsize.x * N_READS + lid.x * N_READS;

    // Read the values as pairs
    for (int i = 0; i < N_READS; i++) {
      if ((offset_idx + i) < axis_size) {
        values[i] = make_pair<T, acc_t>(
            static_cast<acc_t>(in[offset_idx + i]), offset_idx + i);
      } else {
        values[i] = op.get_init();
      }
    }

    // Compute an inclusive scan per thread
    for (int i = 1; i < N_READS; i++) {
      values[i] = op(values[i], values[i - 1]);
    }

    // Compute exclusive scan of thread sums
    pair_t prev_thread = op.simd_exclusive_scan(values[N_READS - 1]);

    // Write simdgroup_sums to SM
    if (simd_lane_id == simd_size - 1) {
      simdgroup_sums[simd_group_id] = op(prev_thread, values[N_READS - 1]);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    // Compute exclusive scan of simdgroup_sums
    if (simd_group_id == 0) {
      pair_t prev_simdgroup =
          op.simd_exclusive_scan(simdgroup_sums[simd_lane_id]);
      simdgroup_sums[simd_lane_id] = prev_simdgroup;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    // Compute the output
    for (int i = 0; i < N_READS; i++) {
      values[i] = op(values[i], prefix);
      values[i] = op(values[i], simdgroup_sums[simd_group_id]);
      values[i] = op(values[i], prev_thread);
    }

    // Write the values
    for (int i = 0; i < N_READS; i++) {
      if ((offset_idx + i) < axis_size) {
        out_values[offset_idx + i] = static_cast<T>(values[i].value);
        out_indices[offset_idx + i] = values[i].index;
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    // Share the prefix
    if (simd_group_id == simd_groups - 1 && simd_lane_id == simd_size - 1) {
      simdgroup_sums[0] = values[N_READS - 1];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    prefix = simdgroup_sums[0];
  }
"""

SCAN_OUTER = """
// x is [outer, axis, stride] (Metal order: extents stride, axis, outer).
const size_t axis_size_value = x.get_extent(1);
const size_t stride_value = x.get_extent(0);
const size_t stride_blocks_value = (stride_value + 31) / 32;
const constant size_t& axis_size = axis_size_value;
const constant size_t& stride = stride_value;
const constant size_t& stride_blocks = stride_blocks_value;
// scan_with_indices_outer_dim's body:
  constexpr int simd_size = 32;
  constexpr int BM = 32;
  constexpr int BN = 32;
  constexpr int BN_pad = 32 + 16 / sizeof(T);
  constexpr int n_simds = BN / N_READS;
  constexpr int n_scans = BN / n_simds;
  Op op;
  using pair_t = typename Op::pair_t;

  threadgroup pair_t read_buffer[BM * BN_pad];
  pair_t values[n_scans];
  pair_t prefix[n_scans];
  for (int i = 0; i < n_scans; i++) {
    prefix[i] = op.get_init();
  }

  // Compute offsets
  size_t full_gid = gid.y + gsize.y * size_t(gid.z);
  size_t offset = full_gid / stride_blocks * axis_size * stride;
  size_t global_index_x = full_gid % stride_blocks * BN;
  uint read_offset_y = (lid.x * N_READS) / BN;
  uint read_offset_x = (lid.x * N_READS) % BN;
  uint scan_offset_y = simd_lane_id;
  uint scan_offset_x = simd_group_id * n_scans;

  uint stride_limit = stride - global_index_x;
  in += offset + global_index_x + read_offset_x;
  out_values += offset + global_index_x + read_offset_x;
  out_indices += offset + global_index_x + read_offset_x;
  threadgroup pair_t* read_into =
      read_buffer + read_offset_y * BN_pad + read_offset_x;
  threadgroup pair_t* read_from =
      read_buffer + scan_offset_y * BN_pad + scan_offset_x;

  for (uint j = 0; j < axis_size; j += BM) {
    // Calculate the indices for the current thread
    uint index_y = j + read_offset_y;
    uint check_index_y = index_y;

    // Read into shared memory as pairs
    for (int i = 0; i < N_READS; i++) {
      if (check_index_y < axis_size && (read_offset_x + i) < stride_limit) {
        // For cummin/cummax, the index should represent the position along the
        // scan axis
        read_into[i] = make_pair<T, acc_t>(
            static_cast<acc_t>(in[index_y * stride + i]), index_y);
      } else {
        read_into[i] = op.get_init();
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    // Read strided into registers
    for (int i = 0; i < n_scans; i++) {
      values[i] = read_from[i];
    }
    simdgroup_barrier(mem_flags::mem_threadgroup);

    // Perform the scan
    for (int i = 0; i < n_scans; i++) {
      values[i] = op.simd_scan(values[i]);
      values[i] = op(values[i], prefix[i]);
      prefix[i] = make_pair<T, acc_t>(
          simd_shuffle(values[i].value, simd_size - 1),
          simd_shuffle(values[i].index, simd_size - 1));
    }

    // Write to shared memory
    for (int i = 0; i < n_scans; i++) {
      read_from[i] = values[i];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    // Write to device memory
    for (int i = 0; i < N_READS; i++) {
      if (check_index_y < axis_size && (read_offset_x + i) < stride_limit) {
        out_values[index_y * stride + i] = static_cast<T>(read_into[i].value);
        out_indices[index_y * stride + i] = read_into[i].index;
      }
    }
  }
"""

SCAN_PARAMS = [
    MetalParameter("gid", "uint3", "threadgroup_position_in_grid"),
    MetalParameter("gsize", "uint3", "threadgroups_per_grid"),
    MetalParameter("lid", "uint3", "thread_position_in_threadgroup"),
    MetalParameter("lsize", "uint3", "threads_per_threadgroup"),
    MetalParameter("simd_lane_id", "uint", "thread_index_in_simdgroup"),
    MetalParameter("simd_group_id", "uint", "simdgroup_index_in_threadgroup"),
]


def _scan_reference(op: str, dim: int):
    def scan(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        fn = torch.cummax if op == "CumMaxOp" else torch.cummin
        values, indices = fn(x, dim=dim)
        return values, indices

    return scan


@functools.cache
def _scan_kernel(op: str, where: str) -> TorchMetalKernel:
    body = SCAN_INNERMOST if where == "innermost" else SCAN_OUTER
    # The outer-dimension kernel takes no threads_per_threadgroup.
    params = SCAN_PARAMS if where == "innermost" else SCAN_PARAMS[:3] + SCAN_PARAMS[4:]
    return TorchMetalKernel(
        f"pytorch_{'cummax' if op == 'CumMaxOp' else 'cummin'}_{where}",
        ["x"],
        # Not `values`: the kernel's body declares a local of that name.
        ["cum_values", "indices"],
        src=SCAN_PROLOGUE.replace("@OP", op) + body,
        helper_src=SCAN_HELPERS,
        torch_defn=_scan_reference(op, -1 if where == "innermost" else -2),
        metal_params=params,
        template_dtypes={"x": "ELEM"},
    )


def _scan_input(dtype: torch.dtype, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        x = torch.randn(*shape, generator=g)
        x[torch.rand(*shape, generator=g) < 0.3] = 0.5  # ties
        x.view(-1)[:: max(7, x.numel() // 3)] = float("nan")
        return x.to(dtype)
    info = torch.iinfo(dtype)
    lo, hi = max(info.min, -20), min(info.max, 20)  # few values: many ties
    return torch.randint(lo, hi + 1, shape, generator=g).to(dtype)


SCAN_DTYPES = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
]


def _check_scan(op: str, where: str, x: torch.Tensor, grid, group, opcheck: bool) -> None:
    kernel = _scan_kernel(op, where)
    values, indices = launch(
        kernel, x, grid=grid, group=group, shapes=[list(x.shape), list(x.shape)], opcheck=opcheck
    )
    want_values, want_indices = _scan_reference(op, -1 if where == "innermost" else -2)(x)
    torch.testing.assert_close(values, want_values, equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(indices, want_indices, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", SCAN_DTYPES)
def test_pytorch_cummax_innermost(dtype: torch.dtype) -> None:
    # 3 rows of 300: with 64 threads of 4 (2 for long) reads, two or three
    # passes of the threadgroup over the row, the last one partial.
    x = _scan_input(dtype, (3, 300), seed=1)
    opcheck = dtype == torch.int32  # (a case without NaN, which opcheck finds unequal)
    _check_scan("CumMaxOp", "innermost", x, (64, 3, 1), (64, 1, 1), opcheck=opcheck)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_pytorch_cummin_innermost(dtype: torch.dtype) -> None:
    x = _scan_input(dtype, (2, 5, 77), seed=2)  # rows over gid.y and gid.z
    _check_scan("CumMinOp", "innermost", x, (32, 5, 2), (32, 1, 1), opcheck=False)


@pytest.mark.parametrize(
    ("op", "dtype"),
    [("CumMaxOp", torch.float32), ("CumMinOp", torch.float16), ("CumMaxOp", torch.int64)],
)
def test_pytorch_scan_outer_dim(op: str, dtype: torch.dtype) -> None:
    # [outer 2, axis 45, stride 40]: two blocks of 32 columns (one partial) and
    # a partial last block of 32 rows along the axis.
    x = _scan_input(dtype, (2, 45, 40), seed=3)
    n_simds = 32 // (2 if dtype == torch.int64 else 4)
    threads = 32 * n_simds
    # (opcheck compares outputs bit for bit, NaN unequal to itself: an integer case.)
    opcheck = dtype == torch.int64
    _check_scan(op, "outer", x, (threads, 2 * 2, 1), (threads, 1, 1), opcheck=opcheck)

"""The kernels every benchmark runs, written as a user writes them.

The Python benchmarks call these objects; ``cpp/render_kernels.py`` renders the
same definitions for the C++ harness, so both measure identical Metal source.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

from coreai_torch import MetalParameter, TorchMetalKernel

# The environment switch that keeps kernels compiled while it is set in fiber
# mode (docs/cpu.md, "Execution"): the benchmarks measure both forms of a kernel.
GROUP_LOOPS_SWITCH = "COREAI_TORCH_CPU_GROUP_LOOPS"


def in_fiber_mode(kernel: TorchMetalKernel) -> TorchMetalKernel:
    """A copy of ``kernel`` under another name, for the compile that runs it in fiber mode.

    Call its first launch with ``GROUP_LOOPS_SWITCH=0`` set (``fiber_mode_compile``).
    """
    return TorchMetalKernel(
        kernel.name + "_fibers",
        kernel.input_names,
        kernel.result_names,
        kernel.src,
        torch_defn=kernel.torch_defn,
        metal_params=kernel.metal_params,
        helper_src=kernel.helper_src,
    )


@contextlib.contextmanager
def fiber_mode_compile() -> Iterator[None]:
    """Kernels compiled inside run in fiber mode (the switch is read at compile time)."""
    before = os.environ.get(GROUP_LOOPS_SWITCH)
    os.environ[GROUP_LOOPS_SWITCH] = "0"
    try:
        yield
    finally:
        if before is None:
            del os.environ[GROUP_LOOPS_SWITCH]
        else:
            os.environ[GROUP_LOOPS_SWITCH] = before


# Side of the square threadgroup of the tiled matmul, and of its tiles.
TILE = 16


def torch_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


# One thread per element. The bounds check is what real kernels carry when the
# grid is rounded up; with an exact grid it is never false.
add = TorchMetalKernel(
    "bench_add",
    ["x", "y"],
    ["out"],
    src="if (id < out.get_extent(0)) out[id] = x[id] + y[id];",
    torch_defn=torch_add,
    metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")],
)


# Four elements per thread, read and written as float4: what a Metal kernel
# written for bandwidth does (torch's own elementwise kernels move 16 bytes per
# thread as well). Launch one thread per four elements; the last thread adds
# what is left one element at a time.
ADD_VEC4_ELEMENTS = 4
add_vec4 = TorchMetalKernel(
    "bench_add_vec4",
    ["x", "y"],
    ["out"],
    src="""
const uint n = out.get_extent(0);
const uint i = 4 * id;
if (i + 4 <= n) {
    *(device float4*)&out[i] = *(device const float4*)&x[i] + *(device const float4*)&y[i];
} else {
    for (uint k = i; k < n; ++k) out[k] = x[k] + y[k];
}
""",
    torch_defn=torch_add,
    metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")],
)


def torch_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


# Classic shared-memory tiling: each thread loads one element of an A tile and
# one of a B tile, the group synchronises, and every thread accumulates a
# 16-long dot product out of threadgroup memory. Two barriers per K-tile.
# Metal dimension 0 is torch's last: torch A[m, k] is A[k, m] here.
_TILED_MATMUL_BODY = """
threadgroup float a_tile[16][16];
threadgroup float b_tile[16][16];
const uint K = A.get_extent(0);
const uint M = A.get_extent(1);
const uint N = B.get_extent(0);
const uint col = gid.x;
const uint row = gid.y;
float acc = 0.0f;
for (uint k0 = 0; k0 < K; k0 += 16) {
    a_tile[lid.y][lid.x] = (row < M && k0 + lid.x < K) ? A[k0 + lid.x, row] : 0.0f;
    b_tile[lid.y][lid.x] = (col < N && k0 + lid.y < K) ? B[col, k0 + lid.y] : 0.0f;
    SYNC
    for (uint k = 0; k < 16; ++k) {
        acc += a_tile[lid.y][k] * b_tile[k][lid.x];
    }
    SYNC
}
if (row < M && col < N) C[col, row] = acc;
"""

_TILE_PARAMS = [
    MetalParameter("gid", "uint2", "thread_position_in_grid"),
    MetalParameter("lid", "uint2", "thread_position_in_threadgroup"),
]

tiled_matmul = TorchMetalKernel(
    "bench_tiled_matmul",
    ["A", "B"],
    ["C"],
    src=_TILED_MATMUL_BODY.replace("SYNC", "threadgroup_barrier(mem_flags::mem_threadgroup);"),
    torch_defn=torch_matmul,
    metal_params=_TILE_PARAMS,
)

# Side of the output tile one SIMD-group of the simdgroup_matrix GEMM computes.
SIMD_TILE = 32

# GEMM on simdgroup_matrix: each SIMD-group (one threadgroup of 32 threads)
# computes a 32 x 32 tile of C as 4 x 4 accumulators of 8 x 8, loading its
# 8 x 8 fragments of A and B straight from device memory (row-major torch
# tensors). M and N must be multiples of 32, K of 8.
simdgroup_gemm = TorchMetalKernel(
    "bench_simdgroup_gemm",
    ["A", "B"],
    ["C"],
    src="""
const uint K = A.get_extent(0);
const uint N = B.get_extent(0);
const uint n0 = tg.x * 32;
const uint m0 = tg.y * 32;
simdgroup_float8x8 acc[4][4];
for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
}
for (uint k0 = 0; k0 < K; k0 += 8) {
    simdgroup_float8x8 a[4];
    simdgroup_float8x8 b[4];
    for (int i = 0; i < 4; ++i) simdgroup_load(a[i], A.get_data_ptr(), K, ulong2(k0, m0 + 8 * i));
    for (int j = 0; j < 4; ++j) simdgroup_load(b[j], B.get_data_ptr(), N, ulong2(n0 + 8 * j, k0));
    for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 4; ++j) simdgroup_multiply_accumulate(acc[i][j], a[i], b[j], acc[i][j]);
    }
}
for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
        simdgroup_store(acc[i][j], C.get_data_ptr(), N, ulong2(n0 + 8 * j, m0 + 8 * i));
    }
}
""",
    torch_defn=torch_matmul,
    metal_params=[MetalParameter("tg", "uint2", "threadgroup_position_in_grid")],
)


def torch_barrier_loop(x: torch.Tensor, count: int) -> torch.Tensor:
    return x + count


# Nothing but barriers: each thread waits `count` times, then writes one value
# (so the result proves every thread ran to the end).
barrier_loop = TorchMetalKernel(
    "bench_barrier_loop",
    ["x", "count"],
    ["out"],
    src="""
for (int i = 0; i < count; ++i) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
}
if (id < out.get_extent(0)) out[id] = x[id] + count;
""",
    torch_defn=torch_barrier_loop,
    metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")],
)


def barriers_per_thread(k: int) -> int:
    """Barriers each thread of the tiled matmul passes for an inner size ``k``."""
    return 2 * ((k + TILE - 1) // TILE)


# ---- row kernels in the style of MLX's (one threadgroup per row, four elements
# per thread per step, SIMD-group then threadgroup reductions). Rows are the
# innermost torch dimension and contiguous: a torch [rows, dim] tensor is
# x[col, row] here, and &x[0, row] is the row's first element.

_ROW_PARAMS = [
    MetalParameter("row", "uint", "threadgroup_position_in_grid"),
    MetalParameter("lid", "uint", "thread_index_in_threadgroup"),
    MetalParameter("threads", "uint", "threads_per_threadgroup"),
    MetalParameter("lane", "uint", "thread_index_in_simdgroup"),
    MetalParameter("simd", "uint", "simdgroup_index_in_threadgroup"),
    MetalParameter("simds", "uint", "simdgroups_per_threadgroup"),
]


def torch_softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


# Online softmax: one pass keeps each thread's running maximum and the sum of
# exponentials relative to it; the second pass reads the row again (from
# cache) and writes exp(x - max) / sum.
softmax = TorchMetalKernel(
    "bench_softmax",
    ["x"],
    ["out"],
    src="""
const uint dim = x.get_extent(0);
device const half* in_row = &x[0, row];
device half* out_row = &out[0, row];
float m = -INFINITY, s = 0.0f;
for (uint i = 4 * lid; i < dim; i += 4 * threads) {
    const float4 v = float4(*(device const half4*)(in_row + i));
    const float new_m = max(m, max(max(v.x, v.y), max(v.z, v.w)));
    const float4 e = exp(v - new_m);
    s = s * exp(m - new_m) + (e.x + e.y) + (e.z + e.w);
    m = new_m;
}
threadgroup float maxes[32];
threadgroup float sums[32];
float simd_m = simd_max(m);
float simd_s = simd_sum(m == -INFINITY ? 0.0f : s * exp(m - simd_m));
if (lane == 0) { maxes[simd] = simd_m; sums[simd] = simd_s; }
threadgroup_barrier(mem_flags::mem_threadgroup);
if (simd == 0) {
    const float gm = lane < simds ? maxes[lane] : -INFINITY;
    const float gs = lane < simds ? sums[lane] : 0.0f;
    const float total_m = simd_max(gm);
    const float total_s = simd_sum(gm == -INFINITY ? 0.0f : gs * exp(gm - total_m));
    if (lane == 0) { maxes[0] = total_m; sums[0] = total_s; }
}
threadgroup_barrier(mem_flags::mem_threadgroup);
const float row_max = maxes[0];
const float inverse = 1.0f / sums[0];
for (uint i = 4 * lid; i < dim; i += 4 * threads) {
    const float4 v = float4(*(device const half4*)(in_row + i));
    *(device half4*)(out_row + i) = half4(exp(v - row_max) * inverse);
}
""",
    torch_defn=torch_softmax,
    metal_params=_ROW_PARAMS,
)


def torch_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)


rms_norm = TorchMetalKernel(
    "bench_rms_norm",
    ["x", "weight", "eps"],
    ["out"],
    src="""
const uint dim = x.get_extent(0);
device const half* in_row = &x[0, row];
device half* out_row = &out[0, row];
device const half* w = &weight[0];
float acc = 0.0f;
for (uint i = 4 * lid; i < dim; i += 4 * threads) {
    const float4 v = float4(*(device const half4*)(in_row + i));
    acc += dot(v, v);
}
threadgroup float partial[32];
acc = simd_sum(acc);
if (lane == 0) partial[simd] = acc;
threadgroup_barrier(mem_flags::mem_threadgroup);
if (simd == 0) {
    const float total = simd_sum(lane < simds ? partial[lane] : 0.0f);
    if (lane == 0) partial[0] = total;
}
threadgroup_barrier(mem_flags::mem_threadgroup);
const float scale = rsqrt(partial[0] / float(dim) + eps);
for (uint i = 4 * lid; i < dim; i += 4 * threads) {
    const float4 v = float4(*(device const half4*)(in_row + i));
    const float4 g = float4(*(device const half4*)(w + i));
    *(device half4*)(out_row + i) = half4(v * scale * g);
}
""",
    torch_defn=torch_rms_norm,
    metal_params=_ROW_PARAMS,
)


def torch_gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.float() @ b.float()).to(a.dtype)


# A SIMD-group-matrix GEMM as Metal code writes one (MLX's and llama.cpp's
# simdgroup kernels have this shape): a 64x64 block of C per threadgroup of
# four SIMD-groups, each owning a 32x32 quarter as 4x4 8x8 accumulators in
# float; the A and B tiles of 32-long K slices go through threadgroup memory,
# and every SIMD-group loads its 8x8 operands from there. Half in, float
# accumulation, half out. M, N and K must be multiples of 64, 64 and 32.
GEMM_BLOCK = 64
GEMM_THREADS = 128
gemm = TorchMetalKernel(
    "bench_tiled_simdgroup_gemm_half",
    ["A", "B"],
    ["C"],
    src="""
constexpr uint BM = 64, BN = 64, BK = 32;
threadgroup half a_tile[BM * BK];
threadgroup half b_tile[BK * BN];
const uint K = A.get_extent(0);
const uint N = B.get_extent(0);
const uint m0 = group.y * BM, n0 = group.x * BN;
const uint sm = (simd / 2) * 32, sn = (simd % 2) * 32;
device const half* a_rows = &A[0, m0];
device const half* b_rows = &B[n0, 0];
simdgroup_float8x8 acc[4][4];
for (uint i = 0; i < 4; ++i)
    for (uint j = 0; j < 4; ++j) acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
for (uint k0 = 0; k0 < K; k0 += BK) {
    for (uint e = lid; e < BM * BK; e += 128) {
        const uint r = e / BK, c = e % BK;
        a_tile[e] = a_rows[r * K + k0 + c];
    }
    for (uint e = lid; e < BK * BN; e += 128) {
        const uint r = e / BN, c = e % BN;
        b_tile[e] = b_rows[(k0 + r) * N + c];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint kk = 0; kk < BK; kk += 8) {
        simdgroup_half8x8 a[4], b[4];
        for (uint i = 0; i < 4; ++i) simdgroup_load(a[i], a_tile, BK, ulong2(kk, sm + 8 * i));
        for (uint j = 0; j < 4; ++j) simdgroup_load(b[j], b_tile, BN, ulong2(sn + 8 * j, kk));
        for (uint i = 0; i < 4; ++i)
            for (uint j = 0; j < 4; ++j)
                simdgroup_multiply_accumulate(acc[i][j], a[i], b[j], acc[i][j]);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
}
device half* c_rows = &C[0, m0];
for (uint i = 0; i < 4; ++i) {
    for (uint j = 0; j < 4; ++j) {
        simdgroup_half8x8 out;
        out.thread_elements() = half2(acc[i][j].thread_elements());
        simdgroup_store(out, c_rows, N, ulong2(n0 + sn + 8 * j, sm + 8 * i));
    }
}
""",
    torch_defn=torch_gemm,
    metal_params=[
        MetalParameter("group", "uint2", "threadgroup_position_in_grid"),
        MetalParameter("lid", "uint", "thread_index_in_threadgroup"),
        MetalParameter("simd", "uint", "simdgroup_index_in_threadgroup"),
    ],
)


# The same GEMM as a Metal author tunes it for throughput (the shape of MLX's
# steel GEMM loaders and ggml's kernel_mul_mm epilogue): a 128x128 block of C
# per threadgroup of eight SIMD-groups, each owning 32x64 as 4x8 accumulators;
# A and B tiles copied 16 bytes per thread and read, into rows padded by 8
# halves so that the eight rows of an 8x8 load fall in different memory
# banks; the float accumulators leave through threadgroup memory, one 8x8
# block at a time per SIMD-group, and are rounded to half on the way out.
# M, N and K must be multiples of 128, 128 and 32.
GEMM_WIDE_BLOCK = 128
GEMM_WIDE_THREADS = 256
gemm_wide = TorchMetalKernel(
    "bench_wide_simdgroup_gemm_half",
    ["A", "B"],
    ["C"],
    src="""
constexpr uint BM = 128, BN = 128, BK = 32, AP = BK + 8, BP = BN + 8;
threadgroup half a_tile[BM * AP];
threadgroup half b_tile[BK * BP];
threadgroup float staged[8][64];
const uint K = A.get_extent(0);
const uint N = B.get_extent(0);
const uint m0 = group.y * BM, n0 = group.x * BN;
const uint sm = (simd / 2) * 32, sn = (simd % 2) * 64;
device const half* a_rows = &A[0, m0];
device const half* b_rows = &B[n0, 0];
simdgroup_float8x8 acc[4][8];
for (uint i = 0; i < 4; ++i)
    for (uint j = 0; j < 8; ++j) acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
for (uint k0 = 0; k0 < K; k0 += BK) {
    for (uint v = lid; v < BM * BK / 8; v += 256) {
        const uint r = v / (BK / 8), c = v % (BK / 8) * 8;
        device const uint4* from = (device const uint4*)(a_rows + r * K + k0 + c);
        *(threadgroup uint4*)(a_tile + r * AP + c) = *from;
    }
    for (uint v = lid; v < BK * BN / 8; v += 256) {
        const uint r = v / (BN / 8), c = v % (BN / 8) * 8;
        device const uint4* from = (device const uint4*)(b_rows + (k0 + r) * N + c);
        *(threadgroup uint4*)(b_tile + r * BP + c) = *from;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint kk = 0; kk < BK; kk += 8) {
        simdgroup_half8x8 a[4], b[8];
        for (uint i = 0; i < 4; ++i) simdgroup_load(a[i], a_tile, AP, ulong2(kk, sm + 8 * i));
        for (uint j = 0; j < 8; ++j) simdgroup_load(b[j], b_tile, BP, ulong2(sn + 8 * j, kk));
        for (uint i = 0; i < 4; ++i)
            for (uint j = 0; j < 8; ++j)
                simdgroup_multiply_accumulate(acc[i][j], a[i], b[j], acc[i][j]);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
}
device half* c_rows = &C[0, m0];
for (uint i = 0; i < 4; ++i) {
    for (uint j = 0; j < 8; ++j) {
        simdgroup_store(acc[i][j], staged[simd], 8);
        simdgroup_barrier(mem_flags::mem_threadgroup);
        const uint r = lane / 4, c = lane % 4 * 2;
        device half* to = c_rows + (sm + 8 * i + r) * N + n0 + sn + 8 * j + c;
        to[0] = half(staged[simd][r * 8 + c]);
        to[1] = half(staged[simd][r * 8 + c + 1]);
        simdgroup_barrier(mem_flags::mem_threadgroup);
    }
}
""",
    torch_defn=torch_gemm,
    metal_params=[
        MetalParameter("group", "uint2", "threadgroup_position_in_grid"),
        MetalParameter("lid", "uint", "thread_index_in_threadgroup"),
        MetalParameter("simd", "uint", "simdgroup_index_in_threadgroup"),
        MetalParameter("lane", "uint", "thread_index_in_simdgroup"),
    ],
)


# The ceiling of SIMD-group matrix products on a backend: each SIMD-group
# multiplies two half 8x8 matrices it holds into eight float accumulators,
# `rounds` times, with no memory traffic in the loop; 2 * 8^3 useful
# floating-point operations per product. Every SIMD-group stores the same
# 8x8 result (the sum of its accumulators) into C, so that none of the work
# is dead code.
def torch_mma_peak(A: torch.Tensor, B: torch.Tensor, rounds: int) -> torch.Tensor:
    """What every SIMD-group stores: the sum of its accumulators, 8 rounds A B + (0 + ... + 7)."""
    return 8 * rounds * (A.float() @ B.float()) + 28


MMA_PEAK_PRODUCTS_PER_ROUND = 8
mma_peak = TorchMetalKernel(
    "bench_simdgroup_product_peak",
    ["A", "B", "rounds"],
    ["C"],
    src="""
simdgroup_half8x8 a, b;
simdgroup_load(a, &A[0, 0]);
simdgroup_load(b, &B[0, 0]);
simdgroup_float8x8 acc[8];
// Distinct accumulators: equal ones would be one computation to the compiler.
for (uint j = 0; j < 8; ++j) acc[j] = make_filled_simdgroup_matrix<float, 8, 8>(float(j));
for (int r = 0; r < rounds; ++r)
    for (uint j = 0; j < 8; ++j) simdgroup_multiply_accumulate(acc[j], a, b, acc[j]);
// The sum of the accumulators (each times the identity), so that all are live.
const simdgroup_float8x8 identity(1.0f);
for (uint j = 1; j < 8; ++j) simdgroup_multiply_accumulate(acc[0], acc[j], identity, acc[0]);
simdgroup_store(acc[0], &C[0, 0]);
""",
    torch_defn=torch_mma_peak,
)


# ---- MLX's looped softmax and RMSNorm (mlx/backend/metal/kernels/softmax.h and
# rms_norm.metal: the variants for rows longer than one read per thread), in
# float32: one threadgroup per row, each thread reads four consecutive values
# per step of a loop over the row, then SIMD-group and threadgroup reductions.
# Rows are contiguous: the row's data starts at &x[0, row].

softmax_looped = TorchMetalKernel(
    "bench_softmax_looped",
    ["x"],
    ["out"],
    src="""
threadgroup float local_max[32];
threadgroup float local_normalizer[32];
const uint dim = x.get_extent(0);
device const float* in = &x[0, row];
device float* out_row = &out[0, row];
float maxval = -FLT_MAX;
float normalizer = 0.0f;
for (uint r = 0; r < dim; r += threads * 4) {
    const uint offset = r + lid * 4;
    float vals[4];
    if (offset + 4 <= dim) {
        for (int i = 0; i < 4; i++) vals[i] = in[offset + i];
    } else {
        for (int i = 0; i < 4; i++) vals[i] = offset + i < dim ? in[offset + i] : -FLT_MAX;
    }
    const float before = maxval;
    for (int i = 0; i < 4; i++) maxval = max(maxval, vals[i]);
    normalizer *= exp(before - maxval);
    for (int i = 0; i < 4; i++) normalizer += exp(vals[i] - maxval);
}
float prevmax = maxval;
maxval = simd_max(maxval);
normalizer *= exp(prevmax - maxval);
normalizer = simd_sum(normalizer);
prevmax = maxval;
if (lane == 0) local_max[simd] = maxval;
threadgroup_barrier(mem_flags::mem_threadgroup);
maxval = simd_max(lane < simds ? local_max[lane] : -FLT_MAX);
normalizer *= exp(prevmax - maxval);
if (lane == 0) local_normalizer[simd] = normalizer;
threadgroup_barrier(mem_flags::mem_threadgroup);
normalizer = 1.0f / simd_sum(lane < simds ? local_normalizer[lane] : 0.0f);
for (uint r = 0; r < dim; r += threads * 4) {
    const uint offset = r + lid * 4;
    if (offset + 4 <= dim) {
        for (int i = 0; i < 4; i++) out_row[offset + i] = exp(in[offset + i] - maxval) * normalizer;
    } else {
        for (int i = 0; i < 4; i++) {
            if (offset + i < dim) out_row[offset + i] = exp(in[offset + i] - maxval) * normalizer;
        }
    }
}
""",
    torch_defn=torch_softmax,
    metal_params=_ROW_PARAMS,
)

rms_norm_looped = TorchMetalKernel(
    "bench_rms_norm_looped",
    ["x", "weight", "eps"],
    ["out"],
    src="""
threadgroup float local_inv_mean[1];
threadgroup float local_sums[32];
const uint dim = x.get_extent(0);
device const float* in = &x[0, row];
device float* out_row = &out[0, row];
device const float* w = &weight[0];
float acc = 0.0f;
for (uint r = 0; r < dim; r += threads * 4) {
    const uint offset = r + lid * 4;
    if (offset + 4 <= dim) {
        for (int i = 0; i < 4; i++) acc += in[offset + i] * in[offset + i];
    } else {
        for (int i = 0; i < 4; i++) {
            if (offset + i < dim) acc += in[offset + i] * in[offset + i];
        }
    }
}
acc = simd_sum(acc);
if (simd == 0) local_sums[lane] = 0.0f;
threadgroup_barrier(mem_flags::mem_threadgroup);
if (lane == 0) local_sums[simd] = acc;
threadgroup_barrier(mem_flags::mem_threadgroup);
if (simd == 0) {
    acc = simd_sum(local_sums[lane]);
    if (lane == 0) local_inv_mean[0] = precise::rsqrt(acc / float(dim) + eps);
}
threadgroup_barrier(mem_flags::mem_threadgroup);
const float inv_mean = local_inv_mean[0];
for (uint r = 0; r < dim; r += threads * 4) {
    const uint offset = r + lid * 4;
    if (offset + 4 <= dim) {
        for (int i = 0; i < 4; i++) out_row[offset + i] = in[offset + i] * inv_mean * w[offset + i];
    } else {
        for (int i = 0; i < 4; i++) {
            if (offset + i < dim) out_row[offset + i] = in[offset + i] * inv_mean * w[offset + i];
        }
    }
}
""",
    torch_defn=torch_rms_norm,
    metal_params=_ROW_PARAMS,
)

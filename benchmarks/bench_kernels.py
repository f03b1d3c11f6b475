"""The kernels every benchmark runs, written as a user writes them.

The Python benchmarks call these objects; ``cpp/render_kernels.py`` renders the
same definitions for the C++ harness, so both measure identical Metal source.
"""

from __future__ import annotations

import torch

from coreai_torch import MetalParameter, TorchMetalKernel

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

# The tiled matmul as a compiler that runs the barrier-free regions of a
# threadgroup as loops would emit it: one CPU thread runs a whole 16 x 16 tile
# of output, each region between two barriers of the kernel above becoming a
# loop over the tile's threads, and the threadgroup tiles becoming that
# thread's locals. It has no barrier and no threadgroup memory, so the CPU
# backend runs it in loop mode. It is a measured prototype of that design (the
# transformation itself is not implemented); its result is checked.
tiled_matmul_as_loops = TorchMetalKernel(
    "bench_tiled_matmul_as_loops",
    ["A", "B"],
    ["C"],
    src="""
const uint K = A.get_extent(0);
const uint M = A.get_extent(1);
const uint N = B.get_extent(0);
const uint c0 = tile.x * 16;
const uint r0 = tile.y * 16;
float a_tile[16][16];
float b_tile[16][16];
float acc[16][16] = {};
for (uint k0 = 0; k0 < K; k0 += 16) {
    for (uint ty = 0; ty < 16; ++ty) {
        for (uint tx = 0; tx < 16; ++tx) {
            a_tile[ty][tx] = (r0 + ty < M && k0 + tx < K) ? A[k0 + tx, r0 + ty] : 0.0f;
            b_tile[ty][tx] = (c0 + tx < N && k0 + ty < K) ? B[c0 + tx, k0 + ty] : 0.0f;
        }
    }
    for (uint ty = 0; ty < 16; ++ty) {
        for (uint tx = 0; tx < 16; ++tx) {
            float sum = acc[ty][tx];
            for (uint k = 0; k < 16; ++k) {
                sum += a_tile[ty][k] * b_tile[k][tx];
            }
            acc[ty][tx] = sum;
        }
    }
}
for (uint ty = 0; ty < 16; ++ty) {
    for (uint tx = 0; tx < 16; ++tx) {
        if (r0 + ty < M && c0 + tx < N) C[c0 + tx, r0 + ty] = acc[ty][tx];
    }
}
""",
    torch_defn=torch_matmul,
    metal_params=[MetalParameter("tile", "uint2", "thread_position_in_grid")],
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

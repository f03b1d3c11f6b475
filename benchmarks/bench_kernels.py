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

# The same loads, stores and multiply-adds with the barriers taken out. Without
# them the CPU backend runs each group as a plain loop over its threads, so the
# tiles hold stale values and the product is wrong: this kernel exists only to
# time the arithmetic, and its result is never compared with anything.
tiled_matmul_no_barrier = TorchMetalKernel(
    "bench_tiled_matmul_no_barrier",
    ["A", "B"],
    ["C"],
    src=_TILED_MATMUL_BODY.replace("SYNC", ""),
    torch_defn=torch_matmul,
    metal_params=_TILE_PARAMS,
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

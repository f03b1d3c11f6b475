"""Fiber mode: barriers, threadgroup memory, SIMD-group and quad-group functions."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support.cpu_launch import Scalar, Tensor, kernel

F32 = torch.float32
I32 = torch.int32

TILE = 16
MATMUL = kernel(
    "tiled_matmul",
    [Tensor("A", rank=2), Tensor("B", rank=2)],
    [Tensor("C", rank=2)],
    f"""
    // A is torch [M, K] (read A[k, m]), B is [K, N], C is [M, N].
    const uint K = A.get_extent(0), M = A.get_extent(1), N = B.get_extent(0);
    threadgroup float a_tile[{TILE}][{TILE}];
    threadgroup float b_tile[{TILE}][{TILE}];
    const uint col = gid.x, row = gid.y;
    float acc = 0.0f;
    for (uint k0 = 0; k0 < K; k0 += {TILE}) {{
        const uint ka = k0 + lid.x, kb = k0 + lid.y;
        a_tile[lid.y][lid.x] = (row < M && ka < K) ? A[ka, row] : 0.0f;
        b_tile[lid.y][lid.x] = (col < N && kb < K) ? B[col, kb] : 0.0f;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint k = 0; k < {TILE}; ++k) acc += a_tile[lid.y][k] * b_tile[k][lid.x];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }}
    if (row < M && col < N) C[col, row] = acc;
    """,
    [
        ("gid", "uint2", "thread_position_in_grid"),
        ("lid", "uint2", "thread_position_in_threadgroup"),
    ],
)


def run_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    m, n = a.shape[0], b.shape[1]
    # Whole tiles: every thread of a group loads its element of the tiles
    # (threads past the edge load zeros), as tiled kernels on the GPU expect.
    grid = (-(-n // TILE) * TILE, -(-m // TILE) * TILE, 1)
    (c,) = MATMUL(a, b, grid=grid, group=(TILE, TILE, 1), shapes=[[m, n]])
    return c


@pytest.mark.parametrize(("m", "k", "n"), [(16, 16, 16), (37, 50, 29), (1, 70, 5)])
def test_tiled_matmul_with_threadgroup_memory(m: int, k: int, n: int) -> None:
    g = torch.Generator().manual_seed(m * k * n)
    a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    # Same products, summed in a different order than torch's: a few float32 ulps.
    torch.testing.assert_close(run_matmul(a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_matmul_threadgroups_do_not_share_tiles() -> None:
    # Many groups over both intra-op threads: a tile shared between two running
    # groups would corrupt results.
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(130, 64, generator=g), torch.randn(64, 130, generator=g)
    for _ in range(3):
        torch.testing.assert_close(run_matmul(a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_barrier_inside_bounds_check() -> None:
    # The grid edge group holds 36 of 64 threads; in every group only threads
    # with id < n (a scalar) reach the barrier, the others return at once.
    k = kernel(
        "barrier_in_bounds",
        [Tensor("x"), Scalar("n", "int")],
        [Tensor("out")],
        """
        threadgroup float tile[64];
        if (id < uint(n)) {
            tile[lid] = x[id];
            threadgroup_barrier(mem_flags::mem_threadgroup);
            // Reverse within the part of the group that is in bounds.
            const uint first = id - lid;
            const uint count = min(uint(n) - first, size);
            out[id] = tile[count - 1 - lid];
        }
        """,
        [
            ("id", "uint", "thread_position_in_grid"),
            ("lid", "uint", "thread_position_in_threadgroup"),
            ("size", "uint", "threads_per_threadgroup"),
        ],
    )
    n = 150
    x = torch.arange(n, dtype=F32)
    (out,) = k(x, n, grid=(164, 1, 1), group=(64, 1, 1), shapes=[[n]])
    expected = torch.cat([x[0:64].flip(0), x[64:128].flip(0), x[128:150].flip(0)])
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_barrier_after_early_return() -> None:
    k = kernel(
        "early_return",
        [Tensor("x")],
        [Tensor("out")],
        """
        threadgroup float tile[32];
        out[id] = -1.0f;
        if (lid % 3 == 0) return;          // a third of the group leaves before the barriers
        tile[lid] = x[id] * 2.0f;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        const uint partner = (lid % 3 == 1) ? lid + 1 : lid - 1;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        out[id] = partner < 32 ? tile[partner] : 0.0f;
        """,
        [("id", "uint", "thread_position_in_grid"), ("lid", "uint", "thread_index_in_threadgroup")],
    )
    x = torch.arange(64, dtype=F32)
    (out,) = k(x, grid=(64, 1, 1), group=(32, 1, 1), shapes=[[64]])
    expected = torch.full((64,), -1.0)
    for i in range(64):
        lid = i % 32
        if lid % 3 == 1:
            expected[i] = 2 * x[i + 1] if lid + 1 < 32 else 0.0
        elif lid % 3 == 2:
            expected[i] = 2 * x[i - 1]
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_block_prefix_scan() -> None:
    # Hillis-Steele inclusive scan over each group of 256, barriers in a loop.
    k = kernel(
        "block_scan",
        [Tensor("x", I32)],
        [Tensor("out", I32)],
        """
        threadgroup int buf[2][256];
        uint src = 0;
        buf[0][lid] = id < x.get_extent(0) ? x[id] : 0;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint offset = 1; offset < size; offset *= 2) {
            const int v = buf[src][lid] + (lid >= offset ? buf[src][lid - offset] : 0);
            buf[1 - src][lid] = v;
            src = 1 - src;
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }
        if (id < out.get_extent(0)) out[id] = buf[src][lid];
        """,
        [
            ("id", "uint", "thread_position_in_grid"),
            ("lid", "uint", "thread_index_in_threadgroup"),
            ("size", "uint", "threads_per_threadgroup"),
        ],
    )
    g = torch.Generator().manual_seed(1)
    x = torch.randint(-100, 100, (700,), dtype=I32, generator=g)
    (out,) = k(x, grid=(700, 1, 1), group=(256, 1, 1), shapes=[[700]])
    expected = torch.cat([c.cumsum(0) for c in x.split(256)]).to(I32)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


# ---- SIMD-group functions ------------------------------------------------------

SIMD_FUNCTIONS = [
    "simd_sum(v)",
    "simd_product(v)",
    "simd_min(v)",
    "simd_max(v)",
    "simd_prefix_inclusive_sum(v)",
    "simd_prefix_exclusive_sum(v)",
    "simd_prefix_inclusive_product(v)",
    "simd_prefix_exclusive_product(v)",
    "simd_shuffle(v, (lane * 7) % 32)",
    "simd_shuffle_up(v, 3)",
    "simd_shuffle_down(v, 5)",
    "simd_shuffle_xor(v, 6)",
    "simd_shuffle_rotate_up(v, 3)",
    "simd_shuffle_rotate_down(v, 5)",
    "simd_broadcast(v, 9)",
    "simd_broadcast_first(v)",
    "float(simd_is_first())",
    "float(simd_all(v > -2.5f))",
    "float(simd_any(v > 2.5f))",
    "float(uint64_t(simd_ballot(v > 0.0f)) % 65536)",
    "float(uint64_t(simd_ballot(v > 0.0f)) >> 16)",
    "float(simd_and(int(v * 4.0f) + 16))",
    "float(simd_or(int(v * 4.0f) + 16))",
    "float(simd_xor(int(v * 4.0f) + 16))",
    "simd_shuffle_and_fill_up(v, -v, 3)",
    "simd_shuffle_and_fill_down(v, -v, 5)",
    "simd_shuffle_and_fill_up(v, -v, 3, 8)",
    "simd_shuffle_and_fill_down(v, -v, 2, 8)",
    "simd_sum(float2(v, 2.0f * v)).y",
    "simd_max(float4(v, -v, 1.0f, 0.0f)).y",
]


def simd_reference(name: str, values: list[float], lane: int) -> float:
    """What lane ``lane`` of a SIMD-group holding ``values`` (its active lanes) gets."""
    n = len(values)
    v = values[lane]

    def tree(op):  # xor butterfly: neighbours at distance 1, 2, 4, ...
        vals: list = [np.float32(x) for x in values]
        present = [True] * n
        vals += [np.float32(0)] * (32 - n)
        present += [False] * (32 - n)
        step = 1
        while step < 32:
            for i in range(0, 32, 2 * step):
                j = i + step
                if present[i] and present[j]:
                    vals[i] = np.float32(op(vals[i], vals[j]))
                elif present[j]:
                    vals[i], present[i] = vals[j], True
            step *= 2
        return float(vals[0])

    def get(src: int) -> float:
        return values[src] if 0 <= src < n else v

    def fill(src: int) -> float:  # filling_data is -v; a missing lane gives own data
        return -values[src] if 0 <= src < n else v

    def fill_up(delta: int, modulo: int) -> float:
        base, j = lane - lane % modulo, lane % modulo
        return get(base + j - delta) if j >= delta else fill(base + modulo - delta + j)

    def fill_down(delta: int, modulo: int) -> float:
        base, j = lane - lane % modulo, lane % modulo
        return get(base + j + delta) if j + delta < modulo else fill(base + j + delta - modulo)

    ints = [int(np.float32(x) * np.float32(4.0)) + 16 for x in values]
    ballot = sum(1 << i for i, x in enumerate(values) if x > 0)
    table = {
        "simd_sum(v)": lambda: tree(lambda a, b: a + b),
        "simd_product(v)": lambda: tree(lambda a, b: a * b),
        "simd_min(v)": lambda: min(values),
        "simd_max(v)": lambda: max(values),
        "simd_prefix_inclusive_sum(v)": lambda: float(np.cumsum(np.float32(values))[lane]),
        "simd_prefix_exclusive_sum(v)": lambda: float(np.cumsum(np.float32([0, *values]))[lane]),
        "simd_prefix_inclusive_product(v)": lambda: float(np.cumprod(np.float32(values))[lane]),
        "simd_prefix_exclusive_product(v)": lambda: float(
            np.cumprod(np.float32([1, *values]))[lane]
        ),
        "simd_shuffle(v, (lane * 7) % 32)": lambda: get((lane * 7) % 32),
        "simd_shuffle_up(v, 3)": lambda: get(lane - 3),
        "simd_shuffle_down(v, 5)": lambda: get(lane + 5),
        "simd_shuffle_xor(v, 6)": lambda: get(lane ^ 6),
        "simd_shuffle_rotate_up(v, 3)": lambda: get((lane - 3) % 32),
        "simd_shuffle_rotate_down(v, 5)": lambda: get((lane + 5) % 32),
        "simd_broadcast(v, 9)": lambda: get(9),
        "simd_broadcast_first(v)": lambda: values[0],
        "float(simd_is_first())": lambda: float(lane == 0),
        "float(simd_all(v > -2.5f))": lambda: float(all(x > -2.5 for x in values)),
        "float(simd_any(v > 2.5f))": lambda: float(any(x > 2.5 for x in values)),
        "float(uint64_t(simd_ballot(v > 0.0f)) % 65536)": lambda: float(ballot % 65536),
        "float(uint64_t(simd_ballot(v > 0.0f)) >> 16)": lambda: float(ballot >> 16),
        "float(simd_and(int(v * 4.0f) + 16))": lambda: float(np.bitwise_and.reduce(ints)),
        "float(simd_or(int(v * 4.0f) + 16))": lambda: float(np.bitwise_or.reduce(ints)),
        "float(simd_xor(int(v * 4.0f) + 16))": lambda: float(np.bitwise_xor.reduce(ints)),
        "simd_shuffle_and_fill_up(v, -v, 3)": lambda: fill_up(3, 32),
        "simd_shuffle_and_fill_down(v, -v, 5)": lambda: fill_down(5, 32),
        "simd_shuffle_and_fill_up(v, -v, 3, 8)": lambda: fill_up(3, 8),
        "simd_shuffle_and_fill_down(v, -v, 2, 8)": lambda: fill_down(2, 8),
        "simd_sum(float2(v, 2.0f * v)).y": lambda: tree(lambda a, b: a + b) * 2,
        "simd_max(float4(v, -v, 1.0f, 0.0f)).y": lambda: -min(values),
    }
    return table[name]()


def simd_kernel(functions: list[str], name: str):
    body = "const float v = x[id];\n" + "".join(
        f"out[{i}, id] = {f};\n" for i, f in enumerate(functions)
    )
    return kernel(
        name,
        [Tensor("x")],
        [Tensor("out", rank=2)],
        body,
        [("id", "uint", "thread_position_in_grid"), ("lane", "uint", "thread_index_in_simdgroup")],
    )


SIMD = simd_kernel(SIMD_FUNCTIONS, "simd_functions")


@pytest.mark.parametrize("threads", [64, 50])  # two full SIMD-groups; then one of 18 lanes
def test_every_simd_function_against_hand_computed_values(threads: int) -> None:
    g = torch.Generator().manual_seed(threads)
    # Multiples of 1/4 in [-3, 3] make the products and sums exact enough to
    # compare bit for bit with the reference (which also follows the tree order).
    x = torch.randint(-12, 13, (threads,), generator=g).to(F32) / 4
    x[x == 0] = 0.25
    (out,) = SIMD(
        x, grid=(threads, 1, 1), group=(threads, 1, 1), shapes=[[threads, len(SIMD_FUNCTIONS)]]
    )
    for s in range(0, threads, 32):
        values = x[s : s + 32].tolist()
        for lane in range(len(values)):
            for f, name in enumerate(SIMD_FUNCTIONS):
                want = simd_reference(name, values, lane)
                got = out[s + lane, f].item()
                assert got == pytest.approx(want, rel=1e-6), (name, s, lane)


def test_simd_sum_adds_in_butterfly_order() -> None:
    # Values whose float32 sum depends on the order of the additions.
    values = [1e8, 1.0, -1e8, 1.0] * 8
    x = torch.tensor(values, dtype=F32)
    k = simd_kernel(["simd_sum(v)"], "simd_sum_order")
    (out,) = k(x, grid=(32, 1, 1), group=(32, 1, 1), shapes=[[32, 1]])
    butterfly = simd_reference("simd_sum(v)", values, 0)
    sequential = float(np.cumsum(np.float32(values))[-1])
    assert butterfly != sequential  # the test means something
    assert out[:, 0].tolist() == [butterfly] * 32


def test_fill_functions_back_to_back_with_different_data() -> None:
    # Each fill function exchanges twice; the next call's first exchange reuses
    # the slot set of this call's first. Different data in each call shows a
    # lane that read its source after another lane had moved on (PyTorch's
    # cummax scan shuffles a value and then an index this way).
    functions = [
        "simd_shuffle_and_fill_up(v, -v, 3)",
        "simd_shuffle_and_fill_down(v + 100.0f, -v, 5)",
        "quad_shuffle_and_fill_up(v + 200.0f, -v, 1)",
        "quad_shuffle_and_fill_down(v + 300.0f, -v, 1, 2)",
        "simd_shuffle(v + 400.0f, 0)",
    ]
    k = simd_kernel(functions, "fill_back_to_back")
    x = torch.arange(32, dtype=F32) + 1
    (out,) = k(x, grid=(32, 1, 1), group=(32, 1, 1), shapes=[[32, len(functions)]])
    v = x.tolist()
    for lane in range(32):
        q, quad = lane % 4, lane - lane % 4
        want = [
            v[lane - 3] if lane >= 3 else -v[29 + lane],
            v[lane + 5] + 100 if lane + 5 < 32 else -v[lane + 5 - 32],
            v[lane - 1] + 200 if q >= 1 else -v[quad + 3],
            v[lane + 1] + 300 if q % 2 + 1 < 2 else -v[quad + q - q % 2 + (q % 2 + 1) % 2],
            v[0] + 400,
        ]
        assert out[lane].tolist() == want, lane


QUAD_FUNCTIONS = [
    "quad_sum(v)",
    "quad_product(v)",
    "quad_min(v)",
    "quad_max(v)",
    "quad_prefix_inclusive_sum(v)",
    "quad_prefix_exclusive_sum(v)",
    "quad_shuffle(v, 3 - q)",
    "quad_shuffle_up(v, 1)",
    "quad_shuffle_down(v, 1)",
    "quad_shuffle_xor(v, 2)",
    "quad_shuffle_rotate_down(v, 1)",
    "quad_broadcast(v, 2)",
    "quad_broadcast_first(v)",
    "float(quad_is_first())",
    "float(quad_all(v > 0.0f))",
    "float(quad_any(v > 2.0f))",
    "float(ushort(quad_ballot(v > 0.0f)))",
    "float(quad_or(int(v * 4.0f) + 16))",
    "quad_shuffle_and_fill_up(v, -v, 1)",
    "quad_shuffle_and_fill_down(v, -v, 1, 2)",
]


def quad_reference(name: str, quad: list[float], q: int) -> float:
    n = len(quad)
    v = quad[q]

    def get(src: int) -> float:
        return quad[src] if 0 <= src < n else v

    def fill_up(delta: int, modulo: int) -> float:
        j = q % modulo
        src = q - j + (j - delta if j >= delta else modulo - delta + j)
        if src >= n:
            return v
        return quad[src] if j >= delta else -quad[src]

    def fill_down(delta: int, modulo: int) -> float:
        j = q % modulo
        src = q - j + (j + delta if j + delta < modulo else j + delta - modulo)
        if src >= n:
            return v
        return quad[src] if j + delta < modulo else -quad[src]

    def tree(op):
        f = [np.float32(a) for a in quad]
        if n == 4:
            return float(op(op(f[0], f[1]), op(f[2], f[3])))
        acc = f[0]
        for a in f[1:]:
            acc = op(acc, a)
        return float(acc)

    table = {
        "quad_sum(v)": lambda: tree(lambda a, b: a + b),
        "quad_product(v)": lambda: tree(lambda a, b: a * b),
        "quad_min(v)": lambda: min(quad),
        "quad_max(v)": lambda: max(quad),
        "quad_prefix_inclusive_sum(v)": lambda: float(np.cumsum(np.float32(quad))[q]),
        "quad_prefix_exclusive_sum(v)": lambda: float(np.cumsum(np.float32([0, *quad]))[q]),
        "quad_shuffle(v, 3 - q)": lambda: get(3 - q),
        "quad_shuffle_up(v, 1)": lambda: get(q - 1),
        "quad_shuffle_down(v, 1)": lambda: get(q + 1) if q + 1 < 4 else v,
        "quad_shuffle_xor(v, 2)": lambda: get(q ^ 2),
        "quad_shuffle_rotate_down(v, 1)": lambda: get((q + 1) % 4),
        "quad_broadcast(v, 2)": lambda: get(2),
        "quad_broadcast_first(v)": lambda: quad[0],
        "float(quad_is_first())": lambda: float(q == 0),
        "float(quad_all(v > 0.0f))": lambda: float(all(a > 0 for a in quad)),
        "float(quad_any(v > 2.0f))": lambda: float(any(a > 2 for a in quad)),
        "float(ushort(quad_ballot(v > 0.0f)))": lambda: float(
            sum(1 << i for i, a in enumerate(quad) if a > 0)
        ),
        "quad_shuffle_and_fill_up(v, -v, 1)": lambda: fill_up(1, 4),
        "quad_shuffle_and_fill_down(v, -v, 1, 2)": lambda: fill_down(1, 2),
        "float(quad_or(int(v * 4.0f) + 16))": lambda: float(
            np.bitwise_or.reduce([int(np.float32(a) * 4) + 16 for a in quad])
        ),
    }
    return table[name]()


def test_every_quad_function_against_hand_computed_values() -> None:
    threads = 46  # the last quad has 2 lanes
    body = "const float v = x[id];\n" + "".join(
        f"out[{i}, id] = {f};\n" for i, f in enumerate(QUAD_FUNCTIONS)
    )
    k = kernel(
        "quad_functions",
        [Tensor("x")],
        [Tensor("out", rank=2)],
        body,
        [("id", "uint", "thread_position_in_grid"), ("q", "uint", "thread_index_in_quadgroup")],
    )
    g = torch.Generator().manual_seed(5)
    x = torch.randint(-12, 13, (threads,), generator=g).to(F32) / 4
    (out,) = k(
        x, grid=(threads, 1, 1), group=(threads, 1, 1), shapes=[[threads, len(QUAD_FUNCTIONS)]]
    )
    for s in range(0, threads, 4):
        quad = x[s : s + 4].tolist()
        for q in range(len(quad)):
            for f, name in enumerate(QUAD_FUNCTIONS):
                want = quad_reference(name, quad, q)
                assert out[s + q, f].item() == pytest.approx(want, rel=1e-6), (name, s, q)


def test_simd_functions_skip_lanes_that_returned() -> None:
    k = kernel(
        "simd_after_return",
        [Tensor("x")],
        [Tensor("out")],
        """
        out[id] = 0.0f;
        if (lane % 4 == 3) return;
        out[id] = simd_sum(x[id]) + simd_broadcast(x[id], 3);   // lane 3 has left
        """,
        [("id", "uint", "thread_position_in_grid"), ("lane", "uint", "thread_index_in_simdgroup")],
    )
    x = torch.arange(32, dtype=F32)
    (out,) = k(x, grid=(32, 1, 1), group=(32, 1, 1), shapes=[[32]])
    kept = [i for i in range(32) if i % 4 != 3]
    total = float(sum(kept))
    for i in range(32):
        # Reading a lane that has exited gives the caller its own value.
        want = 0.0 if i % 4 == 3 else total + i
        assert out[i].item() == want


def test_simd_and_vector_functions_on_half() -> None:
    k = kernel(
        "simd_half",
        [Tensor("x", torch.float16)],
        [Tensor("out", torch.float16)],
        "out[id] = simd_sum(x[id]) + simd_shuffle_xor(half2(x[id], -x[id]), 1).y;",
        [("id", "uint", "thread_position_in_grid")],
    )
    x = (torch.arange(32) % 5).to(torch.float16)
    (out,) = k(x, grid=(32, 1, 1), group=(32, 1, 1), shapes=[[32]])
    partner = x.view(16, 2).flip(1).reshape(32)
    torch.testing.assert_close(out, x.sum() - partner, rtol=0, atol=0)


def test_simdgroup_barrier_orders_threadgroup_memory_within_a_simdgroup() -> None:
    k = kernel(
        "simdgroup_barrier",
        [Tensor("x")],
        [Tensor("out")],
        """
        threadgroup float tile[64];
        tile[lid] = x[id];
        simdgroup_barrier(mem_flags::mem_threadgroup);
        out[id] = tile[(lid & ~31u) + (31 - lid % 32)];
        """,
        [("id", "uint", "thread_position_in_grid"), ("lid", "uint", "thread_index_in_threadgroup")],
    )
    x = torch.arange(128, dtype=F32)
    (out,) = k(x, grid=(128, 1, 1), group=(64, 1, 1), shapes=[[128]])
    torch.testing.assert_close(out, x.view(4, 32).flip(1).reshape(128), rtol=0, atol=0)


def test_synchronisation_hidden_from_the_source_scan_is_an_error() -> None:
    k = kernel(
        "hidden_call",
        [Tensor("x")],
        [Tensor("out")],
        "out[id] = REDUCE(sum)(x[id]);",
        [("id", "uint", "thread_position_in_grid")],
        helper="#define REDUCE(op) simd_##op",
    )
    with pytest.raises(RuntimeError, match="loop mode"):
        k(torch.ones(32), grid=(32, 1, 1), group=(32, 1, 1), shapes=[[32]])


def test_launches_from_several_python_threads() -> None:
    from concurrent.futures import ThreadPoolExecutor

    g = torch.Generator().manual_seed(2)
    pairs = [(torch.randn(40, 33, generator=g), torch.randn(33, 20, generator=g)) for _ in range(4)]

    def work(pair: tuple[torch.Tensor, torch.Tensor]) -> bool:
        a, b = pair
        return all(torch.allclose(run_matmul(a, b), a @ b, rtol=1e-5, atol=1e-5) for _ in range(5))

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert all(pool.map(work, pairs))

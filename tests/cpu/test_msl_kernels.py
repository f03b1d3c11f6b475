"""Kernels on CPU tensors that exercise each part of the Metal standard library."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from support.kernel_testing import run_checked

from coreai_torch import MetalParameter, TorchMetalKernel

# Every kernel here also runs clean under debug mode's checks (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("default_and_debug_mode")

GID = MetalParameter("id", "uint", "thread_position_in_grid")


def _launch(
    kernel: TorchMetalKernel, *args, threads: int, group: int = 64, shapes=None, opcheck=True
):
    shapes = shapes if shapes is not None else [list(args[0].shape)]
    # Every kernel here also passes torch.library.opcheck (schema, fake
    # implementation, tracing with dynamic shapes).
    return run_checked(
        kernel,
        *args,
        opcheck=opcheck,
        threads_per_grid=(threads, 1, 1),
        threads_per_thread_group=(min(group, threads), 1, 1),
        result_shapes=shapes,
    )


def _random(size: int, dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.rand(size, generator=generator) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(size, generator=generator) * 4).to(dtype)
    # Random 64-bit patterns cut down to the type: the full range, so that
    # wrap-around is exercised.
    bits = torch.randint(-(2**63), 2**63 - 1, (size,), generator=generator, dtype=torch.int64)
    if dtype == torch.uint64:
        return bits.view(torch.uint64)
    return bits.to(dtype)


# ---------------------------------------------------------------------------
# Element-wise kernels in every supported dtype.


def _minmax_reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.maximum(x, y) * 3 - torch.minimum(x, y)


minmax_kernel = TorchMetalKernel(
    "msl_minmax",
    ["x", "y"],
    ["out"],
    src="""
        if (id >= x.get_extent(0)) return;
        out[id] = max(x[id], y[id]) * ELEM(3) - min(x[id], y[id]);
    """,
    torch_defn=_minmax_reference,
    metal_params=[GID],
    template_dtypes={"x": "ELEM"},
)


def _or_reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x | y


bool_kernel = TorchMetalKernel(
    "msl_bool_or",
    ["x", "y"],
    ["out"],
    src="if (id < x.get_extent(0)) out[id] = x[id] || y[id];",
    torch_defn=_or_reference,
    metal_params=[GID],
)

NUMERIC_DTYPES = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.uint16,
    torch.int32,
    torch.uint32,
    torch.int64,
    torch.uint64,
]


def _wrapping_reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    # max * 3 - min with modular arithmetic, computed on Python integers so
    # that it is independent of torch's support for unsigned 64-bit math.
    bits = torch.iinfo(x.dtype).bits
    signed = torch.iinfo(x.dtype).min < 0
    values = []
    for a, b in zip(x.tolist(), y.tolist(), strict=True):
        r = (max(a, b) * 3 - min(a, b)) % (1 << bits)
        if signed and r >= 1 << (bits - 1):
            r -= 1 << bits
        values.append(r)
    return values


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=str)
def test_elementwise_in_every_dtype(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    x, y = _random(1000, dtype, g), _random(1000, dtype, g)
    out = _launch(minmax_kernel, x, y, threads=1000)
    assert out.dtype == dtype
    if dtype.is_floating_point:
        # Each operation rounds to the element type on both sides: exact.
        torch.testing.assert_close(out, _minmax_reference(x, y), rtol=0, atol=0)
    else:
        assert out.tolist() == _wrapping_reference(x, y)


def test_elementwise_bool() -> None:
    g = torch.Generator().manual_seed(1)
    x, y = _random(777, torch.bool, g), _random(777, torch.bool, g)
    out = _launch(bool_kernel, x, y, threads=777)
    assert out.dtype == torch.bool
    assert torch.equal(out, x | y)


# ---------------------------------------------------------------------------
# Vector types, constructors, swizzles and vector loads.


def _vector_reference(x: torch.Tensor) -> torch.Tensor:
    return x


vector_kernel = TorchMetalKernel(
    "msl_vectors",
    ["x"],
    ["out"],
    src="""
        // One thread per 4 elements; x is contiguous and 16-byte aligned.
        if (4 * id >= x.get_extent(0)) return;
        device ELEM4* x4 = (device ELEM4*)&x[4 * id];
        ELEM4 v = *x4;                                   // vector load
        ELEM4 w = ELEM4(v.zw, v.xy);                        // constructor from swizzles
        w.yx = w.xy * ELEM(2);                           // swizzle write
        ELEM4 r = w + ELEM4(v.x) - select(ELEM4(0), ELEM4(1), v > ELEM(0));
        device ELEM4* out4 = (device ELEM4*)&out[4 * id];
        *out4 = r.wzyx;                               // vector store of a swizzle
    """,
    torch_defn=_vector_reference,
    metal_params=[GID],
    template_dtypes={"x": "ELEM"},
)


def _vector_expected(x: torch.Tensor) -> torch.Tensor:
    v = x.reshape(-1, 4)
    w = torch.cat([v[:, 2:4], v[:, 0:2]], dim=1)
    w = torch.stack([w[:, 1] * 2, w[:, 0] * 2, w[:, 2], w[:, 3]], dim=1)
    r = w + v[:, 0:1] - (v > 0).to(x.dtype)
    return r.flip(1).reshape(-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_vector_loads_swizzles_and_constructors(dtype: torch.dtype) -> None:
    # The placeholder ELEM is replaced by the element type, so ELEM4 becomes
    # float4 / half4.
    g = torch.Generator().manual_seed(2)
    x = _random(4 * 250, dtype, g)
    out = _launch(vector_kernel, x, threads=250)
    torch.testing.assert_close(out, _vector_expected(x), rtol=0, atol=0)


# ---------------------------------------------------------------------------
# Math functions against torch.


def _math_reference(x: torch.Tensor) -> list[torch.Tensor]:
    p = x.abs() + 0.5
    return [
        torch.exp(x),
        torch.log(p),
        torch.sqrt(p),
        torch.rsqrt(p),
        torch.tanh(x),
        torch.sin(x),
        torch.pow(p, 1.5),
        torch.sigmoid(x),
        torch.floor(x),
        torch.clamp(x, -1.0, 1.0),
    ]


math_kernel = TorchMetalKernel(
    "msl_math",
    ["x"],
    ["e", "l", "s", "r", "t", "sn", "pw", "sg", "f", "c"],
    src="""
        if (id >= x.get_extent(0)) return;
        ELEM v = x[id];
        ELEM q = abs(v) + ELEM(0.5f);
        e[id] = exp(v);
        l[id] = log(q);
        s[id] = precise::sqrt(q);
        r[id] = rsqrt(q);
        t[id] = precise::tanh(v);
        sn[id] = fast::sin(v);
        pw[id] = pow(q, ELEM(1.5f));
        sg[id] = ELEM(1.0f / (1.0f + exp(-float(v))));
        f[id] = floor(v);
        c[id] = clamp(v, ELEM(-1.0f), ELEM(1.0f));
    """,
    torch_defn=_math_reference,
    metal_params=[GID],
    template_dtypes={"x": "ELEM"},
)

# Relative tolerance per dtype. float32: glibc's functions and torch's
# vectorised ones are each within 1-2 ulp (1.2e-7 each) of the exact value,
# and rsqrt rounds twice on our side; 1e-6 covers both with margin. half and
# bfloat: both sides compute in float and round once, so they can differ by
# one unit in the last place when the float results straddle a rounding
# boundary: 2^-10 (~1e-3) and 2^-7 (~8e-3).
MATH_RTOL = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}


@pytest.mark.parametrize("dtype", list(MATH_RTOL), ids=str)
def test_math_matches_torch(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(500, generator=g) * 3).to(dtype)
    x[:4] = torch.tensor([0.0, -0.0, float("-inf"), float("inf")]).to(dtype)
    # sin(inf) is nan, which opcheck's comparisons count as a mismatch: opcheck
    # runs on the finite entries, the comparison below on all of them.
    _launch(math_kernel, x[4:].clone(), threads=496, shapes=[[496]] * 10)
    results = _launch(math_kernel, x, threads=500, shapes=[[500]] * 10, opcheck=False)
    expected = _math_reference(x)
    # The sigmoid is computed in float and rounded once; torch's half sigmoid too.
    for got, want, name in zip(results, expected, math_kernel_names(), strict=True):
        torch.testing.assert_close(
            got,
            want,
            rtol=MATH_RTOL[dtype],
            atol=0,
            equal_nan=True,
            msg=lambda m, n=name: f"{n}: {m}",
        )
    assert results[0][2].item() == 0.0  # exp(-inf) == 0, Metal's safe math


def math_kernel_names() -> list[str]:
    return ["exp", "log", "sqrt", "rsqrt", "tanh", "sin", "pow", "sigmoid", "floor", "clamp"]


# ---------------------------------------------------------------------------
# Integer functions.


def _int_reference(x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    return [x, x, x, x, x, x]


int_kernel = TorchMetalKernel(
    "msl_integer",
    ["x", "y"],
    ["pc", "lz", "tz", "hi", "rot", "sat"],
    src="""
        if (id >= x.get_extent(0)) return;
        uint a = x[id], b = y[id];
        pc[id] = popcount(a);
        lz[id] = clz(a);
        tz[id] = ctz(a);
        hi[id] = mulhi(a, b);
        rot[id] = rotate(a, b);
        sat[id] = addsat(a, b);
    """,
    torch_defn=_int_reference,
    metal_params=[GID],
)


def test_integer_functions() -> None:
    g = torch.Generator().manual_seed(4)
    x = torch.randint(0, 2**32, (300,), generator=g, dtype=torch.int64)
    x[:3] = torch.tensor([0, 1, 2**32 - 1])
    y = torch.randint(0, 2**32, (300,), generator=g, dtype=torch.int64)
    xs, ys = x.tolist(), y.tolist()
    results = _launch(
        int_kernel, x.to(torch.uint32), y.to(torch.uint32), threads=300, shapes=[[300]] * 6
    )
    got = [r.to(torch.int64).tolist() for r in results]
    mask = 2**32 - 1
    assert got[0] == [bin(a).count("1") for a in xs]
    assert got[1] == [32 - a.bit_length() for a in xs]
    assert got[2] == [32 if a == 0 else (a & -a).bit_length() - 1 for a in xs]
    assert got[3] == [(a * b) >> 32 for a, b in zip(xs, ys, strict=True)]
    assert got[4] == [
        ((a << (b % 32)) | (a >> (32 - b % 32))) & mask for a, b in zip(xs, ys, strict=True)
    ]
    assert got[5] == [min(a + b, mask) for a, b in zip(xs, ys, strict=True)]


# ---------------------------------------------------------------------------
# Atomics in device and threadgroup memory.

BINS = 16


GROUP = 128


def _histogram_reference(x: torch.Tensor) -> torch.Tensor:
    return torch.bincount(x, minlength=BINS).to(torch.int32)


device_histogram = TorchMetalKernel(
    "msl_device_histogram",
    ["x"],
    ["hist"],
    src="""
        // One threadgroup: it zeroes the uninitialised result, then every
        // thread adds its share of the input with device atomics.
        device atomic_int* bins = (device atomic_int*)&hist[0];
        if (tid < 16) atomic_store_explicit(&bins[tid], 0, memory_order_relaxed);
        threadgroup_barrier(mem_flags::mem_device);
        for (uint i = tid; i < x.get_extent(0); i += threads) {
            atomic_fetch_add_explicit(&bins[x[i]], 1, memory_order_relaxed);
        }
    """,
    torch_defn=_histogram_reference,
    metal_params=[
        MetalParameter("tid", "uint", "thread_index_in_threadgroup"),
        MetalParameter("threads", "uint", "threads_per_threadgroup"),
    ],
)


def test_device_atomic_histogram() -> None:
    g = torch.Generator().manual_seed(5)
    x = torch.randint(0, BINS, (10000,), generator=g, dtype=torch.int32)
    hist = device_histogram(
        x,
        threads_per_grid=(256, 1, 1),
        threads_per_thread_group=(256, 1, 1),
        result_shapes=[[BINS]],
    )
    assert torch.equal(hist, _histogram_reference(x))


def _group_histogram_reference(x: torch.Tensor) -> torch.Tensor:
    # One row per threadgroup of GROUP threads.
    groups = math.ceil(x.shape[0] / GROUP)
    rows = [torch.bincount(x[i * GROUP : (i + 1) * GROUP], minlength=BINS) for i in range(groups)]
    return torch.stack(rows).to(torch.int32)


group_histogram = TorchMetalKernel(
    "msl_threadgroup_histogram",
    ["x"],
    ["hist"],
    src="""
        // Each threadgroup counts its slice in threadgroup atomics and writes
        // one row; groups run concurrently on different OS threads. The last
        // group is partial, so bins are covered by a strided loop.
        threadgroup atomic_uint local[16];
        for (uint b = tid; b < 16; b += threads) {
            atomic_store_explicit(&local[b], 0u, memory_order_relaxed);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (gid < x.get_extent(0)) {
            atomic_fetch_add_explicit(&local[x[gid]], 1u, memory_order_relaxed);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint b = tid; b < 16; b += threads) {
            hist[b, group] = int(atomic_load_explicit(&local[b], memory_order_relaxed));
        }
    """,
    torch_defn=_group_histogram_reference,
    metal_params=[
        MetalParameter("gid", "uint", "thread_position_in_grid"),
        MetalParameter("tid", "uint", "thread_index_in_threadgroup"),
        MetalParameter("group", "uint", "threadgroup_position_in_grid"),
        MetalParameter("threads", "uint", "threads_per_threadgroup"),
    ],
)


def test_threadgroup_atomic_histogram() -> None:
    g = torch.Generator().manual_seed(6)
    n = 5000
    groups = math.ceil(n / GROUP)
    x = torch.randint(0, BINS, (n,), generator=g, dtype=torch.int32)
    hist = group_histogram(
        x,
        threads_per_grid=(n, 1, 1),
        threads_per_thread_group=(GROUP, 1, 1),
        result_shapes=[[groups, BINS]],
    )
    assert torch.equal(hist, _group_histogram_reference(x))


# ---------------------------------------------------------------------------
# metal::array indices and a rank-generic softmax.


def _scale_reference(x: torch.Tensor) -> torch.Tensor:
    return x * 2


array_kernel = TorchMetalKernel(
    "msl_array_index",
    ["x"],
    ["out"],
    src="""
        if (any(gid >= uint3(x.get_extent(0), x.get_extent(1), x.get_extent(2)))) return;
        metal::array<uint, 3> idx{gid.x, gid.y, gid.z};
        out[idx] = x[idx] * 2.0f;
    """,
    torch_defn=_scale_reference,
    metal_params=[MetalParameter("gid", "uint3", "thread_position_in_grid")],
)


def test_array_indexing() -> None:
    x = torch.randn(3, 5, 7)
    out = array_kernel(
        x, threads_per_grid=(7, 5, 3), threads_per_thread_group=(4, 2, 1), result_shapes=[[3, 5, 7]]
    )
    torch.testing.assert_close(out, x * 2, rtol=0, atol=0)


def _softmax_reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


softmax_kernel = TorchMetalKernel(
    "msl_softmax",
    ["x"],
    ["out"],
    src="""
        // One thread per row; Metal dimension 0 is torch's last dimension.
        metal::array<uint, x.get_rank()> idx;
        uint rows = 1;
        for (uint d = 1; d < x.get_rank(); ++d) rows *= x.get_extent(d);
        if (row >= rows) return;
        uint rest = row;
        for (uint d = 1; d < x.get_rank(); ++d) {
            idx[d] = rest % x.get_extent(d);
            rest /= x.get_extent(d);
        }
        float m = -INFINITY;
        for (uint i = 0; i < x.get_extent(0); ++i) { idx[0] = i; m = max(m, float(x[idx])); }
        float sum = 0.0f;
        for (uint i = 0; i < x.get_extent(0); ++i) { idx[0] = i; sum += exp(float(x[idx]) - m); }
        for (uint i = 0; i < x.get_extent(0); ++i) {
            idx[0] = i;
            out[idx] = ELEM(exp(float(x[idx]) - m) / sum);
        }
    """,
    torch_defn=_softmax_reference,
    metal_params=[MetalParameter("row", "uint", "thread_position_in_grid")],
    template_dtypes={"x": "ELEM"},
)


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [
        ((9,), torch.float32),
        ((4, 9), torch.float32),
        ((2, 3, 4, 9), torch.float32),
        ((3, 2, 9), torch.float16),
    ],
    ids=str,
)
def test_rank_generic_softmax_with_masked_entries(shape, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(7)
    x = torch.randn(shape, generator=g) * 3
    x[..., ::4] = float("-inf")  # masked positions: exp(-inf) must be 0
    x = x.to(dtype)
    rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    out = softmax_kernel(
        x,
        threads_per_grid=(rows, 1, 1),
        threads_per_thread_group=(min(rows, 8), 1, 1),
        result_shapes=[list(shape)],
    )
    # float32: the sums of 9 terms differ from torch's in order only (a few
    # ulp); half: both round the float result once.
    rtol = 1e-6 if dtype == torch.float32 else 1e-3
    torch.testing.assert_close(out, _softmax_reference(x), rtol=rtol, atol=1e-7)
    assert (out[..., ::4] == 0).all()

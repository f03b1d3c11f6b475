"""The MPS backend on an Apple GPU: results, caching, stream ordering, errors.

Every kernel below runs three ways and must agree: on MPS tensors (the Metal
source on the GPU), on CPU tensors (the same source through the CPU backend) and
through its PyTorch reference. Most inputs hold small integers stored as floats,
so sums and products are exact in float32 whatever the order of operations, and
those comparisons use zero tolerance; the others say why their tolerance is what
it is.

These tests need macOS 26 and a GPU in the Metal 4 family. Elsewhere they skip
with the reason; set COREAI_TORCH_REQUIRE_MPS=1 to make a missing GPU an error
instead (for CI machines that are supposed to have one).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch


def _why_mps_cannot_run() -> str | None:
    if sys.platform != "darwin":
        return f"the MPS backend needs macOS and an Apple GPU; this is {sys.platform}"
    if not torch.backends.mps.is_available():
        return "torch.backends.mps.is_available() is False on this Mac"
    import coreai_torch  # noqa: F401  (loads coreai_torch._C, which registers the ops)

    return torch.ops.coreai_torch.mps_unavailable_reason() or None


_REASON = _why_mps_cannot_run()
if _REASON is not None:
    if os.environ.get("COREAI_TORCH_REQUIRE_MPS") == "1":
        pytest.fail(f"COREAI_TORCH_REQUIRE_MPS=1 but {_REASON}", pytrace=False)
    pytest.skip(_REASON, allow_module_level=True)

from support.cpu_launch import Tensor, registration  # noqa: E402

from coreai_torch import MetalCompileError, MetalParameter, TorchMetalKernel  # noqa: E402

pytestmark = pytest.mark.mps

EXACT = {"atol": 0.0, "rtol": 0.0}
# alpha * x + y: Metal may contract it into one fma (safe math allows that),
# which differs from PyTorch's two roundings by at most about one float32
# rounding of the product, ~1.2e-7 relative to values of order 1.
EXACT_OR_FMA = {"atol": 1e-6, "rtol": 1e-6}


def compile_count() -> int:
    return torch.ops.coreai_torch.mps_compile_count()


def small_ints(*shape: int, low: int = -4, high: int = 5, seed: int = 0) -> torch.Tensor:
    """Integer values in [low, high) as float32: sums of them are exact."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, shape, generator=g).to(torch.float32)


def normal(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


def as_list(out: Any) -> list[torch.Tensor]:
    return [out] if isinstance(out, torch.Tensor) else list(out)


def param(name: str, type_: str, attribute: str) -> Any:
    return MetalParameter(name, type_, attribute)


def round_up(n: int, multiple: int) -> int:
    return (n + multiple - 1) // multiple * multiple


# --------------------------------------------------------------------- corpus


def ref_axpy(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    return alpha * x + y


axpy = TorchMetalKernel(
    "mps_axpy",
    ["x", "y", "alpha"],
    ["out"],
    src="if (id < uint(out.get_extent(0))) out[id] = alpha * x[id] + y[id];",
    torch_defn=ref_axpy,
    metal_params=[param("id", "uint", "thread_position_in_grid")],
)


def ref_shift(x: torch.Tensor, offset: int, negate: bool) -> torch.Tensor:
    y = x + offset
    return -y if negate else y


shift = TorchMetalKernel(
    "mps_shift",
    ["x", "offset", "negate"],
    ["out"],
    src="""
        if (id >= uint(out.get_extent(0))) return;
        int v = x[id] + offset;
        out[id] = negate ? -v : v;
    """,
    torch_defn=ref_shift,
    metal_params=[param("id", "uint", "thread_position_in_grid")],
)


def ref_sincos(x: torch.Tensor) -> list[torch.Tensor]:
    return [torch.sin(x), torch.cos(x)]


sincos = TorchMetalKernel(
    "mps_sincos",
    ["x"],
    ["s", "c"],
    src="""
        if (id >= uint(x.get_extent(0))) return;
        s[id] = sin(x[id]);
        c[id] = cos(x[id]);
    """,
    torch_defn=ref_sincos,
    metal_params=[param("id", "uint", "thread_position_in_grid")],
)


def ref_multiply(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x * y


multiply = TorchMetalKernel(
    "mps_multiply",
    ["x", "y"],
    ["out"],
    src="if (id < uint(out.get_extent(0))) out[id] = x[id] * y[id];",
    torch_defn=ref_multiply,
    metal_params=[param("id", "uint", "thread_position_in_grid")],
)


def ref_scaled_sum(a: torch.Tensor, b: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return (a + b) * s


# a[m, n] in torch is a[n, m] in Metal (dimension 0 is the innermost).
scaled_sum = TorchMetalKernel(
    "mps_scaled_sum",
    ["a", "b", "s"],
    ["out"],
    src="""
        const int n = int(gid.x);
        const int m = int(gid.y);
        if (n >= out.get_extent(0) || m >= out.get_extent(1)) return;
        out[n, m] = (a[n, m] + b[n, m]) * s;
    """,
    torch_defn=ref_scaled_sum,
    metal_params=[param("gid", "uint2", "thread_position_in_grid")],
)


def ref_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


TILE = 16

# C[M, N] = A[M, K] @ B[K, N], one 16x16 output tile per threadgroup, staged
# through threadgroup memory. The grid is rounded up to whole tiles, because
# threads outside the grid do not run and every tile entry must be loaded.
tiled_matmul = TorchMetalKernel(
    "mps_tiled_matmul",
    ["a", "b"],
    ["c"],
    src="""
        threadgroup float a_tile[16][16];
        threadgroup float b_tile[16][16];
        const int K = a.get_extent(0);
        const int M = a.get_extent(1);
        const int N = b.get_extent(0);
        const int col = int(gid.x);
        const int row = int(gid.y);
        const int lx = int(lid.x);
        const int ly = int(lid.y);
        float acc = 0.0f;
        for (int k0 = 0; k0 < K; k0 += 16) {
            a_tile[ly][lx] = (row < M && k0 + lx < K) ? float(a[k0 + lx, row]) : 0.0f;
            b_tile[ly][lx] = (k0 + ly < K && col < N) ? float(b[col, k0 + ly]) : 0.0f;
            threadgroup_barrier(mem_flags::mem_threadgroup);
            for (int k = 0; k < 16; ++k) {
                acc += a_tile[ly][k] * b_tile[k][lx];
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }
        if (row < M && col < N) {
            c[col, row] = acc;
        }
    """,
    torch_defn=ref_matmul,
    metal_params=[
        param("gid", "uint2", "thread_position_in_grid"),
        param("lid", "uint2", "thread_position_in_threadgroup"),
    ],
)


def ref_row_sum(x: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=-1)


# One SIMD-group (32 threads, the whole threadgroup) per row: strided partial
# sums, then simd_sum.
row_sum = TorchMetalKernel(
    "mps_row_sum",
    ["x"],
    ["out"],
    src="""
        const int row = int(gid.y);
        const int length = x.get_extent(0);
        float acc = 0.0f;
        for (int i = int(lane); i < length; i += 32) {
            acc += x[i, row];
        }
        acc = simd_sum(acc);
        if (lane == 0) {
            out[row] = acc;
        }
    """,
    torch_defn=ref_row_sum,
    metal_params=[
        param("gid", "uint2", "thread_position_in_grid"),
        param("lane", "uint", "thread_index_in_threadgroup"),
    ],
)


def ref_prefix_sum(x: torch.Tensor) -> torch.Tensor:
    return torch.cumsum(x, dim=-1)


# Inclusive scan of each row (at most 256 long) by one 256-thread threadgroup,
# Hillis-Steele style with barriers between the read and the write of a step.
prefix_sum = TorchMetalKernel(
    "mps_prefix_sum",
    ["x"],
    ["out"],
    src="""
        threadgroup float scan[256];
        const int i = int(tid);
        const int row = int(gid.y);
        const int length = x.get_extent(0);
        scan[i] = i < length ? float(x[i, row]) : 0.0f;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (int offset = 1; offset < 256; offset *= 2) {
            const float addend = i >= offset ? scan[i - offset] : 0.0f;
            threadgroup_barrier(mem_flags::mem_threadgroup);
            scan[i] += addend;
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }
        if (i < length) {
            out[i, row] = scan[i];
        }
    """,
    torch_defn=ref_prefix_sum,
    metal_params=[
        param("tid", "uint", "thread_index_in_threadgroup"),
        param("gid", "uint2", "thread_position_in_grid"),
    ],
)

BINS = 16


def ref_histogram(values: torch.Tensor) -> torch.Tensor:
    counts = torch.zeros(BINS, dtype=torch.int32, device=values.device)
    return counts.scatter_add_(0, values.long(), torch.ones_like(values))


# One threadgroup counts every value into threadgroup atomics, then writes the
# bins (results start uninitialised, so the kernel writes every bin).
histogram = TorchMetalKernel(
    "mps_histogram",
    ["values"],
    ["hist"],
    src="""
        threadgroup atomic_int bins[16];
        const int i = int(tid);
        if (i < 16) {
            atomic_store_explicit(&bins[i], 0, memory_order_relaxed);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        const int n = values.get_extent(0);
        for (int j = i; j < n; j += 256) {
            atomic_fetch_add_explicit(&bins[values[j]], 1, memory_order_relaxed);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (i < 16) {
            hist[i] = atomic_load_explicit(&bins[i], memory_order_relaxed);
        }
    """,
    torch_defn=ref_histogram,
    metal_params=[param("tid", "uint", "thread_index_in_threadgroup")],
)


@dataclass
class Case:
    """One kernel call: how to build its arguments on a device, and how to launch it."""

    id: str
    kernel: TorchMetalKernel
    reference: Callable[..., Any]
    make_args: Callable[[str], tuple[Any, ...]]
    launch: Callable[[tuple[Any, ...]], dict[str, Any]]
    tolerance: dict[str, float] = field(default_factory=lambda: dict(EXACT))


def launch_1d(n: int, group: int = 64) -> dict[str, Any]:
    return {
        "threads_per_grid": (n, 1, 1),
        "threads_per_thread_group": (group, 1, 1),
        "result_shapes": [[n]],
    }


def scaled_sum_args(device: str) -> tuple[Any, ...]:
    m, n = 19, 23
    base = small_ints(m + 1, n, seed=1).to(device)
    a = base[1:]  # a view at a non-zero storage offset
    b = small_ints(n, m, seed=2).to(device).t()  # innermost stride m, copied before launch
    s = small_ints(8, seed=3).to(device)[5]  # a 0-d view at a non-zero storage offset
    assert a.storage_offset() > 0 and b.stride(-1) != 1 and s.dim() == 0
    return a, b, s


def matmul_launch(args: tuple[Any, ...]) -> dict[str, Any]:
    (m, _), (_, n) = args[0].shape, args[1].shape
    return {
        "threads_per_grid": (round_up(n, TILE), round_up(m, TILE), 1),
        "threads_per_thread_group": (TILE, TILE, 1),
        "result_shapes": [[m, n]],
    }


CASES = [
    Case(
        "elementwise_float_scalar",
        axpy,
        ref_axpy,
        lambda d: (normal(1000, seed=1).to(d), normal(1000, seed=2).to(d), 0.75),
        lambda a: launch_1d(1000),
        EXACT_OR_FMA,
    ),
    Case(
        "int_and_bool_scalars",
        shift,
        ref_shift,
        lambda d: (torch.arange(-50, 50, dtype=torch.int32).to(d), 7, True),
        lambda a: launch_1d(100, group=32),
    ),
    Case(
        "int_scalar_bool_false",
        shift,
        ref_shift,
        lambda d: (torch.arange(-50, 50, dtype=torch.int32).to(d), -3, False),
        lambda a: launch_1d(100, group=32),
    ),
    Case(
        "multiple_results",
        sincos,
        ref_sincos,
        lambda d: (normal(777, seed=4).to(d),),
        lambda a: {**launch_1d(777), "result_shapes": [[777], [777]]},
        # Precise sin/cos (the default math functions here) are within a few
        # float32 ulp of the correctly rounded value on |x| < 5, as are the CPU
        # backend's and PyTorch's: a few times 1.2e-7 on values of order 1.
        {"atol": 1e-6, "rtol": 1e-5},
    ),
    Case(
        "half_elementwise",
        multiply,
        ref_multiply,
        lambda d: (normal(512, seed=5, dtype=torch.float16).to(d),) * 2,
        lambda a: launch_1d(512),
        # A half product is correctly rounded everywhere; the one possible
        # difference is a GPU flushing a subnormal half result to zero, which
        # is below the smallest normal half, 6.1e-5.
        {"atol": 6.2e-5, "rtol": 0.0},
    ),
    Case(
        "strided_offset_and_0d_inputs",
        scaled_sum,
        ref_scaled_sum,
        scaled_sum_args,
        lambda a: {
            "threads_per_grid": (23, 19, 1),
            "threads_per_thread_group": (8, 8, 1),
            "result_shapes": [[19, 23]],
        },
    ),
    Case(
        # Stride 0 in an outer dimension (a broadcast) and overlapping rows
        # (unfold): layouts a Metal tensor may refuse, copied before binding.
        "broadcast_and_overlapping_inputs",
        scaled_sum,
        ref_scaled_sum,
        lambda d: (
            small_ints(1, 23, seed=11).to(d).expand(19, 23),
            small_ints(19 * 2 + 21, seed=12).to(d).unfold(0, 23, 2),
            torch.tensor(3.0, device=d),
        ),
        lambda a: {
            "threads_per_grid": (23, 19, 1),
            "threads_per_thread_group": (8, 8, 1),
            "result_shapes": [[19, 23]],
        },
    ),
    Case(
        "tiled_matmul_threadgroup_memory",
        tiled_matmul,
        ref_matmul,
        lambda d: (small_ints(37, 50, seed=6).to(d), small_ints(50, 29, seed=7).to(d)),
        matmul_launch,
    ),
    Case(
        "simd_sum_reduction",
        row_sum,
        ref_row_sum,
        lambda d: (small_ints(7, 100, seed=8).to(d),),
        lambda a: {
            "threads_per_grid": (32, 7, 1),
            "threads_per_thread_group": (32, 1, 1),
            "result_shapes": [[7]],
        },
    ),
    Case(
        "prefix_scan",
        prefix_sum,
        ref_prefix_sum,
        lambda d: (small_ints(3, 200, seed=9).to(d),),
        lambda a: {
            "threads_per_grid": (256, 3, 1),
            "threads_per_thread_group": (256, 1, 1),
            "result_shapes": [[3, 200]],
        },
    ),
    Case(
        "atomics_histogram",
        histogram,
        ref_histogram,
        lambda d: (torch.randint(0, BINS, (1000,), dtype=torch.int32).to(d),),
        lambda a: {
            "threads_per_grid": (256, 1, 1),
            "threads_per_thread_group": (256, 1, 1),
            "result_shapes": [[BINS]],
        },
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_mps_matches_cpu_backend_and_reference(case: Case) -> None:
    torch.manual_seed(0)  # the histogram's values
    cpu_args = case.make_args("cpu")
    torch.manual_seed(0)
    mps_args = case.make_args("mps")
    launch = case.launch(cpu_args)

    expected = as_list(case.reference(*cpu_args))
    on_cpu = as_list(case.kernel(*cpu_args, **launch))
    on_mps = as_list(case.kernel(*mps_args, **launch))

    assert len(on_mps) == len(expected)
    for gpu, cpu, ref in zip(on_mps, on_cpu, expected):
        assert gpu.device.type == "mps"
        assert gpu.dtype == ref.dtype
        torch.testing.assert_close(gpu.cpu(), ref, **case.tolerance)
        torch.testing.assert_close(gpu.cpu(), cpu, **case.tolerance)


# ------------------------------------------------------------------- caching


def test_repeated_calls_compile_nothing() -> None:
    kernel = TorchMetalKernel(
        "mps_cache_probe",
        ["x", "y", "alpha"],
        ["out"],
        src="if (id < uint(out.get_extent(0))) out[id] = alpha * x[id] + y[id];",
        torch_defn=ref_axpy,
        metal_params=[param("id", "uint", "thread_position_in_grid")],
    )
    x = normal(300, seed=10).to("mps")
    before = compile_count()
    kernel(x, x, 1.0, **launch_1d(300))
    assert compile_count() == before + 1  # a new specialization compiles once

    # New values, a new scalar value and new lengths are the same
    # specialization: extents and scalars are run-time arguments.
    for n, alpha in [(300, 2.0), (17, -1.5), (4096, 0.25), (300, 1.0)]:
        y = normal(n, seed=n).to("mps")
        out = kernel(y, y, alpha, **launch_1d(n))
        torch.testing.assert_close(out.cpu(), ref_axpy(y.cpu(), y.cpu(), alpha), **EXACT_OR_FMA)
    assert compile_count() == before + 1

    # A new dtype is a new specialization: exactly one more compile.
    h = x.to(torch.float16)
    kernel(h, h, 1.0, **launch_1d(300))
    assert compile_count() == before + 2


RAW_EXP = ("mps_raw_exp", [Tensor("x")], [Tensor("out")],
           "if (id < uint(out.get_extent(0))) out[id] = exp(x[id]);",
           [("id", "uint", "thread_position_in_grid")])  # fmt: skip


def test_math_mode_keys_the_cache_and_the_debug_bit_does_not() -> None:
    def register(options: int) -> int:
        return torch.ops.coreai_torch.register_kernel(*registration(*RAW_EXP, options=options))

    x = torch.linspace(-10, 10, 1000).to("mps")

    def launch(handle: int) -> torch.Tensor:
        (out,) = torch.ops.coreai_torch.launch(handle, [x], [], [1000, 1, 1], [128, 1, 1], [1000])
        return out.cpu()

    before = compile_count()
    safe = launch(register(0))
    assert compile_count() == before + 1
    launch(register(1))  # the CPU debug bit: same Metal code, same pipeline
    assert compile_count() == before + 1
    fast = launch(register(2))  # fast math is different code
    assert compile_count() == before + 2
    for options in (0, 1, 2):
        launch(register(options))
    assert compile_count() == before + 2

    # Precise exp is within a few float32 ulp (~1.2e-7 relative each).
    torch.testing.assert_close(safe, torch.exp(x.cpu()), atol=0.0, rtol=1e-6)
    # Fast exp trades accuracy for speed; it is still close at this scale.
    torch.testing.assert_close(fast, torch.exp(x.cpu()), atol=0.0, rtol=1e-3)


def ref_exp(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(x)


def ref_plus_one(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def ref_clone(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


def test_fast_math_attribute_reaches_the_compiler() -> None:
    kernel = TorchMetalKernel(
        "mps_fast_math_probe",
        ["x"],
        ["out"],
        src="if (id < uint(out.get_extent(0))) out[id] = exp(x[id]);",
        torch_defn=ref_exp,
        metal_params=[param("id", "uint", "thread_position_in_grid")],
    )
    x = torch.linspace(-5, 5, 64).to("mps")
    before = compile_count()
    kernel(x, **launch_1d(64))
    kernel.fast_math = True
    kernel(x, **launch_1d(64))
    assert compile_count() == before + 2


# ------------------------------------------------------------ stream ordering


def test_kernels_interleave_with_aten_ops_without_synchronisation() -> None:
    # Integer arithmetic throughout, so the GPU and CPU chains agree exactly;
    # every kernel reads an ATen result and every ATen op reads a kernel result,
    # with no synchronisation until the final copy to the CPU.
    def chain(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kept = []
        for step in range(25):
            y = x * 3  # ATen writes, the kernel reads
            z = shift(y, step, step % 2 == 0, **launch_1d(y.numel(), group=32))
            y.add_(1_000_000)  # ATen overwrites the kernel's input after the launch
            kept.append(z)
            x = torch.remainder(z, 1009)  # ATen reads the kernel's result
        return x, torch.stack(kept)

    start = torch.arange(4096, dtype=torch.int32)
    cpu_x, cpu_kept = chain(start)
    mps_x, mps_kept = chain(start.to("mps"))
    torch.testing.assert_close(mps_x.cpu(), cpu_x, **EXACT)
    torch.testing.assert_close(mps_kept.cpu(), cpu_kept, **EXACT)


# -------------------------------------------------------------------- errors


def test_compile_error_names_the_kernel_and_the_line_and_is_remembered() -> None:
    broken = TorchMetalKernel(
        "mps_broken",
        ["x"],
        ["out"],
        src="out[id] = x[id] +;\n",
        torch_defn=ref_clone,
        metal_params=[param("id", "uint", "thread_position_in_grid")],
    )
    x = torch.ones(4, device="mps")
    before = compile_count()
    for _ in range(2):
        with pytest.raises(MetalCompileError) as info:
            broken(x, **launch_1d(4, group=4))
        message = str(info.value)
        assert message.startswith("mps_broken")
        assert "src:1" in message
    # Metal's verdict (MTLLibraryErrorCompileFailure) is remembered: one compile.
    assert compile_count() == before + 1


def test_released_kernels_leave_the_pipeline_cache() -> None:
    def launch_once(body: str) -> None:
        kernel = TorchMetalKernel(
            "mps_cache_entry",
            ["x"],
            ["out"],
            src=body,
            torch_defn=ref_plus_one,
            metal_params=[param("id", "uint", "thread_position_in_grid")],
        )
        out = kernel(torch.zeros(8, device="mps"), **launch_1d(8, group=8))
        torch.testing.assert_close(out.cpu(), torch.ones(8), **EXACT)

    gc.collect()
    entries = torch.ops.coreai_torch.mps_cached_pipelines()
    launch_once("if (id < 8) out[id] = x[id] + 1.0f;")
    gc.collect()  # the kernel, its specialization and its pipeline go
    launch_once("if (id < 8) out[id] = 1.0f + x[id];")  # a new compile erases the dead entry
    gc.collect()
    assert torch.ops.coreai_torch.mps_cached_pipelines() <= entries + 1


def test_empty_views_pass_metals_api_validation() -> None:
    # An empty view at the end of its buffer has a storage offset equal to the
    # buffer's length; bound there, Metal's API validation aborts the process.
    # It runs in a child with validation on (MTL_DEBUG_LAYER=1).
    code = textwrap.dedent(
        """
        import torch
        from coreai_torch import MetalParameter, TorchMetalKernel

        def ref(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return 2 * x + y

        axpy = TorchMetalKernel(
            "mps_validated_axpy", ["x", "y"], ["out"],
            "if (id < uint(out.get_extent(0))) out[id] = 2.0f * x[id] + y[id];", ref,
            metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")],
        )
        x = torch.arange(16.0, device="mps")
        for view in (x[16:], x[5:5], torch.empty(0, device="mps")):
            call = dict(threads_per_grid=(0, 1, 1), threads_per_thread_group=(1, 1, 1))
            out = axpy(view, view, **call, result_shapes=[[0]])
            assert out.shape == (0,)
        call = dict(threads_per_grid=(8, 1, 1), threads_per_thread_group=(8, 1, 1))
        out = axpy(x[8:], x[:8], **call, result_shapes=[[8]])
        assert out.cpu().tolist() == [2 * (8 + i) + i for i in range(8)], out
        print("validated")
        """
    )
    env = {**os.environ, "MTL_DEBUG_LAYER": "1"}
    child = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0 and "validated" in child.stdout, child.stderr


def test_oversized_threadgroup_is_refused_naming_the_kernel() -> None:
    x = torch.ones(2048, device="mps")
    with pytest.raises((ValueError, RuntimeError), match="mps_axpy"):
        axpy(x, x, 1.0, **{**launch_1d(2048), "threads_per_thread_group": (2048, 1, 1)})


def test_empty_results_and_empty_grids_skip_the_dispatch() -> None:
    x = torch.empty(0, device="mps")
    out = axpy(x, x, 1.0, **launch_1d(0))
    assert out.shape == (0,) and out.device.type == "mps"

    y = torch.ones(8, device="mps")
    before = compile_count()
    axpy(
        y,
        y,
        1.0,
        threads_per_grid=(0, 1, 1),
        threads_per_thread_group=(8, 1, 1),
        result_shapes=[[8]],
    )
    assert compile_count() == before  # same specialization as above: compiled already


def test_int64_and_bool_tensors_run_through_the_strided_view() -> None:
    # Metal tensors have no 64-bit or bool element type (MTLTensorDataType):
    # the rendering views them through coreai::strided_view.
    copy = TorchMetalKernel(
        "mps_copy_int64",
        ["x"],
        ["out"],
        src="if (id < uint(out.get_extent(0))) out[id] = x[id] + 1;",
        torch_defn=ref_plus_one,
        metal_params=[param("id", "uint", "thread_position_in_grid")],
    )
    x = torch.arange(-(2**40), -(2**40) + 64, dtype=torch.int64)
    out = copy(x.to("mps"), **launch_1d(64))
    torch.testing.assert_close(out.cpu(), x + 1, **EXACT)


def ref_sum(x: torch.Tensor) -> torch.Tensor:
    return x.sum()


def test_rank_zero_results_and_empty_inputs() -> None:
    total = TorchMetalKernel(
        "mps_rank0_sum",
        ["x"],
        ["total"],
        src="float s = 0; for (int i = 0; i < x.get_extent(0); ++i) s += x[i]; total.set(s);",
        torch_defn=ref_sum,
        metal_params=[param("id", "uint", "thread_position_in_grid")],
    )
    call = {"threads_per_grid": (1, 1, 1), "threads_per_thread_group": (1, 1, 1)}
    x = torch.arange(10.0)
    out = total(x.to("mps"), **call, result_shapes=[[]])
    assert out.shape == () and out.cpu().item() == 45.0
    # An empty input has no MTLBuffer: it is bound to a placeholder, never nil.
    empty = total(torch.zeros(0, device="mps"), **call, result_shapes=[[]])
    assert empty.cpu().item() == 0.0

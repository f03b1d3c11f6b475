"""MPS-backend benchmarks through ``TorchMetalKernel``, against the torch MPS ops they replace.

``run(smoke) -> rows`` (see ``timing.row``); empty unless this process can run
Metal 4 kernels on an Apple GPU. ``python benchmarks/bench_mps.py [--smoke]
[--json FILE]`` prints them. No issue has set MPS targets yet: every row is a
measurement, ours against torch's MPS op in the same run (the first Mac run,
scripts/test_mps.sh, records them). The kernels are bench_kernels' ones, the
same Metal source the CPU and CUDA benchmarks run.

GPU times are wall times of back-to-back calls with one ``torch.mps.synchronize``
per repetition, ours and torch's alternating repetition by repetition.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_kernels as kernels  # from benchmarks/, put on the path above
from run_all import report
from timing import Plan, Timing, measure_interleaved, row

from coreai_torch import MetalParameter, TorchMetalKernel
from coreai_torch.demo import mps_unavailable


def timed(fns: list[Callable[[], Any]], plan: Plan) -> list[Timing]:
    """Seconds per call of each of ``fns``, ``plan.calls`` calls then one synchronisation."""

    def repeated(fn: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(plan.calls):
                fn()
            torch.mps.synchronize()

        return run

    once = Plan(plan.warmup, plan.reps, 1)
    return [
        Timing(t.median / plan.calls, t.best / plan.calls)
        for t in measure_interleaved([repeated(fn) for fn in fns], once)
    ]


def compared(
    key: str, metric: str, ours: Callable[[], Any], theirs: Callable[[], Any], plan: Plan,
    *, amount: float, rate: bool,
) -> dict[str, Any]:  # fmt: skip
    """One row: ``amount`` per second (``rate``) or seconds scaled by ``amount``."""
    mine, base = timed([ours, theirs], plan)

    def value(seconds: float) -> float:
        return amount / seconds if rate else seconds * amount

    return row(
        key, metric, value(mine.median), baseline=value(base.median),
        ours_best=value(mine.best), baseline_best=value(base.best),
    )  # fmt: skip


def add_row(log2: int, plan: Plan) -> dict[str, Any]:
    """fp32 vector add (float4, four elements per thread) on 2^log2 elements vs torch.add."""
    n = 1 << log2
    x, y = torch.randn(n, device="mps"), torch.randn(n, device="mps")
    call = {
        "threads_per_grid": (-(-n // kernels.ADD_VEC4_ELEMENTS), 1, 1),
        "threads_per_thread_group": (256, 1, 1),
        "result_shapes": [[n]],
    }
    torch.testing.assert_close(kernels.add_vec4(x, y, **call), x + y, rtol=0, atol=0)
    return compared(
        f"mps.vector_add4_2e{log2}",
        f"MPS: add 2^{log2} fp32 (float4, 4 elements per thread), GB/s (vs torch.add)",
        lambda: kernels.add_vec4(x, y, **call),
        lambda: torch.add(x, y),
        plan,
        amount=3 * n * 4 / 1e9,  # two fp32 reads and one write per element
        rate=True,
    )


def launch_row(plan: Plan) -> dict[str, Any]:
    """Time per call of a repeated 16-element add: the host and the stream are the limit."""
    x, y = torch.randn(16, device="mps"), torch.randn(16, device="mps")
    call = {"threads_per_grid": (16, 1, 1), "threads_per_thread_group": (16, 1, 1)}
    torch.testing.assert_close(kernels.add(x, y, **call, result_shapes=[[16]]), x + y)
    return compared(
        "mps.launch_tiny",
        "MPS: add 16 elements, us/call (vs torch.add)",
        lambda: kernels.add(x, y, **call, result_shapes=[[16]]),
        lambda: torch.add(x, y),
        plan,
        amount=1e6,
        rate=False,
    )


def row_kernel_rows(rows: int, dim: int, plan: Plan) -> list[dict[str, Any]]:
    """MLX's softmax and RMSNorm in Metal, MLX's Apple launch (min(1024, dim / 4) threads per
    row), fp16 [rows, dim], against torch.softmax and F.rms_norm."""
    threads = min(1024, dim // 4)
    x = torch.randn(rows, dim, device="mps", dtype=torch.float16) * 3
    weight = (1 + 0.1 * torch.randn(dim, device="mps")).half()
    call = {
        "threads_per_grid": (threads * rows, 1, 1),
        "threads_per_thread_group": (threads, 1, 1),
        "result_shapes": [[rows, dim]],
    }
    # Both compute in fp32 and round once to fp16; the sums run in other
    # orders: within an fp16 ulp or two.
    softmax = (lambda: kernels.softmax(x, **call), lambda: torch.softmax(x, dim=-1))
    rms = (
        lambda: kernels.rms_norm(x, weight, 1e-6, **call),
        lambda: kernels.torch_rms_norm(x, weight, 1e-6),
    )
    torch.testing.assert_close(softmax[0](), softmax[1](), rtol=2e-3, atol=1e-5)
    torch.testing.assert_close(rms[0](), rms[1](), rtol=2e-3, atol=2e-3)
    return [
        compared(
            f"mps.{key}",
            f"MPS: {name} (Metal, MLX style) {rows}x{dim} fp16, {threads} threads per row, "
            f"GB/s (vs {base})",
            *fns,
            plan,
            amount=2 * rows * dim * 2 / 1e9,  # one fp16 read and one write per element
            rate=True,
        )
        for key, name, base, fns in (
            ("softmax", "softmax", "torch.softmax", softmax),
            ("rms_norm", "RMSNorm", "F.rms_norm", rms),
        )
    ]


def gemm_row(n: int, plan: Plan) -> dict[str, Any]:
    """bench_kernels' simdgroup_matrix GEMM (128x128 blocks) against torch's MPS matmul."""
    a = torch.randn(n, n, device="mps", dtype=torch.float16)
    b = torch.randn(n, n, device="mps", dtype=torch.float16)
    block, threads = kernels.GEMM_WIDE_BLOCK, kernels.GEMM_WIDE_THREADS
    call = {
        "threads_per_grid": (n // block * threads, n // block, 1),
        "threads_per_thread_group": (threads, 1, 1),
        "result_shapes": [[n, n]],
    }
    # Both sum fp16 products in fp32 and round once to fp16, in different orders.
    expected = (a.float() @ b.float()).half()
    torch.testing.assert_close(kernels.gemm_wide(a, b, **call), expected, rtol=2e-3, atol=2e-2)
    return compared(
        "mps.gemm",
        f"MPS: simdgroup_matrix GEMM (Metal, 128x128 blocks) {n}^3 fp16, TFLOP/s (vs torch @)",
        lambda: kernels.gemm_wide(a, b, **call),
        lambda: a @ b,
        plan,
        amount=2 * n**3 / 1e12,
        rate=True,
    )


def compile_row() -> dict[str, Any]:
    """The first call of a kernel this process has not compiled: Metal compiles the source."""
    before = torch.ops.coreai_torch.mps_compile_count()
    # A body no other benchmark uses, so that this call compiles.
    fresh = TorchMetalKernel(
        f"bench_mps_compile_{time.time_ns()}",
        ["x", "y"],
        ["out"],
        src=f"if (id < out.get_extent(0)) out[id] = x[id] + y[id] + {time.time_ns() % 1000}.0f;",
        torch_defn=kernels.torch_add,
        metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")],
    )
    x = torch.randn(1024, device="mps")
    torch.mps.synchronize()
    start = time.perf_counter()
    fresh(x, x, threads_per_grid=(1024, 1, 1), threads_per_thread_group=(256, 1, 1),
          result_shapes=[[1024]])  # fmt: skip
    torch.mps.synchronize()
    seconds = time.perf_counter() - start
    assert torch.ops.coreai_torch.mps_compile_count() == before + 1
    return row("mps.compile_new_kernel", "MPS: new kernel, first call (Metal compile), ms",
               seconds * 1e3)  # fmt: skip


def run(smoke: bool) -> list[dict[str, Any]]:
    """Every MPS-backend benchmark; none where Metal 4 kernels cannot run."""
    if mps_unavailable():
        return []
    torch.manual_seed(0)
    if smoke:
        plan, tiny = Plan(1, 3, 1), Plan(1, 3, 5)
        return [
            add_row(16, plan), launch_row(tiny), *row_kernel_rows(64, 1024, plan),
            gemm_row(256, plan), compile_row(),
        ]  # fmt: skip
    return [
        add_row(26, Plan(2, 11, 5)),
        add_row(22, Plan(5, 11, 50)),
        launch_row(Plan(200, 15, 500)),
        *row_kernel_rows(8192, 4096, Plan(5, 11, 20)),
        gemm_row(4096, Plan(3, 11, 10)),
        compile_row(),
    ]


def machine_line() -> str:
    """The Mac and the software the table was measured with."""
    from run_all import kernel_compiler

    return (
        f"Machine: macOS {platform.mac_ver()[0]}, {platform.machine()}, python "
        f"{platform.python_version()}, torch {torch.__version__}; CPU kernels: {kernel_compiler()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="MPS-backend benchmarks")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repetition each")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    reason = mps_unavailable()
    if reason:
        print(f"MPS benchmarks skipped: {reason}")
        return
    report(run(args.smoke), machine_line(), args.json)


if __name__ == "__main__":
    main()

"""CPU-backend benchmarks through ``TorchMetalKernel``, against the torch ops they replace.

``run(smoke)`` returns the rows of the report table (see ``timing.row``);
``python benchmarks/bench_cpu.py [--smoke]`` prints them. Targets:

- a 16-element kernel call costs at most 3x ``torch.add`` on the same tensors;
- a 2^24-element vector add reaches at least 0.8x ``torch.add``'s throughput;
- a barrier costs at most 20 ns per thread (tiled 256^3 matmul, 16x16 groups);
- a cold compile of a simple kernel takes at most 1.5 s, and a new process
  with a warm disk cache has its first result within 20 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_kernels as kernels  # from benchmarks/, put on the path above
from timing import Plan, measure_interleaved, row

LAUNCH_TARGET = 3.0  # at most 3x torch.add per call
THROUGHPUT_TARGET = 0.8  # at least 0.8x torch.add's throughput
BARRIER_TARGET_NS = 20.0
COLD_COMPILE_TARGET_S = 1.5
WARM_FIRST_RESULT_TARGET_S = 0.020

_PROBE = Path(__file__).resolve().parent / "startup_probe.py"


@dataclass(frozen=True)
class Sizes:
    tiny: int
    vector_log2: int
    matmul: int
    tiny_plan: Plan
    big_plan: Plan


def sizes(smoke: bool) -> Sizes:
    if smoke:
        return Sizes(16, 12, 32, Plan(1, 3, 5), Plan(1, 3, 1))
    return Sizes(16, 24, 256, Plan(500, 15, 500), Plan(2, 11, 1))


def _grid(n: int) -> tuple[int, int, int]:
    return (n, 1, 1)


def launch_rows(s: Sizes) -> list[dict[str, Any]]:
    """Per-call time of the 16-element add: kernel, torch.add, and reference mode."""
    n = s.tiny
    x, y = torch.randn(n), torch.randn(n)

    def call() -> torch.Tensor:
        return kernels.add(
            x, y, threads_per_grid=_grid(n), threads_per_thread_group=_grid(n), result_shapes=[[n]]
        )

    # One float rounding per element on both sides: bitwise equal.
    torch.testing.assert_close(call(), torch.add(x, y), rtol=0, atol=0)

    def reference_call() -> torch.Tensor:
        kernels.add.execution_mode = "reference"
        try:
            return call()
        finally:
            kernels.add.execution_mode = None

    ours, base, reference = measure_interleaved(
        [call, lambda: torch.add(x, y), reference_call], s.tiny_plan
    )
    us = 1e6
    ratio = ours.median / base.median
    return [
        row(
            "py.launch_tiny",
            f"Python: add {n} elements, us/call (vs torch.add)",
            ours.median * us,
            baseline=base.median * us,
            target=f"<= {LAUNCH_TARGET:g}x",
            passed=ratio <= LAUNCH_TARGET,
            ours_best=ours.best * us,
            baseline_best=base.best * us,
        ),
        row(
            "py.launch_tiny_vs_reference",
            f"Python: add {n} elements, us/call (vs reference mode)",
            ours.median * us,
            baseline=reference.median * us,
            ours_best=ours.best * us,
            baseline_best=reference.best * us,
        ),
    ]


def vector_add_row(s: Sizes) -> dict[str, Any]:
    """Throughput of the add on 2^k elements in 1024-thread groups, against torch.add."""
    n = 1 << s.vector_log2
    x, y = torch.randn(n), torch.randn(n)

    def call() -> torch.Tensor:
        return kernels.add(
            x,
            y,
            threads_per_grid=_grid(n),
            threads_per_thread_group=(1024, 1, 1),
            result_shapes=[[n]],
        )

    torch.testing.assert_close(call(), torch.add(x, y), rtol=0, atol=0)
    ours, base = measure_interleaved([call, lambda: torch.add(x, y)], s.big_plan)
    gigabytes = 3 * n * 4 / 1e9  # two float32 reads and one write per element
    throughput = gigabytes / ours.median
    base_throughput = gigabytes / base.median
    return row(
        "py.vector_add",
        f"Python: add 2^{s.vector_log2} fp32, GB/s (vs torch.add)",
        throughput,
        baseline=base_throughput,
        target=f">= {THROUGHPUT_TARGET:g}x",
        passed=throughput / base_throughput >= THROUGHPUT_TARGET,
        ours_best=gigabytes / ours.best,
        baseline_best=gigabytes / base.best,
    )


def matmul_rows(s: Sizes) -> list[dict[str, Any]]:
    """The tiled matmul against torch.matmul, and the barrier cost derived from it.

    The barrier cost is the time the barriers add (the tiled kernel minus the
    same kernel with its barriers removed, which runs the same loads, stores and
    multiply-adds as a plain loop), divided by the number of barriers all
    threads pass. The Python overhead of a call is in both times and cancels.
    """
    n = s.matmul
    a, b = torch.randn(n, n), torch.randn(n, n)
    grid, group = (n, n, 1), (kernels.TILE, kernels.TILE, 1)

    def tiled() -> torch.Tensor:
        return kernels.tiled_matmul(
            a,
            b,
            threads_per_grid=grid,
            threads_per_thread_group=group,
            result_shapes=[[n, n]],
        )

    def no_barrier() -> torch.Tensor:
        return kernels.tiled_matmul_no_barrier(
            a,
            b,
            threads_per_grid=grid,
            threads_per_thread_group=group,
            result_shapes=[[n, n]],
        )

    # n-long dot products of standard normals (|value| ~ sqrt(n)) summed in another
    # order than torch's: a few ulp of fp32 per add, inside 1e-4 rel + 1e-3 abs at n=256.
    torch.testing.assert_close(tiled(), a @ b, rtol=1e-4, atol=1e-3)
    # no_barrier's result is wrong by design; only its time matters.
    with_barriers, without, base = measure_interleaved(
        [tiled, no_barrier, lambda: a @ b], s.big_plan
    )

    ms = 1e3
    thread_barriers = n * n * kernels.barriers_per_thread(n)
    cost_ns = (with_barriers.median - without.median) / thread_barriers * 1e9
    return [
        row(
            "py.tiled_matmul",
            f"Python: tiled matmul {n}^3 fp32, ms (vs torch.matmul)",
            with_barriers.median * ms,
            baseline=base.median * ms,
            ours_best=with_barriers.best * ms,
            baseline_best=base.best * ms,
        ),
        row(
            "py.tiled_matmul_no_barrier",
            "Python: same matmul without barriers, ms (vs torch.matmul)",
            without.median * ms,
            baseline=base.median * ms,
            ours_best=without.best * ms,
            baseline_best=base.best * ms,
        ),
        row(
            "py.barrier_cost",
            "Python: barrier cost in tiled matmul, ns/thread/barrier",
            cost_ns,
            target=f"<= {BARRIER_TARGET_NS:g} ns",
            passed=cost_ns <= BARRIER_TARGET_NS,
            ours_best=(with_barriers.best - without.best) / thread_barriers * 1e9,
        ),
    ]


def probe(cache_dir: str, device: str = "cpu") -> dict[str, float]:
    """startup_probe.py in a new process with ``cache_dir`` as the kernel cache."""
    env = dict(os.environ, COREAI_TORCH_CACHE_DIR=cache_dir)
    done = subprocess.run(
        [sys.executable, str(_PROBE), device],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{_PROBE.name} {device} failed ({done.returncode}):\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def startup_rows(smoke: bool) -> list[dict[str, Any]]:
    """Cold compile and warm-cache start, each in a new process."""
    warm_runs = 1 if smoke else 5
    with tempfile.TemporaryDirectory(prefix="coreai_torch_bench_cache_") as cache:
        cold = probe(cache)
        # The median of a few warm starts: one process is one sample.
        warm = sorted((probe(cache) for _ in range(warm_runs)), key=lambda p: p["first_result"])
    middle = warm[len(warm) // 2]
    return [
        row(
            "py.cold_compile",
            "Python: new process, empty cache: first result, s",
            cold["first_result"],
            target=f"<= {COLD_COMPILE_TARGET_S:g} s",
            passed=cold["first_result"] <= COLD_COMPILE_TARGET_S,
        ),
        row(
            "py.warm_first_result",
            "Python: new process, warm cache: first result, ms",
            middle["first_result"] * 1e3,
            target=f"<= {WARM_FIRST_RESULT_TARGET_S * 1e3:g} ms",
            passed=middle["first_result"] <= WARM_FIRST_RESULT_TARGET_S,
            ours_best=warm[0]["first_result"] * 1e3,
        ),
        row(
            "py.import",
            "Python: import coreai_torch after torch, ms (vs import torch)",
            middle["import_coreai_torch"] * 1e3,
            baseline=middle["import_torch"] * 1e3,
        ),
    ]


def run(smoke: bool) -> list[dict[str, Any]]:
    """Every CPU-backend benchmark; ``smoke`` runs each once at tiny sizes."""
    s = sizes(smoke)
    torch.manual_seed(0)
    return [
        *launch_rows(s),
        vector_add_row(s),
        *matmul_rows(s),
        *startup_rows(smoke),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description="CPU-backend benchmarks through TorchMetalKernel")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repetition each")
    args = parser.parse_args()
    print(json.dumps(run(args.smoke), indent=1))


if __name__ == "__main__":
    main()

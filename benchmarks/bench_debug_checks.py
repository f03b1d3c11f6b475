"""What debug mode's checks cost: a debug call's time over a default call's.

Debug mode (docs/cpu.md, "Checking kernels") runs a kernel twice over guarded
copies of its tensors, every access of the first run checked for races, in
fiber mode, one threadgroup after another. The rows give that slowdown for the
benchmark kernels (``bench_kernels.py``) at sizes where a debug call takes
well under a second. Default mode is not in these rows: its own rows in
``bench_cpu.py`` are the ones to compare with and without this code.

    python benchmarks/bench_debug_checks.py [--smoke]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import bench_kernels as kernels
import torch
from timing import Plan, measure_interleaved, row


def _ratio_row(key: str, what: str, kernel: Any, call: Callable[[], Any], plan: Plan) -> dict:
    """Times ``call`` with ``kernel.debug`` off and on, interleaved."""

    def with_debug(on: bool) -> Callable[[], Any]:
        def run() -> Any:
            kernel.debug = on
            try:
                return call()
            finally:
                kernel.debug = False

        return run

    default, debug = measure_interleaved([with_debug(False), with_debug(True)], plan)
    return row(
        key,
        f"Python: {what}, debug-mode ms per call (baseline: default mode)",
        debug.median * 1e3,
        baseline=default.median * 1e3,
        ours_best=debug.best * 1e3,
        baseline_best=default.best * 1e3,
    )


def run(smoke: bool) -> list[dict[str, Any]]:
    """The debug overhead rows; ``smoke`` runs each once at tiny sizes."""
    plan = Plan(warmup=1, reps=1, calls=1) if smoke else Plan(warmup=2, reps=5, calls=2)
    n = 1 << (10 if smoke else 16)
    x, y = torch.randn(n), torch.randn(n)
    m = 32 if smoke else 128
    a, b = torch.randn(m, m), torch.randn(m, m)

    def add() -> torch.Tensor:
        return kernels.add(
            x,
            y,
            threads_per_grid=(n, 1, 1),
            threads_per_thread_group=(256, 1, 1),
            result_shapes=[[n]],
        )

    def matmul() -> torch.Tensor:
        return kernels.tiled_matmul(
            a,
            b,
            threads_per_grid=(m, m, 1),
            threads_per_thread_group=(kernels.TILE, kernels.TILE, 1),
            result_shapes=[[m, m]],
        )

    # Debug mode must not change the numbers: exact, same code and inputs.
    kernels.add.debug = True
    torch.testing.assert_close(add(), x + y, rtol=0, atol=0)
    kernels.add.debug = False
    return [
        _ratio_row("py.debug.add", f"add 2^{n.bit_length() - 1} fp32", kernels.add, add, plan),
        _ratio_row(
            "py.debug.tiled_matmul", f"tiled matmul {m}x{m}", kernels.tiled_matmul, matmul, plan
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description="debug-mode overhead of the CPU backend")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repetition each")
    args = parser.parse_args()
    print(json.dumps(run(args.smoke), indent=1))


if __name__ == "__main__":
    main()

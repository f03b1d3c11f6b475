"""What the kernel checker costs: debug mode against default mode, and the
fidelity checks against none.

Debug mode (docs/cpu.md, "Checking kernels") runs a kernel twice over guarded
copies of its tensors, every access of the first run checked for races, in
fiber mode, one threadgroup after another. The rows give

- that slowdown on the test corpora (tests/corpus and
  tests/cpu/test_msl_kernels.py: ported MLX, PyTorch, ggml, tinygrad and Apple
  kernels): every distinct kernel call of those tests timed in both modes
  (``debug_overhead_plugin.py``), as the median, 90th percentile and largest
  ratio of debug to default time per call;
- the same slowdown for two benchmark kernels (``bench_kernels.py``) at sizes
  where a debug call takes well under a second;
- what default mode pays: the Metal-fidelity checks run when a kernel is
  compiled (a source scan and the inliner's remarks), so a new kernel's
  compile is timed with them on and off. At run time default-mode kernels
  carry no checks (tests/cpu/test_debug_checks.py checks the compiled library
  for the instrumentation), so their rows in ``bench_cpu.py`` are unchanged by
  the checker.

    python benchmarks/bench_debug_checks.py [--smoke] [--corpus-json FILE]

``--corpus-json`` writes each timed corpus call (test, kernel, both times,
whether debug mode gave the same bits) for a closer look.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bench_kernels as kernels
import torch
from timing import Plan, measure_interleaved, row

from coreai_torch import MetalParameter, TorchMetalKernel

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CORPORA = ["tests/corpus", "tests/cpu/test_msl_kernels.py"]
PLUGIN = ["-p", "debug_overhead_plugin"]
# One small ported kernel: what --smoke runs of the corpora.
SMOKE_CORPUS = ["tests/corpus/test_tinygrad.py::test_tinygrad_metal_matmul[default-64]"]
# The corpora's tests run twice, as written and in debug mode
# (tests/conftest.py, default_and_debug_mode): the plugin times both modes of
# each call of the first pass itself.
DEFAULT_PASS = ["-k", "not debug"]


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


def corpus_calls(smoke: bool) -> list[dict[str, Any]]:
    """Each distinct kernel call of the corpora, timed in both modes (a child pytest session)."""
    with tempfile.TemporaryDirectory(prefix="coreai_torch_debug_overhead_") as tmp:
        out = Path(tmp) / "calls.jsonl"
        env = dict(
            os.environ,
            COREAI_TORCH_DEBUG_OVERHEAD_OUT=str(out),
            COREAI_TORCH_DEBUG_OVERHEAD_REPS="1" if smoke else "3",
            PYTHONPATH=os.pathsep.join(
                p for p in (str(HERE), str(ROOT), os.environ.get("PYTHONPATH")) if p
            ),
        )
        env.pop("COREAI_TORCH_DEBUG", None)  # default mode is the baseline
        tests = SMOKE_CORPUS if smoke else CORPORA
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                *PLUGIN,
                *DEFAULT_PASS,
                *tests,
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(
                "the corpora failed under the timing plugin:\n"
                + done.stdout[-4000:]
                + done.stderr[-2000:]
            )
        calls = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    if not calls:
        raise RuntimeError("the corpora launched no kernel on the CPU")
    return calls


def corpus_rows(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The median, 90th percentile and largest debug/default ratio over the timed calls."""
    timed = [c for c in calls if "refused" not in c]
    ratios = sorted(c["debug_s"] / c["default_s"] for c in timed)
    kernels_timed = len({c["kernel"] for c in timed})
    what = f"{len(timed)} calls of {kernels_timed} kernels"
    refused = [c for c in calls if "refused" in c]
    p90 = ratios[min(len(ratios) - 1, int(0.9 * len(ratios)))]
    stats = (
        ("median", statistics.median(ratios)),
        ("90th percentile", p90),
        ("largest", ratios[-1]),
    )
    return [
        row(
            f"py.debug.corpus_{name.split()[0]}",
            f"Python: test corpora ({what}), debug/default time per call, {name}, x",
            value,
        )
        for name, value in stats
    ] + [
        row(
            "py.debug.corpus_refused",
            "Python: test corpora, calls debug mode refused (--corpus-json says why)",
            float(len(refused)),
        ),
        row(
            "py.debug.corpus_different_bits",
            "Python: test corpora, calls whose debug-mode results differ from default mode's bits",
            float(sum(not c["identical"] for c in timed)),
        ),
    ]


def _double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def compile_row(smoke: bool) -> dict[str, Any]:
    """A new kernel's compile, with the Metal-fidelity checks (default) and without."""
    count = 1 if smoke else 5
    x = torch.randn(64)
    times: dict[str, list[float]] = {"1": [], "0": []}
    previous = os.environ.get("COREAI_TORCH_METAL_FIDELITY")
    try:
        for i in range(count):
            for fidelity in ("1", "0"):
                os.environ["COREAI_TORCH_METAL_FIDELITY"] = fidelity
                # A source no cache has seen: the call compiles it.
                nonce = f"{time.time_ns()}_{i}_{fidelity}"
                kernel = TorchMetalKernel(
                    f"bench_compile_{nonce}",
                    ["x"],
                    ["out"],
                    src=f"// {nonce}\nif (id < out.get_extent(0)) out[id] = x[id] * 2.0f;",
                    torch_defn=_double,
                    metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")],
                )
                start = time.perf_counter()
                out = kernel(
                    x,
                    threads_per_grid=(64, 1, 1),
                    threads_per_thread_group=(32, 1, 1),
                    result_shapes=[[64]],
                )
                times[fidelity].append(time.perf_counter() - start)
                torch.testing.assert_close(out, x * 2, rtol=0, atol=0)
    finally:
        if previous is None:
            os.environ.pop("COREAI_TORCH_METAL_FIDELITY", None)
        else:
            os.environ["COREAI_TORCH_METAL_FIDELITY"] = previous
    on, off = statistics.median(times["1"]), statistics.median(times["0"])
    return row(
        "py.fidelity.compile_new_kernel",
        "Python: compile a new kernel, ms, Metal-fidelity checks on (baseline: off)",
        on * 1e3,
        baseline=off * 1e3,
        ours_best=min(times["1"]) * 1e3,
        baseline_best=min(times["0"]) * 1e3,
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
        *corpus_rows(corpus_calls(smoke)),
        compile_row(smoke),
        _ratio_row("py.debug.add", f"add 2^{n.bit_length() - 1} fp32", kernels.add, add, plan),
        _ratio_row(
            "py.debug.tiled_matmul", f"tiled matmul {m}x{m}", kernels.tiled_matmul, matmul, plan
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description="debug-mode overhead of the CPU backend")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repetition each")
    parser.add_argument("--corpus-json", type=Path, help="write each timed corpus call here")
    args = parser.parse_args()
    if args.corpus_json:
        calls = corpus_calls(args.smoke)
        args.corpus_json.write_text(json.dumps(calls, indent=1))
        print(json.dumps(corpus_rows(calls), indent=1))
        return
    print(json.dumps(run(args.smoke), indent=1))


if __name__ == "__main__":
    main()

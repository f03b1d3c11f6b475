"""Where the CUDA backend's first result with an empty cache spends its time.

Not a benchmark row: ``bench_cuda.py``'s ``cuda.cold_compile`` row says how
long the first result takes; this says what it is made of, measured on the
benchmark's seed kernel (``bench_kernels.add``), each part in new processes
(the median of ``--runs``, default 3):

- ``compiler check``: ``clang++ --version``, which the backend runs (beside a
  probe) when the cache holds no note of the compiler;
- ``PTX, prelude parsed``: the kernel compiled to PTX by a process whose cache
  holds the compiler's note only, with the prelude parsed from source
  (``COREAI_TORCH_PRECOMPILED_PRELUDE=0``);
- ``PTX, prelude precompiled``: the same with the precompiled prelude there;
- ``PTX, empty cache``: the kernel compiled to PTX with nothing in the cache
  (the compiler check, the compile and the prelude's precompile beside it);
- ``first result, empty cache``: ``startup_probe.py cuda``, which also has the
  driver compile the PTX to machine code and load it (needs a GPU).

Usage: ``python benchmarks/cold_start_parts.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def compile_ptx() -> float:
    """In this process: seconds to compile the seed kernel to PTX for sm_90."""
    import torch

    from coreai_torch import _C

    sys.path.insert(0, str(HERE))
    import bench_kernels

    kernel = bench_kernels.add
    x = torch.zeros(4)
    spec = kernel.specialization([x, x], [1], [torch.float32])
    args = [list(a) if isinstance(a, tuple) else a for a in kernel.registration(spec)]
    handle = torch.ops.coreai_torch.register_kernel.default(*args)
    start = time.perf_counter()
    _C._cuda_ptx(handle, "sm_90")
    return time.perf_counter() - start


def in_new_process(cache: Path, **env: str) -> float:
    """``compile_ptx`` in a new process with ``cache`` as the kernel cache."""
    done = subprocess.run(
        [sys.executable, __file__, "--compile-ptx"],
        env=dict(os.environ, COREAI_TORCH_CACHE_DIR=str(cache), **env),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"compiling the seed kernel failed:\n{done.stderr}")
    return float(done.stdout.strip().splitlines()[-1])


def parts(runs: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {}

    def note(name: str, seconds: float) -> None:
        times.setdefault(name, []).append(seconds)

    from coreai_torch import _C

    compiler = _C._cpu_compiler()  # the one the backends compile with
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([compiler, "--version"], capture_output=True, check=True)
        note("compiler check (clang++ --version)", time.perf_counter() - start)
        with tempfile.TemporaryDirectory(prefix="coreai_torch_cold_parts_") as tmp:
            empty, parsed, precompiled = (Path(tmp) / n for n in ("empty", "parsed", "pch"))
            for d in (empty, parsed, precompiled):
                d.mkdir(mode=0o700)
            note("PTX, empty cache", in_new_process(empty))
            for kept in empty.glob("compiler-*.txt"):
                shutil.copy2(kept, parsed / kept.name)
                shutil.copy2(kept, precompiled / kept.name)
            for kept in empty.glob("*.pch"):
                shutil.copy2(kept, precompiled / kept.name)
            note(
                "PTX, prelude parsed",
                in_new_process(parsed, COREAI_TORCH_PRECOMPILED_PRELUDE="0"),
            )
            note("PTX, prelude precompiled", in_new_process(precompiled))
        if shutil.which("nvidia-smi"):
            with tempfile.TemporaryDirectory(prefix="coreai_torch_cold_parts_") as tmp:
                probe = subprocess.run(
                    [sys.executable, str(HERE / "startup_probe.py"), "cuda"],
                    env=dict(os.environ, COREAI_TORCH_CACHE_DIR=tmp),
                    capture_output=True,
                    text=True,
                    timeout=300,
                    check=True,
                )
                result = json.loads(probe.stdout.strip().splitlines()[-1])
                note("first result, empty cache", result["first_result"])
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--compile-ptx", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.compile_ptx:
        print(compile_ptx())
        return
    print("| part | median, ms | best, ms |")
    print("|---|---:|---:|")
    for name, samples in parts(args.runs).items():
        print(f"| {name} | {statistics.median(samples) * 1e3:.0f} | {min(samples) * 1e3:.0f} |")


if __name__ == "__main__":
    main()

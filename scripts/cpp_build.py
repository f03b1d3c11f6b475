"""Builds the C++ library with the C++ tests and the benchmark harness, in one directory.

    python scripts/cpp_build.py [TARGET...]     # default: every target below

The top-level CMakeLists.txt builds ``libcoreai_torch`` from ``csrc/`` once;
the launch checks (``tests/cpp``) and the benchmark harness (``benchmarks/cpp``)
link that one library. ``scripts/install.sh --test`` runs this, so the test
run and ``benchmarks/run_all.py`` find everything built and only rebuild what
changed since.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD_DIR = ROOT / "build" / "cpp"
LAUNCH_CHECKS = "coreai_torch_launch_checks"
HARNESS = "coreai_torch_bench"
TARGETS = (LAUNCH_CHECKS, HARNESS)


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        output = f"{done.stdout[-6000:]}\n{done.stderr[-6000:]}".strip()
        raise RuntimeError(f"`{' '.join(cmd)}` failed ({done.returncode}):\n{output}")


def build(targets: tuple[str, ...] = TARGETS, jobs: int | None = None) -> Path:
    """Configures ``build/cpp`` once and builds ``targets``; returns the build directory.

    A build that is up to date takes a second or two (CMake checks the sources).
    """
    import torch.utils

    if not (BUILD_DIR / "CMakeCache.txt").exists():
        _run(
            [
                "cmake",
                "-S",
                str(ROOT),
                "-B",
                str(BUILD_DIR),
                # The harness times the library: an unoptimised one would mislead.
                "-DCMAKE_BUILD_TYPE=Release",
                "-DCOREAI_TORCH_BUILD_BENCHMARKS=ON",
                "-DCOREAI_TORCH_BUILD_TESTS=ON",
                f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
            ]
        )
    jobs = jobs or os.cpu_count() or 1
    _run(["cmake", "--build", str(BUILD_DIR), "-j", str(jobs), "--target", *targets])
    return BUILD_DIR


if __name__ == "__main__":
    print(build(tuple(sys.argv[1:]) or TARGETS))

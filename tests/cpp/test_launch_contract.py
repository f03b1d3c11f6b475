"""Builds and runs tests/cpp/launch_checks.cpp: coreai_torch::launch refusing a call
that does not match the registered record (rank, dtype, device, scalar kind), from C++.

The executable links the library CMake builds from csrc/ (as the benchmark harness
does) into build/cpp-tests; a later run rebuilds only what changed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch.utils
from support.cpu_launch import Scalar, Tensor, registration

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BUILD = ROOT / "build" / "cpp-tests"
CHECKS = [
    "matching launch",
    "wrong rank",
    "wrong dtype",
    "wrong device",
    "float for an int scalar",
    "bool for an int scalar",
    "int outside Metal's int",
    "grid entry of 2^32",
    "missing tensor",
    "dispatcher: input requiring grad",
    "dispatcher: same inputs under at::NoGradGuard",
    "released handle",
]

pytestmark = pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")


def _build() -> Path:
    jobs = str(max(1, (os.cpu_count() or 2)))
    if not (BUILD / "CMakeCache.txt").exists():
        subprocess.run(
            ["cmake", "-S", str(HERE), "-B", str(BUILD),
             f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}"],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
    build = subprocess.run(
        ["cmake", "--build", str(BUILD), "--target", "coreai_torch_launch_checks", "-j", jobs],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]
    return BUILD / "coreai_torch_launch_checks"


def test_launch_refuses_calls_that_do_not_match_the_record(tmp_path: Path) -> None:
    args = registration(
        "scaled_add",
        [Tensor("x"), Tensor("y"), Scalar("n", "int")],
        [Tensor("out")],
        "out[id] = x[id] + y[id] * float(n);",
        [("id", "uint", "thread_position_in_grid")],
    )
    source = tmp_path / "scaled_add.metal"
    source.write_text(args[1])
    env = {**os.environ, "COREAI_TORCH_CACHE_DIR": str(tmp_path / "cache")}
    run = subprocess.run(
        [str(_build()), str(source), args[2]], capture_output=True, text=True, env=env, timeout=600
    )
    lines = run.stdout.splitlines()
    assert lines == [f"ok {name}" for name in CHECKS], run.stdout + run.stderr
    assert run.returncode == 0

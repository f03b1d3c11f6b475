"""Builds and runs tests/cpp/launch_checks.cpp: coreai_torch::launch refusing a call
that does not match the registered record (rank, dtype, device, scalar kind), from C++.

The executable links the library CMake builds from csrc/ into build/cpp, the one
build directory it shares with the benchmark harness (scripts/cpp_build.py, which
scripts/install.sh --test runs); here the build only catches up with what changed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.cpu_launch import Scalar, Tensor, registration

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import cpp_build  # noqa: E402  (scripts/, put on the path above)

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
    return cpp_build.build((cpp_build.LAUNCH_CHECKS,)) / "tests" / "cpp" / cpp_build.LAUNCH_CHECKS


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

"""The fiber context switch on its own: the assembly version and the ucontext fallback."""

from __future__ import annotations

import subprocess
from pathlib import Path

import coreai_torch._C as C
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("force_ucontext", [False, True], ids=["assembly", "ucontext"])
def test_fiber_switch_keeps_state_and_order(tmp_path: Path, force_ucontext: bool) -> None:
    program = tmp_path / "fiber_check"
    define = ["-DCOREAI_FIBER_FORCE_UCONTEXT"] if force_ucontext else []
    build = subprocess.run(
        [
            C._cpu_compiler(),
            "-std=c++20",
            "-O2",
            *define,
            "-I",
            str(ROOT / "csrc"),
            str(Path(__file__).parent / "data" / "fiber_check.cpp"),
            str(ROOT / "csrc" / "cpu" / "fiber.cpp"),
            "-o",
            str(program),
        ],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(program)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("ok ")


def test_switch_cost_in_the_built_library() -> None:
    # About 9 ns on the 2-core x86-64 VM we test on; the bound only catches a
    # fallback to ucontext (about 300 ns) or something worse.
    assert C._fiber_switch_ns(100_000) < 100

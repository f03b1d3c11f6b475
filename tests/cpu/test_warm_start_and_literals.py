"""Metal half literals, and a warm disk cache that starts no compiler at all."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import coreai_torch._C as C
import pytest
import torch

from coreai_torch import MetalParameter, TorchMetalKernel


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("half x = 1.5h;", "half x = 1.5f16;"),
        ("y = 2e-3h + .5h + 1.0e+5H;", "y = 2e-3f16 + .5f16 + 1.0e+5f16;"),
        ("int z = 0x1h;", None),  # not a decimal literal: left for the compiler
        ("x1h = 2h; v.x5h;", None),  # identifiers, and `2h`, which Metal rejects too
        ("// 2.0h\n", None),
        ('s = "3.0h";', None),
    ],
)
def test_half_literal_rewrite(source: str, expected: str | None) -> None:
    assert C._rewrite_half_literals(source) == (source if expected is None else expected)


def _half_axpb(x: torch.Tensor) -> torch.Tensor:
    return x * 0.1 + 3.3


half_literals = TorchMetalKernel(
    "half_literals",
    ["x"],
    ["out"],
    src="if (id < out.get_extent(0)) out[id] = x[id] * 0.1h + 3.3h;",
    torch_defn=_half_axpb,
    metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")],
)


def test_half_literals_round_like_half() -> None:
    x = torch.linspace(-4, 4, 64, dtype=torch.float16)
    out = half_literals(
        x, threads_per_grid=(64, 1, 1), threads_per_thread_group=(32, 1, 1), result_shapes=[[64]]
    )
    # The literals are halves (0.1h == 0.0999755859375) and each operation rounds
    # to half, exactly as torch computes x * half(0.1) + half(3.3) in float16.
    want = x * torch.tensor(0.1, dtype=torch.float16) + torch.tensor(3.3, dtype=torch.float16)
    torch.testing.assert_close(out, want, rtol=0, atol=0)


CHILD = textwrap.dedent(
    """
    import time, torch
    from coreai_torch import MetalParameter, TorchMetalKernel
    def ref(x: torch.Tensor) -> torch.Tensor:
        return x + 1
    k = TorchMetalKernel("warm_start_probe", ["x"], ["out"], "out[id] = x[id] + 1;", ref,
                         metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")])
    x = torch.arange(8.0)
    start = time.perf_counter()
    out = k(x, threads_per_grid=(8, 1, 1), threads_per_thread_group=(8, 1, 1),
            result_shapes=[[8]])
    elapsed = time.perf_counter() - start
    assert torch.equal(out, x + 1)
    print(torch.ops.coreai_torch.cpu_compile_count(),
          torch.ops.coreai_torch.cpu_disk_cache_hits(), elapsed)
    """
)


def _compiler_wrapper(tmp_path: Path, name: str, before: str) -> Path:
    """A clang++ that runs the shell line ``before`` first, then the real compiler."""
    wrapper = tmp_path / name
    wrapper.write_text(f'#!/bin/sh\n{before}\nexec {C._cpu_compiler()} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def _run_child(cache: Path, compiler: Path) -> tuple[int, int, float]:
    env = {**os.environ, "COREAI_TORCH_CACHE_DIR": str(cache), "COREAI_TORCH_CXX": str(compiler)}
    p = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr
    compiles, hits, elapsed = p.stdout.split()
    return int(compiles), int(hits), float(elapsed)


def test_warm_cache_runs_no_compiler_process(tmp_path: Path) -> None:
    log = tmp_path / "invocations.log"
    wrapper = _compiler_wrapper(tmp_path, "clang-wrapper", f'echo "$*" >> "{log}"')
    cache = tmp_path / "cache"

    assert _run_child(cache, wrapper)[:2] == (1, 0)
    first = log.read_text().splitlines()
    assert any("--version" in line for line in first)  # the compiler was checked
    assert len(first) >= 3  # --version, the syntax probe, the kernel

    compiles, hits, _ = _run_child(cache, wrapper)
    assert (compiles, hits) == (0, 1)
    assert log.read_text().splitlines() == first  # no process started at all

    # Replacing the compiler binary (a new modification time) checks it again.
    later = time.time() + 5
    os.utime(wrapper, (later, later))
    assert _run_child(cache, wrapper)[:2] == (0, 1)
    assert len(log.read_text().splitlines()) == len(first) + 2


# A new cache: the compiler is checked when the kernel is defined, while the
# process goes on, and the first call finds the check's note.
EARLY_CHECK = textwrap.dedent(
    """
    import os, sys, time, torch
    from pathlib import Path
    from coreai_torch import MetalParameter, TorchMetalKernel
    def ref(x: torch.Tensor) -> torch.Tensor:
        return x * 2
    cache = Path(os.environ["COREAI_TORCH_CACHE_DIR"])
    k = TorchMetalKernel("early_check_probe", ["x"], ["out"], "out[id] = x[id] * 2;", ref,
                         metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")])
    deadline = time.monotonic() + 120
    while not list(cache.glob("compiler-*.txt")):
        assert time.monotonic() < deadline, "no compiler note two minutes after the definition"
        time.sleep(0.01)
    x = torch.arange(8.0)
    if sys.argv[1] == "fork":
        # A child forked while the search may still run has none of its
        # threads: its launch must not wait for it.
        pid = os.fork()
        if pid == 0:
            out = k(x, threads_per_grid=(8, 1, 1), threads_per_thread_group=(8, 1, 1),
                    result_shapes=[[8]])
            os._exit(0 if torch.equal(out, x * 2) else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
    out = k(x, threads_per_grid=(8, 1, 1), threads_per_thread_group=(8, 1, 1),
            result_shapes=[[8]])
    assert torch.equal(out, x * 2)
    print("ok")
    """
)


@pytest.mark.parametrize("how", ["same process", "fork"])
def test_the_compiler_is_checked_when_the_first_kernel_is_defined(tmp_path: Path, how: str) -> None:
    log = tmp_path / "invocations.log"
    wrapper = _compiler_wrapper(tmp_path, "clang-wrapper", f'echo "$*" >> "{log}"')
    env = {
        **os.environ,
        "COREAI_TORCH_CACHE_DIR": str(tmp_path / "cache"),
        "COREAI_TORCH_CXX": str(wrapper),
    }
    p = subprocess.run(
        [sys.executable, "-c", EARLY_CHECK, how.split()[0]],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr
    runs = log.read_text().splitlines()
    # One check (before the first call), however many launches followed it.
    assert sum(line == "--version" for line in runs) == 1, runs
    assert sum("-fsyntax-only" in line for line in runs) == 1, runs


def test_a_hung_compiler_check_does_not_hold_the_exit(tmp_path: Path) -> None:
    wrapper = _compiler_wrapper(
        tmp_path, "hung-clang", 'if [ "$1" = "--version" ]; then sleep 120; fi'
    )
    env = {
        **os.environ,
        "COREAI_TORCH_CACHE_DIR": str(tmp_path / "cache"),
        "COREAI_TORCH_CXX": str(wrapper),
    }
    define_and_leave = textwrap.dedent(
        """
        import torch
        from coreai_torch import MetalParameter, TorchMetalKernel
        def ref(x: torch.Tensor) -> torch.Tensor:
            return x
        TorchMetalKernel("hung_check", ["x"], ["out"], "out[id] = x[id];", ref,
                         metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")])
        print("defined")
        """
    )
    start = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-c", define_and_leave],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    # The exit waits a few seconds for the search, not for the hung --version.
    assert p.returncode == 0 and p.stdout.strip() == "defined", p.stderr
    assert time.monotonic() - start < 60

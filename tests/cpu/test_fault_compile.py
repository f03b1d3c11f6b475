"""Compiler runs that fail for reasons other than the source: not cached, so
the next call compiles again; a time limit; SIGINT stops a compile."""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path

import coreai_torch._C as C
import pytest
import torch
from support.child_process import LineReader, child_env, run, spawn
from support.cpu_launch import Tensor, kernel

GID = [("id", "uint", "thread_position_in_grid")]


def _wrapper(tmp_path: Path, first_compile: str) -> Path:
    """A compiler that runs `first_compile` (shell) instead of its first kernel compile."""
    script = tmp_path / "flaky-clang++"
    marker = tmp_path / "first-compile-done"
    script.write_text(
        "#!/bin/bash\n"
        'case " $* " in\n'
        f'  *" -c "*) if [ ! -e {marker} ]; then touch {marker}; {first_compile}; fi ;;\n'
        "esac\n"
        f'exec {C._cpu_compiler()} "$@"\n'
    )
    script.chmod(0o755)
    return script


# Two calls of one kernel in one process: the first meets the broken
# compiler, the second must compile again and return the right numbers.
TWO_CALLS = """
import time, torch
from coreai_torch import MetalCompileError
from support.cpu_launch import Tensor, kernel
k = kernel("flaky", [Tensor("x")], [Tensor("out")], "out[id] = x[id] * 3.0f;",
           [("id", "uint", "thread_position_in_grid")])
x = torch.arange(16, dtype=torch.float32)
start = time.monotonic()
try:
    k(x, grid=(16, 1, 1), group=(16, 1, 1), shapes=[[16]])
    print("first call succeeded")
except BaseException as e:  # KeyboardInterrupt included
    print(type(e).__name__, "after", round(time.monotonic() - start), "s:", e)
(out,) = k(x, grid=(16, 1, 1), group=(16, 1, 1), shapes=[[16]])
assert torch.equal(out, 3 * x), out
print("second call ok, compiles:", torch.ops.coreai_torch.cpu_compile_count())
"""


@pytest.mark.parametrize(
    ("first_compile", "expected"),
    [
        ("kill -KILL $$", "killed by signal 9"),
        (
            "echo 'ld: error: write failed: No space left on device' >&2; exit 1",
            "without reporting an error in the kernel's source",
        ),
    ],
    ids=["killed", "disk-full"],
)
def test_a_transient_compile_failure_is_not_cached(
    tmp_path: Path, first_compile: str, expected: str
) -> None:
    env = child_env(tmp_path / "cache", COREAI_TORCH_CXX=str(_wrapper(tmp_path, first_compile)))
    out = run(TWO_CALLS, env)
    assert out.startswith("RuntimeError after"), out
    assert "kernel 'flaky'" in out and expected in out and "Nothing was cached" in out
    assert "MetalCompileError" not in out
    assert out.strip().endswith("second call ok, compiles: 2")


def test_a_compile_past_the_time_limit_is_stopped(tmp_path: Path) -> None:
    env = child_env(
        tmp_path / "cache",
        COREAI_TORCH_CXX=str(_wrapper(tmp_path, "sleep 120")),
        COREAI_TORCH_COMPILE_TIMEOUT="2",
    )
    # The limit is read at each compile: the second call gets the default.
    code = TWO_CALLS.replace(
        "(out,) = k(", "import os\nos.environ.pop('COREAI_TORCH_COMPILE_TIMEOUT')\n(out,) = k("
    )
    out = run(code, env)
    assert "did not finish within 2 s and was stopped" in out, out
    assert "COREAI_TORCH_COMPILE_TIMEOUT" in out
    seconds = int(out.split(" after ")[1].split()[0])
    assert seconds < 30, out  # stopped at the limit, not after the wrapper's sleep
    assert out.strip().endswith("second call ok, compiles: 2")


def test_sigint_stops_a_compile_and_the_next_call_compiles(tmp_path: Path) -> None:
    env = child_env(tmp_path / "cache", COREAI_TORCH_CXX=str(_wrapper(tmp_path, "sleep 120")))
    code = TWO_CALLS.replace(
        "start = time.monotonic()", "print('compiling', flush=True)\nstart = time.monotonic()"
    )
    p = spawn(code, env)
    lines = LineReader(p)
    assert lines.next() == "compiling"
    time.sleep(1.5)  # well inside the wrapper's sleep
    p.send_signal(signal.SIGINT)
    first = lines.next(timeout=60)  # not the wrapper's 120 s
    assert first.startswith("KeyboardInterrupt after"), first
    assert lines.finish(timeout=300) == ["second call ok, compiles: 2"]


def test_a_real_compile_error_is_still_remembered() -> None:
    k = kernel("remembered", [Tensor("x")], [Tensor("out")], f"// {uuid.uuid4()}\nout[id] = ;", GID)
    with pytest.raises(RuntimeError, match="MetalCompileError: kernel 'remembered'"):
        k(torch.ones(4), grid=(4, 1, 1), group=(4, 1, 1), shapes=[[4]])
    compiles = torch.ops.coreai_torch.cpu_compile_count()
    with pytest.raises(RuntimeError, match="MetalCompileError"):
        k(torch.ones(4), grid=(4, 1, 1), group=(4, 1, 1), shapes=[[4]])
    assert torch.ops.coreai_torch.cpu_compile_count() == compiles


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("COREAI_TORCH_COMPILE_TIMEOUT", "soon", "is not a positive number of seconds"),
        ("COREAI_TORCH_COMPILE_TIMEOUT", "-1", "is not a positive number of seconds"),
        ("COREAI_TORCH_CACHE_MAX_BYTES", "lots", "is not a positive size"),
        ("COREAI_TORCH_CACHE_MAX_BYTES", "12T", "is not a positive size"),
    ],
)
def test_bad_settings_are_named(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv(variable, value)
    k = kernel(
        "settings", [Tensor("x")], [Tensor("out")], f"// {uuid.uuid4()}\nout[id] = x[id];", GID
    )
    with pytest.raises(RuntimeError, match=f"{variable}={value} {message}"):
        k(torch.ones(4), grid=(4, 1, 1), group=(4, 1, 1), shapes=[[4]])

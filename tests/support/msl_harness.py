"""Compiles small C++ programs against the Metal standard library headers and reads their output.

A check program is a function body that runs inside ``namespace metal`` (as a
kernel does on the CPU backend) and reports values with ``emit("name", v...)``.
Floating-point values are printed as hexadecimal floats, so the Python side
sees the exact bits; integers as decimal.

In device mode for CUDA (``COREAI_TORCH_TEST_DEVICE=cuda``) the same program is
compiled by the CUDA backend's compiler command for the GPU, as one device
function around the same headers, and runs on one GPU thread (cuda_runner.py);
emit() prints with the GPU's printf. The values are then the GPU's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from support import ptx_check

MSL_INCLUDE_DIR = Path(__file__).resolve().parents[2] / "csrc" / "msl"

# The CPU backend's flags: half and bfloat round after every operation.
KERNEL_FLAGS = [
    "-std=c++23",
    "-O2",
    "-Xclang",
    "-ffloat16-excess-precision=none",
    "-Xclang",
    "-fbfloat16-excess-precision=none",
]
# The headers must stay warning-free under the usual warning set.
WARNING_FLAGS = ["-Wall", "-Wextra", "-Werror"]

PRELUDE = r"""
#include <coreai_msl/core.h>
// What `threadgroup` storage is on this target (the address-space pass writes it).
#include <coreai_msl/sync.h>
#include <cstdio>
#include <type_traits>

namespace check {

template <class T>
void emit_value(const T& value) {
  if constexpr (metal::detail::is_vector_v<T>) {
    for (int i = 0; i < metal::detail::size_v<T>; ++i) {
      emit_value(static_cast<metal::detail::element_t<T>>(value[i]));
    }
  } else if constexpr (metal::detail::float_scalar<T> || std::is_same_v<T, double>) {
    std::printf(" f%a", static_cast<double>(value));
  } else if constexpr (std::is_same_v<T, bool>) {
    std::printf(" i%d", value ? 1 : 0);
  } else if constexpr (std::is_signed_v<T>) {
    std::printf(" i%lld", static_cast<long long>(value));
  } else {
    std::printf(" i%llu", static_cast<unsigned long long>(value));
  }
}

template <class... T>
void emit(const char* name, const T&... values) {
  std::printf("%s", name);
  (emit_value(values), ...);
  std::printf("\n");
}

}  // namespace check

namespace metal {
using check::emit;
void run_checks();
}  // namespace metal
"""

HOST_MAIN = """
int main() {
  metal::run_checks();
  return 0;
}
"""

ON_GPU = os.environ.get("COREAI_TORCH_TEST_DEVICE") == "cuda"
GPU_ARCH = "sm_90"
# The program as device code: host+device functions over the same headers,
# printf declared for the device (clang lowers it to the GPU's vprintf).
GPU_HEAD = """
#include <coreai_msl/nvptx_math.h>
extern "C" __attribute__((device)) int printf(const char*, ...);
#include <cstdio>
#pragma clang force_cuda_host_device begin
"""
GPU_MAIN = """
#pragma clang force_cuda_host_device end
extern "C" __attribute__((global)) void coreai_checks() { metal::run_checks(); }
"""
CUDA_RUNNER = Path(__file__).with_name("cuda_runner.py")


def find_clang() -> str:
    for name in ("clang++-19", "clang++"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("the Metal standard library tests need clang++ (19 or newer)")


def _parse_token(token: str) -> float | int:
    kind, text = token[0], token[1:]
    if kind == "f":
        return float.fromhex(text) if "nan" not in text else float("nan")
    return int(text)


def _source(
    body: str, globals_src: str, helpers: str = "", metal_passes: bool = False, gpu: bool = ON_GPU
) -> str:
    kernel_code = f"{helpers}\nvoid run_checks() {{\n{body}\n}}\n"
    if metal_passes:
        kernel_code = metal_to_cpp(kernel_code)
    program = f"{PRELUDE}\n{globals_src}\nnamespace metal {{\n{kernel_code}}}  // namespace metal\n"
    return f"{GPU_HEAD}{program}{GPU_MAIN}" if gpu else program + HOST_MAIN


def _gpu_command() -> list[str]:
    from coreai_torch import _C

    return _C._cuda_compile_command(GPU_ARCH)


def _start_gpu_check(source: Path, extra_flags: tuple[str, ...]) -> subprocess.Popen | None:
    """On the CPU: starts checking ``source`` (the program as device code) for the
    CUDA backend, whose compile the GPU suite alone would otherwise see. Where
    the CUDA toolchain is missing, not checked (ptx_check.py says when that
    fails a run)."""
    if not ptx_check.ENABLED:
        return None
    return subprocess.Popen(
        [*_gpu_command(), *extra_flags, "-fsyntax-only", str(source)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _build_and_run(source: Path, extra_flags: tuple[str, ...]) -> str:
    """Compiles ``source`` for this mode's target, runs it, returns what it printed."""
    if ON_GPU:
        ptx = source.with_suffix(".ptx")
        build = subprocess.run(
            [*_gpu_command(), *extra_flags, "-o", str(ptx), str(source)],
            capture_output=True,
            text=True,
        )
        assert build.returncode == 0, f"check program failed to compile:\n{build.stderr}"
        run = subprocess.run(
            [sys.executable, str(CUDA_RUNNER), str(ptx)],
            capture_output=True,
            text=True,
            timeout=300,
        )
    else:
        binary = source.with_suffix("")
        cmd = [find_clang(), *KERNEL_FLAGS, *WARNING_FLAGS, *extra_flags, f"-I{MSL_INCLUDE_DIR}"]
        build = subprocess.run(
            [*cmd, str(source), "-o", str(binary)], capture_output=True, text=True
        )
        assert build.returncode == 0, f"check program failed to compile:\n{build.stderr}"
        run = subprocess.run([str(binary)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"check program failed:\n{run.stderr}"
    return run.stdout


def metal_to_cpp(source: str) -> str:
    """The CPU backend's text passes (address spaces, casts, half literals ...)."""
    import coreai_torch._C as C

    return C._metal_to_cpp(source)


# Address-space words outside what the passes rewrite, as kernels see them.
ADDRESS_SPACE_MACROS = "#include <coreai_msl/address_space_words.h>\n"


def run_checks(
    body: str,
    globals_src: str = "",
    extra_flags: tuple[str, ...] = (),
    helpers: str = "",
    metal_passes: bool = False,
    device_code: bool = True,
) -> dict:
    """Compiles and runs ``body``; returns {name: [values...]} of its emit() calls.

    ``globals_src`` goes at global scope before the body (extra includes);
    ``helpers`` inside namespace metal, before it. With ``metal_passes`` the
    helpers and the body go through the CPU backend's text passes first, as a
    kernel's source does, with Metal's address-space words defined. On the
    CPU the program is also checked as device code for the CUDA backend,
    unless ``device_code`` is false (a program that is host code only).
    """
    if metal_passes:
        globals_src = ADDRESS_SPACE_MACROS + globals_src
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "checks.cpp"
        source.write_text(_source(body, globals_src, helpers, metal_passes))
        gpu_check = None
        if device_code and not ON_GPU:
            device_source = Path(tmp) / "checks_device.cu"
            device_source.write_text(_source(body, globals_src, helpers, metal_passes, gpu=True))
            gpu_check = _start_gpu_check(device_source, extra_flags)
        try:
            output = _build_and_run(source, extra_flags)
        finally:
            gpu_errors = gpu_check.communicate()[1] if gpu_check else ""
        assert gpu_check is None or gpu_check.returncode == 0, (
            f"check program does not compile for the CUDA backend:\n{gpu_errors}"
        )
    results: dict[str, list] = {}
    for line in output.splitlines():
        name, *tokens = line.split()
        # Emitting one name repeatedly (from a loop) appends to its values.
        results.setdefault(name, []).extend(_parse_token(t) for t in tokens)
    return results


def compile_errors(bodies: list[str], metal_passes: bool = False) -> list[str]:
    """Compiles each body (syntax and semantics only) and returns each compiler's stderr.

    The bodies are compiled concurrently; each must fail to compile.
    """
    globals_src = ADDRESS_SPACE_MACROS if metal_passes else ""
    compiler = _gpu_command() if ON_GPU else [find_clang(), *KERNEL_FLAGS, f"-I{MSL_INCLUDE_DIR}"]

    def compile_one(body: str) -> str:
        with tempfile.TemporaryDirectory() as tmp:
            source = Path(tmp) / "bad.cpp"
            source.write_text(_source(body, globals_src, metal_passes=metal_passes))
            cmd = [*compiler, "-fsyntax-only", str(source)]
            result = subprocess.run(cmd, capture_output=True, text=True)
        assert result.returncode != 0, f"expected a compile error for:\n{body}"
        return result.stderr

    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(compile_one, bodies))


def hex_float(value: float) -> str:
    """A C++ float literal with the exact value of ``value`` (a float32)."""
    if value != value:
        return '__builtin_nanf("")'
    if value in (float("inf"), float("-inf")):
        return "__builtin_inff()" if value > 0 else "(-__builtin_inff())"
    return f"{float(value).hex()}f"


def hex_double(value: float) -> str:
    return float(value).hex()

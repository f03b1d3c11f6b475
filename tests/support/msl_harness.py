"""Compiles small C++ programs against the Metal standard library headers and reads their output.

A check program is a function body that runs inside ``namespace metal`` (as a
kernel does on the CPU backend) and reports values with ``emit("name", v...)``.
Floating-point values are printed as hexadecimal floats, so the Python side
sees the exact bits; integers as decimal.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

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

int main() {
  metal::run_checks();
  return 0;
}
"""


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


def _source(body: str, globals_src: str, helpers: str = "", metal_passes: bool = False) -> str:
    kernel_code = f"{helpers}\nvoid run_checks() {{\n{body}\n}}\n"
    if metal_passes:
        kernel_code = metal_to_cpp(kernel_code)
    return f"{PRELUDE}\n{globals_src}\nnamespace metal {{\n{kernel_code}}}  // namespace metal\n"


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
) -> dict:
    """Compiles and runs ``body``; returns {name: [values...]} of its emit() calls.

    ``globals_src`` goes at global scope before the body (extra includes);
    ``helpers`` inside namespace metal, before it. With ``metal_passes`` the
    helpers and the body go through the CPU backend's text passes first, as a
    kernel's source does, with Metal's address-space words defined.
    """
    clang = find_clang()
    if metal_passes:
        globals_src = ADDRESS_SPACE_MACROS + globals_src
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "checks.cpp"
        binary = Path(tmp) / "checks"
        source.write_text(_source(body, globals_src, helpers, metal_passes))
        cmd = [clang, *KERNEL_FLAGS, *WARNING_FLAGS, *extra_flags, f"-I{MSL_INCLUDE_DIR}"]
        build = subprocess.run(
            [*cmd, str(source), "-o", str(binary)], capture_output=True, text=True
        )
        assert build.returncode == 0, f"check program failed to compile:\n{build.stderr}"
        run = subprocess.run([str(binary)], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, f"check program failed:\n{run.stderr}"
    results: dict[str, list] = {}
    for line in run.stdout.splitlines():
        name, *tokens = line.split()
        # Emitting one name repeatedly (from a loop) appends to its values.
        results.setdefault(name, []).extend(_parse_token(t) for t in tokens)
    return results


def compile_errors(bodies: list[str], metal_passes: bool = False) -> list[str]:
    """Compiles each body (syntax and semantics only) and returns each compiler's stderr.

    The bodies are compiled concurrently; each must fail to compile.
    """
    clang = find_clang()
    globals_src = ADDRESS_SPACE_MACROS if metal_passes else ""

    def compile_one(body: str) -> str:
        with tempfile.TemporaryDirectory() as tmp:
            source = Path(tmp) / "bad.cpp"
            source.write_text(_source(body, globals_src, metal_passes=metal_passes))
            cmd = [clang, *KERNEL_FLAGS, "-fsyntax-only", f"-I{MSL_INCLUDE_DIR}", str(source)]
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

"""Compile-checks the Objective-C++ MPS backend on machines without a Mac.

Only macOS builds csrc/mps/*.mm, so without this check a misspelt selector, a
wrong argument type, a broken torch API use or an API newer than the oldest
supported macOS used without an @available check would first show up on a
Mac. Here clang parses each file as Objective-C++ with ARC for a macOS target
against the real torch headers and tests/mps/sdk_stubs/, a small stand-in for
the Apple SDK headers whose declarations mirror the SDK's, each citing the
header it comes from, with the SDK's availability annotations.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from torch.utils.cpp_extension import include_paths

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"
STUBS = Path(__file__).resolve().parent / "sdk_stubs"
MPS_SOURCES = sorted((CSRC / "mps").glob("*.mm"))
# The compile probe of a Mac run shares the backend's compile options.
SOURCES = [*MPS_SOURCES, ROOT / "scripts" / "mps_compile_probe.mm"]
CLANG = shutil.which("clang++-19") or shutil.which("clang++")

pytestmark = [
    pytest.mark.skipif(
        sys.platform == "darwin",
        reason="macOS builds csrc/mps/*.mm for real against the SDK; the stand-in check is for "
        "other systems",
    ),
    pytest.mark.skipif(CLANG is None, reason="needs clang++ (clang++-19) to parse Objective-C++"),
]


# The oldest macOS torch's arm64 wheels install on (their tag is
# macosx_11_0_arm64), and so the oldest a build of the backend may target: an
# API introduced later must sit behind an @available check.
DEPLOYMENT_TARGET = "11.0"
# The SDK headers the backend and the torch headers it includes name, parsed
# once into a precompiled header that every check below reuses.
PREFIX = """\
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>
#include <ATen/mps/MPSDevice.h>
#include <ATen/mps/MPSStream.h>
#include <c10/util/Exception.h>
#include <torch/library.h>
#include "coreai_torch.h"
#include "specializations/launch_args.h"
"""


def clang_command() -> list[str]:
    command = [
        str(CLANG),
        # An Apple target, so that clang applies the availability attributes:
        # the deployment target and -Werror=unguarded-availability make an
        # unguarded use of a newer API an error. x86_64 rather than arm64
        # because this machine's C and C++ library headers, which stand in for
        # the SDK's, are x86_64 ones; the check is about the API, not the
        # architecture. The target enables blocks (dispatch_sync takes one)
        # and the Objective-C runtime ARC needs.
        "-target",
        f"x86_64-apple-macos{DEPLOYMENT_TARGET}",
        "-std=c++20",  # as the real build (setup.py, CMakeLists.txt)
        "-fobjc-arc",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-Werror=unguarded-availability",
        # Beyond the target, the preprocessor describes this Linux machine, so
        # that its glibc and libstdc++ headers (and torch's headers, which
        # branch on __APPLE__ to include SDK headers this machine lacks) parse
        # as they do for a Linux build: Apple's predefined macros are removed
        # and Linux's defined.
        "-U__APPLE__",
        "-U__MACH__",
        "-U__APPLE_CC__",
        "-U__nonnull",
        "-D__linux__",
        "-D__linux",
        "-D__gnu_linux__",
        "-D__unix__",
        "-D__unix",
        "-D__ELF__",
        "-D_GNU_SOURCE",
        "-nostdinc++",
        *(f"-isystem{path}" for path in HOST_CXX_INCLUDES),
        "-DCOREAI_TORCH_WITH_MPS=1",
        # The stand-ins hold only Apple SDK headers (test_stubs_shadow_no_torch_header),
        # so listing them first replaces nothing of torch's.
        f"-I{STUBS}",
        f"-I{CSRC}",
    ]
    for path in include_paths():
        command += ["-isystem", path]
    return command


def host_cxx_includes() -> list[str]:
    """The C++ and C system include directories clang uses on this machine."""
    probe = subprocess.run(
        [str(CLANG), "-x", "c++", "-E", "-v", "-"],
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = probe.stderr.splitlines()
    start = lines.index("#include <...> search starts here:") + 1
    end = lines.index("End of search list.")
    return [line.strip() for line in lines[start:end]]


HOST_CXX_INCLUDES = host_cxx_includes() if CLANG and sys.platform != "darwin" else []


def build_prefix(directory: Path) -> Path:
    header = directory / "prefix.h"
    header.write_text(PREFIX)
    pch = directory / "prefix.h.pch"
    command = [*clang_command(), "-x", "objective-c++-header", str(header), "-o", str(pch)]
    built = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, f"the SDK and torch headers do not parse:\n{built.stderr}"
    return pch


def syntax_check(
    source: Path, pch: Path, first: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Parses `source`; `first` is searched for `mps/...` headers before csrc/."""
    command = [*clang_command(), "-include-pch", str(pch), "-x", "objective-c++"]
    command += ["-iquote", str(first)] if first else []
    command += ["-fsyntax-only", str(source)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


# Each mutation takes a line of the real backend (a file of csrc/mps) and
# breaks it the way a typo or a careless change would; the check must reject
# the copy (parsed through the .mm named second), naming what is wrong.
MUTATIONS = {
    "misspelt_selector": (
        "run.mm",
        "run.mm",
        "[encoder dispatchThreads:MTLSizeMake",
        "[encoder dispatchThread:MTLSizeMake",
        "dispatchThread:threadsPerThreadgroup:",
    ),
    "wrong_argument_type": (
        "run.mm",
        "run.mm",
        "[encoder setBuffer:binding.placeholder ? placeholder_buffer() : buffer",
        "[encoder setBuffer:&tensor",
        "id<MTLBuffer>",
    ),
    "wrong_enum": (
        "compile_options.h",
        "pipeline_cache.mm",
        "options.mathMode = MTLMathModeSafe;",
        "options.mathMode = MTLMathFloatingPointFunctionsPrecise;",
        "MTLMathMode",
    ),
    # A macOS 26 API by name, with no check that the OS has it.
    "unguarded_macos26_api": (
        "compile_options.h",
        "pipeline_cache.mm",
        "options.languageVersion = static_cast<MTLLanguageVersion>(kLanguageVersion4_0);",
        "options.languageVersion = MTLLanguageVersion4_0;",
        "'MTLLanguageVersion4_0' is only available on macOS 26.0 or newer",
    ),
    # The macOS 15 math options without their @available check.
    "unguarded_macos15_api": (
        "compile_options.h",
        "pipeline_cache.mm",
        "if (@available(macOS 15.0, *)) {",
        "if (true) {",
        "is only available on macOS 15.0 or newer",
    ),
    "unguarded_metal4_family": (
        "availability.mm",
        "availability.mm",
        "static_cast<MTLGPUFamily>(kGPUFamilyMetal4)",
        "MTLGPUFamilyMetal4",
        "'MTLGPUFamilyMetal4' is only available on macOS 26.0 or newer",
    ),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.CompletedProcess]:
    """Every check of this module, run at once after the shared headers are parsed."""
    jobs: dict[str, tuple[Path, Path | None]] = {s.name: (s, None) for s in SOURCES}
    directory = tmp_path_factory.mktemp("mutated")
    for name, (file, parsed, original, broken, _) in MUTATIONS.items():
        text = (CSRC / "mps" / file).read_text()
        assert original in text, f"{file} no longer contains {original!r}; update {name}"
        tree = directory / name
        shutil.copytree(CSRC / "mps", tree / "mps")
        (tree / "mps" / file).write_text(text.replace(original, broken))
        jobs[name] = (tree / "mps" / parsed, tree)
    pch = build_prefix(directory)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        done = {
            key: pool.submit(syntax_check, source, pch, first)
            for key, (source, first) in jobs.items()
        }
        return {key: future.result() for key, future in done.items()}


def test_backend_sources_exist() -> None:
    assert MPS_SOURCES, f"no Objective-C++ sources under {CSRC / 'mps'}"


@pytest.mark.parametrize("source", [p.name for p in SOURCES])
def test_backend_source_compiles_against_the_sdk_stand_ins(
    results: dict[str, subprocess.CompletedProcess], source: str
) -> None:
    result = results[source]
    assert result.returncode == 0, f"{source} does not compile:\n{result.stderr}"


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_check_rejects_a_broken_copy(
    results: dict[str, subprocess.CompletedProcess], mutation: str
) -> None:
    file, _, _, broken, expected = MUTATIONS[mutation]
    result = results[mutation]
    assert result.returncode != 0, f"the check accepted {file} with {broken!r}"
    assert expected in result.stderr, result.stderr


def test_stubs_shadow_no_torch_header() -> None:
    stubs = [p.relative_to(STUBS) for p in STUBS.rglob("*.h")]
    assert stubs
    for stub in stubs:
        for path in include_paths():
            assert not (Path(path) / stub).exists(), (
                f"sdk_stubs/{stub} would hide torch's {Path(path) / stub}"
            )

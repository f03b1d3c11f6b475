"""Compile-checks the Objective-C++ MPS backend on machines without a Mac.

Only macOS builds csrc/mps/*.mm, so without this check a misspelt selector, a
wrong argument type or a broken torch API use would first show up on a Mac.
Here clang parses each file as Objective-C++ with ARC against the real torch
headers and tests/mps/sdk_stubs/, a small stand-in for the Apple SDK headers
whose declarations mirror the SDK's, each citing the header it comes from.
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
CLANG = shutil.which("clang++-19") or shutil.which("clang++")

pytestmark = [
    pytest.mark.skipif(
        sys.platform == "darwin",
        reason="macOS builds csrc/mps/*.mm for real against the SDK; the stand-in check is for "
        "other systems",
    ),
    pytest.mark.skipif(CLANG is None, reason="needs clang++ (clang++-19) to parse Objective-C++"),
]


def syntax_check(source: Path) -> subprocess.CompletedProcess[str]:
    command = [
        str(CLANG),
        "-x",
        "objective-c++",
        "-fsyntax-only",
        "-std=c++20",  # as the real build (setup.py, CMakeLists.txt)
        "-fobjc-arc",
        # Defaults of Apple's clang that a non-Apple target has to ask for:
        # blocks (dispatch_sync takes one) and the Objective-C 2 runtime that
        # ARC requires.
        "-fblocks",
        "-fobjc-runtime=macosx-26.0",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-DCOREAI_TORCH_WITH_MPS=1",
        # The stand-ins hold only Apple SDK headers (test_stubs_shadow_no_torch_header),
        # so listing them first replaces nothing of torch's.
        f"-I{STUBS}",
        f"-I{CSRC}",
    ]
    for path in include_paths():
        command += ["-isystem", path]
    command.append(str(source))
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


# Each mutation takes a line of the real backend and breaks it the way a typo
# would; the check must reject the copy, naming what is wrong.
MUTATIONS = {
    "misspelt_selector": (
        "run.mm",
        "[encoder dispatchThreads:MTLSizeMake",
        "[encoder dispatchThread:MTLSizeMake",
        "dispatchThread:threadsPerThreadgroup:",
    ),
    "wrong_argument_type": (
        "run.mm",
        "[encoder setBuffer:buffer_of(tensor) offset:offset atIndex:index]",
        "[encoder setBuffer:&tensor offset:offset atIndex:index]",
        "id<MTLBuffer>",
    ),
    "wrong_enum": (
        "pipeline_cache.mm",
        "options.mathMode = MTLMathModeSafe;",
        "options.mathMode = MTLMathFloatingPointFunctionsPrecise;",
        "MTLMathMode",
    ),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.CompletedProcess]:
    """Every check of this module, run at once (each parses all of ATen: seconds)."""
    jobs = {source.name: source for source in MPS_SOURCES}
    directory = tmp_path_factory.mktemp("mutated")
    for name, (file, original, broken, _) in MUTATIONS.items():
        text = (CSRC / "mps" / file).read_text()
        assert original in text, f"{file} no longer contains {original!r}; update {name}"
        (directory / name).mkdir()
        copy = directory / name / file
        copy.write_text(text.replace(original, broken))
        jobs[name] = copy
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        done = {key: pool.submit(syntax_check, path) for key, path in jobs.items()}
        return {key: future.result() for key, future in done.items()}


def test_backend_sources_exist() -> None:
    assert MPS_SOURCES, f"no Objective-C++ sources under {CSRC / 'mps'}"


@pytest.mark.parametrize("source", [p.name for p in MPS_SOURCES])
def test_backend_source_compiles_against_the_sdk_stand_ins(
    results: dict[str, subprocess.CompletedProcess], source: str
) -> None:
    result = results[source]
    assert result.returncode == 0, f"{source} does not compile:\n{result.stderr}"


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_check_rejects_a_broken_copy(
    results: dict[str, subprocess.CompletedProcess], mutation: str
) -> None:
    file, _, broken, expected = MUTATIONS[mutation]
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

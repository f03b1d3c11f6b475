"""The MPS backend's decisions that need no Metal, checked on any machine.

csrc/mps/launch_rules.h decides which inputs are copied before they are bound
and the strides their views get, where a tensor's buffer is bound, which
failed compiles are remembered and what a user whose process cannot run
Metal 4 kernels is told; csrc/mps/weak_cache.h keeps the pipelines. Both are
plain C++: tests/mps/launch_rules_driver.cpp, compiled once here, answers one
question per input line, and each test below states its cases and the
answers expected. What only a Mac can settle is probed by scripts/test_mps.sh.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from torch.utils.cpp_extension import include_paths

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).resolve().parent / "launch_rules_driver.cpp"
CLANG = shutil.which("clang++-19") or shutil.which("clang++")

pytestmark = pytest.mark.skipif(CLANG is None, reason="needs clang++ to build the driver")

INT_MAX = 2**31 - 1


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    binary = tmp_path_factory.mktemp("launch_rules") / "driver"
    command = [str(CLANG), "-std=c++20", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'csrc'}"]
    for path in include_paths():
        command += ["-isystem", path]
    built = subprocess.run(
        [*command, str(DRIVER), "-o", str(binary)], capture_output=True, text=True, timeout=300
    )
    assert built.returncode == 0, built.stderr
    return binary


def ask(driver: Path, *questions: str) -> list[str]:
    answered = subprocess.run(
        [str(driver)], input="\n".join(questions) + "\n", capture_output=True, text=True, timeout=60
    )
    assert answered.returncode == 0, answered.stderr
    return answered.stdout.splitlines()


# (torch sizes, torch strides) -> (copied, strides the view is given, torch order)
INPUT_PLANS = {
    "contiguous": (([3, 4], [4, 1]), (False, [4, 1])),
    "padded rows": (([3, 4], [6, 1]), (False, [6, 1])),
    "offset rows of a larger tensor": (([2, 5], [5, 1]), (False, [5, 1])),
    "transposed (innermost stride 4)": (([4, 3], [1, 4]), (True, [3, 1])),
    "expanded in an outer dimension (stride 0)": (([4, 5], [0, 1]), (True, [5, 1])),
    "expanded innermost (stride 0)": (([4, 5], [1, 0]), (True, [5, 1])),
    "overlapping windows (unfold, step 2 of 4)": (([3, 4], [2, 1]), (True, [4, 1])),
    "size-1 dimensions with any stride": (([1, 4, 1], [0, 1, 7]), (False, [1, 1, 1])),
    "innermost size 1 with stride 5": (([4, 1], [5, 5]), (False, [5, 1])),
    "empty (never read)": (([0, 5], [0, 0]), (False, [5, 1])),
    "span past 2^31 elements": (([2, 4], [2**31, 1]), (True, [4, 1])),
    "span just inside int": (([2, 4], [INT_MAX - 4, 1]), (False, [INT_MAX - 4, 1])),
    "permuted but not overlapping": (([4, 3, 2], [2, 8, 1]), (False, [2, 8, 1])),
}


def test_inputs_are_copied_unless_their_layout_is_positive_unit_innermost_and_disjoint(
    driver: Path,
) -> None:
    questions = [
        f"plan {' '.join(map(str, sizes))} / {' '.join(map(str, strides))}"
        for (sizes, strides), _ in INPUT_PLANS.values()
    ]
    for case, answer in zip(INPUT_PLANS, ask(driver, *questions)):
        copy, strides = INPUT_PLANS[case][1]
        assert answer == f"copy={int(copy)} strides={','.join(map(str, strides))}", case


def test_tensors_without_an_element_are_bound_to_the_placeholder_at_offset_zero(
    driver: Path,
) -> None:
    answers = ask(
        driver,
        "bind 1 12 5 4",  # a view at element 5 of a float buffer: 20 bytes in
        "bind 1 0 16 4",  # empty view at the end of a 16-float buffer: never at byte 64
        "bind 0 0 0 4",  # an empty tensor with no MTLBuffer
        "bind 1 1 3 2",  # a 0-d half at element 3
    )
    assert answers == [
        "placeholder=0 offset=20",
        "placeholder=1 offset=0",
        "placeholder=1 offset=0",
        "placeholder=0 offset=6",
    ]


def test_only_metals_compile_failure_verdict_is_remembered(driver: Path) -> None:
    final, internal, unsupported = ask(
        driver,
        "failure 1 3 26 MTLLibraryErrorDomain safe-math program_source:3: error: expected ';'",
        "failure 0 2 26 MTLLibraryErrorDomain safe-math Compiler encountered an internal error",
        "failure 0 1 26 MTLLibraryErrorDomain fast-math the action is unsupported",
    )
    assert final == (
        "remembered=1 MetalCompileError: k: the MPS backend's Metal compiler rejected the "
        "kernel (Metal 4.0, safe-math):\\nprogram_source:3: error: expected ';'"
    )
    for answer, code in ((internal, 2), (unsupported, 1)):
        assert answer.startswith("remembered=0 coreai_torch: kernel 'k': ")
        assert f"(MTLLibraryErrorDomain code {code}, Metal 4.0, " in answer
        assert "the next launch compiles again" in answer
    assert "internal error" in internal


def test_a_process_on_an_older_sdk_is_told_why_and_what_to_install(driver: Path) -> None:
    (new_sdk, old_sdk) = ask(
        driver,
        "failure 1 3 26 MTLLibraryErrorDomain safe-math unknown language version",
        "failure 1 3 16 MTLLibraryErrorDomain safe-math unknown language version",
    )
    assert "older than macOS 26" not in new_sdk
    assert old_sdk.startswith("remembered=1 ")
    assert "If Metal refused language version 4.0" in old_sdk
    assert "built against an SDK older than macOS 26" in old_sdk
    assert "Use a Python built against the macOS 26 SDK" in old_sdk
    assert "vtool -show-build" in old_sdk


def test_unavailability_names_what_is_missing(driver: Path) -> None:
    old_os, no_mps, no_device, old_gpu, hidden, ready, ready_old_sdk = ask(
        driver,
        "reason 15 6 1 1 1 1 Apple M1",
        "reason 26 0 0 0 0 0 -",
        "reason 26 0 0 1 0 0 -",
        "reason 26 0 0 1 1 0 AMD Radeon Pro 5500M",
        "reason 16 0 0 1 1 0 Apple M2",
        "reason 26 1 0 1 1 1 Apple M4",
        "reason 16 0 0 1 1 1 Apple M4",
    )
    assert old_os.startswith(
        "the coreai_torch MPS backend compiles kernels as Metal 4.0, which "
        "needs macOS 26 or newer; this Mac runs macOS 15.6.1."
    )
    assert no_mps.startswith("PyTorch reports no usable MPS device")
    assert no_device.startswith("PyTorch's MPS device has no Metal device behind it.")
    assert old_gpu.startswith("the GPU 'AMD Radeon Pro 5500M' is not in the Metal 4 GPU family")
    assert "older than macOS 26" not in old_gpu
    # macOS 26 seen as 16: the process was built against an older SDK.
    assert hidden.startswith("the GPU 'Apple M2' reports no Metal 4 GPU family")
    assert "built against an SDK older than macOS 26" in hidden
    assert "Use a Python built against the macOS 26 SDK" in hidden
    for reason in (old_os, no_mps, no_device, old_gpu, hidden):
        assert reason.endswith("the PyTorch reference (torch_defn) runs anywhere.")
    assert ready == ready_old_sdk == "(none)"


def test_the_pipeline_cache_erases_released_entries(driver: Path) -> None:
    answers = ask(
        driver,
        "cache get a 1",  # built and held
        "cache get a 1",  # found while held
        "cache get b 1",
        "cache size",
        "cache release",  # the holders let go: both entries are dead
        "cache size",  # not yet erased
        "cache get a 0",  # the dead entry is erased and built again; b is swept
        "cache size",
        "cache get c 0",  # a is dead again (nobody held it): swept
        "cache size",
    )
    assert answers == [
        "built", "found", "built", "2", "released", "2", "built", "1", "built", "1",
    ]  # fmt: skip

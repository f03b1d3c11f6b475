"""coreai_torch.check_kernel and `python -m coreai_torch check FILE[:KERNEL]`."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from coreai_torch import Example, TorchMetalKernel, check_kernel
from coreai_torch.cli import main
from coreai_torch.testing import _edge

try:
    from coreai.authoring import MetalParameter
except ImportError:  # pragma: no cover - the test environment has coreai-core
    MetalParameter = None

ID = "thread_position_in_grid"


def _scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def _kernel(name: str, src: str) -> TorchMetalKernel:
    return TorchMetalKernel(
        name,
        ["x"],
        ["out"],
        src=src,
        torch_defn=_scale,
        metal_params=[MetalParameter("id", "uint", ID)],
        template_dtypes={"x": "T"},
    )


EXAMPLE = Example(
    torch.ones(64),
    threads_per_grid=(64, 1, 1),
    threads_per_thread_group=(32, 1, 1),
    result_shapes=[[64]],
)


def test_edge_sizes_are_not_multiples_of_the_threadgroup() -> None:
    assert _edge(64, 32) == 63
    assert _edge(63, 32) == 62
    assert _edge(32, 1) is None


def test_a_correct_kernel_passes_every_dtype_and_the_edge_size() -> None:
    k = _kernel("check_ok", "if (id < x.get_extent(0)) out[id] = x[id] * T(2) + T(1);")
    report = check_kernel(k, EXAMPLE, devices=["cpu"])
    assert report.passed, str(report)
    ran = [c for c in report.cases if not c.skipped]
    # Two sizes (64 and the edge 63) times three float dtypes.
    assert {c.shapes[0] for c in ran} == {(64,), (63,)}
    assert {c.dtypes[0] for c in ran} == {"float32", "float16", "bfloat16"}
    assert "PASS" in str(report).splitlines()[0]


def _reverse_blocks(x: torch.Tensor) -> torch.Tensor:
    """Each block of 32 elements reversed (the last, maybe shorter, block too)."""
    out = x.clone()
    for start in range(0, x.numel(), 32):
        out[start : start + 32] = x[start : start + 32].flip(0)
    return out


REVERSE = """
threadgroup float t[32];
t[lid] = x[id];
threadgroup_barrier(mem_flags::mem_threadgroup);
out[id] = t[LAST - lid];
"""


def _reverse_kernel(name: str, last: str) -> TorchMetalKernel:
    return TorchMetalKernel(
        name,
        ["x"],
        ["out"],
        src=REVERSE.replace("LAST", last),
        torch_defn=_reverse_blocks,
        metal_params=[
            MetalParameter("id", "uint", ID),
            MetalParameter("lid", "uint", "thread_index_in_threadgroup"),
            MetalParameter("size", "uint", "threads_per_threadgroup"),
        ],
    )


REVERSE_EXAMPLE = Example(
    torch.ones(64),
    threads_per_grid=(64, 1, 1),
    threads_per_thread_group=(32, 1, 1),
    result_shapes=[[64]],
)


def test_a_kernel_assuming_full_threadgroups_fails_the_edge_size() -> None:
    # The last threadgroup of 63 threads has 31: thread 0 reads t[31], which no
    # thread wrote (a warning of debug mode), and gets a wrong value. The
    # example's size (64) passes.
    report = check_kernel(
        _reverse_kernel("check_full_groups", "31"), REVERSE_EXAMPLE, devices=["cpu"]
    )
    assert not report.passed
    full, edge = report.cases
    assert full.passed and not edge.passed
    assert edge.shapes == ((63,),)
    assert [f["kind"] for f in edge.findings] == ["uninitialized read"]
    assert edge.first_mismatch.startswith("result 'out' at torch index [32]: ")
    assert "read of threadgroup memory 't'[31]" in str(report)
    assert "FAIL" in str(report).splitlines()[0]


def test_the_kernel_using_the_threadgroup_size_passes_the_edge_size() -> None:
    report = check_kernel(
        _reverse_kernel("check_group_size", "(size - 1)"), REVERSE_EXAMPLE, devices=["cpu"]
    )
    assert report.passed, str(report)
    assert [c.shapes for c in report.cases] == [((64,),), ((63,),)]


def test_a_wrong_result_names_the_first_mismatch_and_the_error() -> None:
    k = _kernel(
        "check_wrong", "if (id < x.get_extent(0)) out[id] = id == 5 ? T(0) : x[id] * T(2) + T(1);"
    )
    report = check_kernel(k, EXAMPLE, devices=["cpu"], all_dtypes=False, edge_sizes=False)
    (case,) = report.cases
    assert not case.passed
    assert case.first_mismatch.startswith("result 'out' at torch index [5]: 0.0 (expected ")
    expected = float(case.first_mismatch.split("expected ")[1].rstrip(")"))
    assert case.max_error >= abs(expected)  # out[5] is 0 instead of the reference's value


def test_a_race_is_reported_with_its_findings() -> None:
    def shift(x: torch.Tensor) -> torch.Tensor:
        return x.view(-1, 64).roll(-1, 1).reshape(-1)

    k = TorchMetalKernel(
        "check_race",
        ["x"],
        ["out"],
        src="threadgroup float t[64];\nt[lid] = x[id];\nout[id] = t[(lid + 1) % 64];",
        torch_defn=shift,
        metal_params=[
            MetalParameter("id", "uint", ID),
            MetalParameter("lid", "uint", "thread_index_in_threadgroup"),
        ],
    )
    example = Example(
        torch.ones(64),
        threads_per_grid=(64, 1, 1),
        threads_per_thread_group=(64, 1, 1),
        result_shapes=[[64]],
    )
    report = check_kernel(k, example, devices=["cpu"], edge_sizes=False)
    (case,) = report.cases
    assert not case.passed
    assert {f["kind"] for f in case.findings} <= {"data race", "SIMD lockstep"}
    assert any(f["kind"] == "data race" for f in case.findings)
    assert "data race on threadgroup memory 't'" in str(report)


KERNEL_FILE = """
import torch
from coreai.authoring import MetalParameter
from coreai_torch import Example, TorchMetalKernel


def ref(x: torch.Tensor) -> torch.Tensor:
    return x + 1


good = TorchMetalKernel("cli_good", ["x"], ["out"],
    src="if (id < x.get_extent(0)) out[id] = x[id] + 1;", torch_defn=ref,
    metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")])
bad = TorchMetalKernel("cli_bad", ["x"], ["out"],
    src="if (id < x.get_extent(0)) out[id] = x[id] + 2;", torch_defn=ref,
    metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")])

EXAMPLES = {
    "cli_good": Example(torch.zeros(8), threads_per_grid=(8, 1, 1),
                        threads_per_thread_group=(4, 1, 1), result_shapes=[[8]]),
    "cli_bad": lambda: Example(torch.zeros(8), threads_per_grid=(8, 1, 1),
                               threads_per_thread_group=(4, 1, 1), result_shapes=[[8]]),
}
"""


def _cli(tmp_path: Path, *args: str, extra: str = "") -> subprocess.CompletedProcess:
    path = tmp_path / "kernels.py"
    path.write_text(textwrap.dedent(KERNEL_FILE) + extra)
    return subprocess.run(
        [sys.executable, "-m", "coreai_torch", "check", *[a.format(path=path) for a in args]],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_check_command_passes_a_good_kernel(tmp_path: Path) -> None:
    run = _cli(tmp_path, "{path}:cli_good")
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("kernel 'cli_good': PASS")


def test_the_check_command_fails_on_any_bad_kernel(tmp_path: Path) -> None:
    run = _cli(tmp_path, "{path}")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "kernel 'cli_good': PASS" in run.stdout
    assert "kernel 'cli_bad': FAIL" in run.stdout
    assert "first mismatch: result 'out' at torch index [0]: " in run.stdout


def test_the_check_command_names_a_missing_kernel(tmp_path: Path) -> None:
    run = _cli(tmp_path, "{path}:nothing")
    assert run.returncode == 2
    assert "defines no kernel 'nothing'" in run.stdout


def test_a_file_that_exits_at_import_fails_the_check(tmp_path: Path, capsys) -> None:
    # An unguarded unittest.main() ends the file this way, with status 0 when
    # no test failed: the command must not pass having checked nothing.
    path = tmp_path / "exits.py"
    path.write_text(textwrap.dedent(KERNEL_FILE) + "\nimport sys\nsys.exit(0)\n")
    assert main(["check", str(path)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"check: {path} called sys.exit(0) before its kernels were all checked")
    assert "kernel 'cli_good'" not in out  # nothing ran


def test_a_file_that_calls_os_exit_fails_the_check(tmp_path: Path) -> None:
    # os._exit ends a process without raising: run in a child, whose status is the verdict.
    run = _cli(tmp_path, "{path}", extra="\nimport os\nos._exit(0)\n")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "called os._exit(0) before its kernels were all checked" in run.stdout

"""Probes for a Mac run: what only Apple's Metal compiler and an Apple GPU can settle.

    python scripts/mps_probes.py WORK_DIR --probe BIN [--old-sdk-probe BIN]

``BIN`` is scripts/mps_compile_probe.mm built for this Mac; ``--old-sdk-probe``
the same program recorded as built against the macOS 15 SDK (scripts/test_mps.sh
builds both). Each probe prints one line, ``P<point> <name>: <answer>``, for
the points of docs/mps.md ("Assumptions a Mac run settles"). A line tagged
``[expected: ...]`` states what the project relies on; the command exits with
1 when such an expectation fails. The other lines are facts that decide
between alternatives (whether ``out[]`` compiles, whether a broadcast Metal
tensor works) and fail nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Metal sources compiled with the backend's options by the compile probe.
# name -> (point, source, what the project relies on, or None for a fact).
HEADER = "#include <metal_stdlib>\n#include <metal_tensor>\nusing namespace metal;\n"
RANK0 = "kernel void k(tensor<device float, dextents<int, 0>, tensor_handle> out [[buffer(0)]]) "
SOURCES: dict[str, tuple[int, str, str | None]] = {
    "language_4_0": (
        0,
        HEADER + "#if __METAL_VERSION__ < 400\n#error not Metal 4\n#endif\nkernel void k() {}\n",
        "compiled",
    ),
    "rank0_set": (1, HEADER + RANK0 + "{ out.set(1.0f); }\n", "compiled"),
    "rank0_get_set": (
        1,
        HEADER + RANK0 + "{ float v = out.get(); out.set(v + 1.0f); }\n",
        "compiled",
    ),
    "rank0_empty_subscript": (1, HEADER + RANK0 + "{ out[] = 1.0f; }\n", None),
    "rank0_array_index": (1, HEADER + RANK0 + "{ out[metal::array<int, 0>{}] = 1.0f; }\n", None),
    # The empty subscript on a user type with a variadic operator[], which is
    # what the eager rendering's rank-0 view would need.
    "empty_subscript_user_type": (
        1,
        HEADER + "struct view { device float* p; template <typename... I> device float& "
        "operator[](I...) const { return *p; } };\n"
        "kernel void k(device float* out [[buffer(0)]]) { view v{out}; v[] = 1.0f; }\n",
        None,
    ),
    # threadgroup arrays declared in a nested block of a kernel, as Apple's
    # rendering nests the body of a kernel that has scalar inputs.
    "threadgroup_in_nested_block": (
        2,
        HEADER + "kernel void k(device float* out [[buffer(0)]], "
        "uint i [[thread_index_in_threadgroup]]) "
        "{ { threadgroup float tile[32]; tile[i] = float(i); "
        "threadgroup_barrier(mem_flags::mem_threadgroup); out[i] = tile[31 - i]; } }\n",
        None,
    ),
    # Metal's verdict on a broken source: the error the backend remembers.
    "broken_source": (
        4,
        HEADER + "kernel void k() { int x = ; }\n",
        "failed (MTLLibraryErrorDomain 3)",
    ),
}


def compile_sources(probe: Path, work: Path) -> dict[str, str]:
    """name -> the compile probe's answer for each of SOURCES (and its header lines)."""
    work.mkdir(parents=True, exist_ok=True)
    files = []
    for name, (_, source, _) in SOURCES.items():
        path = work / f"{name}.metal"
        path.write_text(source)
        files.append(str(path))
    out = subprocess.run([str(probe), *files], capture_output=True, text=True, timeout=300)
    answers = {"exit": str(out.returncode)}
    for line in out.stdout.splitlines():
        key, _, value = line.partition(": ") if ": " in line else line.partition("=")
        answers[key.removesuffix(".metal")] = value
    return answers


def coreai_rendering_with_scalar_and_threadgroup(work: Path) -> Path:
    """Apple's rendering (the converter's) of a kernel with a scalar and threadgroup memory."""
    import torch

    from coreai_torch.contract import (
        KernelDefinition,
        ScalarArg,
        Specialization,
        TensorArg,
        render_coreai_source,
    )

    body = (
        "threadgroup float tile[32]; tile[i] = x[i] * scale; "
        "threadgroup_barrier(mem_flags::mem_threadgroup); out[i] = tile[31 - i];"
    )
    definition = KernelDefinition(
        "scaled_reverse", ("x", "scale"), ("out",), body, "",
        (("i", "uint", "thread_index_in_threadgroup"),), (),
    )  # fmt: skip
    spec = Specialization(
        (TensorArg("x", 1, torch.float32), ScalarArg("scale", float)),
        (TensorArg("out", 1, torch.float32),),
    )
    _, source = render_coreai_source(definition, spec, {"scale": 2.0})
    path = work / "coreai_rendering_nested_body.metal"
    path.write_text(source)
    return path


def inline_view_probe(row_stride: int, expected: str) -> str:
    """A child that reads x (8 floats) through a 4 x 3 tensor_inline view of the kernel's own
    building, innermost stride 1 and ``row_stride`` between rows, into the result, and
    compares it with the torch view ``expected``."""
    return f"""
        def view(x: torch.Tensor) -> torch.Tensor:
            return {expected}.clone()
        k = TorchMetalKernel("probe_view_{row_stride}", ["x"], ["out"],
            "metal::tensor<device float, metal::dextents<int, 2>, metal::tensor_inline> b("
            "coreai_buf_x, metal::dextents<int, 2>(4, 3), metal::array<int, 2>{{1, {row_stride}}});"
            " if (g.x < 4 && g.y < 3) out[g.x, g.y] = b[g.x, g.y];", view,
            metal_params=[MetalParameter("g", "uint2", "thread_position_in_grid")])
        x = torch.arange(8.0)
        got = k(x.to("mps"), threads_per_grid=(4, 3, 1), threads_per_thread_group=(4, 3, 1),
                result_shapes=[[3, 4]]).cpu()
        print("matches" if torch.equal(got, view(x)) else f"wrong: {{got.tolist()}}")
        """


# Eager probes run in a child each: a GPU fault there costs one line, not the run.
EAGER = {
    "rank0_result_set_get": (
        1,
        """
        def total(x: torch.Tensor) -> torch.Tensor:
            return x.sum() * 2
        k = TorchMetalKernel("probe_rank0", ["x"], ["total"],
            "float s = 0; for (int i = 0; i < x.get_extent(0); ++i) s += x[i];"
            " total.set(s); total.set(total.get() * 2);", total)
        x = torch.arange(10.0)
        got = k(x.to("mps"), **ONE, result_shapes=[[]]).cpu()
        print("matches" if got.item() == 90.0 else f"wrong: {got.item()} (expected 90)")
        """,
        "matches",
    ),
    # A tensor_inline view built by the body with a zero stride in an outer
    # dimension, and one with overlapping rows: whether Metal tensors take the
    # layouts the backend copies today (launch_rules.h, plan_input).
    "inline_view_stride0": (6, inline_view_probe(0, "x[:4].expand(3, 4)"), None),
    "inline_view_overlapping": (6, inline_view_probe(2, "x.unfold(0, 4, 2)"), None),
}

CHILD_PRELUDE = """
import torch
from coreai_torch import MetalParameter, TorchMetalKernel
ONE = dict(threads_per_grid=(1, 1, 1), threads_per_thread_group=(1, 1, 1))
"""


def run_child(code: str) -> str:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    child = subprocess.run(
        [sys.executable, "-c", CHILD_PRELUDE + textwrap.dedent(code)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    if child.returncode != 0:
        last = (child.stderr.strip().splitlines() or ["(no message)"])[-1]
        return f"error (exit {child.returncode}): {last}"
    return child.stdout.strip().splitlines()[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("work", type=Path)
    parser.add_argument("--probe", type=Path, required=True)
    parser.add_argument("--old-sdk-probe", type=Path)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    failed = 0

    def report(point: int, name: str, answer: str, expected: str | None) -> None:
        nonlocal failed
        tag = ""
        if expected is not None:
            ok = answer.startswith(expected)
            failed += not ok
            tag = f" [expected: {expected}{'' if ok else ' -- NOT MET'}]"
        print(f"P{point} {name}: {answer}{tag}", flush=True)

    answers = compile_sources(args.probe, args.work)
    report(0, "compile probe", f"exit {answers['exit']}, {answers.get('device', '?')}", "exit 0")
    for name, (point, _, expected) in SOURCES.items():
        report(point, name, answers.get(name, "(no answer)"), expected)

    nested = subprocess.run(
        [str(args.probe), str(coreai_rendering_with_scalar_and_threadgroup(args.work))],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    last = (nested.stdout.strip().splitlines() or ["(no answer)"])[-1]
    report(2, "coreai_rendering_nested_body", last.partition(": ")[2], None)

    for name, (point, code, expected) in EAGER.items():
        report(point, name, run_child(code), expected)

    # What macOS shows this Python process, and a process built against the macOS 15 SDK.
    from coreai_torch.demo import mps_unavailable

    report(7, "this python", mps_unavailable() or "Metal 4 kernels can run", None)
    report(7, "probe, installed SDK", _process_facts(answers), None)
    if args.old_sdk_probe:
        old = compile_sources(args.old_sdk_probe, args.work / "old_sdk")
        report(7, "probe, macOS 15 SDK", _process_facts(old), None)
    return 1 if failed else 0


def _process_facts(answers: dict[str, str]) -> str:
    return (
        f"reported macOS {answers.get('reported_os', '?')}, "
        f"family_metal4={answers.get('family_metal4', '?')}, "
        f"Metal 4.0 source: {answers.get('language_4_0', '?')}"
    )


if __name__ == "__main__":
    sys.exit(main())

"""Keeps the benchmarks runnable: ``benchmarks/run_all.py --smoke``, one part per test.

Each part (a Python benchmark module, or the C++ harness) runs once at tiny
sizes in a child (``--only PART``), and its table is checked, not its timings:
smoke sizes say nothing about speed, and CI machines are noisy. The children
share the test run's kernel cache; the benchmarks that time a cold compile make
an empty cache of their own. The C++ harness comes from ``build/cpp``, which
``scripts/install.sh --test`` builds (here only what changed is rebuilt).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
from pathlib import Path

import pytest
from support.child_process import run

ROOT = Path(__file__).resolve().parents[1]
RUN_ALL = ROOT / "benchmarks" / "run_all.py"

# The keys each part's rows must have.
EXPECTED_KEYS = {
    "bench_cpu": {
        "py.launch_tiny",
        "py.launch_tiny_python_call",
        "py.launch_tiny_vs_reference",
        "py.vector_add",
        "py.tiled_matmul",
        "py.tiled_matmul_fibers",
        "py.simdgroup_gemm",
        "py.simdgroup_gemm_fibers",
        "py.barrier_cost",
        "py.barrier_cost_fibers",
        "py.softmax_looped",
        "py.rms_norm_looped",
        "py.cold_compile",
        "py.warm_first_result",
        "py.import",
        "py.compile_new_kernel",
    },
    "bench_debug_checks": {
        "py.debug.corpus_median",
        "py.debug.corpus_90th",
        "py.debug.corpus_largest",
        "py.debug.corpus_refused",
        "py.debug.corpus_different_bits",
        "py.debug.add",
        "py.debug.tiled_matmul",
        "py.fidelity.compile_new_kernel",
    },
    "bench_conversion": {
        "conversion.zoo_raw_vs_decomposed",
        "conversion.zoo_median_times",
        "conversion.llama4_raw",
        "conversion.llama4_decomposed",
        "conversion.llama4_decompose_only",
        "conversion.llama4_int4",
        "conversion.stateful_decoder",
        "conversion.static_cache_llama",
        "conversion.weights_scaling",
    },
    # Without a GPU these modules run and have no rows (tests/cuda and
    # tests/mps have their checks).
    "bench_cuda": set(),
    "bench_mps": set(),
    "cpp": {
        "cpp.cold_compile",
        "cpp.launch_tiny",
        "cpp.vector_add",
        "cpp.tiled_matmul",
        "cpp.tiled_matmul_fibers",
        "cpp.simdgroup_gemm",
        "cpp.simdgroup_gemm_fibers",
        "cpp.barrier_alone",
        "cpp.barrier_alone_fibers",
    },
}
# Rows with a target must say whether they met it.
TARGETED_KEYS = {
    "py.launch_tiny",
    "py.vector_add",
    "py.tiled_matmul",
    "py.simdgroup_gemm",
    "py.barrier_cost",
    "py.softmax_looped",
    "py.rms_norm_looped",
    "py.cold_compile",
    "py.warm_first_result",
    "py.compile_new_kernel",
    "conversion.zoo_raw_vs_decomposed",
    "conversion.llama4_raw",
    "conversion.llama4_int4",
    "conversion.stateful_decoder",
    "conversion.weights_scaling",
    "cpp.cold_compile",
    "cpp.launch_tiny",
    "cpp.vector_add",
    "cpp.tiled_matmul",
    "cpp.simdgroup_gemm",
    "cpp.barrier_alone",
}
# Rows that are the difference of two timings (with and without barriers): at
# smoke sizes, one call per repetition, a loaded machine makes them negative.
DIFFERENCE_KEYS = {
    "py.barrier_cost",
    "py.barrier_cost_fibers",
    "cpp.barrier_alone",
    "cpp.barrier_alone_fibers",
}
# Rows that count calls: none is a fine answer.
COUNT_KEYS = {"py.debug.corpus_refused", "py.debug.corpus_different_bits"}


def smoke_run(part: str, tmp_path: Path) -> tuple[list[dict], list[str]]:
    """The rows and the printed lines of ``run_all.py --smoke --only PART``."""
    out_json = tmp_path / "rows.json"
    code = f"""
    import runpy, sys
    sys.argv = [{str(RUN_ALL)!r}, "--smoke", "--only", {part!r}, "--json", {str(out_json)!r}]
    runpy.run_path(sys.argv[0], run_name="__main__")
    """
    # The benchmarks measure this checkout, not whichever copy is installed.
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    stdout = run(code, {**os.environ, "PYTHONPATH": path}, timeout=600)
    return json.loads(out_json.read_text())["rows"], stdout.splitlines()


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_rows(rows: list[dict], lines: list[str], expected: set[str]) -> None:
    keys = [r.get("key") for r in rows]
    missing = expected - set(keys)
    assert not missing, f"rows missing from the table: {sorted(missing)}"
    named = [k for k in keys if k]
    assert len(named) == len(set(named)), f"duplicate row keys: {named}"
    for r in rows:
        assert isinstance(r["metric"], str) and r["metric"], r
        assert _finite(r["ours"]), r
        if r.get("key") in COUNT_KEYS:
            assert r["ours"] >= 0 and r["ours"] == int(r["ours"]), r
        else:
            assert r["ours"] > 0 or r.get("key") in DIFFERENCE_KEYS, r
        if r.get("baseline") is not None:
            assert _finite(r["baseline"]) and r["baseline"] > 0, r
            assert math.isclose(r["ratio"], r["ours"] / r["baseline"], rel_tol=1e-3), r
        if r.get("key") in TARGETED_KEYS:
            assert isinstance(r["pass"], bool) and r["target"] != "-", r
    # The printed table: the machine line, the header, one line per row.
    assert lines[0].startswith("Machine: ") and "torch " in lines[0], lines[0]
    assert "| metric | ours | baseline | ratio | target | pass |" in lines
    table = [line for line in lines if line.startswith("| ")]
    for r in rows:
        assert any(line.startswith(f"| {r['metric']} |") for line in table), r["metric"]


@pytest.mark.parametrize(
    "part", ["bench_cpu", "bench_debug_checks", "bench_conversion", "bench_cuda", "bench_mps"]
)
def test_python_benchmarks_run_at_smoke_size(part: str, tmp_path: Path) -> None:
    if part == "bench_conversion":
        pytest.importorskip("transformers")
    rows, lines = smoke_run(part, tmp_path)
    check_rows(rows, lines, EXPECTED_KEYS[part])


@pytest.mark.skipif(shutil.which("cmake") is None, reason="the C++ harness is built with cmake")
def test_the_cpp_harness_runs_at_smoke_size(tmp_path: Path) -> None:
    rows, lines = smoke_run("cpp", tmp_path)
    check_rows(rows, lines, EXPECTED_KEYS["cpp"])


def test_every_part_has_expected_rows() -> None:
    sys.path.insert(0, str(RUN_ALL.parent))
    import run_all

    assert set(EXPECTED_KEYS) == set(run_all.PARTS)


def test_the_cold_start_parts_run(tmp_path: Path) -> None:
    """``cold_start_parts.py`` (not a part of run_all: it needs the CUDA
    toolchain, and no GPU) prints one row of positive times per part."""
    from support import ptx_check

    if problem := ptx_check.toolchain_problem():
        pytest.skip(problem)
    code = f"""
    import runpy, sys
    sys.argv = [{str(RUN_ALL.parent / "cold_start_parts.py")!r}, "--runs", "1"]
    runpy.run_path(sys.argv[0], run_name="__main__")
    """
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    lines = run(code, {**os.environ, "PYTHONPATH": path}, timeout=600).splitlines()
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines if line.startswith("| ")}
    parts = [
        "compiler check (clang++ --version)",
        "PTX, empty cache",
        "PTX, prelude parsed",
        "PTX, prelude precompiled",
    ]
    assert all(part in rows for part in parts), lines
    for part in parts:
        median, best = (float(cell) for cell in rows[part].strip("| ").split(" | ")[1:3])
        assert median > 0 and best > 0, rows[part]

"""Keeps the benchmarks runnable: ``benchmarks/run_all.py --smoke`` end to end.

This builds the C++ harness with CMake, runs every Python and C++ benchmark
once at tiny sizes and checks the table, not the timings (smoke sizes say
nothing about speed, and CI machines are noisy).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# bench_conversion converts a whole (tiny) model.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
RUN_ALL = ROOT / "benchmarks" / "run_all.py"

EXPECTED_KEYS = {
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
    "cpp.cold_compile",
    "cpp.launch_tiny",
    "cpp.vector_add",
    "cpp.tiled_matmul",
    "cpp.tiled_matmul_fibers",
    "cpp.simdgroup_gemm",
    "cpp.simdgroup_gemm_fibers",
    "cpp.barrier_alone",
    "cpp.barrier_alone_fibers",
    "py.debug.corpus_median",
    "py.debug.corpus_90th",
    "py.debug.corpus_largest",
    "py.debug.corpus_refused",
    "py.debug.corpus_different_bits",
    "py.debug.add",
    "py.debug.tiled_matmul",
    "py.fidelity.compile_new_kernel",
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
    "cpp.cold_compile",
    "cpp.launch_tiny",
    "cpp.vector_add",
    "cpp.tiled_matmul",
    "cpp.simdgroup_gemm",
    "cpp.barrier_alone",
}


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    if shutil.which("cmake") is None:
        pytest.fail("cmake is needed to build the C++ benchmark harness: pip install cmake")
    tmp = tmp_path_factory.mktemp("bench")
    out_json = tmp / "rows.json"
    # A private kernel cache keeps the run independent of earlier ones; the
    # build directory is the shared one so that a rerun builds incrementally.
    # The benchmarks measure this checkout, not whichever copy is installed.
    root = str(RUN_ALL.resolve().parents[1])
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, COREAI_TORCH_CACHE_DIR=str(tmp / "kernel-cache"), PYTHONPATH=path)
    done = subprocess.run(
        [sys.executable, str(RUN_ALL), "--smoke", "--json", str(out_json)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, f"run_all.py --smoke failed:\n{done.stdout}\n{done.stderr}"
    return json.loads(out_json.read_text()), done.stdout


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def test_every_expected_row_is_present(smoke_run: tuple[dict, str]) -> None:
    report, _ = smoke_run
    keys = [r.get("key") for r in report["rows"]]
    missing = EXPECTED_KEYS - set(keys)
    assert not missing, f"rows missing from the table: {sorted(missing)}"
    named = [k for k in keys if k]
    assert len(named) == len(set(named)), f"duplicate row keys: {named}"


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


def test_numbers_are_finite_and_positive(smoke_run: tuple[dict, str]) -> None:
    report, _ = smoke_run
    for r in report["rows"]:
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


def test_markdown_table_lists_every_row(smoke_run: tuple[dict, str]) -> None:
    report, stdout = smoke_run
    lines = stdout.splitlines()
    assert lines[0].startswith("Machine: ") and "torch " in lines[0], lines[0]
    assert "| metric | ours | baseline | ratio | target | pass |" in lines
    table = [line for line in lines if line.startswith("| ")]
    for r in report["rows"]:
        assert any(line.startswith(f"| {r['metric']} |") for line in table), r["metric"]

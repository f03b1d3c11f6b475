"""Debug mode's race and synchronisation checks (csrc/cpu/access_checker.h).

Each broken kernel is a real bug pattern; its report must name the kernel, the
memory and index, the threads and the source lines. The fixed version of each
runs clean and matches the reference.
"""

from __future__ import annotations

import re

import coreai_torch._C as C
import pytest
import torch
from support.cpu_launch import Tensor, kernel

F32 = torch.float32
ATTRS = [
    ("id", "uint", "thread_position_in_grid"),
    ("lid", "uint", "thread_index_in_threadgroup"),
    ("group", "uint", "threadgroup_position_in_grid"),
]

# Sum of each threadgroup's 64 values by halving; `barrier` goes inside the loop.
REDUCTION = """
threadgroup float partial[64];
partial[lid] = x[id];
{barrier}
for (uint stride = 32; stride > 0; stride /= 2) {{
  if (lid < stride) partial[lid] += partial[lid + stride];
  {barrier}
}}
if (lid == 0) out[group] = partial[0];
"""


def _fails(
    name: str, body: str, x: torch.Tensor, group: int, shapes, pattern: str, grid: int = 0
) -> list[dict]:
    k = kernel(name, [Tensor("x")], [Tensor("out")], body, ATTRS, debug=True)
    with pytest.raises(RuntimeError, match=pattern):
        k(x, grid=(grid or x.numel(), 1, 1), group=(group, 1, 1), shapes=shapes)
    return C._last_debug_findings()


def _clean(name: str, body: str, x: torch.Tensor, group: int, shapes) -> torch.Tensor:
    k = kernel(name, [Tensor("x")], [Tensor("out")], body, ATTRS, debug=True)
    (out,) = k(x, grid=(x.numel(), 1, 1), group=(group, 1, 1), shapes=shapes)
    assert C._last_debug_findings() == []
    return out


def test_a_reduction_missing_its_barrier_is_a_threadgroup_race() -> None:
    x = torch.arange(128.0)
    found = _fails(
        "reduce_no_barrier",
        REDUCTION.format(barrier=""),
        x,
        64,
        [[2]],
        r"kernel 'reduce_no_barrier': data race on threadgroup memory 'partial'\[\d+\] in "
        r"threadgroup \(0, 0, 0\): (read|written) by the thread at thread_position_in_grid "
        r"\(\d+, 0, 0\) at src:\d+:\d+, then (read|written) by the thread at \(\d+, 0, 0\) at "
        r"src:\d+:\d+, with no threadgroup_barrier",
    )
    races = [f for f in found if f["kind"] == "data race"]
    assert races and races[0]["memory"] == "threadgroup memory 'partial'"
    # Lines of the body (rendered from line 1 of src): the store and the += in the loop.
    assert all(line.startswith("src:") for f in races for line in f["lines"])
    assert {int(line.split(":")[1]) for f in races for line in f["lines"]} <= {3, 6}


def test_the_reduction_with_its_barriers_is_clean() -> None:
    x = torch.arange(128.0)
    barrier = "threadgroup_barrier(mem_flags::mem_threadgroup);"
    out = _clean("reduce_ok", REDUCTION.format(barrier=barrier), x, 64, [[2]])
    # Exact: sums of small integers are exact in float32.
    torch.testing.assert_close(out, x.view(2, 64).sum(1), rtol=0, atol=0)


# An inclusive scan over the 32 lanes of one SIMD-group, in threadgroup memory.
SCAN = """
threadgroup float s[32];
s[lid] = x[id];
{sync}
for (uint d = 1; d < 32; d *= 2) {{
  float v = lid >= d ? s[lid - d] : 0.0f;
  {sync}
  s[lid] += v;
  {sync}
}}
out[id] = s[lid];
"""


def test_a_scan_relying_on_simd_lockstep_is_reported_as_such(capfd) -> None:
    # A warning (on stderr), not an error: Apple GPUs do run a SIMD-group's
    # lanes in step.
    k = kernel(
        "scan_lockstep", [Tensor("x")], [Tensor("out")], SCAN.format(sync=""), ATTRS, debug=True
    )
    k(torch.ones(32), grid=(32, 1, 1), group=(32, 1, 1), shapes=[[32]])
    pattern = (
        r"kernel 'scan_lockstep': relies on SIMD-group lockstep: lanes \d+ and \d+ of "
        r"SIMD-group 0 of threadgroup \(0, 0, 0\) pass data through threadgroup memory "
        r"'s'\[\d+\] without a simdgroup_barrier: .* at src:\d+:\d+, then .* at src:\d+:\d+"
    )
    assert re.search(pattern, capfd.readouterr().err)
    found = C._last_debug_findings()
    assert found and {f["kind"] for f in found} == {"SIMD lockstep"}
    lines = {int(line.split(":")[1]) for f in found for line in f["lines"]}
    assert lines <= {3, 6, 8}  # the stores to s[lid] and the read of s[lid - d]


def test_the_scan_with_simdgroup_barriers_is_clean() -> None:
    out = _clean(
        "scan_ok",
        SCAN.format(sync="simdgroup_barrier(mem_flags::mem_threadgroup);"),
        torch.ones(32),
        32,
        [[32]],
    )
    torch.testing.assert_close(out, torch.arange(1.0, 33.0), rtol=0, atol=0)  # exact integers


# A tile kernel whose bounds check returns before the barrier.
TILE = """
threadgroup float t[16];
{check}
t[lid] = x[id];
threadgroup_barrier(mem_flags::mem_threadgroup);
if (id < x.get_extent(0)) out[id] = t[15 - lid];
"""


def test_a_barrier_in_a_bounds_check_is_reached_by_part_of_the_group() -> None:
    found = _fails(
        "partial_barrier",
        TILE.format(check="if (id >= x.get_extent(0)) return;"),
        torch.arange(16.0)[:12],
        16,
        [[12]],
        r"kernel 'partial_barrier': threadgroup_barrier at src:5:\d+ was reached by only 12 of "
        r"the 16 threads of threadgroup \(0, 0, 0\): the thread at thread_position_in_grid "
        r"\(12, 0, 0\) and 3 more had returned before it",
        grid=16,  # rounded up to whole threadgroups, as a launch often is
    )
    assert found[0]["kind"] == "partial barrier"


def test_the_tile_kernel_that_skips_only_the_work_is_clean() -> None:
    body = TILE.format(check="").replace(
        "t[lid] = x[id];", "t[lid] = id < x.get_extent(0) ? x[id] : 0.0f;"
    )
    x = torch.arange(16.0)
    out = _clean("tile_ok", body, x, 16, [[16]])
    torch.testing.assert_close(out, x.flip(0), rtol=0, atol=0)


def test_a_read_of_threadgroup_memory_no_thread_wrote(capfd) -> None:
    # A warning: real scans read such entries in lanes whose values go unused.
    body = """
threadgroup float t[32];
if (lid < 16) t[lid] = x[id];
threadgroup_barrier(mem_flags::mem_threadgroup);
out[id] = t[31 - lid];
"""
    k = kernel("uninit_read", [Tensor("x")], [Tensor("out")], body, ATTRS, debug=True)
    k(torch.arange(32.0), grid=(32, 1, 1), group=(32, 1, 1), shapes=[[32]])
    pattern = (
        r"kernel 'uninit_read': read of threadgroup memory 't'\[(1[6-9]|2\d|3[01])\] that no "
        r"thread of threadgroup \(0, 0, 0\) had written, by the thread at "
        r"thread_position_in_grid \(\d+, 0, 0\) at src:5:\d+"
    )
    assert re.search(pattern, capfd.readouterr().err)
    assert [f["kind"] for f in C._last_debug_findings()] == ["uninitialized read"]


def test_threadgroups_writing_one_element_without_atomics_race() -> None:
    # Every threadgroup's first thread adds its sum into out[0]: a lost update on a GPU.
    body = "if (lid == 0) out[0] += x[id];"
    found = _fails(
        "device_race",
        body,
        torch.ones(64),
        16,
        [[1]],
        r"kernel 'device_race': data race on tensor 'out' at torch index \[0\]: (read|written) "
        r"by the thread at thread_position_in_grid \(0, 0, 0\) \(threadgroup \(0, 0, 0\)\) at "
        r"src:1:\d+, and (read|written) by the thread at \(16, 0, 0\) \(threadgroup "
        r"\(1, 0, 0\)\) at src:1:\d+\. Threads of different threadgroups are not ordered",
    )
    assert found[0]["threads"] == ["(0, 0, 0)", "(16, 0, 0)"]


def test_the_same_update_with_an_atomic_is_clean() -> None:
    k = kernel(
        "device_atomic_ok",
        [Tensor("x")],
        [Tensor("out", torch.int32)],
        "device atomic_int* total = (device atomic_int*)&out[0];\n"
        "if (lid == 0) atomic_fetch_add_explicit(&total[0], int(x[id]), memory_order_relaxed);",
        ATTRS,
        debug=True,
    )
    # Debug mode fills results with 0x5A bytes for its last run (docs/cpu.md):
    # the four threadgroups each add 1 to that.
    (out,) = k(torch.ones(64), grid=(64, 1, 1), group=(16, 1, 1), shapes=[[1]])
    assert C._last_debug_findings() == []
    assert int(out[0]) == 0x5A5A5A5A + 4


def test_an_out_of_bounds_access_through_a_raw_pointer() -> None:
    body = "device const float* p = x.get_data_ptr();\nout[id] = p[id + 2];"
    found = _fails(
        "pointer_oob",
        body,
        torch.arange(8.0),
        8,
        [[8]],
        r"kernel 'pointer_oob': out-of-bounds access through a pointer: tensor 'x' read at "
        r"element offset (8|9) by the thread at thread_position_in_grid \((6|7), 0, 0\) at "
        r"src:2:\d+; the tensor \(shape \[8\]\) holds element offsets 0 to 7",
    )
    assert found[0]["kind"] == "out of bounds"


def test_simd_functions_reached_from_different_calls(capfd) -> None:
    # A warning: each call runs over the lanes that reach it (Metal's active
    # lanes), which code written for the whole SIMD-group may not intend.
    body = """
float v = x[id];
float s;
if (lid % 2 == 0) {
  s = simd_sum(v);
} else {
  s = simd_sum(v * 2);
}
out[id] = s;
"""
    k = kernel("simd_divergent", [Tensor("x")], [Tensor("out")], body, ATTRS, debug=True)
    (out,) = k(torch.ones(32), grid=(32, 1, 1), group=(32, 1, 1), shapes=[[32]])
    pattern = (
        r"kernel 'simd_divergent': lanes of SIMD-group 0 of threadgroup \(0, 0, 0\) reached "
        r"different SIMD-group function calls at once: lane \d+ .* at src:(5|7):\d+ and lane "
        r"\d+ .* at src:(5|7):\d+"
    )
    assert re.search(pattern, capfd.readouterr().err)
    assert {f["kind"] for f in C._last_debug_findings()} == {"SIMD participation"}
    # Over the active lanes: 16 even lanes sum 1s, 16 odd lanes sum 2s (exact).
    expected = torch.tensor([16.0, 32.0]).repeat(16)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_a_pointer_into_threadgroup_memory_is_checked_too() -> None:
    body = """
threadgroup float t[64];
threadgroup float* p = t;
p[lid] = x[id];
out[id] = p[(lid + 1) % 64];
"""
    found = _fails(
        "pointer_race",
        body,
        torch.ones(64),
        64,
        [[64]],
        r"kernel 'pointer_race': (data race on threadgroup memory 't'|relies on SIMD-group "
        r"lockstep)",
    )
    assert found


def test_default_mode_kernels_carry_no_checks(tmp_path, monkeypatch) -> None:
    # What default mode pays for the checker at run time: nothing per access.
    # Its kernel library has none of the instrumentation that debug mode's has.
    body = REDUCTION.format(barrier="threadgroup_barrier(mem_flags::mem_threadgroup);")
    x = torch.arange(128.0)
    libraries = {}
    for debug in (False, True):
        mode = "debug" if debug else "default"
        cache = tmp_path / mode
        cache.mkdir(mode=0o700)
        monkeypatch.setenv("COREAI_TORCH_CACHE_DIR", str(cache))
        name = f"checks_in_{mode}_mode"
        k = kernel(name, [Tensor("x")], [Tensor("out")], body, ATTRS, debug=debug)
        (out,) = k(x, grid=(128, 1, 1), group=(64, 1, 1), shapes=[[2]])
        torch.testing.assert_close(out, x.view(2, 64).sum(1), rtol=0, atol=0)  # exact: integers
        libraries[mode] = [p.read_bytes() for p in cache.glob("*.so")]
    assert libraries["default"] and libraries["debug"]
    assert not any(b"__tsan_" in lib for lib in libraries["default"])
    assert all(b"__tsan_" in lib for lib in libraries["debug"])


# The documented limit of fiber mode's lockstep (docs/cpu.md, "Lockstep"): lane
# 0 writes t[0] inside a branch the other lanes skip, between two reads of t[0]
# by all lanes. In lockstep every lane's second read sees 100; fiber mode lets
# the other lanes make both reads in one run of reads, so they see the old
# value twice. Default mode gives that silently; debug mode must report it.
LOCKSTEP_LIMIT = """
threadgroup float t[32];
t[lid] = x[id];
simdgroup_barrier(mem_flags::mem_threadgroup);
float before = t[0];
if (lid == 0) { t[0] = 100.0f; }
float after = t[0];
out[id] = before + after;
"""


def test_the_lockstep_limit_is_reported_in_debug_mode(capfd) -> None:
    x = torch.arange(1.0, 33.0)
    plain = kernel("lockstep_limit", [Tensor("x")], [Tensor("out")], LOCKSTEP_LIMIT, ATTRS)
    (out,) = plain(x, grid=(32, 1, 1), group=(32, 1, 1), shapes=[[32]])
    # Lane 0 reads 1 then its own 100; the others read the old 1 twice (a GPU
    # in lockstep would give them 101 too).
    torch.testing.assert_close(out, torch.tensor([101.0] + [2.0] * 31), rtol=0, atol=0)

    checked = kernel(
        "lockstep_limit_debug", [Tensor("x")], [Tensor("out")], LOCKSTEP_LIMIT, ATTRS, debug=True
    )
    checked(x, grid=(32, 1, 1), group=(32, 1, 1), shapes=[[32]])
    found = C._last_debug_findings()
    assert [f["kind"] for f in found] == ["SIMD lockstep"]
    assert found[0]["memory"] == "threadgroup memory 't'" and found[0]["index"] == "[0]"
    assert "(0, 0, 0)" in found[0]["threads"]  # lane 0, the writer
    assert "src:6:" in " ".join(found[0]["lines"])  # the write inside the branch
    assert "relies on SIMD-group lockstep" in capfd.readouterr().err


# One SIMD-group multiplies an 8x8 matrix by itself; `{guard}` may put the
# product in divergent code.
MATRIX = """
simdgroup_float8x8 a;
simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(1.0f);
simdgroup_load(a, &x[0, 0]);
{guard}
  simdgroup_multiply_accumulate(acc, a, a, acc);
simdgroup_store(acc, &out[0, 0]);
"""


def _matrix_kernel(name: str, guard: str):
    square = [Tensor("x", rank=2)], [Tensor("out", rank=2)]
    return kernel(name, *square, MATRIX.format(guard=guard), ATTRS, debug=True)


def test_a_simdgroup_product_in_divergent_code_is_reported_with_its_line() -> None:
    # Metal leaves it undefined (and the CUDA backend's tensor cores need every
    # lane): an error, naming the call's line and the lanes that skipped it.
    k = _matrix_kernel("matrix_divergent", "if (lid < 16)")
    pattern = (
        r"kernel 'matrix_divergent': simdgroup_multiply_accumulate at src:6:\d+ was reached by "
        r"only 16 of the 32 lanes of SIMD-group 0 of threadgroup \(0, 0, 0\): lane 16 "
        r"\(thread_position_in_grid \(16, 0, 0\)\) and 15 more did not take part\. Metal leaves "
        r"SIMD-group matrix operations undefined"
    )
    with pytest.raises(RuntimeError, match=pattern):
        k(torch.ones(8, 8), grid=(32, 1, 1), group=(32, 1, 1), shapes=[[8, 8]])
    (found,) = [f for f in C._last_debug_findings() if f["kind"] == "partial SIMD-group matrix"]
    assert found["lines"][0].startswith("src:6:")
    assert found["threads"] == ["(0, 0, 0)", "(16, 0, 0)"]


def test_the_product_made_by_the_whole_simdgroup_is_clean() -> None:
    k = _matrix_kernel("matrix_uniform", "")
    x = torch.randint(-3, 4, (8, 8)).float()
    (out,) = k(x, grid=(32, 1, 1), group=(32, 1, 1), shapes=[[8, 8]])
    assert C._last_debug_findings() == []
    # Small integers: every product and sum is exact in float.
    torch.testing.assert_close(out, x @ x + 1, rtol=0, atol=0)

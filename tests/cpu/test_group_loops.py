"""The group-loop form: which kernels take it, and that it computes what fiber mode does.

Kernels with barriers or SIMD-group operations run as loops over their threads
when the analysis can prove how (csrc/cpu/group_form.h); fiber mode keeps the
rest. Each kernel below runs in the group-loop form and again with group
loops turned off (fiber mode): the results must be the same bits, and match a
reference computed here.
"""

from __future__ import annotations

import coreai_torch._C as C
import pytest
import torch
from support.cpu_launch import Scalar, Tensor, kernel, registration

F32 = torch.float32
I32 = torch.int32
GID = ("id", "uint", "thread_position_in_grid")
LID = ("lid", "uint", "thread_index_in_threadgroup")
LANE = ("lane", "uint", "thread_index_in_simdgroup")
SIMD = ("simd", "uint", "simdgroup_index_in_threadgroup")


def form_of(body: str, attrs: list, helper: str = "", debug: bool = False) -> tuple[str, str, str]:
    """(form, why not group loops, what the form did) for a one-input, one-result kernel."""
    source = registration("probe", [Tensor("x")], [Tensor("out")], body, attrs, helper)[1]
    form, reason, summary, _ = C._cpu_execution_form(source, debug)
    return form, reason, summary


def both_forms(monkeypatch, name: str, inputs, results, body: str, attrs, args, **launch):
    """Runs the kernel in the group-loop form, then in fiber mode; returns the
    first results after checking that both forms give the same bits."""
    group = kernel(name + "_g", inputs, results, body, attrs)
    got = group(*args, **launch)
    assert torch.ops.coreai_torch.cpu_execution_form(group.handle) == "group_loops"
    monkeypatch.setenv("COREAI_TORCH_CPU_GROUP_LOOPS", "0")  # read when a kernel compiles
    fibers = kernel(name + "_f", inputs, results, body, attrs)
    want = fibers(*args, **launch)
    assert torch.ops.coreai_torch.cpu_execution_form(fibers.handle) == "fibers"
    monkeypatch.delenv("COREAI_TORCH_CPU_GROUP_LOOPS")
    for g, f in zip(got, want, strict=True):
        assert torch.equal(g, f), (g - f).abs().max()
    return got


# ---- which form ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "attrs", "form", "reason"),
    [
        ("out[id] = x[id];", [GID], "loop", ""),
        (
            "threadgroup float t[64]; t[lid] = x[id];\n"
            "threadgroup_barrier(mem_flags::mem_threadgroup);\nout[id] = t[63 - lid];",
            [GID, LID],
            "group_loops",
            "",
        ),
        ("out[id] = simd_sum(x[id]);", [GID], "group_loops", ""),
        # A barrier in a loop whose trip count differs between threads.
        (
            "for (uint i = 0; i < lid; ++i) threadgroup_barrier(mem_flags::mem_none);\n"
            "out[id] = x[id];",
            [GID, LID],
            "fibers",
            "the condition around a barrier differs between threads",
        ),
        # A SIMD-group function in code only some lanes run.
        (
            "float v = x[id];\nif (lane < 7) v = simd_sum(v);\nout[id] = v;",
            [GID, LANE],
            "fibers",
            "SIMD-group operation under a condition that differs between threads",
        ),
        # A break out of a loop around a barrier: it would end a loop over threads.
        (
            "for (uint i = 0; i < 8; ++i) {\n  threadgroup_barrier(mem_flags::mem_none);\n"
            "  if (i == 3) break;\n}\nout[id] = x[id];",
            [GID],
            "fibers",
            "a break or continue out of a loop around a synchronisation",
        ),
        # Lanes that write then read threadgroup memory with no barrier between:
        # fiber mode keeps them in lockstep there.
        (
            "threadgroup float t[64]; t[lid] = x[id];\nout[id] = t[lid ^ 1];",
            [GID, LID],
            "fibers",
            "read and written between two synchronisations",
        ),
    ],
)
def test_the_form_a_kernel_takes_and_why(body: str, attrs: list, form: str, reason: str) -> None:
    got, why, _ = form_of(body, attrs)
    assert got == form, why
    assert reason in why


def test_synchronisation_in_a_helper_keeps_fiber_mode() -> None:
    helper = "float total(float v) { return simd_sum(v); }"
    form, why, _ = form_of("out[id] = total(x[id]);", [GID], helper)
    assert form == "fibers" and "helper code uses simd_sum" in why


def test_debug_mode_and_the_switch_keep_fiber_mode(monkeypatch) -> None:
    body = "out[id] = simd_sum(x[id]);"
    assert form_of(body, [GID], debug=True)[:2] == (
        "fibers",
        "debug mode checks every thread in fiber mode",
    )
    monkeypatch.setenv("COREAI_TORCH_CPU_GROUP_LOOPS", "0")
    assert form_of(body, [GID])[:2] == ("fibers", "COREAI_TORCH_CPU_GROUP_LOOPS=0")


def test_the_summary_counts_what_the_form_did() -> None:
    body = (
        "threadgroup float partial[32];\nfloat v = simd_sum(x[id]);\n"
        "if (lane == 0) partial[simd] = v;\nthreadgroup_barrier(mem_flags::mem_threadgroup);\n"
        "out[id] = partial[0] + v;"
    )
    form, _, summary = form_of(body, [GID, LANE, SIMD])
    assert form == "group_loops"
    assert "2 regions between barriers" in summary or "1 regions over SIMD-groups" in summary
    assert "1 SIMD-group functions on the lanes' values" in summary
    assert "1 values kept per thread across regions" in summary


def test_an_array_too_large_to_keep_per_thread_stays_in_fiber_mode() -> None:
    body = (
        "float buf[1048576];\nfor (uint i = 0; i < 1048576; ++i) buf[i] = x[id];\n"
        "threadgroup_barrier(mem_flags::mem_none);\nout[id] = buf[id];"
    )
    form, why, _ = form_of(body, [GID])
    assert form == "fibers" and "would not fit a stack" in why


# ---- regions between barriers as loops ------------------------------------------------


def test_tiled_matmul_in_two_dimensional_groups_with_edges(monkeypatch) -> None:
    body = """
    const uint K = A.get_extent(0), M = A.get_extent(1), N = B.get_extent(0);
    threadgroup float a_tile[8][16];
    threadgroup float b_tile[16][16];
    const uint col = gid.x, row = gid.y;
    float acc = 0.0f;
    for (uint k0 = 0; k0 < K; k0 += 16) {
        // Edge groups are smaller: their threads load more than one element.
        for (uint kk = lid.x; kk < 16; kk += size.x) {
            a_tile[lid.y][kk] = (row < M && k0 + kk < K) ? A[k0 + kk, row] : 0.0f;
        }
        for (uint kk = lid.y; kk < 16; kk += size.y) {
            b_tile[kk][lid.x] = (col < N && k0 + kk < K) ? B[col, k0 + kk] : 0.0f;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint k = 0; k < 16; ++k) acc += a_tile[lid.y][k] * b_tile[k][lid.x];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (row < M && col < N) C[col, row] = acc;
    """
    attrs = [
        ("gid", "uint2", "thread_position_in_grid"),
        ("lid", "uint2", "thread_position_in_threadgroup"),
        ("size", "uint2", "threads_per_threadgroup"),
    ]
    g = torch.Generator().manual_seed(3)
    m, k, n = 21, 40, 37
    a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    (c,) = both_forms(
        monkeypatch,
        "gl_matmul",
        [Tensor("A", rank=2), Tensor("B", rank=2)],
        [Tensor("C", rank=2)],
        body,
        attrs,
        (a, b),
        grid=(n, m, 1),  # edge groups are smaller: 37 = 2 * 16 + 5, 21 = 2 * 8 + 5
        group=(16, 8, 1),
        shapes=[[m, n]],
    )
    # 40-long dot products summed in another order than torch's: a few float32 ulps.
    torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-5)


def test_threads_that_return_before_barriers_are_not_waited_for(monkeypatch) -> None:
    # A third of each group returns; the others exchange values through
    # threadgroup memory across two barriers, and sum over their SIMD-group.
    body = """
    threadgroup float tile[64];
    out[id] = -1.0f;
    if (lid % 3 == 0) return;
    tile[lid] = x[id] * 2.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const uint partner = (lid % 3 == 1) ? lid + 1 : lid - 1;
    const float mine = partner < 64 ? tile[partner] : 0.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[id] = mine + simd_sum(1.0f);
    """
    x = torch.arange(128, dtype=F32)
    (out,) = both_forms(
        monkeypatch,
        "gl_return",
        [Tensor("x")],
        [Tensor("out")],
        body,
        [GID, LID],
        (x,),
        grid=(128, 1, 1),
        group=(64, 1, 1),
        shapes=[[128]],
    )
    want = torch.full((128,), -1.0)
    for i in range(128):
        lid = i % 64
        if lid % 3 == 0:
            continue
        partner = lid + 1 if lid % 3 == 1 else lid - 1
        mine = 2.0 * x[i - lid + partner] if partner < 64 else 0.0
        running = sum(1 for j in range(32) if ((lid // 32) * 32 + j) % 3 != 0)
        want[i] = mine + running
    torch.testing.assert_close(out, want, rtol=0, atol=0)


def test_barriers_under_a_bounds_check_at_the_end_of_the_kernel(monkeypatch) -> None:
    # Threads past n skip the branch and are done; the others reverse their part.
    body = """
    threadgroup float tile[64];
    if (id < uint(n)) {
        tile[lid] = x[id];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        const uint first = id - lid;
        const uint count = min(uint(n) - first, size);
        out[id] = tile[count - 1 - lid];
    }
    """
    attrs = [GID, LID, ("size", "uint", "threads_per_threadgroup")]
    n = 150
    x = torch.arange(n, dtype=F32)
    (out,) = both_forms(
        monkeypatch,
        "gl_bounds",
        [Tensor("x"), Scalar("n", "int")],
        [Tensor("out")],
        body,
        attrs,
        (x, n),
        grid=(164, 1, 1),
        group=(64, 1, 1),
        shapes=[[n]],
    )
    want = torch.cat([x[0:64].flip(0), x[64:128].flip(0), x[128:150].flip(0)])
    torch.testing.assert_close(out, want, rtol=0, atol=0)


def test_a_scan_whose_loop_variables_change_once_per_group(monkeypatch) -> None:
    # Hillis-Steele over each group of 128, ping-pong buffers: `src ^= 1` and
    # `offset *= 2` run once per step for the whole group; `v` lives across a
    # barrier in a slot per thread.
    body = """
    threadgroup int buf[2][128];
    uint src = 0;
    buf[0][lid] = x[id];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    uint offset = 1;
    while (offset < 128) {
        const int v = buf[src][lid] + (lid >= offset ? buf[src][lid - offset] : 0);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        buf[src ^ 1][lid] = v;
        src ^= 1;
        offset *= 2;
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    out[id] = buf[src][lid];
    """
    x = torch.randint(-50, 50, (256,), dtype=I32)
    (out,) = both_forms(
        monkeypatch,
        "gl_scan",
        [Tensor("x", I32)],
        [Tensor("out", I32)],
        body,
        [GID, LID],
        (x,),
        grid=(256, 1, 1),
        group=(128, 1, 1),
        shapes=[[256]],
    )
    want = torch.cat([x[:128].cumsum(0), x[128:].cumsum(0)]).to(I32)
    torch.testing.assert_close(out, want, rtol=0, atol=0)


# ---- loops of a uniform trip count, the threads innermost ---------------------------------

ROW = ("row", "uint", "threadgroup_position_in_grid")
ROWS = ("rows", "uint", "threadgroups_per_grid")

# MLX's looped softmax, reduced: each of a row's 64 threads reads two values
# per step of a loop over the row, carrying its running maximum and sum
# (values per thread across the loop); then SIMD-group reductions, one inside
# a loop of a uniform trip count; a loop whose trip count differs between
# threads; constant loops of 2 inside the interchanged one. Threads with
# lid % 7 == 6 return before the loops.
ROW_LOOPS = """
const uint n = x.get_extent(0) / rows;
device const float* in = &x[row * n];
if (lid % 7 == 6) { out[row * 64 + lid] = -1.0f; return; }
float m = -INFINITY;
float s = 0.0f;
for (uint r = 0; r < n; r += 64 * 2) {
    float vals[2];
    for (int i = 0; i < 2; i++) {
        const uint k = r + lid * 2 + i;
        vals[i] = k < n ? in[k] : -INFINITY;
    }
    const float before = m;
    for (int i = 0; i < 2; i++) m = max(m, vals[i]);
    s *= exp(before - m);
    for (int i = 0; i < 2; i++) s += exp(vals[i] - m);
}
const float mine = m;
m = simd_max(m);
s = simd_sum(s * exp(mine - m));
float acc = 0.0f;
for (uint r = 0; r < n; r += 64) {
    const uint k = r + lid;
    acc += simd_sum(k < n ? in[k] : 0.0f);
}
float tail = 0.0f;
for (uint k = lid; k < n; k += 64) tail += in[k];
out[row * 64 + lid] = s + 1000.0f * acc + 1.0e6f * tail;
"""


def both_forms_by_rows(monkeypatch, name: str, body: str, x: torch.Tensor, rows: int):
    """A row kernel over ``x`` (one input, one result of 64 values a row), in both forms."""
    (out,) = both_forms(
        monkeypatch,
        name,
        [Tensor("x")],
        [Tensor("out")],
        body,
        [LID, ROW, ROWS],
        (x,),
        grid=(64 * rows, 1, 1),
        group=(64, 1, 1),
        shapes=[[64 * rows]],
    )
    return out


@pytest.mark.parametrize(
    ("body", "interchanged"),
    [
        (ROW_LOOPS, 1),
        # The trip count differs between threads: each thread runs its loop.
        (
            "float t = 0.0f;\nfor (uint k = lid; k < x.get_extent(0); k += 64) t += x[k];\n"
            "out[lid] = simd_sum(t);",
            0,
        ),
        # A constant count of at most 16: unrolled in the thread's code instead.
        (
            "float t = 0.0f;\nfor (uint k = 0; k < 16; ++k) t += x[lid * 16 + k];\n"
            "out[lid] = simd_sum(t);",
            0,
        ),
        # A break out of the loop: its threads could leave at different steps.
        (
            "float t = 0.0f;\nfor (uint k = 0; k < x.get_extent(0); ++k) {\n"
            "  if (x[k] > 9.0f) break;\n  t += x[k] * lid;\n}\nout[lid] = simd_sum(t);",
            0,
        ),
        # At group level, between barriers (threadgroup memory only read there).
        (
            "threadgroup float tile[64];\ntile[lid] = x[lid];\n"
            "threadgroup_barrier(mem_flags::mem_threadgroup);\nfloat t = 0.0f;\n"
            "for (uint j = 0; j < x.get_extent(0); ++j) t += tile[(lid + j) % 64];\n"
            "out[lid] = t;",
            1,
        ),
    ],
)
def test_which_loops_run_with_the_threads_innermost(body: str, interchanged: int) -> None:
    form, why, summary = form_of(body, [LID, ROW, ROWS])
    assert form == "group_loops", why
    assert f" {interchanged} loops of a uniform trip count with the threads innermost" in summary


def test_row_loops_with_carried_values_reductions_and_returns(monkeypatch) -> None:
    rows, n = 3, 300  # the last step of the row loop is partial (300 = 2 * 128 + 44)
    x = torch.randn(rows * n, generator=torch.Generator().manual_seed(11)) * 4
    out = both_forms_by_rows(monkeypatch, "gl_rowloops", ROW_LOOPS, x, rows)
    want = torch.empty(rows * 64, dtype=torch.float64)
    xd = x.double().view(rows, n)
    for row in range(rows):
        for lid in range(64):
            if lid % 7 == 6:
                want[row * 64 + lid] = -1.0
                continue
            running = [t for t in range(lid // 32 * 32, lid // 32 * 32 + 32) if t % 7 != 6]
            mine = torch.cat([xd[row, k : k + 2] for t in running for k in range(2 * t, n, 128)])
            s = torch.exp(mine - mine.max()).sum()
            acc = sum(xd[row, r + t] for r in range(0, n, 64) for t in running if r + t < n)
            tail = xd[row, lid::64].sum()
            want[row * 64 + lid] = s + 1000.0 * acc + 1.0e6 * tail
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-2)


# MLX's looped RMSNorm, reduced: a branch every thread of a step takes until
# the row's last, partial step (`offset + 2 <= n`), whose else branch reads
# what is left of the row one value at a time.
EVERY_THREAD_BRANCH = """
const uint n = x.get_extent(0) / rows;
device const float* in = &x[row * n];
float acc = 0.0f;
for (uint r = 0; r < n; r += 64 * 2) {
    const uint offset = r + lid * 2;
    if (offset + 2 <= n) {
        for (int i = 0; i < 2; i++) acc += in[offset + i] * in[offset + i];
    } else {
        for (int i = 0; i < 2; i++) acc += offset + i < n ? 3.0f * in[offset + i] : 0.0f;
    }
}
out[row * 64 + lid] = simd_sum(acc);
"""


@pytest.mark.parametrize(
    ("body", "versioned"),
    [
        (EVERY_THREAD_BRANCH, 1),
        # The condition reads a variable the loop's pieces change: its value
        # for a thread is only known when that thread gets there.
        (
            EVERY_THREAD_BRANCH.replace("float acc = 0.0f;", "float acc = 0.0f;\nuint limit = n;")
            .replace("offset + 2 <= n", "offset + 2 <= limit")
            .replace("acc += offset + i < n", "limit = 0; acc += offset + i < n"),
            0,
        ),
        # A declaration before the if that reads memory.
        (
            EVERY_THREAD_BRANCH.replace(
                "const uint offset = r + lid * 2;", "const uint offset = r + lid * 2 + uint(in[0]);"
            ),
            0,
        ),
        # A statement before the if that is not a declaration.
        (EVERY_THREAD_BRANCH.replace("const uint offset", "acc += 0.5f; const uint offset"), 0),
    ],
)
def test_which_loops_also_run_without_a_branch_every_thread_takes(
    body: str, versioned: int
) -> None:
    form, why, summary = form_of(body, [LID, ROW, ROWS])
    assert form == "group_loops", why
    assert f" {versioned} loops also run without an if every thread takes" in summary


@pytest.mark.parametrize("n", [256, 301])
def test_a_branch_every_thread_takes_and_the_partial_step_after_it(monkeypatch, n: int) -> None:
    # n = 301: steps at 0 and 128 take the branch in every thread, the step at
    # 256 only in threads 0-21 (256 + 2 * 21 + 2 = 300), thread 22 reads the
    # last value in the else branch; n = 256: every step takes the branch.
    rows = 3
    x = torch.randn(rows * n, generator=torch.Generator().manual_seed(5))
    out = both_forms_by_rows(monkeypatch, f"gl_every_{n}", EVERY_THREAD_BRANCH, x, rows)
    xd = x.double().view(rows, n)
    want = torch.empty(rows, 64, dtype=torch.float64)
    for row in range(rows):
        per_thread = torch.zeros(64, dtype=torch.float64)
        for lid in range(64):
            for r in range(0, n, 128):
                offset = r + 2 * lid
                values = xd[row, offset : offset + 2]
                per_thread[lid] += (values * values).sum() if offset + 2 <= n else 3 * values.sum()
        want[row, :32] = per_thread[:32].sum()
        want[row, 32:] = per_thread[32:].sum()
    torch.testing.assert_close(out.double().view(rows, 64), want, rtol=1e-5, atol=1e-4)


def test_a_uniform_loop_between_barriers_at_group_level(monkeypatch) -> None:
    body = """
    threadgroup float tile[64];
    tile[lid] = x[id];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float acc = 0.0f;
    float top = -INFINITY;
    for (uint j = 0; j < uint(n); j += 3) {
        acc += tile[(lid + j) % 64] * float(j + 1);
        top = max(top, tile[j % 64] - acc);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[id] = acc + top;
    """
    x = torch.randn(128, generator=torch.Generator().manual_seed(12))
    n = 100
    (out,) = both_forms(
        monkeypatch,
        "gl_uniformloop",
        [Tensor("x"), Scalar("n", "int")],
        [Tensor("out")],
        body,
        [GID, LID],
        (x, n),
        grid=(128, 1, 1),
        group=(64, 1, 1),
        shapes=[[128]],
    )
    want = torch.empty(128)
    for i in range(128):
        base, lid = i - i % 64, i % 64
        acc, top = torch.tensor(0.0), torch.tensor(-float("inf"))
        for j in range(0, n, 3):
            acc = acc + x[base + (lid + j) % 64] * float(j + 1)
            top = torch.maximum(top, x[base + j % 64] - acc)
        want[i] = acc + top
    torch.testing.assert_close(out, want, rtol=0, atol=0)


# ---- SIMD-groups as vector units ---------------------------------------------------------


def test_simd_group_functions_over_partial_and_thinned_simd_groups(monkeypatch) -> None:
    # 48-thread groups: the second SIMD-group has 16 lanes; lanes 4, 9, 14 ...
    # return first. Every function below runs over the lanes still running.
    body = """
    if (lid % 5 == 4) { out[id] = 0.0f; total[id] = 0.0f; return; }
    const float v = x[id];
    const float a = simd_sum(v);
    const float b = simd_max(v) - simd_min(v);
    const float c = simd_prefix_exclusive_sum(v);
    const float d = simd_shuffle_xor(v, 3u) + simd_shuffle_down(v, 5u) + simd_broadcast_first(v);
    const float e = float(uint64_t(simd_ballot(v > 0.0f)) % 1000u) +
                    (simd_is_first() ? 1.0f : 0.0f);
    const float f = quad_sum(v) + simd_shuffle_and_fill_up(v, -v, ushort(2));
    out[id] = a + b + c + d + e + f;
    total[id] = a;
    """
    x = torch.randn(144, generator=torch.Generator().manual_seed(5))
    out, total = both_forms(
        monkeypatch,
        "gl_simd",
        [Tensor("x")],
        [Tensor("out"), Tensor("total")],
        body,
        [GID, LID],
        (x,),
        grid=(144, 1, 1),
        group=(48, 1, 1),
        shapes=[[144], [144]],
    )
    want = torch.zeros(144)
    for group in range(3):
        for first, lanes in ((0, 32), (32, 16)):
            running = [first + i for i in range(lanes) if (first + i) % 5 != 4]
            base = 48 * group
            for lid in running:
                want[base + lid] = x[[base + r for r in running]].sum()
    # The butterfly adds in another order than torch's sum: a few float32 ulps.
    torch.testing.assert_close(total, want, rtol=1e-5, atol=1e-5)
    assert (out.view(3, 48)[:, 4::5] == 0).all()


def test_simd_reductions_in_two_dimensional_groups(monkeypatch) -> None:
    # (16, 4) groups: SIMD-groups span two rows; each row's first lane stores.
    body = """
    const float v = x[gid.y, gid.x];
    const float s = simd_sum(v);
    threadgroup float per_simd[2];
    if (lane == 0) per_simd[simd] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[gid.y, gid.x] = per_simd[0] + per_simd[1];
    """
    attrs = [("gid", "uint2", "thread_position_in_grid"), LANE, SIMD]
    x = torch.randn(32, 8, generator=torch.Generator().manual_seed(6))
    (out,) = both_forms(
        monkeypatch,
        "gl_simd2d",
        [Tensor("x", rank=2)],
        [Tensor("out", rank=2)],
        body,
        attrs,
        (x,),
        grid=(32, 8, 1),
        group=(16, 4, 1),
        shapes=[[32, 8]],
    )
    # x[gid.y, gid.x] is torch x[gid.x, gid.y]: each group covers 16 torch rows x 4 columns.
    for gx in range(2):
        for gy in range(2):
            want = x[16 * gx : 16 * gx + 16, 4 * gy : 4 * gy + 4].sum()
            got = out[16 * gx : 16 * gx + 16, 4 * gy : 4 * gy + 4]
            torch.testing.assert_close(got, want.expand_as(got), rtol=1e-5, atol=1e-5)


def test_simdgroup_matrices_kept_across_barriers(monkeypatch) -> None:
    # Two SIMD-groups (64 threads) each multiply an 8 x 8 block staged through
    # threadgroup memory; the accumulator lives across the barriers of the
    # K loop, thread_elements() scales each lane's pair on the way out.
    body = """
    threadgroup float a_tile[2][64];
    threadgroup float b_tile[64];
    simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    const uint K = A.get_extent(0);
    for (uint k0 = 0; k0 < K; k0 += 8) {
        a_tile[simd][lane] = A[k0 + lane % 8, 8 * simd + lane / 8];
        a_tile[simd][lane + 32] = A[k0 + lane % 8, 8 * simd + 4 + lane / 8];
        if (simd == 0) {
            b_tile[lane] = B[lane % 8, k0 + lane / 8];
            b_tile[lane + 32] = B[lane % 8, k0 + 4 + lane / 8];
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        simdgroup_float8x8 a, b;
        simdgroup_load(a, a_tile[simd], 8);
        simdgroup_load(b, b_tile, 8);
        simdgroup_multiply_accumulate(acc, a, b, acc);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    acc.thread_elements() *= 2.0f;
    simdgroup_store(acc, C.get_data_ptr() + 64 * simd, 8);
    """
    g = torch.Generator().manual_seed(7)
    a, b = torch.randn(16, 24, generator=g), torch.randn(24, 8, generator=g)
    (c,) = both_forms(
        monkeypatch,
        "gl_matrix",
        [Tensor("A", rank=2), Tensor("B", rank=2)],
        [Tensor("C", rank=2)],
        body,
        [LANE, SIMD],
        (a, b),
        grid=(64, 1, 1),
        group=(64, 1, 1),
        shapes=[[16, 8]],
    )
    torch.testing.assert_close(c, 2 * (a @ b), rtol=1e-5, atol=1e-5)


def test_simdgroup_matrices_of_a_partial_simd_group(monkeypatch) -> None:
    # A 16-thread group: lanes 16-31 do not exist, their elements count as zero
    # in the product and are not stored (the result keeps its -1 fill there).
    body = """
    out[lane] = -1.0f; out[lane + 16] = -1.0f; out[lane + 32] = -1.0f; out[lane + 48] = -1.0f;
    simdgroup_barrier(mem_flags::mem_device);
    simdgroup_float8x8 a, b, c;
    simdgroup_load(a, x.get_data_ptr(), 8);
    simdgroup_load(b, x.get_data_ptr() + 64, 8);
    simdgroup_multiply(c, a, b);
    simdgroup_store(c, out.get_data_ptr(), 8);
    """
    x = torch.randn(128, generator=torch.Generator().manual_seed(8))
    (out,) = both_forms(
        monkeypatch,
        "gl_partial",
        [Tensor("x")],
        [Tensor("out")],
        body,
        [LANE],
        (x,),
        grid=(16, 1, 1),
        group=(16, 1, 1),
        shapes=[[64]],
    )
    # Lane L holds row 4 L[4] + 2 L[2] + L[1], columns 4 L[3] + 2 L[0] and the next.
    present = torch.zeros(8, 8, dtype=torch.bool)
    for lane in range(16):
        r = 4 * ((lane >> 4) & 1) + 2 * ((lane >> 2) & 1) + ((lane >> 1) & 1)
        c0 = 4 * ((lane >> 3) & 1) + 2 * (lane & 1)
        present[r, c0 : c0 + 2] = True
    ma = torch.where(present, x[:64].view(8, 8), 0.0)
    mb = torch.where(present, x[64:].view(8, 8), 0.0)
    want = torch.where(present, ma @ mb, -1.0).flatten()
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)

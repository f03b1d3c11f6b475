"""The CUDA backend's steps form: several Metal threads per CUDA thread.

A launch of whole threadgroups of more than 256 threads runs a kernel with
barriers on blocks of 256 CUDA threads, each running up to four Metal
threads in turn between barriers (csrc/cpu/group_form.h, cuda_steps_form;
docs/cuda.md, "Several Metal threads per CUDA thread"). What the form
makes of a kernel, and that it compiles, is checked here without a GPU; on a
GPU, each kernel's results are compared bit for bit with the same kernel
run one Metal thread per CUDA thread (``COREAI_TORCH_CUDA_STEPS=0``) and
with a reference computed here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from support import ptx_check
from support.cpu_launch import Scalar, Tensor, kernel, registration
from support.cuda_tools import requires_gpu

from coreai_torch import _C

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_kernels  # benchmarks/, put on the path above

F16 = torch.float16
GID = ("gid", "uint", "thread_position_in_grid")
LID = ("lid", "uint", "thread_index_in_threadgroup")
SIZE = ("n", "uint", "threads_per_threadgroup")

# MLX's RMSNorm as the benchmarks measure it (benchmarks/bench_kernels.py,
# bench_rms_norm): four elements a thread a step, SIMD-group sums, then the
# SIMD-groups' sums summed by SIMD-group 0 through threadgroup memory.
RMS_NORM = bench_kernels.rms_norm.src
RMS_PARAMS = [(p.name, p.dtype, p.attr) for p in bench_kernels.rms_norm.metal_params]
RMS_IO = (
    [Tensor("x", F16, 2), Tensor("weight", F16), Scalar("eps", "float")],
    [Tensor("out", F16, 2)],
)

# A value that lives across barriers (`own`), a loop around a barrier whose
# trip count is the group's, and a sum every thread reads.
TREE = """
threadgroup float partial[1024];
const float own = 2.0f * x[gid];
partial[lid] = own;
for (uint stride = n / 2; stride > 0; stride /= 2) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (lid < stride) partial[lid] += partial[lid + stride];
}
threadgroup_barrier(mem_flags::mem_threadgroup);
out[gid] = own + partial[0];
"""

# Every thread's attributes, read after a barrier, and what its SIMD-group
# and quad see.
ATTRIBUTES = """
threadgroup uint first[1];
if (index == 0) first[0] = tg.x + 1;
threadgroup_barrier(mem_flags::mem_threadgroup);
const uint t = gid.x + gid.y * x.get_extent(0);
const uint values[] = {gid.x, gid.y, lid.x, lid.y, tg.x, tg.y, tptg.x, tptg.y,
                       index, lane, simd, simds, first[0]};
for (uint c = 0; c < 13; ++c) out[c, t] = int(values[c]);
out[13, t] = int(simd_sum(index));
out[14, t] = int(simd_prefix_exclusive_sum(lane));
out[15, t] = int(quad_sum(index));
out[16, t] = int(simd_shuffle_xor(index, 5u));
out[17, t] = int(simd_broadcast(index, 7u));
"""
ATTRIBUTE_PARAMS = [
    ("gid", "uint2", "thread_position_in_grid"),
    ("lid", "uint2", "thread_position_in_threadgroup"),
    ("tg", "uint2", "threadgroup_position_in_grid"),
    ("tptg", "uint2", "threads_per_threadgroup"),
    ("index", "uint", "thread_index_in_threadgroup"),
    ("lane", "uint", "thread_index_in_simdgroup"),
    ("simd", "uint", "simdgroup_index_in_threadgroup"),
    ("simds", "uint", "simdgroups_per_threadgroup"),
]


def steps_form(body: str, attrs: list, inputs=None, results=None) -> tuple[str, str, str]:
    """(why there is none, what the form did, its rendering) of a kernel."""
    inputs = inputs or [Tensor("x")]
    results = results or [Tensor("out")]
    source = registration("steps_probe", inputs, results, body, attrs)[1]
    return _C._cuda_steps_form(source)


# ---- the form (no GPU needed) --------------------------------------------------------


def test_regions_between_barriers_become_loops_over_steps() -> None:
    reason, summary, rendering = steps_form(RMS_NORM, RMS_PARAMS, *RMS_IO)
    assert reason == ""
    assert summary.startswith("3 loops over steps in 3 regions between barriers")
    body = rendering[rendering.index("[[kernel]]") :]
    assert body.count("coreai_k < ::coreai_steps") == 3
    assert body.count("threadgroup_barrier(mem_flags::mem_threadgroup);") == 2
    # The SIMD-group functions stay as written (the warp's), inside the steps.
    assert body.count("simd_sum(") == 2 and "exchange" not in body
    # The group's attributes once; a thread's in each step.
    assert body.count("attr_threadgroup_position_in_grid") == 1
    assert body.count("attr_thread_index_in_threadgroup") == 2


def test_values_across_barriers_get_a_slot_per_step_and_uniform_loops_stay_single() -> None:
    reason, summary, rendering = steps_form(TREE, [GID, LID, SIZE])
    assert reason == "", reason
    assert "1 values kept per step across regions" in summary
    assert "float coreai_lanes_own[::coreai_steps];" in rendering
    assert "auto& own = coreai_lanes_own[coreai_k];" in rendering
    # The loop around the barrier runs once per CUDA thread, its steps inside.
    loop = rendering.index("for (uint stride = n / 2;")
    assert rendering.index("coreai_k < ::coreai_steps", loop) > loop


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (
            "if (gid >= x.get_extent(0)) return;\nthreadgroup_barrier(mem_flags::mem_threadgroup);"
            "\nout[gid] = x[gid];",
            "a thread may return before the others",
        ),
        (
            "simdgroup_float8x8 m;\nsimdgroup_load(m, &x[0], 8);\nsimdgroup_store(m, &out[0], 8);",
            "a simdgroup matrix",
        ),
        ("out[gid] = x[gid];", "no barrier or SIMD-group function"),
        (
            "threadgroup float t[1024];\nt[lid] = x[gid];\n"
            "if (x[gid] > 0.0f) threadgroup_barrier(mem_flags::mem_threadgroup);\n"
            "out[gid] = t[lid ^ 1];",
            "differs between threads",
        ),
    ],
    ids=["return", "simdgroup-matrix", "no-barrier", "divergent-barrier"],
)
def test_kernels_the_form_cannot_take_keep_one_metal_thread_per_cuda_thread(body, reason) -> None:
    why, _, rendering = steps_form(body, [GID, LID])
    assert reason in why and rendering == ""


@pytest.mark.skipif(not ptx_check.ENABLED, reason="needs libdevice and ptxas")
@pytest.mark.parametrize("steps", [2, 4])
def test_the_steps_form_compiles_for_the_gpu(steps: int) -> None:
    args = registration("steps_rms_norm_ptx", *RMS_IO, RMS_NORM, RMS_PARAMS)
    handle = torch.ops.coreai_torch.register_kernel.default(*args)
    try:
        ptx = _C._cuda_ptx(handle, "sm_90", True, True, steps)
    finally:
        torch.ops.coreai_torch.release_kernel.default(handle)
    entry = ptx[ptx.index(".entry") :]
    assert entry.count("barrier.sync") == 2  # the kernel's two barriers, once each
    # Each step's loads of its first four elements, one 8-byte load each.
    assert entry.count("ld.global.v4.b16") >= 3 * steps


# ---- on the GPU ------------------------------------------------------------------------


def _both_forms(monkeypatch, name: str, inputs, results, body, attrs, args, **launch):
    """Runs the kernel in the steps form and one Metal thread per CUDA thread,
    checks that each took its form and that both give the same bits; returns
    the steps form's results."""
    stepped = kernel(name + "_steps", inputs, results, body, attrs)
    got = stepped(*args, **launch)
    monkeypatch.setenv("COREAI_TORCH_CUDA_STEPS", "0")  # read when a kernel first launches
    single = kernel(name + "_single", inputs, results, body, attrs)
    want = single(*args, **launch)
    group = launch["group"][0] * launch["group"][1] * launch["group"][2]
    assert _C._cuda_loaded_steps(stepped.handle) == [min(group // 256, 4)]
    assert _C._cuda_loaded_steps(single.handle) == [1]
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)
    return got


@requires_gpu
@pytest.mark.parametrize("threads", [512, 768, 1024])
def test_rms_norm_in_steps_matches_one_thread_per_cuda_thread_and_torch(
    monkeypatch, threads: int
) -> None:
    rows, dim = 8, 4096
    x = torch.randn(rows, dim, dtype=F16, device="cuda")
    weight = torch.randn(dim, dtype=F16, device="cuda")
    (out,) = _both_forms(
        monkeypatch,
        f"steps_rms_norm_{threads}",
        *RMS_IO,
        RMS_NORM,
        RMS_PARAMS,
        (x, weight, 1e-6),
        grid=(threads * rows, 1, 1),
        group=(threads, 1, 1),
        shapes=[[rows, dim]],
    )
    want = torch.nn.functional.rms_norm(x.float(), (dim,), weight.float(), 1e-6)
    # half results of float math: within two half ulps of the float reference.
    torch.testing.assert_close(out.float(), want, rtol=2e-3, atol=2e-3)


@requires_gpu
@pytest.mark.parametrize("threads", [512, 1024])
def test_values_across_barriers_in_steps(monkeypatch, threads: int) -> None:
    groups = 3
    x = torch.randint(-8, 8, (threads * groups,), device="cuda").float()
    (out,) = _both_forms(
        monkeypatch,
        f"steps_tree_{threads}",
        [Tensor("x")],
        [Tensor("out")],
        TREE,
        [GID, LID, SIZE],
        (x,),
        grid=(threads * groups, 1, 1),
        group=(threads, 1, 1),
        shapes=[[threads * groups]],
    )
    # Small integers: every order of the sums is exact.
    sums = (2 * x).reshape(groups, threads).sum(1).repeat_interleave(threads)
    assert torch.equal(out, 2 * x + sums)


@requires_gpu
@pytest.mark.parametrize("group", [(1024, 1, 1), (32, 32, 1), (64, 8, 1)], ids=str)
def test_attributes_and_simd_functions_in_steps_match_the_cpu(monkeypatch, group) -> None:
    grid = (group[0] * 2, group[1] * 2, 1)
    x = torch.zeros(grid[0])  # its extent: the grid's width
    shapes = [[grid[0] * grid[1], 18]]
    inputs, results = [Tensor("x")], [Tensor("out", torch.int32, 2)]
    cpu = kernel("steps_attributes_cpu", inputs, results, ATTRIBUTES, ATTRIBUTE_PARAMS)(
        x, grid=grid, group=group, shapes=shapes
    )[0]
    (gpu,) = _both_forms(
        monkeypatch,
        f"steps_attributes_{group[0]}x{group[1]}",
        inputs,
        results,
        ATTRIBUTES,
        ATTRIBUTE_PARAMS,
        (x.cuda(),),
        grid=grid,
        group=group,
        shapes=shapes,
    )
    assert torch.equal(gpu.cpu(), cpu)
    # Hand-computed for the last thread: its index, lane and SIMD-group.
    last = gpu[-1].tolist()
    threads = group[0] * group[1]
    assert last[8:12] == [threads - 1, 31, threads // 32 - 1, threads // 32]
    assert last[12] == 1 + 1  # first[0] of the last group, (1, 1): its tg.x + 1


@requires_gpu
def test_partial_groups_and_small_groups_keep_one_metal_thread_per_cuda_thread() -> None:
    x = torch.randint(-8, 8, (1000,), device="cuda").float()
    tree = kernel("steps_tree_edge", [Tensor("x")], [Tensor("out")], TREE, [GID, LID, SIZE])
    # 1000 threads in groups of 512: the last group is cut at the grid edge.
    tree(x, grid=(1000, 1, 1), group=(512, 1, 1), shapes=[[1000]])
    tree(x[:512], grid=(256, 1, 1), group=(256, 1, 1), shapes=[[256]])
    assert _C._cuda_loaded_steps(tree.handle) == [1]

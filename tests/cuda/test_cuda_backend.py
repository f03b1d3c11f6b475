"""The CUDA backend: what it compiles (no GPU needed) and what it runs (on a CUDA GPU).

The GPU tests compare every result with the CPU backend, which defines Metal's
semantics for this project, and with hand-computed values; they skip without a
GPU. The eager test suite itself also runs on the GPU in device mode
(tests/support/kernel_testing.py, docs/cuda.md).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from support import ptx_check
from support.child_process import child_env, run
from support.cuda_tools import find_ptxas, requires_gpu
from support.kernel_testing import observed_launches

from coreai_torch import _C, MetalCompileError, MetalParameter, TorchMetalKernel

GID = MetalParameter("id", "uint", "thread_position_in_grid")


def _same(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


def _warp_sums(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, 32).sum(1)


def _attribute_rows(x: torch.Tensor) -> torch.Tensor:
    return torch.zeros(x.numel(), 20, dtype=torch.int32)


def _group_sums(x: torch.Tensor) -> torch.Tensor:
    return torch.stack([c.sum() for c in x.split(256)])


def _positions(x: torch.Tensor) -> torch.Tensor:
    return torch.arange(1, x.numel() + 1, dtype=torch.int32)


def _spin(x: torch.Tensor, n: int) -> torch.Tensor:
    return x.clone()


def _triple(x: torch.Tensor) -> torch.Tensor:
    return 3 * x


def _scaled(a: torch.Tensor, s: torch.Tensor, scale: float, flip: bool) -> torch.Tensor:
    return (-1 if flip else 1) * (a * scale + s)


def _register(kernel: TorchMetalKernel, *inputs, result_ranks=(1,), dtypes=(torch.float32,)):
    spec = kernel.specialization(inputs, list(result_ranks), list(dtypes))
    return torch.ops.coreai_torch.register_kernel.default(*kernel.registration(spec))


# ---- compiling for the GPU (CI: no GPU needed) ----------------------------------------

tiled_sum = TorchMetalKernel(
    "cuda_tiled_sum",
    ["x"],
    ["out"],
    src="""
        threadgroup float tile[64];
        tile[lid] = gid < x.get_extent(0) ? x[gid] : 0.0f;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        float s = simd_sum(tile[lid]);
        if (lid % 32 == 0) out[gid / 32] = s;
    """,
    torch_defn=_warp_sums,
    metal_params=[
        MetalParameter("gid", "uint", "thread_position_in_grid"),
        MetalParameter("lid", "uint", "thread_index_in_threadgroup"),
    ],
)


def test_the_gpu_compiles_the_same_rendering_with_threadgroup_memory_as_shared_memory() -> None:
    handle = _register(tiled_sum, torch.zeros(64))
    tu = torch.ops.coreai_torch.cuda_translation_unit(handle)
    assert "#include <coreai_msl.h>" in tu  # the CPU backend's prelude and headers
    assert "COREAI_THREADGROUP_STORAGE float coreai_threadgroup_tile[64];" in tu
    assert "static void cuda_tiled_sum_" in tu and "[[kernel]]" not in tu
    assert "values[4]" in tu  # the metadata: extent and stride of x and out
    ptx = _C._cuda_ptx(handle, "sm_90")
    # Per block, at a multiple of 16 bytes (target_nvptx.h).
    assert ".shared .align 16 .b8" in ptx and "coreai_threadgroup_tile[256]" in ptx
    assert "barrier.sync" in ptx
    assert "shfl.sync.bfly.b32" in ptx  # simd_sum: the butterfly of warp shuffles
    assert "activemask.b32" in ptx  # over the active lanes
    assert ".target sm_90" in ptx


def _alternate_fill(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    even = torch.arange(x.numel(), device=x.device) % 2 == 0
    return x.masked_fill(even, -2.5), y.masked_fill(even, -2.5)


# A half and a bfloat constant that the kernel takes by reference, so that
# they live in GPU memory (as MLX's sort keeps its NaN padding key).
narrow_constants = TorchMetalKernel(
    "cuda_narrow_constants",
    ["x", "y"],
    ["a", "b"],
    src="""
        a[id] = pick(x[id], id % 2 == 0, Fill<half>::v);
        b[id] = pick(y[id], id % 2 == 0, Fill<bfloat>::v);
    """,
    helper_src="""
        template <typename T> struct Fill { static constexpr constant T v = T(-2.5f); };
        template <typename T>
        __attribute__((noinline)) T pick(T keep, bool fill, const constant T& value) {
          return fill ? value : keep;
        }
    """,
    torch_defn=_alternate_fill,
    metal_params=[GID],
)
NARROW_INPUTS = (torch.ones(8, dtype=torch.float16), torch.ones(8, dtype=torch.bfloat16))
NARROW_CALL = {
    "threads_per_grid": (8, 1, 1),
    "threads_per_thread_group": (8, 1, 1),
    "result_shapes": [[8], [8]],
}


def test_half_and_bfloat_constants_in_gpu_memory_keep_their_values() -> None:
    spec = narrow_constants.specialization(NARROW_INPUTS, [1, 1], [torch.half, torch.bfloat16])
    handle = torch.ops.coreai_torch.register_kernel.default(*narrow_constants.registration(spec))
    ptx = _C._cuda_ptx(handle, "sm_90")
    # clang 19 spells these as 64-bit float literals, which ptxas reads as 0;
    # the backend writes the 16-bit patterns of -2.5 from the LLVM IR instead.
    assert ".b16 _ZN5metal4FillIDF16_E1vE = 0xC100;" in ptx  # half
    assert ".b16 _ZN5metal4FillIDF16bE1vE = 0xC020;" in ptx  # bfloat


@requires_gpu
def test_half_and_bfloat_constants_on_the_gpu() -> None:
    got = narrow_constants(*(t.cuda() for t in NARROW_INPUTS), **NARROW_CALL)
    for g, want in zip(got, _alternate_fill(*NARROW_INPUTS)):
        torch.testing.assert_close(g.cpu(), want, rtol=0, atol=0)


def _shifted_copy(x: torch.Tensor, shift: int) -> torch.Tensor:
    """x[shift : shift + 4 n] copied in place, zeros around it (n = numel / 4 - 1)."""
    out = torch.zeros_like(x)
    window = slice(shift, shift + x.numel() - 4)
    out[window] = x[window]
    return out


# Thread `id` copies four halves as one half4 from and to `4 id + shift`: for
# shifts 1 to 3 the vectors sit at addresses aligned only to their element,
# which Metal accepts (MLX's RMSNorm stores half4s so; llama.cpp reads float4s
# at rows of any length).
shifted_vectors = TorchMetalKernel(
    "cuda_shifted_vectors",
    ["x", "shift"],
    ["out"],
    src="""
        const uint n = x.get_extent(0) / 4 - 1;
        *(device half4*)(&out[0] + 4 * id + shift) = *(device const half4*)(&x[0] + 4 * id + shift);
        if (id == 0) {
            for (int k = 0; k < shift; ++k) out[k] = half(0);
            for (uint k = 4 * n + shift; k < x.get_extent(0); ++k) out[k] = half(0);
        }
    """,
    torch_defn=_shifted_copy,
    metal_params=[GID],
)
SHIFTED_INPUT = torch.arange(1, 37, dtype=torch.float16)  # 36 halves: 8 threads of 4
SHIFTED_CALL = {
    "threads_per_grid": (8, 1, 1),
    "threads_per_thread_group": (8, 1, 1),
    "result_shapes": [[36]],
}


def _rotated_tile(x: torch.Tensor, shift: int) -> torch.Tensor:
    return x[shift + (torch.arange(512) + 8) % 512]


# Each of 64 threads copies 16 bytes of x into a threadgroup tile; after the
# barrier each writes out what its neighbour copied. At shift 0 and 8 the
# copies are asynchronous on the GPU; at shift 2 their source is aligned to
# the uint4's element (as Metal requires) but not to 16 bytes, and they run
# as they were (cuda/async_copies.h).
tile_copies = TorchMetalKernel(
    "cuda_tile_copies",
    ["x", "shift"],
    ["out"],
    src="""
        threadgroup half tile[512];
        *(threadgroup uint4*)(tile + 8 * id) = *(device const uint4*)(&x[0] + shift + 8 * id);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint k = 0; k < 8; ++k) out[8 * id + k] = tile[(8 * id + 8 + k) % 512];
    """,
    torch_defn=_rotated_tile,
    metal_params=[GID],
)
TILE_INPUT = torch.arange(520, dtype=torch.float16)
TILE_CALL = {
    "threads_per_grid": (64, 1, 1),
    "threads_per_thread_group": (64, 1, 1),
    "result_shapes": [[512]],
}


def test_tile_copies_are_asynchronous_and_waited_for_at_the_barrier() -> None:
    spec = tile_copies.specialization((TILE_INPUT, 2), [1], [torch.float16])
    handle = torch.ops.coreai_torch.register_kernel.default(*tile_copies.registration(spec))
    try:
        ptx = _entry_body(_C._cuda_ptx(handle, "sm_90"))
        older = _entry_body(_C._cuda_ptx(handle, "sm_75"))
    finally:
        torch.ops.coreai_torch.release_kernel.default(handle)
    assert ptx.count("cp.async.cg.shared.global") == 1, ptx
    assert re.search(r"cp\.async\.wait_all;\s+barrier\.sync\s+0;", ptx), ptx
    assert "cp.async" not in older  # sm_75 has no cp.async
    for shift in (0, 2, 8):
        got = tile_copies(TILE_INPUT, shift, **TILE_CALL)
        torch.testing.assert_close(got, _rotated_tile(TILE_INPUT, shift), rtol=0, atol=0)


@requires_gpu
@pytest.mark.parametrize("shift", [0, 2, 8])
def test_tile_copies_on_the_gpu(shift: int) -> None:
    got = tile_copies(TILE_INPUT.cuda(), shift, **TILE_CALL).cpu()
    torch.testing.assert_close(got, _rotated_tile(TILE_INPUT, shift), rtol=0, atol=0)


def test_vector_accesses_test_their_alignment() -> None:
    spec = shifted_vectors.specialization((SHIFTED_INPUT, 1), [1], [torch.float16])
    handle = torch.ops.coreai_torch.register_kernel.default(*shifted_vectors.registration(spec))
    ptx = _C._cuda_ptx(handle, "sm_90")
    # Each access tests the low three bits of its address, then moves the
    # half4 as one 8-byte access, or as four 2-byte ones.
    assert len(re.findall(r"and\.b64\s+%rd\d+, %rd\d+, 7;", ptx)) == 2, ptx
    assert len(re.findall(r"ld\.global\.v4\.b16", ptx)) == 1, ptx
    assert len(re.findall(r"st\.global\.v4\.b16", ptx)) == 1, ptx
    assert len(re.findall(r"ld\.global\.u16", ptx)) == 4, ptx
    # The same kernel on the CPU backend, at every alignment.
    for shift in range(4):
        got = shifted_vectors(SHIFTED_INPUT, shift, **SHIFTED_CALL)
        want = torch.zeros(36, dtype=torch.float16)
        want[shift : shift + 32] = torch.arange(1 + shift, 33 + shift, dtype=torch.float16)
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def _doubled_rows(x: torch.Tensor) -> torch.Tensor:
    return 2 * x


# Thread `id` doubles four halves of one row of x as a half4, read and written
# through row pointers as MLX's RMSNorm does. Whether the vectors are 16-byte
# aligned depends on the tensors' data pointers and row strides, which only a
# launch knows (cuda/target.h, LaunchForm::aligned_tensors).
row_vectors = TorchMetalKernel(
    "cuda_row_vectors",
    ["x"],
    ["out"],
    src="""
        const uint row = id / 8, i = 4 * (id % 8);
        const half4 v = *(device const half4*)(&x[0, row] + i);
        *(device half4*)(&out[0, row] + i) = v * half(2);
    """,
    torch_defn=_doubled_rows,
    metal_params=[GID],
)
ROW_CALL = {
    "threads_per_grid": (48, 1, 1),
    "threads_per_thread_group": (8, 1, 1),
    "result_shapes": [[6, 32]],
}


def _row_inputs(device: str = "cpu") -> dict[str, torch.Tensor]:
    """6 x 32 halves: contiguous; starting 8 bytes past a 16-byte boundary; rows 136 bytes apart.

    Made on ``device`` itself: copying a view to another device makes it contiguous.
    """
    values = torch.arange(6 * 32, dtype=torch.float16, device=device).reshape(6, 32)
    shifted = torch.zeros(4 + 6 * 32, dtype=torch.float16, device=device)[4:].view(6, 32)
    strided = torch.zeros(6, 68, dtype=torch.float16, device=device)[:, :32]
    shifted.copy_(values)
    strided.copy_(values)
    return {"contiguous": values, "data 8 bytes past 16": shifted, "row stride 136 bytes": strided}


def test_launches_of_aligned_tensors_have_a_form_without_address_tests() -> None:
    inputs = _row_inputs()
    spec = row_vectors.specialization((inputs["contiguous"],), [2], [torch.float16])
    handle = torch.ops.coreai_torch.register_kernel.default(*row_vectors.registration(spec))
    try:
        general = _entry_body(_C._cuda_ptx(handle, "sm_90"))
        aligned = _entry_body(_C._cuda_ptx(handle, "sm_90", aligned_tensors=True))
    finally:
        torch.ops.coreai_torch.release_kernel.default(handle)
    address_test = r"and\.b64\s+%rd\d+, %rd\d+, 7;"
    # Any launch: both accesses test their address (8-byte vectors at rows of
    # any even stride), then move the half4 whole or as four halves.
    assert len(re.findall(address_test, general)) == 2, general
    assert len(re.findall(r"st\.global\.u16", general)) == 4, general
    # Aligned tensors: the row pointer's alignment is proven, nothing is tested.
    assert not re.search(address_test, aligned), aligned
    assert len(re.findall(r"ld\.global\.v4\.b16", aligned)) == 1, aligned
    assert len(re.findall(r"st\.global\.v4\.b16", aligned)) == 1, aligned
    assert "st.global.u16" not in aligned, aligned
    # The kernel's results on the CPU backend, for the launches of each form.
    for name, x in inputs.items():
        got = row_vectors(x, **ROW_CALL)
        torch.testing.assert_close(got, 2 * inputs["contiguous"], rtol=0, atol=0, msg=name)


@requires_gpu
def test_the_launcher_picks_the_aligned_form_only_for_aligned_tensors() -> None:
    loaded = torch.ops.coreai_torch.cuda_loaded_modules
    before = loaded()
    # The aligned form for the contiguous rows, then one general form for the others.
    for (name, x), forms in zip(_row_inputs("cuda").items(), (1, 2, 2)):
        assert (x.data_ptr() % 16 == 0 and x.stride(0) % 8 == 0) == (name == "contiguous")
        got = row_vectors(x, **ROW_CALL)
        torch.testing.assert_close(got.cpu(), 2 * x.cpu(), rtol=0, atol=0, msg=name)
        assert loaded() - before == forms, name


def _code_generator(ir: str) -> subprocess.CompletedProcess:
    """clang's code generator alone on ``ir``, as the CUDA backend runs it: PTX on stdout."""
    return subprocess.run(
        [
            _C._cuda_compile_command("sm_90")[0],
            *("-x", "ir", "--target=nvptx64-nvidia-cuda", "-march=sm_90", "-S", "-O3"),
            *("-Xclang", "-disable-llvm-optzns", "-o", "-", "-"),
        ],
        input=ir,
        capture_output=True,
        text=True,
    )


# Optimized IR as clang writes it for NVPTX: an entry block with an alloca
# (left whole), accesses in a block whose successor has a phi naming it, a
# volatile load (left alone), a store of a constant vector and an integer
# load of element alignment (tested).
_UNDERALIGNED_IR = """\
target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

define void @copies(ptr addrspace(1) %0, ptr addrspace(1) %1, i32 %2) {
  %4 = alloca [4 x float], align 4
  %5 = load <4 x half>, ptr addrspace(1) %0, align 2
  store <4 x half> %5, ptr addrspace(1) %1, align 2
  %6 = icmp eq i32 %2, 0
  br i1 %6, label %7, label %14

7:
  %8 = getelementptr inbounds half, ptr addrspace(1) %0, i64 4
  %9 = load <4 x half>, ptr addrspace(1) %8, align 2, !tbaa !0
  %10 = getelementptr inbounds half, ptr addrspace(1) %1, i64 4
  store <4 x half> %9, ptr addrspace(1) %10, align 2, !tbaa !0
  %11 = load volatile <4 x half>, ptr addrspace(1) %8, align 2
  %12 = getelementptr inbounds half, ptr addrspace(1) %0, i64 16
  %13 = load i32, ptr addrspace(1) %12, align 2
  br label %14

14:
  %15 = phi i32 [ 0, %3 ], [ %13, %7 ]
  store <2 x i32> <i32 1, i32 2>, ptr addrspace(1) %1, align 4
  store i32 %15, ptr addrspace(1) %1, align 4
  ret void
}

!0 = !{!1, !1, i64 0}
!1 = !{!"half", !2, i64 0}
!2 = !{!"omnipotent char", !3, i64 0}
!3 = !{!"Simple C++ TBAA"}
"""


@pytest.mark.skipif(not ptx_check.ENABLED, reason="needs libdevice and ptxas")
def test_the_alignment_rewrite_keeps_the_ir_valid() -> None:
    ir, tested, proven = _C._cuda_version_vectors(_UNDERALIGNED_IR)
    assert (tested, proven) == (4, 0), ir
    # The entry block holds an alloca: its accesses stay as they were.
    assert "%5 = load <4 x half>, ptr addrspace(1) %0, align 2\n" in ir
    assert "store <4 x half> %5, ptr addrspace(1) %1, align 2\n" in ir
    assert "load volatile <4 x half>, ptr addrspace(1) %8, align 2\n" in ir
    # Each tested access: the full alignment on one side, as it was on the other.
    assert "load <4 x half>, ptr addrspace(1) %8, align 8, !tbaa !0" in ir
    assert "store <4 x half> %9, ptr addrspace(1) %10, align 8, !tbaa !0" in ir
    assert "load i32, ptr addrspace(1) %12, align 4\n" in ir
    assert "store <2 x i32> <i32 1, i32 2>, ptr addrspace(1) %1, align 8\n" in ir
    assert ir.count("ptr addrspace(1) %8, align 2, !tbaa !0") == 1
    # Block %7's terminator moved to the join of its last test, which the phi names.
    assert re.search(r"%15 = phi i32 \[ 0, %3 \], \[ %13, %coreai\.vector\d+\.join \]", ir), ir
    # clang's IR verifier accepts it, and the tested accesses become whole ones.
    compiled = _code_generator(ir)
    assert compiled.returncode == 0, compiled.stderr
    ptx = compiled.stdout
    assert len(re.findall(r"ld\.global\.v4\.b16", ptx)) == 1, ptx
    assert len(re.findall(r"st\.global\.v4\.b16", ptx)) == 1, ptx
    assert len(re.findall(r"st\.global\.v2\.u32", ptx)) == 1, ptx
    assert len(re.findall(r"ld\.global\.u32", ptx)) == 1, ptx


# Accesses whose alignment the IR proves, or does not: a 16-byte aligned
# threadgroup array read at even halves (a SIMD-group matrix load's pair, the
# base a constant offset into it) and at a loop counter stepping by four
# halves (a half4); against them an odd offset, an array of 2-byte alignment,
# a device pointer, a counter stepping by one, and a counter doubling from
# one, whose doubled value is even but no more.
_ALIGNED_IR = """\
target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

@tile = internal addrspace(3) global [256 x half] undef, align 16
@loose = internal addrspace(3) global [256 x half] undef, align 2

define void @reads(ptr addrspace(1) %out, ptr %device, i32 %lane, i32 %n) {
  %tile = getelementptr i8, ptr addrspacecast (ptr addrspace(3) @tile to ptr), i64 16
  %column = shl nuw nsw i32 %lane, 1
  %pair = and i32 %column, 6
  %row = mul nuw nsw i32 %lane, 40
  %at = or disjoint i32 %row, %pair
  %even = zext nneg i32 %at to i64
  %p1 = getelementptr half, ptr %tile, i64 %even
  %v1 = load i32, ptr %p1, align 2
  %odd = or disjoint i64 %even, 1
  %p2 = getelementptr half, ptr %tile, i64 %odd
  %v2 = load i32, ptr %p2, align 2
  %p3 = getelementptr half, ptr addrspacecast (ptr addrspace(3) @loose to ptr), i64 %even
  %v3 = load i32, ptr %p3, align 2
  %p4 = getelementptr half, ptr %device, i64 %even
  %v4 = load i32, ptr %p4, align 2
  br label %loop

loop:
  %i = phi i32 [ 0, %0 ], [ %i.next, %loop ]
  %j = phi i32 [ 0, %0 ], [ %j.next, %loop ]
  %k = phi i32 [ 1, %0 ], [ %k.next, %loop ]
  %i.wide = zext i32 %i to i64
  %p5 = getelementptr half, ptr addrspace(3) @tile, i64 %i.wide
  %v5 = load <4 x half>, ptr addrspace(3) %p5, align 2
  %j.wide = zext i32 %j to i64
  %p6 = getelementptr half, ptr addrspace(3) @tile, i64 %j.wide
  %v6 = load <4 x half>, ptr addrspace(3) %p6, align 2
  %k.next = shl i32 %k, 1
  %k.wide = zext i32 %k.next to i64
  %p7 = getelementptr i8, ptr addrspace(3) @tile, i64 %k.wide
  %v7 = load i32, ptr addrspace(3) %p7, align 2
  %i.next = add i32 %i, 4
  %j.next = add i32 %j, 1
  %more = icmp ult i32 %i.next, %n
  br i1 %more, label %loop, label %done

done:
  %s1 = add i32 %v1, %v2
  %s2 = add i32 %s1, %v3
  %s3 = add i32 %s2, %v4
  %s4 = add i32 %s3, %v7
  store i32 %s4, ptr addrspace(1) %out, align 4
  %h = fadd <4 x half> %v5, %v6
  store <4 x half> %h, ptr addrspace(1) %out, align 8
  ret void
}
"""


@pytest.mark.skipif(not ptx_check.ENABLED, reason="needs libdevice and ptxas")
def test_accesses_the_ir_proves_aligned_are_not_tested() -> None:
    ir, tested, proven = _C._cuda_version_vectors(_ALIGNED_IR)
    assert (tested, proven) == (5, 2), ir
    # Proven: the matrix pair at even halves, the half4 at steps of four halves.
    assert "%v1 = load i32, ptr %p1, align 4\n" in ir
    assert "%v5 = load <4 x half>, ptr addrspace(3) %p5, align 8\n" in ir
    # Tested: each of the others branches on its address.
    for pointer in ("%p2", "%p3", "%p4", "%p6", "%p7"):
        assert re.search(rf"ptrtoint ptr( addrspace\(3\))? {pointer} to i64", ir), pointer
    compiled = _code_generator(ir)
    assert compiled.returncode == 0, compiled.stderr


def _product_line(result: str, a: str, b: str, c0: str, c1: str) -> str:
    """An 8x8 product of the headers as clang prints it: rows 8..15 zero."""
    return (
        f"  {result} = tail call {{ float, float, float, float }} {_MMA_ASM}(i32 {a}, i32 0, "
        f"i32 {b}, float {c0}, float {c1}, float 0.000000e+00, float 0.000000e+00)\n"
    )


_MMA_ASM = (
    'asm "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {$0, $1, $2, $3}, {$4, $5}, {$6}, '
    '{$7, $8, $9, $10};", "=f,=f,=f,=f,r,r,r,f,f,f,f"'
)
_RESULT = "{ float, float, float, float }"
_ONE, _TWO = "1.000000e+00", "2.000000e+00"

# Products as a tiled GEMM's unrolled loop has them, and the cases that must
# stay apart: %p1/%p2 share B (paired); %p4 shares B with %p3 and reads a lane
# extracted after it (paired, the extract repeated before %p3); %p6 reads %p5's
# result; %p7's unused rows are read; %p9 and %p10 are in different blocks.
_PRODUCTS_IR = (
    'target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"\n'
    'target triple = "nvptx64-nvidia-cuda"\n\n'
    "define void @products(ptr addrspace(1) %out, i32 %a0, i32 %a1, i32 %b0, i32 %b1, "
    "i32 %b2, i32 %b3, <2 x float> %acc, i1 %flag) {\n"
    + _product_line("%p1", "%a0", "%b0", _ONE, _TWO)
    + f"  %p1.0 = extractvalue {_RESULT} %p1, 0\n"
    + _product_line("%p2", "%a1", "%b0", _TWO, _ONE)
    + f"  %p2.1 = extractvalue {_RESULT} %p2, 1, !srcloc !0\n"
    + _product_line("%p3", "%a0", "%b1", "%p1.0", "%p2.1")
    + f"  %p3.0 = extractvalue {_RESULT} %p3, 0\n"
    + "  %x = extractelement <2 x float> %acc, i64 0\n"
    + _product_line("%p4", "%a1", "%b1", "%x", "%x")
    + f"  %p4.1 = extractvalue {_RESULT} %p4, 1\n"
    + _product_line("%p5", "%a0", "%b2", _ONE, _ONE)
    + f"  %p5.0 = extractvalue {_RESULT} %p5, 0\n"
    + _product_line("%p6", "%a1", "%b2", "%p5.0", _ONE)
    + f"  %p6.0 = extractvalue {_RESULT} %p6, 0\n"
    + _product_line("%p7", "%a0", "%b3", _ONE, _ONE)
    + f"  %p7.2 = extractvalue {_RESULT} %p7, 2\n"
    + _product_line("%p8", "%a1", "%b3", _ONE, _ONE)
    + f"  %p8.0 = extractvalue {_RESULT} %p8, 0\n"
    + _product_line("%p9", "%a0", "%b0", _ONE, _ONE)
    + f"  %p9.0 = extractvalue {_RESULT} %p9, 0\n"
    + "  br i1 %flag, label %next, label %done\n\n"
    + "next:\n"
    + _product_line("%p10", "%a1", "%b0", _ONE, _ONE)
    + f"  %p10.0 = extractvalue {_RESULT} %p10, 0\n"
    + "  br label %done\n\n"
    + "done:\n"
    + "  %last = phi float [ %p9.0, %0 ], [ %p10.0, %next ]\n"
    + "  %s1 = fadd float %p3.0, %p4.1\n"
    + "  %s2 = fadd float %s1, %p6.0\n"
    + "  %s3 = fadd float %s2, %p7.2\n"
    + "  %s4 = fadd float %s3, %p8.0\n"
    + "  %s5 = fadd float %s4, %last\n"
    + "  store float %s5, ptr addrspace(1) %out, align 4\n"
    + "  ret void\n"
    + "}\n\n"
    + "!0 = !{i64 1}\n"  # metadata on an extract (clang adds !dbg) does not stop a pair
)


@pytest.mark.skipif(not ptx_check.ENABLED, reason="needs libdevice and ptxas")
def test_products_sharing_b_are_paired_on_one_instruction() -> None:
    ir, pairs = _C._cuda_pair_products(_PRODUCTS_IR)
    assert pairs == 2, ir
    # The first of each pair computes both: the second's A in rows 8..15, its C too.
    assert (
        f"%p1 = tail call {_RESULT} {_MMA_ASM}(i32 %a0, i32 %a1, i32 %b0, float {_ONE}, "
        f"float {_TWO}, float {_TWO}, float {_ONE})\n" in ir
    ), ir
    assert f"%coreai.pair0.d2 = extractvalue {_RESULT} %p1, 2\n" in ir
    assert f"%p2 = insertvalue {_RESULT} %coreai.pair0.low, float %coreai.pair0.d3, 1\n" in ir
    # %p4's lane, extracted after %p3, is extracted again before it.
    copy = "%coreai.pair1.copy0 = extractelement <2 x float> %acc, i64 0\n"
    assert copy in ir and ir.index(copy) < ir.index("%p3 = tail call")
    assert "float %coreai.pair1.copy0, float %coreai.pair1.copy0)" in ir
    # The others are left as they were.
    for unpaired in ("%p5", "%p6", "%p7", "%p8", "%p9", "%p10"):
        assert f"{unpaired} = tail call {_RESULT} {_MMA_ASM}(i32 %a" in ir, unpaired
        assert ir.count(f"{unpaired} = ") == 1
    assert ir.count("i32 0, i32 %b") == 6
    # clang's IR verifier accepts it: eight mma instructions where ten were.
    compiled = _code_generator(ir)
    assert compiled.returncode == 0, compiled.stderr
    assert compiled.stdout.count("mma.sync.aligned.m16n8k8") == 8, compiled.stdout


# A kernel entry's copies from a buffer to a threadgroup array, as clang
# writes them, and the cases that must stay synchronous: %v1 is copied
# (its source tested at run time); %v2 is also added up; %v3 is read from
# the metadata block (parameter space); %v4 is stored to the buffer; %v5 has
# a store between its load and its store; %v6 is copied, and the thread
# reads the tile right after (it waits first).
_TILE = "addrspacecast (ptr addrspace(3) @tile to ptr)"
_COPIES_IR = f"""\
target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

@tile = internal addrspace(3) global [256 x half] undef, align 16

define void @coreai_cuda_kernel(ptr noundef %x, ptr noundef %out, \
ptr noundef readonly byval([4 x i32]) align 4 %meta, i64 %i, i1 %again) {{
  %s1 = getelementptr inbounds half, ptr %x, i64 %i
  %d1 = getelementptr inbounds half, ptr {_TILE}, i64 0
  %v1 = load <4 x i32>, ptr %s1, align 4
  %o1 = add i64 %i, 8
  store <4 x i32> %v1, ptr %d1, align 16
  %s2 = getelementptr inbounds half, ptr %x, i64 %o1
  %v2 = load <4 x i32>, ptr %s2, align 4
  %d2 = getelementptr inbounds half, ptr {_TILE}, i64 8
  store <4 x i32> %v2, ptr %d2, align 16
  %e2 = extractelement <4 x i32> %v2, i64 0
  %v3 = load <4 x i32>, ptr %meta, align 4
  %d3 = getelementptr inbounds half, ptr {_TILE}, i64 16
  store <4 x i32> %v3, ptr %d3, align 16
  %v4 = load <4 x i32>, ptr %s2, align 4
  store <4 x i32> %v4, ptr %out, align 4
  %v5 = load <4 x i32>, ptr %s2, align 4
  store i32 %e2, ptr %out, align 4
  %d5 = getelementptr inbounds half, ptr {_TILE}, i64 24
  store <4 x i32> %v5, ptr %d5, align 16
  br label %loop

loop:
  %k = phi i64 [ 0, %0 ], [ %next, %loop ]
  %s6 = getelementptr inbounds half, ptr %x, i64 %k
  %v6 = load <4 x i32>, ptr %s6, align 4
  %d6 = getelementptr inbounds half, ptr {_TILE}, i64 32
  store <4 x i32> %v6, ptr %d6, align 16
  %next = add i64 %k, 8
  br i1 %again, label %loop, label %done

done:
  %r6 = load i32, ptr {_TILE}, align 16
  store i32 %r6, ptr %out, align 4
  tail call void @llvm.nvvm.barrier0()
  ret void
}}

declare void @llvm.nvvm.barrier0()
"""


@pytest.mark.skipif(not ptx_check.ENABLED, reason="needs libdevice and ptxas")
def test_copies_to_threadgroup_arrays_are_asynchronous() -> None:
    ir, copies, tested = _C._cuda_async_copies(_COPIES_IR)
    assert (copies, tested) == (2, 5), ir  # tested: %v2..%v5's loads, %v4's store
    copy = "call void @llvm.nvvm.cp.async.cg.shared.global.16(ptr addrspace(3) "
    assert ir.count(copy) == 2, ir
    # %v1: its source tested, the copy on one side, the load and store as
    # they were on the other; the block goes on after both.
    assert "%coreai.copy0.low = and i64 %coreai.copy0.address, 15\n" in ir
    assert (
        "  %coreai.copy0.global = addrspacecast ptr %s1 to ptr addrspace(1)\n"
        f"  %coreai.copy0.shared = addrspacecast ptr %d1 to ptr addrspace(3)\n"
        f"  {copy}%coreai.copy0.shared, ptr addrspace(1) %coreai.copy0.global)\n" in ir
    ), ir
    assert "  %coreai.copy0.value = load <4 x i32>, ptr %s1, align 4\n" in ir
    assert "  store <4 x i32> %coreai.copy0.value, ptr %d1, align 16\n" in ir
    assert "%v1 = load" not in ir
    # The others stay as they were (%v2..%v5 tested as under-aligned loads).
    for kept in ("%v2", "%v3", "%v4", "%v5"):
        assert f"store <4 x i32> {kept}," in ir, kept
    assert "%coreai.copy1.value" in ir and "%v6 = load" not in ir
    # The thread waits for its copies before its next memory access (the
    # load of %v2's tested path, the tile read after the loop), not within
    # the loop, and not again before the barrier.
    wait = "  call void @llvm.nvvm.cp.async.wait.all()\n"
    body = ir[ir.index("define void @coreai_cuda_kernel") :]
    assert body.count(wait) == 4, body  # both of %v2's paths, copy1.sync, the tile read
    assert body.index(wait) < body.index("%coreai.vector0.whole.value = load")
    assert f"{wait}  %r6 = load i32" in body
    assert f"{wait}  %coreai.copy1.value = load" in body
    compiled = _code_generator(ir)
    assert compiled.returncode == 0, compiled.stderr
    assert compiled.stdout.count("cp.async.cg.shared.global") == 2, compiled.stdout
    # An entry block with allocas is not split: only the loop's copy is made.
    with_alloca = _COPIES_IR.replace("  %s1 =", "  %slot = alloca i32, align 4\n  %s1 =", 1)
    ir, copies, _ = _C._cuda_async_copies(with_alloca)
    assert copies == 1 and "%coreai.copy0.global = addrspacecast ptr %s6" in ir, ir
    assert _code_generator(ir).returncode == 0


def _k8(result: str, a: tuple[str, str], b: str, c: tuple[str, str, str, str]) -> str:
    """An m16n8k8 product as clang prints it, with every operand given."""
    return (
        f"  {result} = tail call {_RESULT} {_MMA_ASM}(i32 {a[0]}, i32 {a[1]}, i32 {b}, "
        f"float {c[0]}, float {c[1]}, float {c[2]}, float {c[3]})\n"
    )


def _elements(of: str, names: str) -> str:
    """The four elements of the product ``of`` extracted as %<names>0..3."""
    return "".join(f"  %{names}{k} = extractvalue {_RESULT} {of}, {k}\n" for k in range(4))


_ZERO = "0.000000e+00"
_ONES = (_ONE, _ONE, _ONE, _ONE)
# Products in a row on one accumulator, as a GEMM's unrolled K loop has them
# after the pairing, and the cases that must stay apart. %q2 reads %q1's D
# through the pairing's extracts and inserts, and %q1's D also feeds an
# unused shuffle (fused); %q3 reads %q2's, which is fused already; the lone
# products %r1, %r2 have zero rows 8..15 (fused); %s1's D is also added up
# elsewhere; %u2 reads %u1's elements in another order; %t2 is in the next
# block.
_CHAINED_IR = (
    'target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"\n'
    'target triple = "nvptx64-nvidia-cuda"\n\n'
    "define void @chains(ptr addrspace(1) %out, i32 %a0, i32 %a1, i32 %a2, i32 %a3, i32 %b0, "
    "i32 %b1, i1 %flag) {\n"
    + _k8("%q1", ("%a0", "%a1"), "%b0", _ONES)
    + f"  %q1.0 = extractvalue {_RESULT} %q1, 0\n"
    + f"  %q1.1 = extractvalue {_RESULT} %q1, 1\n"
    + f"  %q1.2 = extractvalue {_RESULT} %q1, 2\n"
    + f"  %q1.3 = extractvalue {_RESULT} %q1, 3\n"
    + f"  %q1.low = insertvalue {_RESULT} poison, float %q1.2, 0\n"
    + f"  %q1.high = insertvalue {_RESULT} %q1.low, float %q1.3, 1\n"
    + f"  %q1.h0 = extractvalue {_RESULT} %q1.high, 0, !srcloc !0\n"
    + f"  %q1.h1 = extractvalue {_RESULT} %q1.high, 1\n"
    + "  %q1.bits = bitcast float %q1.0 to i32\n"
    + '  %q1.unused = tail call i32 asm "shfl.sync.idx.b32 $0, $1, 0, 31, -1;", "=r,r"'
    "(i32 %q1.bits)\n"
    + _k8("%q2", ("%a2", "%a3"), "%b1", ("%q1.0", "%q1.1", "%q1.h0", "%q1.h1"))
    + _elements("%q2", "q2.")
    + _k8("%q3", ("%a0", "%a1"), "%b1", ("%q2.0", "%q2.1", "%q2.2", "%q2.3"))
    + _elements("%q3", "q3.")
    + _k8("%r1", ("%a0", "0"), "%b0", (_ONE, _TWO, _ZERO, _ZERO))
    + _elements("%r1", "r1.")
    + _k8("%r2", ("%a2", "0"), "%b1", ("%r1.0", "%r1.1", _ZERO, _ZERO))
    + _elements("%r2", "r2.")
    + _k8("%s1", ("%a0", "%a1"), "%b0", _ONES)
    + _elements("%s1", "s1.")
    + _k8("%s2", ("%a2", "%a3"), "%b1", ("%s1.0", "%s1.1", "%s1.2", "%s1.3"))
    + _elements("%s2", "s2.")
    + _k8("%u1", ("%a0", "%a1"), "%b0", _ONES)
    + _elements("%u1", "u1.")
    + _k8("%u2", ("%a2", "%a3"), "%b1", ("%u1.1", "%u1.0", "%u1.2", "%u1.3"))
    + _elements("%u2", "u2.")
    + _k8("%t1", ("%a0", "%a1"), "%b0", _ONES)
    + _elements("%t1", "t1.")
    + "  br label %next\n\n"
    + "next:\n"
    + _k8("%t2", ("%a2", "%a3"), "%b1", ("%t1.0", "%t1.1", "%t1.2", "%t1.3"))
    + _elements("%t2", "t2.")
    + "".join(
        f"  %sum{i} = fadd float {'%q3.0' if i == 0 else f'%sum{i - 1}'}, {v}\n"
        for i, v in enumerate(["%q3.3", "%r2.0", "%r2.3", "%s2.0", "%s1.0", "%u2.2", "%t2.1"])
    )
    + "  store float %sum6, ptr addrspace(1) %out, align 4\n"
    + "  ret void\n"
    + "}\n\n"
    + "!0 = !{i64 1}\n"
)


@pytest.mark.skipif(not ptx_check.ENABLED, reason="needs libdevice and ptxas")
def test_products_in_a_row_on_one_accumulator_are_fused() -> None:
    ir, fused = _C._cuda_fuse_chained_products(_CHAINED_IR)
    assert fused == 2, ir
    k16 = (
        _MMA_ASM.replace("m16n8k8", "m16n8k16")
        .replace(
            "{$4, $5}, {$6}, {$7, $8, $9, $10}", "{$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13}"
        )
        .replace("r,r,r,f,f,f,f", "r,r,r,r,r,r,f,f,f,f")
    )
    # At the second product's place: both A side by side, B one over the
    # other, the first product's C.
    assert (
        f"%q2 = tail call {_RESULT} {k16}(i32 %a0, i32 %a1, i32 %a2, i32 %a3, i32 %b0, i32 %b1, "
        f"float {_ONE}, float {_ONE}, float {_ONE}, float {_ONE})\n" in ir
    ), ir
    assert (
        f"%r2 = tail call {_RESULT} {k16}(i32 %a0, i32 0, i32 %a2, i32 0, i32 %b0, i32 %b1, "
        f"float {_ONE}, float {_TWO}, float {_ZERO}, float {_ZERO})\n" in ir
    ), ir
    for kept in ("%q1", "%q3", "%r1", "%s1", "%s2", "%u1", "%u2", "%t1", "%t2"):
        assert f"{kept} = tail call {_RESULT} {_MMA_ASM}(" in ir, kept
    # The first products of the fused pairs are left unused; the code
    # generator drops them: two m16n8k16, seven m16n8k8.
    compiled = _code_generator(ir)
    assert compiled.returncode == 0, compiled.stderr
    assert compiled.stdout.count("mma.sync.aligned.m16n8k16") == 2, compiled.stdout
    assert compiled.stdout.count("mma.sync.aligned.m16n8k8") == 7, compiled.stdout


@requires_gpu
@pytest.mark.parametrize("shift", range(4))
def test_vector_accesses_at_element_aligned_addresses_on_the_gpu(shift: int) -> None:
    got = shifted_vectors(SHIFTED_INPUT.cuda(), shift, **SHIFTED_CALL)
    want = torch.zeros(36, dtype=torch.float16)
    want[shift : shift + 32] = torch.arange(1 + shift, 33 + shift, dtype=torch.float16)
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


def test_compile_errors_point_at_the_users_lines() -> None:
    broken = TorchMetalKernel(
        "cuda_broken",
        ["x"],
        ["out"],
        src="float v = x[id];\nout[id] = v + undeclared_name;",
        torch_defn=_same,
        metal_params=[GID],
    )
    handle = _register(broken, torch.zeros(4))
    with pytest.raises(RuntimeError, match="MetalCompileError") as info:
        _C._cuda_ptx(handle, "sm_90")
    message = str(info.value)
    assert "does not compile for the CUDA backend" in message
    assert "src:2:" in message and "undeclared_name" in message


def test_the_gpu_refuses_what_metal_refuses() -> None:
    # Metal fidelity holds on the CUDA backend too: a source construct found
    # before compiling (double) and one the compiler finds (recursion).
    with_double = TorchMetalKernel(
        "cuda_with_double",
        ["x"],
        ["out"],
        src="double wide = x[id];\nout[id] = float(wide);",
        torch_defn=_same,
        metal_params=[GID],
    )
    with pytest.raises(RuntimeError, match="double") as info:
        _C._cuda_ptx(_register(with_double, torch.zeros(4)), "sm_90")
    assert "src:1:" in str(info.value)
    recursive = TorchMetalKernel(
        "cuda_recursive",
        ["x"],
        ["out"],
        src="out[id] = factorial(uint(x[id]));",
        helper_src="uint factorial(uint n) { return n < 2 ? 1 : n * factorial(n - 1); }",
        torch_defn=_same,
        metal_params=[GID],
    )
    with pytest.raises(RuntimeError, match="recurs") as info:
        _C._cuda_ptx(_register(recursive, torch.zeros(4)), "sm_90")
    assert "helper_src:1:" in str(info.value)


def test_a_missing_libdevice_is_named_with_what_to_install(tmp_path) -> None:
    code = textwrap.dedent(
        """
        import torch
        from coreai_torch import TorchMetalKernel, MetalParameter, _C
        def same(x: torch.Tensor) -> torch.Tensor:
            return x.clone()
        k = TorchMetalKernel("cuda_no_libdevice", ["x"], ["out"], src="out[id] = x[id];",
                             torch_defn=same,
                             metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")])
        x = torch.zeros(4)
        spec = k.specialization([x], [1], [torch.float32])
        h = torch.ops.coreai_torch.register_kernel.default(*k.registration(spec))
        _C._cuda_ptx(h, "sm_90")
        """
    )
    env = {**os.environ, "COREAI_TORCH_LIBDEVICE": str(tmp_path / "nowhere.bc")}
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert p.returncode != 0
    assert "libdevice.10.bc" in p.stderr and "nowhere.bc" in p.stderr
    assert "pip install nvidia-nvvm" in p.stderr


def test_ptx_is_cached_on_disk_across_processes(tmp_path) -> None:
    code = textwrap.dedent(
        """
        import torch
        from coreai_torch import TorchMetalKernel, MetalParameter, _C
        def double(x: torch.Tensor) -> torch.Tensor:
            return 2 * x
        k = TorchMetalKernel("cuda_cached", ["x"], ["out"], src="out[id] = 2 * x[id];",
                             torch_defn=double,
                             metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")])
        x = torch.zeros(4)
        spec = k.specialization([x], [1], [torch.float32])
        h = torch.ops.coreai_torch.register_kernel.default(*k.registration(spec))
        _C._cuda_ptx(h, "sm_90")
        _C._cuda_ptx(h, "sm_90")
        ops = torch.ops.coreai_torch
        print(ops.cuda_compile_count(), ops.cuda_disk_cache_hits())
        """
    )
    env = {**os.environ, "COREAI_TORCH_CACHE_DIR": str(tmp_path)}
    runs = [
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        for _ in range(2)
    ]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr + runs[1].stderr
    # First process: one compile, then the in-process... second call reads the disk.
    assert runs[0].stdout.split() == ["1", "1"]
    assert runs[1].stdout.split() == ["0", "2"]
    cached = sorted(p.suffix for p in tmp_path.iterdir() if p.stem and not p.name.startswith("."))
    assert ".ptx" in cached and ".pch" in cached
    assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in tmp_path.glob("*.ptx"))


# Compiles kernel `tag` (one kernel per tag) to PTX and prints clang runs and disk hits.
PTX_OF_TAGS = """
import torch
from coreai_torch import _C
from support.cpu_launch import Tensor, registration
for tag in {tags!r}:
    args = registration("cached_ptx", [Tensor("x")], [Tensor("out")],
                        f"// {{tag}}\\nout[id] = x[id] * 2.0f;",
                        [("id", "uint", "thread_position_in_grid")])
    handle = torch.ops.coreai_torch.register_kernel.default(*args)
    assert ".entry coreai_cuda_kernel" in _C._cuda_ptx(handle, "sm_90")
ops = torch.ops.coreai_torch
print(ops.cuda_compile_count(), ops.cuda_disk_cache_hits())
"""


def _ptx_of(cache, *tags: str, fresh: bool = False, **env: str) -> tuple[int, int]:
    """Compiles and loads counts of a child compiling kernels ``tags``; ``fresh``: a new
    interpreter that exits as a program does (C++ destructors run), not a fork."""
    out = run(PTX_OF_TAGS.format(tags=list(tags)), child_env(cache, **env), fresh=fresh)
    compiles, hits = out.split()
    return int(compiles), int(hits)


def _ptx_by_tag(cache) -> dict:
    return {
        p.with_suffix(".cu").read_text().split('#line 1 "src"\n', 1)[1].split("\n", 1)[0][3:]: p
        for p in cache.glob("*.ptx")
    }


def test_the_first_kernel_compiles_while_the_prelude_is_precompiled(tmp_path) -> None:
    # With no precompiled prelude yet, the first kernel parses the headers from
    # source while a second clang precompiles them (the prelude build is not a
    # kernel compile); the kernels after it read the precompiled prelude.
    fresh, warm = tmp_path / "fresh", tmp_path / "warm"
    assert _ptx_of(fresh, "k1", fresh=True) == (1, 0)
    # The process waited for the build at exit: the file is published, and
    # no temporary is left behind.
    assert len(list(fresh.glob("*.pch"))) == 1
    assert not list((fresh / "coreai-tmp").iterdir())
    assert _ptx_of(warm, "k0", "k1") == (2, 0)
    # Both routes give the same kernel function; only the order of the helper
    # functions clang emits beside it (and so the numbers in labels) differs.
    assert _entry_function(_ptx_by_tag(fresh)["k1"]) == _entry_function(_ptx_by_tag(warm)["k1"])


def test_a_child_forked_during_a_prelude_build_exits_cleanly(tmp_path) -> None:
    # The parent's build thread does not exist in a forked child: the child
    # must neither wait for it at exit nor lose its own compiles.
    code = PTX_OF_TAGS.format(tags=["k1"]) + textwrap.dedent(
        """
        import os
        pid = os.fork()
        if pid == 0:
            args = registration("cached_ptx", [Tensor("x")], [Tensor("out")],
                                "// child\\nout[id] = x[id] * 3.0f;",
                                [("id", "uint", "thread_position_in_grid")])
            handle = torch.ops.coreai_torch.register_kernel.default(*args)
            assert ".entry coreai_cuda_kernel" in _C._cuda_ptx(handle, "sm_90")
            raise SystemExit(0)  # a normal exit: atexit handlers and C++ destructors run
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
        """
    )
    out = run(code, child_env(tmp_path / "cache"), timeout=120, fresh=True)
    assert out.split()[-2:] == ["child", "0"]


def _entry_function(ptx_path) -> str:
    return _entry_function_of_text(ptx_path.read_bytes())


def _entry_function_of_text(sealed: bytes) -> str:
    """The PTX of the kernel's entry function, with labels numbered apart from the functions."""
    text = sealed.decode("utf-8", "replace")
    body = text.split(".entry coreai_cuda_kernel", 1)[1].split("// -- End function", 1)[0]
    assert "ld.global" in body and "st.global" in body
    return re.sub(r"\$L__BB\d+_", "$L__BB_", body)


def test_damaged_cached_ptx_is_compiled_again(tmp_path) -> None:
    cache = tmp_path / "cache"
    assert _ptx_of(cache, "k1") == (1, 0)
    (ptx,) = cache.glob("*.ptx")
    sealed = ptx.read_bytes()
    assert b"coreai-kernel-v2" in sealed[-256:]  # sealed like a CPU library (jit/seal.h)
    ptx.write_bytes(sealed[: len(sealed) // 2])  # truncated
    assert _ptx_of(cache, "k1") == (1, 0)
    # Compiled again, now with the precompiled prelude the first compile left
    # (test_the_first_kernel_compiles_while_the_prelude_is_precompiled).
    assert b"coreai-kernel-v2" in ptx.read_bytes()[-256:]
    assert _entry_function(ptx) == _entry_function_of_text(sealed)
    assert _ptx_of(cache, "k1") == (0, 1)


def test_ptx_counts_against_the_cache_limit_least_recently_used_first(tmp_path) -> None:
    cache = tmp_path / "cache"
    assert _ptx_of(cache, "k1", "k2") == (2, 0)
    entries = _ptx_by_tag(cache)
    for age, tag in ((300, "k1"), (200, "k2")):
        stamp = time.time() - age
        os.utime(entries[tag], (stamp, stamp))
    total = sum(p.stat().st_size for p in cache.iterdir() if not p.name.startswith("."))
    one = entries["k1"].stat().st_size + entries["k1"].with_suffix(".cu").stat().st_size
    # Room for all but one entry once k3 is added: k1, the oldest, goes (with its
    # kept source); the precompiled headers this process used stay.
    limit = total + one // 2
    assert _ptx_of(cache, "k3", COREAI_TORCH_CACHE_MAX_BYTES=str(limit)) == (1, 0)
    assert sorted(_ptx_by_tag(cache)) == ["k2", "k3"]
    assert not entries["k1"].with_suffix(".cu").exists()
    assert list(cache.glob("*.pch"))


def _product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.float() @ b.float()


def _half_product(ab: str, cd: str) -> TorchMetalKernel:
    return TorchMetalKernel(
        f"cuda_mma_{ab}_{cd}",
        ["a", "b"],
        ["d"],
        src=f"""
            simdgroup_matrix<{ab}, 8, 8> ma, mb;
            simdgroup_matrix<{cd}, 8, 8> md = make_filled_simdgroup_matrix<{cd}, 8, 8>(0);
            simdgroup_load(ma, &a[0, 0]);
            simdgroup_load(mb, &b[0, 0]);
            simdgroup_multiply_accumulate(md, ma, mb, md);
            simdgroup_store(md, &d[0, 0]);
        """,
        torch_defn=_product,
        metal_params=[GID],
    )


@pytest.mark.parametrize(
    ("ab", "cd", "units"),
    [("half", "float", True), ("bfloat", "float", True), ("float", "float", False)],
)
def test_simdgroup_products_use_the_tensor_cores_for_half_and_bfloat(ab, cd, units) -> None:
    dtype = {"half": torch.float16, "bfloat": torch.bfloat16, "float": torch.float32}[ab]
    kernel = _half_product(ab, cd)
    x = torch.zeros(8, 8, dtype=dtype)
    spec = kernel.specialization([x, x], [2], [torch.float32])
    handle = torch.ops.coreai_torch.register_kernel.default(*kernel.registration(spec))
    ptx = _C._cuda_ptx(handle, "sm_90")
    torch.ops.coreai_torch.release_kernel.default(handle)
    assert ("mma.sync.aligned.m16n8k8.row.col.f32" in ptx) == units
    assert ("movmatrix.sync.aligned.m8n8.trans.b16" in ptx) == units
    assert "shfl.sync.idx.b32" in ptx  # the generic path, for partial SIMD-groups too


def _tile_product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.float() @ b.float()


# One SIMD-group computes a 32x32 block of C = A B as a 4x4 tile of float
# accumulators, K in steps of 8, the way tiled GEMMs in Metal do.
TILE_GEMM_SRC = """
        const uint K = A.get_extent(0);
        simdgroup_float8x8 acc[4][4];
        for (uint i = 0; i < 4; ++i)
            for (uint j = 0; j < 4; ++j)
                acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
        for (uint k = 0; k < K; k += 8) {
            simdgroup_half8x8 a[4], b[4];
            for (uint i = 0; i < 4; ++i) simdgroup_load(a[i], &A[0, 0], K, ulong2(k, 8 * i));
            for (uint j = 0; j < 4; ++j) simdgroup_load(b[j], &B[0, 0], 32, ulong2(8 * j, k));
            for (uint i = 0; i < 4; ++i)
                for (uint j = 0; j < 4; ++j)
                    simdgroup_multiply_accumulate(acc[i][j], a[i], b[j], acc[i][j]);
        }
        for (uint i = 0; i < 4; ++i)
            for (uint j = 0; j < 4; ++j)
                simdgroup_store(acc[i][j], &C[0, 0], 32, ulong2(8 * j, 8 * i));
    """

tile_gemm = TorchMetalKernel(
    "cuda_tile_gemm",
    ["A", "B"],
    ["C"],
    src=TILE_GEMM_SRC,
    torch_defn=_tile_product,
    metal_params=[GID],
)


# The same, K in steps of 16 made of two of 8: each two products in a row on
# one accumulator, which the GPU runs as one m16n8k16 (cuda/chained_products.h).
tile_gemm_two_steps = TorchMetalKernel(
    "cuda_tile_gemm_two_steps",
    ["A", "B"],
    ["C"],
    src=TILE_GEMM_SRC.replace(
        "for (uint k = 0; k < K; k += 8) {",
        "for (uint k16 = 0; k16 < K; k16 += 16)\n"
        "        for (uint k = k16, step = 0; step < 2; k += 8, ++step) {",
    ),
    torch_defn=_tile_product,
    metal_params=[GID],
)


def _entry_body(ptx: str) -> str:
    """The kernel function's PTX, without the functions it calls."""
    start = ptx.index(".entry coreai_cuda_kernel")
    after = re.search(r"^(\.visible |\.weak )?\.func", ptx[start:], re.MULTILINE)
    return ptx[start : start + after.start()] if after else ptx[start:]


def test_whole_simdgroups_keep_accumulators_in_the_matrix_units_layout() -> None:
    a = torch.zeros(32, 64, dtype=torch.float16)
    b = torch.zeros(64, 32, dtype=torch.float16)
    spec = tile_gemm.specialization([a, b], [2], [torch.float32])
    handle = torch.ops.coreai_torch.register_kernel.default(*tile_gemm.registration(spec))
    try:
        assert _C._cuda_uses_simdgroup_matrices(handle)
        whole = _entry_body(_C._cuda_ptx(handle, "sm_90", True))
        partial = _entry_body(_C._cuda_ptx(handle, "sm_90", False))
    finally:
        torch.ops.coreai_torch.release_kernel.default(handle)
    # The loops are unrolled and the 16 accumulators live in registers.
    assert ".local" not in whole and ".local" not in partial
    # Products that share a b run two to an instruction (cuda/paired_products.h).
    assert whole.count("mma.sync.aligned.m16n8k8") == 8
    # With whole SIMD-groups nothing is re-laid: each loaded b is transposed
    # once for its four products, and Apple's copies, unread, are gone.
    assert whole.count("movmatrix.sync.aligned.m8n8.trans.b16") == 4
    assert "shfl.sync" not in whole
    # With partial SIMD-groups every product re-lays its operands.
    assert partial.count("movmatrix.sync.aligned.m8n8.trans.b16") == 16
    assert partial.count("shfl.sync.idx.b32") >= 6 * 16


def test_two_products_in_a_row_run_as_one_m16n8k16() -> None:
    a = torch.zeros(32, 64, dtype=torch.float16)
    b = torch.zeros(64, 32, dtype=torch.float16)
    spec = tile_gemm_two_steps.specialization([a, b], [2], [torch.float32])
    registration = tile_gemm_two_steps.registration(spec)
    handle = torch.ops.coreai_torch.register_kernel.default(*registration)
    try:
        whole = _entry_body(_C._cuda_ptx(handle, "sm_90", True))
        partial = _entry_body(_C._cuda_ptx(handle, "sm_90", False))
    finally:
        torch.ops.coreai_torch.release_kernel.default(handle)
    # 32 products per step of 16: paired to 16, fused to 8.
    assert whole.count("mma.sync.aligned.m16n8k16") == 8
    assert "mma.sync.aligned.m16n8k8" not in whole
    # With partial SIMD-groups each product re-lays its result: none is fused.
    assert partial.count("mma.sync.aligned.m16n8k8") == 32
    assert "mma.sync.aligned.m16n8k16" not in partial


@pytest.mark.skipif(not ptx_check.ENABLED, reason="needs libdevice and ptxas")
def test_the_wide_gemm_fits_two_groups_per_sm(tmp_path) -> None:
    """The GEMM row's speed rests on this: 32 mma per tile step, at most 128 registers.

    Two groups of 256 threads share an SM only at 128 registers or fewer
    (65536 per SM); the benchmark's 0.16x cuBLAS needs both (docs/cuda.md,
    "Two products that share B, one instruction").
    """
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import bench_kernels

    a = torch.zeros(256, 256, dtype=torch.float16)
    kernel = bench_kernels.gemm_wide
    spec = kernel.specialization([a, a], [2], [torch.float16])
    handle = torch.ops.coreai_torch.register_kernel.default(*kernel.registration(spec))
    try:
        ptx = _C._cuda_ptx(handle, "sm_90", True)
    finally:
        torch.ops.coreai_torch.release_kernel.default(handle)
    body = _entry_body(ptx)
    # 128 products per tile of K (four steps of 8): paired (64), then each two
    # steps in a row fused (32).
    assert body.count("mma.sync.aligned.m16n8k16") == 32
    assert "mma.sync.aligned.m16n8k8" not in body
    # The tile copies are asynchronous, waited for at the barrier after them.
    assert body.count("cp.async.cg.shared.global") == 2
    assert re.search(r"cp\.async\.wait_all;\s+barrier\.sync\s+0;", body), body
    source = tmp_path / "gemm.ptx"
    source.write_text(ptx)
    report = subprocess.run(
        [find_ptxas(), "-arch=sm_90", "-v", str(source), "-o", str(tmp_path / "gemm.cubin")],
        capture_output=True,
        text=True,
    )
    assert report.returncode == 0, report.stderr
    registers = int(re.search(r"Used (\d+) registers", report.stderr).group(1))
    assert registers <= 128, report.stderr
    assert "0 bytes spill stores" in report.stderr, report.stderr


def test_only_kernels_with_simdgroup_matrices_have_two_forms() -> None:
    handle = _register(tiled_sum, torch.zeros(64))
    try:
        assert not _C._cuda_uses_simdgroup_matrices(handle)
    finally:
        torch.ops.coreai_torch.release_kernel.default(handle)


# ---- running on the GPU --------------------------------------------------------------

ATTRIBUTES = [
    ("gid", "uint3", "thread_position_in_grid"),
    ("lid", "uint3", "thread_position_in_threadgroup"),
    ("tg", "uint3", "threadgroup_position_in_grid"),
    ("tptg", "uint3", "threads_per_threadgroup"),
    ("index", "uint", "thread_index_in_threadgroup"),
    ("lane", "uint", "thread_index_in_simdgroup"),
    ("simd", "uint", "simdgroup_index_in_threadgroup"),
    ("simds", "uint", "simdgroups_per_threadgroup"),
]

# Each thread writes its attributes and what its SIMD-group sees: the active
# lanes and the sum of their indices (a partial SIMD-group at the edge).
attributes = TorchMetalKernel(
    "cuda_attributes",
    ["x"],
    ["out"],
    src="""
        const uint t = gid.x + gid.y * x.get_extent(0) + gid.z * x.get_extent(0) * x.get_extent(1);
        const uint values[] = {gid.x, gid.y, gid.z, lid.x, lid.y, lid.z, tg.x, tg.y, tg.z,
                               tptg.x, tptg.y, tptg.z, index, lane, simd, simds};
        for (uint c = 0; c < 16; ++c) out[c, t] = int(values[c]);
        out[16, t] = int(uint64_t(simd_active_threads_mask()));
        out[17, t] = int(simd_sum(index));
        out[18, t] = int(simd_prefix_exclusive_sum(lane));
        out[19, t] = int(quad_sum(index));
    """,
    torch_defn=_attribute_rows,
    metal_params=[MetalParameter(*a) for a in ATTRIBUTES],
)


@requires_gpu
@pytest.mark.parametrize(
    ("grid", "group"),
    [((37, 5, 3), (8, 4, 2)), ((100, 1, 1), (64, 1, 1)), ((7, 9, 1), (3, 5, 1))],
    ids=str,
)
def test_edge_threadgroups_are_smaller_and_simd_groups_packed(grid, group) -> None:
    x = torch.zeros(grid[2], grid[1], grid[0])
    call = {"threads_per_grid": grid, "threads_per_thread_group": group}
    shapes = [[x.numel(), 20]]
    cpu = attributes(x, **call, result_shapes=shapes)
    gpu = attributes(x.cuda(), **call, result_shapes=shapes).cpu()
    assert torch.equal(gpu, cpu)
    # Hand-computed for one thread of the last (edge) group: its group is
    # smaller, its index counts over the actual size, its SIMD-group is partial.
    last = -1
    size = [min(group[d], grid[d] - (grid[d] - 1) // group[d] * group[d]) for d in range(3)]
    count = size[0] * size[1] * size[2]
    assert gpu[last, 9:12].tolist() == size
    assert gpu[last, 12].item() == count - 1
    assert gpu[last, 15].item() == -(-count // 32)
    lanes_in_last_simd = count - 32 * ((count - 1) // 32)
    assert gpu[last, 16].item() & 0xFFFFFFFF == (1 << lanes_in_last_simd) - 1


barrier_reduce = TorchMetalKernel(
    "cuda_barrier_reduce",
    ["x"],
    ["out"],
    src="""
        // A tree reduction over threadgroup memory: every barrier must hold in
        // the edge group too, whose missing threads never run.
        threadgroup float partial[256];
        partial[lid] = x[gid];
        for (uint stride = 128; stride > 0; stride /= 2) {
            threadgroup_barrier(mem_flags::mem_threadgroup);
            if (lid < stride && lid + stride < n) partial[lid] += partial[lid + stride];
        }
        if (lid == 0) out[group] = partial[0];
    """,
    torch_defn=_group_sums,
    metal_params=[
        MetalParameter("gid", "uint", "thread_position_in_grid"),
        MetalParameter("lid", "uint", "thread_index_in_threadgroup"),
        MetalParameter("n", "uint", "threads_per_threadgroup"),
        MetalParameter("group", "uint", "threadgroup_position_in_grid"),
    ],
)


@requires_gpu
def test_barriers_hold_in_edge_groups() -> None:
    x = torch.randint(-8, 8, (1000,)).float()  # small integers: every order sums exactly
    call = {"threads_per_grid": (1000, 1, 1), "threads_per_thread_group": (256, 1, 1)}
    gpu = barrier_reduce(x.cuda(), **call, result_shapes=[[4]]).cpu()
    want = torch.stack([c.sum() for c in x.split(256)])
    assert torch.equal(gpu, want)
    assert torch.equal(gpu, barrier_reduce(x, **call, result_shapes=[[4]]))


divergent = TorchMetalKernel(
    "cuda_divergent_simd",
    ["x"],
    ["out"],
    src="""
        // Only the even lanes call simd_sum: Metal sums over the active lanes.
        float v = x[id];
        out[id] = -1.0f;
        if (id % 2 == 0) out[id] = simd_sum(v);
    """,
    torch_defn=_same,
    metal_params=[GID],
)


@requires_gpu
def test_simd_functions_in_divergent_code_use_the_active_lanes() -> None:
    x = torch.arange(64.0)
    out = divergent(
        x.cuda(),
        threads_per_grid=(64, 1, 1),
        threads_per_thread_group=(64, 1, 1),
        result_shapes=[[64]],
    ).cpu()
    even_sums = [x[w * 32 : (w + 1) * 32 : 2].sum().item() for w in range(2)]
    want = [even_sums[i // 32] if i % 2 == 0 else -1.0 for i in range(64)]
    assert out.tolist() == want


positions = TorchMetalKernel(
    "cuda_positions",
    ["x"],
    ["out"],
    src="if (gid.y < x.get_extent(0)) out[gid.y] = int(gid.y) + 1;",
    torch_defn=_positions,
    metal_params=[MetalParameter("gid", "uint2", "thread_position_in_grid")],
)


@requires_gpu
def test_more_threadgroups_than_a_cuda_grid_dimension_holds() -> None:
    # 100000 threadgroups along y: CUDA's grid y is limited to 65535.
    x = torch.zeros(100000, dtype=torch.int32)
    out = positions(
        x.cuda(),
        threads_per_grid=(1, 100000, 1),
        threads_per_thread_group=(1, 1, 1),
        result_shapes=[[100000]],
    ).cpu()
    assert torch.equal(out, torch.arange(1, 100001, dtype=torch.int32))


spin = TorchMetalKernel(
    "cuda_spin",
    ["x", "n"],
    ["out"],
    src="""
        float acc = x[id];
        for (int i = 0; i < n; ++i) acc = acc * 0.999f + 1.0f;
        out[id] = acc;
    """,
    torch_defn=_spin,
    metal_params=[GID],
)


@requires_gpu
def test_launches_go_on_the_current_stream_without_waiting() -> None:
    n, iterations = 128 * 132 * 4, 10_000_000  # tens of milliseconds of dependent arithmetic
    x = torch.ones(n, device="cuda")
    call = {"threads_per_grid": (n, 1, 1), "threads_per_thread_group": (128, 1, 1)}
    spin(x, 10, **call, result_shapes=[[n]])  # compile and load first
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        start = time.perf_counter()
        out = spin(x, iterations, **call, result_shapes=[[n]])
        queued = time.perf_counter() - start
        done = torch.cuda.Event()
        done.record(stream)
    assert not done.query(), "the kernel had finished before the call returned"
    stream.synchronize()
    ran = time.perf_counter() - start
    assert queued < ran / 10, (queued, ran)
    one = spin(
        torch.ones(1),
        iterations,
        threads_per_grid=(1, 1, 1),
        threads_per_thread_group=(1, 1, 1),
        result_shapes=[[1]],
    )
    assert torch.equal(out.cpu(), one.expand(n))  # the same float operations, in order


@requires_gpu
def test_repeated_calls_compile_nothing_and_take_the_fast_path() -> None:
    x = torch.randn(1000, device="cuda")
    call = {"threads_per_grid": (1000, 1, 1), "threads_per_thread_group": (128, 1, 1)}
    tiled = TorchMetalKernel(
        "cuda_repeat",
        ["x"],
        ["out"],
        src="if (id < x.get_extent(0)) out[id] = x[id] * 3.0f;",
        torch_defn=_triple,
        metal_params=[GID],
    )
    tiled(x, **call, result_shapes=[[1000]])
    compiles = torch.ops.coreai_torch.cuda_compile_count()
    for _ in range(3):
        with observed_launches() as launches:
            out = tiled(x, **call, result_shapes=[[1000]])
        assert [launch.route for launch in launches] == ["direct"]  # C++'s eager route
    assert torch.ops.coreai_torch.cuda_compile_count() == compiles
    torch.testing.assert_close(out, 3 * x, rtol=0, atol=0)


@requires_gpu
def test_strided_inputs_0d_tensors_and_scalars() -> None:
    k = TorchMetalKernel(
        "cuda_strided",
        ["a", "s", "scale", "flip"],
        ["out"],
        src="""
            if (gid.x >= out.get_extent(0) || gid.y >= out.get_extent(1)) return;
            float v = a[gid.x, gid.y] * scale + s;
            out[gid.x, gid.y] = flip ? -v : v;
        """,
        torch_defn=_scaled,
        metal_params=[MetalParameter("gid", "uint2", "thread_position_in_grid")],
    )
    a = torch.randn(33, 17).t()  # innermost stride 17: not contiguous
    s = torch.tensor(0.25)
    call = {"threads_per_grid": (33, 17, 1), "threads_per_thread_group": (8, 8, 1)}
    gpu = k(a.cuda(), s.cuda(), 2.0, True, **call, result_shapes=[[17, 33]]).cpu()
    assert torch.equal(gpu, k(a, s, 2.0, True, **call, result_shapes=[[17, 33]]))
    assert torch.equal(gpu, -(a * 2.0 + 0.25))


@requires_gpu
def test_debug_mode_is_refused_with_what_to_do() -> None:
    k = TorchMetalKernel(
        "cuda_debug",
        ["x"],
        ["out"],
        src="out[id] = x[id];",
        torch_defn=_same,
        metal_params=[GID],
    )
    k.debug = True
    with pytest.raises(RuntimeError, match="debug mode .* CPU backend"):
        k(
            torch.zeros(4, device="cuda"),
            threads_per_grid=(4, 1, 1),
            threads_per_thread_group=(4, 1, 1),
            result_shapes=[[4]],
        )


@requires_gpu
def test_too_much_threadgroup_memory_is_a_compile_error() -> None:
    k = TorchMetalKernel(
        "cuda_big_tile",
        ["x"],
        ["out"],
        src="threadgroup float big[16384]; big[id] = x[id]; "
        "threadgroup_barrier(mem_flags::mem_threadgroup); out[id] = big[16383 - id];",
        torch_defn=_same,
        metal_params=[GID],
    )
    with pytest.raises(MetalCompileError, match="CUDA backend"):
        k(
            torch.zeros(4, device="cuda"),
            threads_per_grid=(4, 1, 1),
            threads_per_thread_group=(4, 1, 1),
            result_shapes=[[4]],
        )


@requires_gpu
def test_a_new_process_loads_machine_code_from_the_disk_cache(tmp_path) -> None:
    code = textwrap.dedent(
        """
        import time, torch
        from coreai_torch import TorchMetalKernel, MetalParameter
        def plus_one(x: torch.Tensor) -> torch.Tensor:
            return x + 1
        k = TorchMetalKernel("cuda_warm", ["x"], ["out"], src="out[id] = x[id] + 1.0f;",
                             torch_defn=plus_one,
                             metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")])
        x = torch.zeros(32, device="cuda")
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = k(x, threads_per_grid=(32, 1, 1), threads_per_thread_group=(32, 1, 1),
                result_shapes=[[32]])
        torch.cuda.synchronize()
        assert torch.equal(out.cpu(), torch.ones(32))
        print(torch.ops.coreai_torch.cuda_compile_count(),
              torch.ops.coreai_torch.cuda_disk_cache_hits(), time.perf_counter() - start)
        """
    )
    env = {**os.environ, "COREAI_TORCH_CACHE_DIR": str(tmp_path)}
    runs = [
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        for _ in range(2)
    ]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr + runs[1].stderr
    assert runs[0].stdout.split()[:2] == ["1", "0"]
    assert runs[1].stdout.split()[:2] == ["0", "1"]  # the machine code, from the disk
    assert list(tmp_path.glob("*.cubin"))


# Small integers: every product and sum is exact in any order, so the tensor
# cores, the lane-by-lane products and the CPU agree bit for bit.
def _small_integers(*shape: int) -> torch.Tensor:
    return torch.randint(-3, 4, shape, generator=torch.Generator().manual_seed(sum(shape))).half()


@requires_gpu
@pytest.mark.parametrize(
    ("grid", "group"), [((32, 1, 1), (32, 1, 1)), ((24, 1, 1), (32, 1, 1))], ids=str
)
# The whole form of the second runs its products as m16n8k16 (chained_products.h).
@pytest.mark.parametrize("kernel", [tile_gemm, tile_gemm_two_steps], ids=["k8", "k16"])
def test_tile_gemm_with_whole_and_partial_simdgroups_matches_the_cpu(kernel, grid, group) -> None:
    a, b = _small_integers(32, 64), _small_integers(64, 32)
    call = {
        "threads_per_grid": grid,
        "threads_per_thread_group": group,
        "result_shapes": [[32, 32]],
    }
    gpu = kernel(a.cuda(), b.cuda(), **call).cpu()
    cpu = kernel(a, b, **call)
    lanes = grid[0]
    # Element (r, c) of each 8x8 block is stored by the lane that holds it in
    # Apple's layout; elements of lanes that do not exist are never written.
    lane = [
        [
            (r >> 2 & 1) << 4 | (c >> 2 & 1) << 3 | (r >> 1 & 1) << 2 | (r & 1) << 1 | (c >> 1 & 1)
            for c in range(8)
        ]
        for r in range(8)
    ]
    written = (torch.tensor(lane) < lanes).repeat(4, 4)
    assert int(written.sum()) == 16 * 2 * lanes
    assert torch.equal(gpu[written], cpu[written])
    full = a.float() @ b.float()
    if lanes == 32:
        assert torch.equal(gpu, full)
    else:  # the missing lanes' operand elements count as zeros (docs/cpu.md)
        assert not torch.equal(gpu[written], full[written])


def _elements_and_products_shapes(
    a: torch.Tensor, b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.empty(8, 8), torch.empty(32, 2), torch.empty(32)


elements_and_products = TorchMetalKernel(
    "cuda_elements_and_products",
    ["a", "b"],
    ["d", "seen", "some"],
    src="""
        simdgroup_half8x8 ma, mb;
        simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(1.0f);
        simdgroup_load(ma, &a[0, 0]);
        simdgroup_load(mb, &b[0, 0]);
        ma.thread_elements() *= half(2);  // a write in Apple's layout
        simdgroup_multiply_accumulate(acc, ma, mb, acc);
        simdgroup_multiply_accumulate(acc, ma, mb, acc);
        seen[0, lane] = acc.thread_elements()[0];
        seen[1, lane] = acc.thread_elements()[1];
        some[lane] = -1.0f;
        if (lane % 3 == 0) some[lane] = acc.thread_elements()[1];  // read in divergent code
        simdgroup_store(acc, &d[0, 0]);
    """,
    torch_defn=_elements_and_products_shapes,
    metal_params=[MetalParameter("lane", "uint", "thread_index_in_simdgroup")],
)


@requires_gpu
def test_thread_elements_and_products_agree_in_both_layouts() -> None:
    a, b = _small_integers(8, 8), _small_integers(8, 8)
    call = {
        "threads_per_grid": (32, 1, 1),
        "threads_per_thread_group": (32, 1, 1),
        "result_shapes": [[8, 8], [32, 2], [32]],
    }
    gpu = [t.cpu() for t in elements_and_products(a.cuda(), b.cuda(), **call)]
    cpu = elements_and_products(a, b, **call)
    for g, c in zip(gpu, cpu):
        assert torch.equal(g, c)
    want = 1 + 2 * (2 * a.float() @ b.float())
    assert torch.equal(gpu[0], want)


@requires_gpu
def test_each_form_is_compiled_when_a_launch_first_needs_it() -> None:
    # A source no disk cache holds yet: the same GEMM with a comment of its own.
    kernel = TorchMetalKernel(
        "cuda_tile_gemm_forms",
        ["A", "B"],
        ["C"],
        src=TILE_GEMM_SRC + f"// {os.getpid()} {time.time_ns()}\n",
        torch_defn=_tile_product,
        metal_params=[GID],
    )
    a, b = _small_integers(32, 64).cuda(), _small_integers(64, 32).cuda()
    compiles = torch.ops.coreai_torch.cuda_compile_count
    before = compiles()
    for lanes, compiled in [(32, 1), (32, 1), (24, 2), (24, 2), (32, 2)]:
        call = {
            "threads_per_grid": (lanes, 1, 1),
            "threads_per_thread_group": (32, 1, 1),
            "result_shapes": [[32, 32]],
        }
        kernel(a, b, **call)
        assert compiles() - before == compiled, (lanes, compiled)

"""ggml's Metal kernels on the CPU backend: kernel_mul_mm (the simdgroup_matrix
path) and kernel_flash_attn_ext_vec.

Source: github.com/ggml-org/ggml at d99724f2b141fed9e1a9f402213506c081433465
(MIT license), src/ggml-metal/ggml-metal.metal (the same file llama.cpp
ships). Helper code is in tests/corpus/ggml/ggml.metal, unchanged; each kernel
body below is ggml's own with its signature adapted: the buffers are the tensor
views' data (as bytes, which is how ggml reads them), the argument struct ggml's
host code fills in (ggml-metal-ops.cpp) is filled in from the tensors' shapes,
and the function constants become values. The threadgroup memory ggml asks
the encoder for is a threadgroup array of the same size.
"""

from __future__ import annotations

import math

import pytest
import torch
from corpus_support import HERE, helper_source, launch, randn

from coreai_torch import MetalParameter, TorchMetalKernel

# Every kernel here also runs clean under debug mode's checks (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("default_and_debug_mode")

GGML_HELPERS = helper_source("ggml/ggml.metal")

# ------------------------------------------------------------- kernel_mul_mm
#
# kernel_mul_mm<S0, S0_4x4, S0_8x8, S1, S1_2x4, S1_8x8, block_q, nl,
# dequantize_func, T0, T0_4x4, T1, T1_2x4> without GGML_METAL_HAS_TENSOR: 64 x 32
# tiles of dst = src1 * src0^T over 4 SIMD-groups of simdgroup_matrix
# products, src0 dequantized to half (bfloat for bf16) in threadgroup memory.
# Instantiated here as ggml does for src0 in f32, f16, bf16, q4_0 and q8_0 (of
# ggml's block formats, the two whose dequantizers this corpus carries) with
# src1 in f32.

MUL_MM_TYPES = {
    # name: (S0, S0_4x4, S0_8x8, S1, S1_2x4, S1_8x8, block_q, nl, dequantize, T0, T0_4x4)
    "f32": (
        "half",
        "half4x4",
        "simdgroup_half8x8",
        "half",
        "half2x4",
        "simdgroup_half8x8",
        "float4x4",
        1,
        "dequantize_f32",
        "float",
        "float4x4",
    ),
    "f16": (
        "half",
        "half4x4",
        "simdgroup_half8x8",
        "half",
        "half2x4",
        "simdgroup_half8x8",
        "half4x4",
        1,
        "dequantize_f16",
        "half",
        "half4x4",
    ),
    "bf16": (
        "bfloat",
        "bfloat4x4",
        "simdgroup_bfloat8x8",
        "bfloat",
        "bfloat2x4",
        "simdgroup_bfloat8x8",
        "bfloat4x4",
        1,
        "dequantize_bf16",
        "bfloat",
        "bfloat4x4",
    ),
    "q4_0": (
        "half",
        "half4x4",
        "simdgroup_half8x8",
        "half",
        "half2x4",
        "simdgroup_half8x8",
        "block_q4_0",
        2,
        "dequantize_q4_0",
        "float",
        "float4x4",
    ),
    "q8_0": (
        "half",
        "half4x4",
        "simdgroup_half8x8",
        "half",
        "half2x4",
        "simdgroup_half8x8",
        "block_q8_0",
        2,
        "dequantize_q8_0",
        "float",
        "float4x4",
    ),
}

MUL_MM_PROLOGUE = """
using S0 = {0}; using S0_4x4 = {1}; using S0_8x8 = {2};
using S1 = {3}; using S1_2x4 = {4}; using S1_8x8 = {5};
using block_q = {6};
constexpr short nl = {7};
auto dequantize_func = {8}<S0_4x4>;
using T0 = {9}; using T0_4x4 = {10};
using T1 = float; using T1_2x4 = float2x4;
// The buffers, as the bytes ggml reads them as.
device const char * src0 = (device const char *) a.get_data_ptr();
device const char * src1 = (device const char *) b.get_data_ptr();
device       char * dst = (device char *) d.get_data_ptr();
threadgroup char shmem[8192];
// The arguments ggml-metal-ops.cpp sets for a 2-D product: src0 [ne01, ne00],
// src1 [ne11, ne10 = ne00], dst [ne1 = ne11, ne0 = ne01]; rows in bytes.
const int K = b.get_extent(0);
const ggml_metal_kargs_mul_mm args = {{
    K, 1, uint64_t(a.get_extent(0)) * sizeof(a[0, 0]), 0, 0, 1,
    sizeof(float), uint64_t(K) * sizeof(float), 0, 0,
    int32_t(d.get_extent(0)), int32_t(d.get_extent(1)), 1, 1}};
// The function constants: bounds checks where the shapes need them.
const bool FC_mul_mm_bc_inp = K % 32 != 0;
const bool FC_mul_mm_bc_out = args.ne0 % 64 != 0 || args.ne1 % 32 != 0;
const short FC_mul_mm_ne12 = 1, FC_mul_mm_ne13 = 1, FC_mul_mm_r2 = 1, FC_mul_mm_r3 = 1;
"""

MUL_MM_BODY = (HERE / "ggml" / "kernel_mul_mm.metal").read_text()


def _dequantize(a: torch.Tensor, kind: str, k: int) -> torch.Tensor:
    """src0 as the float values ggml's block formats encode (ggml-common.h)."""
    if kind in ("f32", "f16", "bf16"):
        return a.float()
    block = {"q4_0": 18, "q8_0": 34}[kind]
    raw = a.reshape(a.shape[0], k // 32, block)
    d = raw[:, :, :2].contiguous().view(torch.float16).float()  # [rows, blocks, 1]
    if kind == "q8_0":
        q = raw[:, :, 2:].contiguous().view(torch.int8).float()
    else:
        # Byte j holds element j in its low nibble and element j + 16 in its high one.
        qs = raw[:, :, 2:].to(torch.int64)
        q = torch.cat([qs & 0xF, qs >> 4], dim=2).float() - 8
    return (q * d).reshape(a.shape[0], k)


def _mul_mm_reference(kind: str):
    def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        # src0 goes through half (bfloat for bf16) and src1 through half (bfloat)
        # on their way into threadgroup memory; the products sum in float.
        narrow = torch.bfloat16 if kind == "bf16" else torch.float16
        w = _dequantize(a, kind, b.shape[1]).to(narrow).float()
        return b.to(narrow).float() @ w.T

    return reference


def _mul_mm_kernel(kind: str) -> TorchMetalKernel:
    return TorchMetalKernel(
        f"ggml_kernel_mul_mm_{kind}",
        ["a", "b"],
        ["d"],
        src=MUL_MM_PROLOGUE.format(*MUL_MM_TYPES[kind]) + MUL_MM_BODY,
        helper_src=GGML_HELPERS,
        torch_defn=_mul_mm_reference(kind),
        metal_params=[
            MetalParameter("tgpig", "uint3", "threadgroup_position_in_grid"),
            MetalParameter("tiitg", "ushort", "thread_index_in_threadgroup"),
            MetalParameter("sgitg", "ushort", "simdgroup_index_in_threadgroup"),
        ],
    )


MUL_MM_KERNELS = {kind: _mul_mm_kernel(kind) for kind in MUL_MM_TYPES}


def _src0(kind: str, m: int, k: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if kind in ("f32", "f16", "bf16"):
        dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[kind]
        return torch.randn(m, k, generator=g).to(dtype)
    blocks = k // 32
    d = (torch.rand(m, blocks, 1, generator=g) * 0.1 + 0.01).to(torch.float16)
    if kind == "q8_0":
        qs = torch.randint(-128, 128, (m, blocks, 32), generator=g).to(torch.int8).view(torch.uint8)
    else:
        qs = torch.randint(0, 256, (m, blocks, 16), generator=g).to(torch.uint8)
    return torch.cat([d.view(torch.uint8), qs], dim=2).reshape(m, -1)


@pytest.mark.parametrize("kind", list(MUL_MM_TYPES))
@pytest.mark.parametrize(("m", "n", "k"), [(64, 32, 64), (70, 45, 96)])
def test_ggml_kernel_mul_mm(kind: str, m: int, n: int, k: int) -> None:
    if kind in ("f32", "f16", "bf16") and m == 70:
        k = 40  # K not a multiple of 32: the kernel's bounds-checked input path
    a = _src0(kind, m, k, seed=m + k)
    b = randn(n, k, seed=n)
    # ggml's grid: ((ne11 + 31) / 32, (ne01 + 63) / 64) threadgroups of 128 threads.
    d = launch(
        MUL_MM_KERNELS[kind],
        a,
        b,
        grid=(128 * math.ceil(n / 32), math.ceil(m / 64), 1),
        group=(128, 1, 1),
        shapes=[[n, m]],
        opcheck=(kind, m) in (("f32", 64), ("q4_0", 64)),
    )
    # float sums of K products of half (bfloat) values, in another order than
    # torch's: a few float ulps of sums of magnitude up to ~sqrt(K) * 3.
    torch.testing.assert_close(d, _mul_mm_reference(kind)(a, b), rtol=1e-4, atol=1e-4)


# -------------------------------------------------- kernel_flash_attn_ext_vec
#
# kernel_flash_attn_ext_vec<FA_TYPES, half4, 1, dequantize_f16_t4, half4, 1,
# dequantize_f16_t4, 64, 64, 2> (and FA_TYPES_F32 with float4 K and V): one
# query per threadgroup, an online softmax over the keys in chunks of 32,
# each SIMD-group of NSG taking every NSG-th chunk, then a reduction over the
# SIMD-groups. Function constants as ggml sets them for a plain attention over
# a KV length padded to the chunk (no mask, sinks, ALiBi or softcap; one
# workgroup, so the kernel normalises its own output).

FA_TYPES = {
    # name: (q4_t, k4_t, v4_t, qk_t, s_t, s4_t, o4_t, kd4_t, deq_k, vd4_t, deq_v)
    "f16": (
        "half4",
        "half4",
        "half4",
        "float",
        "float",
        "float4",
        "float4",
        "half4",
        "dequantize_f16_t4",
        "half4",
        "dequantize_f16_t4",
    ),
    "f32": (
        "half4",
        "float4",
        "float4",
        "float",
        "float",
        "float4",
        "float4",
        "float4",
        "dequantize_f32_t4",
        "float4",
        "dequantize_f32_t4",
    ),
}

FA_PROLOGUE = """
using q4_t = {0}; using k4_t = {1}; using v4_t = {2};
using qk_t = {3}; using s_t = {4}; using s4_t = {5}; using o4_t = {6};
using kd4_t = {7};
constexpr short nl_k = 1;
auto deq_k_t4 = {8}<k4_t>;
using vd4_t = {9};
constexpr short nl_v = 1;
auto deq_v_t4 = {10}<v4_t>;
constexpr short DK = 64, DV = 64, NE = 2, Q = OP_FLASH_ATTN_EXT_VEC_NQPSG,
                C = OP_FLASH_ATTN_EXT_VEC_NCPSG;
// The buffers: q [heads, queries, DK] float, k [heads, keys, DK], v [heads, keys, DV].
device const char * q = (device const char *) q_in.get_data_ptr();
device const char * k = (device const char *) k_in.get_data_ptr();
device const char * v = (device const char *) v_in.get_data_ptr();
device const char * mask = nullptr;
device const char * sinks = nullptr;
device const char * pad = nullptr;
device       char * dst = (device char *) out.get_data_ptr();
threadgroup half shmem_f16[4096];
// The function constants.
const bool FC_flash_attn_ext_vec_has_mask = false, FC_flash_attn_ext_vec_has_sinks = false,
           FC_flash_attn_ext_vec_has_bias = false, FC_flash_attn_ext_vec_has_scap = false,
           FC_flash_attn_ext_vec_has_kvpad = false;
const int32_t FC_flash_attn_ext_vec_ns10 = DK, FC_flash_attn_ext_vec_ns20 = DV;
const int32_t FC_flash_attn_ext_vec_nsg = NSG_VALUE, FC_flash_attn_ext_vec_nwg = 1;
// The arguments ggml-metal-ops.cpp sets.
const int32_t heads = q_in.get_extent(2), queries = q_in.get_extent(1), keys = k_in.get_extent(1);
const uint64_t kb = sizeof(k_in[0, 0, 0]), vb = sizeof(v_in[0, 0, 0]);
const ggml_metal_kargs_flash_attn_ext_vec args = {{
    queries, heads, 1, DK * 4ul, uint64_t(queries) * DK * 4, 0,
    keys, heads, 1, DK, DK * kb, uint64_t(keys) * DK * kb, 0,
    DV, DV * vb, uint64_t(keys) * DV * vb, 0,
    0, 1, 1, 0, 0, 0,
    heads, queries, 1,
    1.0f / sqrt(float(DK)), 0.0f, 0.0f, 0.0f, 0, 0.0f}};
"""

FA_BODY = (HERE / "ggml" / "kernel_flash_attn_ext_vec.metal").read_text()


def _attention(q_in: torch.Tensor, k_in: torch.Tensor, v_in: torch.Tensor) -> torch.Tensor:
    # q goes through half in threadgroup memory; scores, softmax and sums in float.
    q = q_in.half().float()
    scores = (q @ k_in.float().transpose(1, 2)) / math.sqrt(q.shape[-1])
    out = torch.softmax(scores, dim=-1) @ v_in.float()  # [heads, queries, DV]
    return out.transpose(0, 1).contiguous()  # ggml's dst: [queries, heads, DV]


def _fa_kernel(kind: str, nsg: int) -> TorchMetalKernel:
    return TorchMetalKernel(
        f"ggml_flash_attn_ext_vec_{kind}_nsg{nsg}",
        ["q_in", "k_in", "v_in"],
        ["out"],
        src=FA_PROLOGUE.format(*FA_TYPES[kind]).replace("NSG_VALUE", str(nsg)) + FA_BODY,
        helper_src=GGML_HELPERS,
        torch_defn=_attention,
        metal_params=[
            MetalParameter("tgpig", "uint3", "threadgroup_position_in_grid"),
            MetalParameter("tiisg", "ushort", "thread_index_in_simdgroup"),
            MetalParameter("sgitg", "ushort", "simdgroup_index_in_threadgroup"),
        ],
    )


FA_KERNELS = {(kind, nsg): _fa_kernel(kind, nsg) for kind in FA_TYPES for nsg in (1, 2)}

# With two SIMD-groups the kernel's final reduction has lane 0 write ss[0] and
# ss[1] in the same step in which the other lanes read them, with no barrier
# in between: correct because the lanes of a SIMD-group run in lockstep, which
# fiber mode keeps for threadgroup memory (docs/cpu.md, "Lockstep").
FA_CASES = list(FA_KERNELS)


@pytest.mark.parametrize(("kind", "nsg"), FA_CASES)
@pytest.mark.parametrize(("heads", "queries", "keys"), [(2, 3, 64), (1, 2, 96)])
def test_ggml_flash_attn_ext_vec(
    kind: str, nsg: int, heads: int, queries: int, keys: int, default_and_debug_mode: str
) -> None:
    dtype = torch.float16 if kind == "f16" else torch.float32
    q = randn(heads, queries, 64, seed=keys)
    k = randn(heads, keys, 64, dtype=dtype, seed=keys + 1)
    v = randn(heads, keys, 64, dtype=dtype, seed=keys + 2)
    # ggml's grid: (queries, heads, 1) threadgroups of NSG SIMD-groups.
    call = dict(
        grid=(32 * queries, nsg * heads, 1),
        group=(32, nsg, 1),
        shapes=[[queries, heads, 64]],
        opcheck=(kind, nsg, keys) == ("f16", 1, 64),
    )
    if default_and_debug_mode == "debug" and nsg == 2:
        # With two SIMD-groups the kernel has real (benign) write-write races:
        # every SIMD-group stores the same query into shared memory
        # (`sq4[i] = q4[i]`), and one SIMD-group's zeroing of its scratch
        # (`ss4[i] = 0`) overlaps the other's zeroing of its results (`so4[i]
        # = 0`), with no barrier between them. Both sides store the same
        # values, so the results are right, but Metal does not order the
        # stores: debug mode must report them.
        with pytest.raises(RuntimeError, match="data race on threadgroup memory"):
            launch(FA_KERNELS[kind, nsg], q, k, v, **call)
        return
    out = launch(FA_KERNELS[kind, nsg], q, k, v, **call)
    # float dot products, exponentials and sums in another order than torch's.
    torch.testing.assert_close(out, _attention(q, k, v), rtol=1e-4, atol=1e-5)

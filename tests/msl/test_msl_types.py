"""Scalars, vectors, packed vectors, arrays and limits of the CPU Metal library."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from support.msl_harness import hex_double, hex_float, run_checks

# float32 values whose conversion to half and bfloat exercises rounding: ties
# to even in both directions, values just past a tie, subnormal results,
# overflow to infinity and the special values.
CONVERSION_INPUTS = [
    0.0,
    -0.0,
    1.0,
    0.1,
    -3.3,
    1.0 + 2.0**-8,  # bfloat tie, rounds to even (down)
    1.0 + 3 * 2.0**-8,  # bfloat tie, rounds to even (up)
    1.0 + 2.0**-8 + 2.0**-20,  # just past the bfloat tie
    1.0 + 2.0**-11,  # half tie
    1.0 + 3 * 2.0**-11,
    65504.0,
    65520.0,  # rounds to infinity in half
    3.3895313892515355e38,  # bfloat max
    3.4e38,  # rounds to infinity in bfloat
    1e-8,  # half subnormal
    1e-40,  # float subnormal, bfloat subnormal
    2.0**-133,  # smallest bfloat subnormal
    float("inf"),
    float("-inf"),
    float("nan"),
]


def _bfloat_from_double(value: float) -> float:
    """Correctly rounded double -> bfloat (ties to even), for normal results."""
    exact = Fraction(value)
    exponent = math.floor(math.log2(abs(value)))
    ulp = Fraction(2) ** (exponent - 7)
    return float(round(exact / ulp) * ulp)


# Doubles whose rounding through float first would land on a bfloat tie and
# round the wrong way.
DOUBLE_INPUTS = [
    1.0 + 2.0**-8 + 2.0**-30,
    -(1.0 + 2.0**-8 + 2.0**-30),
    1.0 + 2.0**-8 - 2.0**-30,
    3.0 + 2.0**-7 + 2.0**-40,
    0.1,
]


@pytest.fixture(scope="module")
def results() -> dict:
    float_list = ", ".join(hex_float(float(np.float32(v))) for v in CONVERSION_INPUTS)
    double_list = ", ".join(hex_double(v) for v in DOUBLE_INPUTS)
    body = rf"""
    // Sizes and alignments as in Metal.
    emit("sizes", sizeof(half), sizeof(bfloat), sizeof(uchar), sizeof(ushort), sizeof(uint),
         sizeof(long), sizeof(ulong), sizeof(float3), alignof(float3), sizeof(half3),
         sizeof(bool4), sizeof(packed_float3), alignof(packed_float3), sizeof(char4));
    emit("same_types", std::is_same_v<vec<float, 4>, float4>, std::is_same_v<vec<half, 2>, half2>,
         std::is_same_v<char4, vec<int8_t, 4>>, std::is_same_v<uchar4, vec<uint8_t, 4>>,
         std::is_same_v<ulong, uint64_t>, std::is_same_v<long, int64_t>);

    // Per-operation rounding of the narrow types.
    volatile half ha = half(0.1f), hb = half(3.3f), hc = half(0.33f);
    volatile bfloat ba = bfloat(0.1f), bb = bfloat(3.3f), bc = bfloat(0.33f);
    emit("half_per_op", half(ha * hb - hc));
    emit("bfloat_per_op", bfloat(ba * bb - bc));
    half4 hv = half4(ha, hb, hc, ha);
    emit("half4_per_op", hv * hv.yzwx - hv.zwxy);
    bfloat4 bv = bfloat4(ba, bb, bc, ba);
    emit("bfloat4_per_op", bv * bv.yzwx - bv.zwxy);
    emit("rounds_per_op", detail::narrow_types_round_per_operation());

    // Conversions from float and from double.
    volatile float floats[] = {{{float_list}}};
    for (float f : floats) {{
      emit("to_half", as_type<ushort>(half(f)));
      emit("to_bfloat", as_type<ushort>(bfloat(f)));
    }}
    volatile double doubles[] = {{{double_list}}};
    for (double d : doubles) {{
      emit("double_to_bfloat", bfloat(d));
    }}

    // Constructors.
    float4 a = float4(1, 2, 3, 4);
    float4 b = float4(5.5f);
    emit("ctor_scalars", a);
    emit("ctor_splat", b);
    emit("ctor_zero", float4());
    emit("ctor_halves", float4(a.xy, b.zw));
    emit("ctor_mixed", float3(a.zw, 1.0f), float4(0.5f, a.yzw), float4(a.x, a.yz, 7));
    volatile float fx = 2.25f;
    emit("ctor_runtime_splat", float2(fx));
    emit("convert_trunc", int4(float4(1.7f, -1.7f, 2.5f, -0.5f)));
    emit("convert_half", half4(float4(0.1f, 1e-8f, 65520.0f, -3.3f)));
    emit("convert_uchar_wraps", uchar4(int4(-1, 256, 300, 7)));
    emit("convert_bool", bool3(0, 2, -1), bool4(float4(0.0f, -0.0f, 0.5f, NAN)));
    emit("convert_from_bool", float4(bool4(true, false, true, false)));
    emit("convert_narrow", bfloat2(half2(half(0.1f), half(3.3f))),
         half2(bfloat2(bfloat(0.1f), bfloat(70000.0f))));
    emit("ctor_packed", float4(packed_float3(1.0f, 2.0f, 3.0f), 4.0f));

    // Swizzles: read, write, rgba.
    float4 s = float4(1, 2, 3, 4);
    emit("swizzle_read", s.wzyx, s.xxyy, s.rgba.bgr);
    s.zx = float2(7, 8);
    emit("swizzle_write", s);
    s.gb += 10.0f;
    emit("swizzle_compound", s);
    s[3] = -1.0f;
    emit("subscript_write", s);

    // Comparisons give -1/0 masks; bool vectors hold 0/1.
    float4 lo = float4(1, 2, 3, 4), hi = float4(2, 2, 4, 5);
    auto mask = lo < hi;
    emit("mask", mask);
    emit("mask_to_bool", bool4(mask));
    emit("all_any", all(lo < hi + 1.0f), all(mask), any(mask), any(lo > hi));
    int taken = 0;
    if (all(lo <= hi)) {{
      taken = 1;
    }}
    emit("if_all", taken);
    bool4 flags = bool4(true, false, true, true);
    flags.y = true;
    emit("bool_vector", flags, all(flags), flags.zw);

    // Bit casts.
    emit("as_type", as_type<uint>(1.0f), as_type<float>(0x40490fdbu), as_type<ushort2>(1.0f),
         as_type<uint>(half2(1.0f, -2.0f)), as_type<ulong>(float2(1.0f, 2.0f)));

    // Packed vectors.
    packed_float3 p = float3(1, 2, 3);
    p.y = 5.0f;
    p[2] += 1.0f;
    float3 q = p;
    packed_float3 packed_array[2] = {{float3(1, 2, 3), float3(4, 5, 6)}};
    emit("packed", q, p[0], float3(p) + float3(1.0f), p + float3(1.0f),
         (char*)&packed_array[1] - (char*)&packed_array[0]);

    // metal::array.
    array<uint, 3> idx{{3, 1, 2}};
    uint sum = 0;
    for (uint v : idx) {{
      sum += v;
    }}
    idx[1] = 9;
    array<int, 1> single{{42}};
    emit("array", idx.size(), sum, idx[1], single[0], sizeof(idx));

    // Limits.
    emit("limits_float", numeric_limits<float>::max(), numeric_limits<float>::min(),
         numeric_limits<float>::lowest(), numeric_limits<float>::epsilon(),
         numeric_limits<float>::infinity(), numeric_limits<float>::digits);
    emit("limits_half", numeric_limits<half>::max(), numeric_limits<half>::min(),
         numeric_limits<half>::lowest(), numeric_limits<half>::epsilon(),
         numeric_limits<half>::infinity(), numeric_limits<half>::denorm_min(),
         numeric_limits<half>::digits);
    emit("limits_bfloat", numeric_limits<bfloat>::max(), numeric_limits<bfloat>::min(),
         numeric_limits<bfloat>::lowest(), numeric_limits<bfloat>::epsilon(),
         numeric_limits<bfloat>::infinity(), numeric_limits<bfloat>::denorm_min(),
         numeric_limits<bfloat>::digits);
    emit("limits_nan", isnan(numeric_limits<float>::quiet_NaN()),
         isnan(numeric_limits<half>::quiet_NaN()), isnan(numeric_limits<bfloat>::quiet_NaN()));
    emit("limits_int", numeric_limits<int8_t>::min(), numeric_limits<uchar>::max(),
         numeric_limits<short>::min(), numeric_limits<ushort>::max(), numeric_limits<int>::min(),
         numeric_limits<uint>::max(), numeric_limits<long>::min(), numeric_limits<ulong>::max());
    emit("constants", M_PI_F, M_E_F, M_SQRT2_F, M_PI_H, MAXFLOAT, MAXHALF, HUGE_VALF, INFINITY,
         isnan(NAN), HALF_MAX, HALF_MIN, HALF_EPSILON);
    """
    return run_checks(body)


def test_sizes_match_metal(results: dict) -> None:
    # half, bfloat, uchar, ushort, uint, long, ulong, float3 (size, align), half3,
    # bool4, packed_float3 (size, align), char4
    assert results["sizes"] == [2, 2, 1, 2, 4, 8, 8, 16, 16, 8, 4, 12, 4, 4]
    assert results["same_types"] == [1] * 6


def test_half_and_bfloat_round_after_each_operation(results: dict) -> None:
    # The inputs are exact half / bfloat values; torch rounds each operation too.
    for dtype, key in ((torch.float16, "half_per_op"), (torch.bfloat16, "bfloat_per_op")):
        a, b, c = (torch.tensor(v, dtype=dtype) for v in (0.1, 3.3, 0.33))
        expected = (a * b - c).item()
        assert results[key] == [expected]
        assert expected == 0.0  # the same sum in float is -8.06e-5 / -6.87e-5
    for dtype, key in ((torch.float16, "half4_per_op"), (torch.bfloat16, "bfloat4_per_op")):
        v = torch.tensor([0.1, 3.3, 0.33, 0.1]).to(dtype)
        expected = v * v.roll(-1) - v.roll(-2)
        assert results[key] == expected.float().tolist()
    assert results["rounds_per_op"] == [1]


def test_float_to_half_and_bfloat_match_torch(results: dict) -> None:
    floats = torch.tensor(CONVERSION_INPUTS, dtype=torch.float32)
    half_bits = floats.to(torch.float16).view(torch.int16).numpy().view(np.uint16)
    bf_bits = floats.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    got_half = np.array(results["to_half"], dtype=np.uint16)
    got_bf = np.array(results["to_bfloat"], dtype=np.uint16)
    nan = np.isnan(floats.numpy())
    # NaN payloads may differ; both must be NaN.
    np.testing.assert_array_equal(got_half[~nan], half_bits[~nan])
    np.testing.assert_array_equal(got_bf[~nan], bf_bits[~nan])
    assert all(
        (h & 0x7C00) == 0x7C00 and (h & 0x3FF) and (b & 0x7F80) == 0x7F80 and (b & 0x7F)
        for h, b in zip(got_half[nan], got_bf[nan], strict=True)
    )


def test_double_to_bfloat_rounds_once(results: dict) -> None:
    got = results["double_to_bfloat"]
    assert got == [_bfloat_from_double(v) for v in DOUBLE_INPUTS]


def test_constructors(results: dict) -> None:
    assert results["ctor_scalars"] == [1, 2, 3, 4]
    assert results["ctor_splat"] == [5.5] * 4
    assert results["ctor_zero"] == [0] * 4
    assert results["ctor_halves"] == [1, 2, 5.5, 5.5]
    assert results["ctor_mixed"] == [3, 4, 1, 0.5, 2, 3, 4, 1, 2, 3, 7]
    assert results["ctor_runtime_splat"] == [2.25, 2.25]
    assert results["ctor_packed"] == [1, 2, 3, 4]


def test_explicit_conversions(results: dict) -> None:
    assert results["convert_trunc"] == [1, -1, 2, 0]  # toward zero, like Metal
    expected_half = torch.tensor([0.1, 1e-8, 65520.0, -3.3]).to(torch.float16).float()
    assert results["convert_half"] == expected_half.tolist()
    assert results["convert_uchar_wraps"] == [255, 0, 44, 7]
    # bool components are 0 or 1; NaN is nonzero, so true.
    assert results["convert_bool"] == [0, 1, 1, 0, 0, 1, 1]
    assert results["convert_from_bool"] == [1, 0, 1, 0]
    # half <-> bfloat through float: one rounding; bfloat(70000) overflows half.
    halves = torch.tensor([0.1, 3.3]).half()
    bfloats = torch.tensor([0.1, 70000.0]).bfloat16()
    assert results["convert_narrow"] == [
        *halves.float().bfloat16().float().tolist(),
        *bfloats.float().half().float().tolist(),
    ]


def test_swizzles(results: dict) -> None:
    assert results["swizzle_read"] == [4, 3, 2, 1, 1, 1, 2, 2, 3, 2, 1]
    assert results["swizzle_write"] == [8, 2, 7, 4]
    assert results["swizzle_compound"] == [8, 12, 17, 4]
    assert results["subscript_write"] == [8, 12, 17, -1]


def test_comparisons_masks_and_bool_vectors(results: dict) -> None:
    # clang's comparison masks: -1 for true (documented in vector.h).
    assert results["mask"] == [-1, 0, -1, -1]
    assert results["mask_to_bool"] == [1, 0, 1, 1]
    assert results["all_any"] == [1, 0, 1, 0]
    assert results["if_all"] == [1]
    assert results["bool_vector"] == [1, 1, 1, 1, 1, 1, 1]


def test_as_type(results: dict) -> None:
    one = 0x3F800000
    assert results["as_type"] == [
        one,
        float(np.float32(math.pi)),
        0x0000,
        0x3F80,
        0xC000_3C00,
        0x4000_0000_3F80_0000,
    ]


def test_packed_vectors(results: dict) -> None:
    assert results["packed"] == [1, 5, 4, 1, 2, 6, 5, 2, 6, 5, 12]


def test_array(results: dict) -> None:
    assert results["array"] == [3, 6, 9, 42, 12]


def test_limits(results: dict) -> None:
    f32, f16 = torch.finfo(torch.float32), torch.finfo(torch.float16)
    bf16 = torch.finfo(torch.bfloat16)
    inf = float("inf")
    assert results["limits_float"] == [f32.max, f32.tiny, f32.min, f32.eps, inf, 24]
    assert results["limits_half"] == [f16.max, f16.tiny, f16.min, f16.eps, inf, 2.0**-24, 11]
    assert results["limits_bfloat"] == [bf16.max, bf16.tiny, bf16.min, bf16.eps, inf, 2.0**-133, 8]
    assert results["limits_nan"] == [1, 1, 1]
    assert results["limits_int"] == [
        -128,
        255,
        -32768,
        65535,
        -(2**31),
        2**32 - 1,
        -(2**63),
        2**64 - 1,
    ]


def test_constants(results: dict) -> None:
    f32 = np.float32
    assert results["constants"] == [
        float(f32(math.pi)),
        float(f32(math.e)),
        float(f32(math.sqrt(2))),
        float(np.float16(math.pi)),
        float(np.finfo(np.float32).max),
        65504.0,
        math.inf,
        math.inf,
        1,
        65504.0,
        2.0**-14,
        2.0**-10,
    ]

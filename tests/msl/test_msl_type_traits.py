"""<metal_type_traits>, numeric_limits and Metal's numeric macros.

The expected answers are those of Apple's <metal_type_traits> header (Xcode
toolchain, usr/metal/.../include/metal/metal_type_traits): its traits are built
on clang's __is_floating_point / __is_integral / __is_signed, which Metal's
compiler answers for half (and bfloat), and are specialised for
ext_vector_type and packed_vector_type to answer for the component type.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from support.msl_harness import run_checks

BODY = r"""
emit("floating", is_floating_point_v<half>, is_floating_point_v<bfloat>,
     is_floating_point_v<float4>, is_floating_point_v<const half2>,
     is_floating_point_v<packed_half3>, is_floating_point_v<int>);
emit("integral", is_integral_v<uint2>, is_integral_v<bool>, is_integral_v<long>,
     is_integral_v<float>, is_integral_v<char4>);
emit("signed", is_signed_v<int3>, is_signed_v<uint>, is_signed_v<half>, is_signed_v<float2>,
     is_signed_v<char>);
emit("unsigned", is_unsigned_v<ushort4>, is_unsigned_v<int>, is_unsigned_v<bool>);
emit("arithmetic", is_arithmetic_v<bfloat4>, is_arithmetic_v<int2>, is_arithmetic_v<float4x4>);
emit("scalar", is_scalar_v<half>, is_scalar_v<float4>, is_scalar_v<device float*>,
     is_scalar_v<threadgroup int*>, is_scalar_v<float*>);
emit("vector", is_vector_v<float4>, is_vector_v<packed_float3>, is_vector_v<float>,
     is_vector_v<const uint2>);
emit("vec_elements", vec_elements<float3>::value, vec_elements<half>::value,
     vec_elements<packed_uchar4>::value);
emit("make", is_same_v<make_scalar_t<half4>, half>, is_same_v<make_signed_t<uint4>, int4>,
     is_same_v<make_unsigned_t<char>, uchar>, is_same_v<make_unsigned_t<long2>, ulong2>,
     is_same_v<make_signed_t<const ushort>, short>, is_same_v<make_scalar_t<float>, float>);
emit("misc", is_same_v<enable_if_t<true, int>, int>,
     is_same_v<conditional_t<false, int, half>, half>,
     is_same_v<remove_cv_t<const volatile float4>, float4>,
     is_same_v<remove_addrspace_t<float>, float>,
     disjunction_v<false_type, true_type>, conjunction_v<true_type, false_type>,
     is_convertible_v<half, float>, bool_constant<true>::value, integral_constant<int, 7>{}());

// A templated helper specialises as on the GPU: half takes the floating-point overload.
emit("dispatch", kind(half(1)), kind(bfloat(1)), kind(float4(1)), kind(3u), kind(int2(1)));

emit("half_limits", numeric_limits<half>::max(), numeric_limits<half>::min(),
     numeric_limits<half>::lowest(), numeric_limits<half>::epsilon(),
     numeric_limits<half>::denorm_min(), numeric_limits<half>::digits,
     numeric_limits<half>::is_iec559, numeric_limits<half>::has_denorm == std::denorm_present,
     numeric_limits<half>::round_style == std::round_to_nearest, numeric_limits<half>::is_bounded);
emit("bfloat_limits", numeric_limits<bfloat>::max(), numeric_limits<bfloat>::min(),
     numeric_limits<bfloat>::lowest(), numeric_limits<bfloat>::epsilon(),
     numeric_limits<bfloat>::digits, numeric_limits<bfloat>::max_exponent);
emit("int_limits", numeric_limits<int>::max(), numeric_limits<uchar>::max(),
     numeric_limits<short>::lowest(), numeric_limits<float>::infinity() > FLT_MAX);

emit("flt", FLT_MAX, FLT_MIN, FLT_EPSILON, FLT_DIG, FLT_MANT_DIG, FLT_MAX_EXP, FLT_MIN_EXP,
     FLT_MAX_10_EXP, FLT_MIN_10_EXP, FLT_RADIX);
emit("halfm", HALF_MAX, HALF_MIN, HALF_EPSILON, HALF_DIG, HALF_MANT_DIG, HALF_MAX_EXP,
     HALF_MIN_EXP);
emit("ints", CHAR_BIT, SCHAR_MAX, SCHAR_MIN, UCHAR_MAX, SHRT_MAX, SHRT_MIN, USHRT_MAX, INT_MAX,
     INT_MIN, UINT_MAX, LONG_MAX, LONG_MIN, ULONG_MAX);
"""

HELPERS = r"""
template <class T>
int kind(T, enable_if_t<is_floating_point_v<T>, int> = 0) { return 1; }
template <class T>
int kind(T, enable_if_t<is_integral_v<T>, int> = 0) { return 2; }
"""


@pytest.fixture(scope="module")
def got() -> dict:
    return run_checks(BODY, helpers=HELPERS, metal_passes=True)


def test_arithmetic_categories_answer_for_half_bfloat_and_vector_components(got: dict) -> None:
    assert got["floating"] == [1, 1, 1, 1, 1, 0]
    assert got["integral"] == [1, 1, 1, 0, 1]
    assert got["signed"] == [1, 0, 1, 1, 1]  # char is signed in Metal
    assert got["unsigned"] == [1, 0, 1]
    assert got["arithmetic"] == [1, 1, 0]  # a matrix is a class, not a vector


def test_scalar_vector_and_component_traits(got: dict) -> None:
    # A pointer is a scalar in any address space; a vector is not.
    assert got["scalar"] == [1, 0, 1, 1, 1]
    assert got["vector"] == [1, 1, 0, 1]
    assert got["vec_elements"] == [3, 0, 4]
    assert got["make"] == [1] * 6
    assert got["misc"] == [1, 1, 1, 1, 1, 0, 1, 1, 7]
    assert got["dispatch"] == [1, 1, 1, 2, 2]


def test_numeric_limits_in_full(got: dict) -> None:
    f16 = np.finfo(np.float16)
    assert got["half_limits"][:5] == [
        float(f16.max),
        float(f16.smallest_normal),
        -float(f16.max),
        float(f16.eps),
        2.0**-24,
    ]
    assert got["half_limits"][5:] == [11, 1, 1, 1, 1]
    # bfloat: float's exponent range with an 8-bit significand.
    assert got["bfloat_limits"] == [
        (2 - 2**-7) * 2.0**127,
        2.0**-126,
        -(2 - 2**-7) * 2.0**127,
        2.0**-7,
        8,
        128,
    ]
    assert got["int_limits"] == [2**31 - 1, 255, -(2**15), 1]


def test_numeric_macros_have_metals_values(got: dict) -> None:
    f32 = np.finfo(np.float32)
    assert got["flt"] == [
        float(f32.max),
        float(f32.smallest_normal),
        float(f32.eps),
        6,
        24,
        128,
        -125,
        38,
        -37,
        2,
    ]
    f16 = np.finfo(np.float16)
    assert got["halfm"] == [
        float(f16.max),
        float(f16.smallest_normal),
        float(f16.eps),
        3,
        11,
        16,
        -13,
    ]
    assert got["ints"] == [
        8,
        127,
        -128,
        255,
        2**15 - 1,
        -(2**15),
        2**16 - 1,
        2**31 - 1,
        -(2**31),
        2**32 - 1,
        2**63 - 1,
        -(2**63),
        2**64 - 1,
    ]
    assert math.isfinite(got["flt"][0])


def test_names_real_kernels_define_in_namespace_metal_still_compile() -> None:
    # MLX's steel/utils/type_traits.h adds these to namespace metal itself, so
    # the library must not declare them.
    helpers = r"""
    namespace metal {
    template <typename T> struct is_empty : metal::bool_constant<__is_empty(T)> {};
    template <typename... Ts> struct make_void { typedef void type; };
    template <typename... Ts> using void_t = typename make_void<Ts...>::type;
    }
    struct Empty {};
    """
    got = run_checks(
        'emit("mlx", metal::is_empty<Empty>::value, is_same_v<metal::void_t<int>, void>);',
        helpers=helpers,
        metal_passes=True,
    )
    assert got["mlx"] == [1, 1]

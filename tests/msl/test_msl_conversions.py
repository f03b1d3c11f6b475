"""Casts with Metal's meaning, and math functions with mixed argument types.

Metal converts the components of a vector in a C-style cast `(float4)i4` and in
a constructor `float4(i4)`, also when the type is spelled through a typedef or
a template parameter (MSL specification, "Vector Data Types": conversions
between vector types are component-wise; "as_type" is the reinterpreting
one). clang reinterprets the bits of a same-size vector instead, so the CPU
backend's conversion pass (csrc/cpu/conversions.cpp) rewrites every cast it
recognises; each precedence case it accepts is checked here against the value
C's own precedence gives. Binary and ternary math functions take mixed
argument types by the operand-type rule of Metal's <metal_math> headers
(_math_binary_func_operand_type): pow(float, short) computes in float.
"""

from __future__ import annotations

import coreai_torch._C as C
import numpy as np
import pytest
from support.msl_harness import compile_errors, run_checks

HELPERS = r"""
typedef float4 vec4_t;
using half4_t = half4;
template <typename T, typename U>
T via_template(U u) { return (T)u + T(u); }
template <class T>
struct holder { using type = T; };
"""

# int4 i = (1, -2, 3, 2^24 + 1): the last needs rounding in float (2^24 + 1 is odd).
BODY = r"""
int4 i = int4(1, -2, 3, 16777217);
float4 f = float4(0.5f, -1.75f, 2.25f, 3.0f);
int2 j = int2(7, -8);
device int4* p = &i;
emit("plain", (float4)i);
emit("times", (float4)i * 2);                 // the cast binds tighter than *
emit("sum_product", f + (float4)i * f);
emit("postfix", (float2)i.wy, (float4)p[0], (float4)*p);
emit("unary_inside", (float4)-i, (int4)-f);
// ! of a vector gives clang's -1/0 mask (vector.h); bool4() makes it 0/1.
emit("unary_outside", -(float4)i, bool4(!(bool4)int4(0, 1, 2, 0)), ~(uint2)int2(0, -1));
emit("chain", (float4)(half4)i, (int4)(float4)(half4)f);
emit("parenthesised", (float4)(i) * (float4)(i));
emit("ternary", true ? (float4)i : f, false ? f : (float4)j.xyxy);
emit("literal", (float4)1.5f, (float4)2);
emit("bool", (bool4)float4(0.0f, 0.5f, -2.0f, 0.0f), (float4)bool4(true, false, true, true));
emit("typedef", (vec4_t)i, vec4_t(i), (half4_t)f, half4_t(i));
emit("template", via_template<float4>(i), via_template<float>(3));
emit("qualified", (typename holder<float4>::type)i, (const float4)j.xxyy);
emit("vec", vec<float, 4>(i), (vec<float, 2>)j, metal::vec<int, 2>(float2(1.9f, -1.9f)));
emit("decltype", (decltype(f))i, (decltype(*p))f * 2);  // *p: an int4&
emit("scalar", (float)i.w, (int)f.y, (uint)-1);
emit("as_type", as_type<float>(1065353216), as_type<int2>(float2(1.0f, -2.0f)));
emit("pow", pow(2.0f, (short)3), pow(half(2), 3), pow(float2(2, 3), 2));
emit("mixed", fmax(1.5f, 2), max(half(1.5), 1), min(float4(1, 5, -1, 3), 2.0f),
     clamp(float4(-1, 0.5f, 2, 3), 0, 1), mix(float2(0, 10), float2(10, 20), 0.5f),
     step(0.5f, float2(0.25f, 1.0f)), fma(2.0f, 3, 1), atan2(1, 1.0f));
"""


@pytest.fixture(scope="module")
def got() -> dict:
    return run_checks(BODY, helpers=HELPERS, metal_passes=True)


def _f32(values) -> list[float]:
    return np.asarray(values, dtype=np.float32).astype(np.float64).tolist()


def test_c_style_vector_casts_convert_each_component(got: dict) -> None:
    i = np.array([1, -2, 3, 16777217])
    fi = _f32(i)  # 16777217 rounds to 16777216 in float
    assert got["plain"] == fi
    assert got["times"] == _f32(np.float32(i) * 2)
    f = np.array([0.5, -1.75, 2.25, 3.0], dtype=np.float32)
    assert got["sum_product"] == _f32(f + np.float32(i) * f)
    assert got["postfix"] == _f32([16777217, -2]) + fi + fi
    assert got["unary_inside"] == [*_f32(-i), 0, 1, -2, -3]  # float -> int truncates
    assert got["unary_outside"] == [*_f32(-np.float32(i)), 1, 0, 0, 1, 2**32 - 1, 0]
    # Through half: 16777217 overflows half to infinity; 2.25 and -1.75 are exact.
    assert got["chain"][:3] == [1.0, -2.0, 3.0] and got["chain"][3] == float("inf")
    assert got["chain"][4:] == [0, -1, 2, 3]
    assert got["parenthesised"] == _f32(np.float32(i) * np.float32(i))
    assert got["ternary"] == [*fi, 7.0, -8.0, 7.0, -8.0]
    assert got["literal"] == [1.5] * 4 + [2.0] * 4
    assert got["bool"] == [0, 1, 1, 0, 1, 0, 1, 1]


def test_casts_through_typedefs_templates_and_vec(got: dict) -> None:
    i = np.array([1, -2, 3, 16777217])
    fi = _f32(i)
    h = np.array([0.5, -1.75, 2.25, 3.0], dtype=np.float16).astype(np.float64).tolist()
    assert got["typedef"] == fi + fi + h + [1.0, -2.0, 3.0, float("inf")]
    assert got["template"] == [*_f32(2 * np.float32(i)), 6.0]
    assert got["qualified"] == [*fi, 7.0, 7.0, -8.0, -8.0]
    assert got["vec"] == [*fi, 7.0, -8.0, 1, -1]
    # The type of an expression, without its reference: float4, then int4.
    assert got["decltype"] == [*fi, 0, -2, 4, 6]  # f truncates to (0, -1, 2, 3)


def test_scalar_casts_and_as_type_are_unchanged(got: dict) -> None:
    assert got["scalar"] == [16777216.0, -1, 2**32 - 1]
    assert got["as_type"] == [1.0, 1065353216, -1073741824]


def test_math_functions_take_mixed_argument_types(got: dict) -> None:
    assert got["pow"] == [8.0, 8.0, 4.0, 9.0]
    # fmax, max (half), min, clamp, mix, step, fma with scalars standing in for
    # vectors or floats; atan2(1, 1.0f) is pi / 4 rounded to float.
    assert got["mixed"][:15] == [2.0, 1.5, 1, 2, -1, 2, 0, 0.5, 1, 1, 5, 15, 0, 1, 7]
    assert got["mixed"][15:] == [float(np.float32(np.pi / 4))]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("a = (float4)v;", "a = ::coreai::cast_to<float4>->*v;"),
        ("return (half2)-w;", "return ::coreai::cast_to<half2>->*-w;"),
        ("x = (float4)(half4)y;", "x = ::coreai::cast_to<float4>->*::coreai::cast_to<half4>->*y;"),
        ("n = sizeof(float4);", None),
        ("float g(float4);", None),
        ("y = (float)v.x;", None),
        ("f(x)(float4) y;", None),  # a call's result called again: not a cast
        (
            "template <typename T> T h(U u) { return T(u); }",
            "template <typename T> T h(U u) { return ::coreai::construct<T>(u); }",
        ),
        ("template <typename T> struct S { operator T() const; };", None),
        ("// (float4)v\n", None),
        (
            "a = (decltype(v))w * 2;",
            "a = ::coreai::cast_to<::std::remove_reference_t<decltype(v)>>->*w * 2;",
        ),
        ("n = sizeof(decltype(v));", None),
    ],
)
def test_conversion_pass(source: str, expected: str | None) -> None:
    assert C._rewrite_conversions(source) == (source if expected is None else expected)


def test_refused_conversions_name_the_problem() -> None:
    errors = compile_errors(
        [
            "half4 h = half4(1); float2 f = (float2)h;",  # 4 components into 2
            "half x = pow(half(2), 3.0f);",  # half and float: no operand type
            "int m = max(1, 2u);",  # int and uint: no operand type either
            "device float* d = nullptr; threadgroup float* t = (threadgroup float*)d;",
            "float x = 1; using R = int&; int r = (R)x;",  # a reference cast via a typedef
        ],
        metal_passes=True,
    )
    assert "a vector converts only to a vector with as many components" in errors[0]
    assert "no matching function for call to 'pow'" in errors[1]
    assert "no matching function for call to 'max'" in errors[2]
    assert "a pointer cannot be cast to another address space" in errors[3]
    assert "a C-style cast to a reference type named by a typedef" in errors[4]

"""Math functions of the CPU Metal library against NumPy / torch references."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from support.msl_harness import ON_GPU, hex_float, run_checks

# Unary functions: name -> (reference on float64, input domain).
WIDE = np.linspace(-9.5, 9.5, 39)
POSITIVE = np.concatenate([np.geomspace(1e-3, 1e3, 25), [1.0, 2.0, 0.5]])
UNIT = np.linspace(-0.99, 0.99, 23)
UNARY = {
    "exp": (np.exp, WIDE),
    "exp2": (np.exp2, WIDE),
    "exp10": (lambda x: np.power(10.0, x), WIDE / 3),
    "log": (np.log, POSITIVE),
    "log2": (np.log2, POSITIVE),
    "log10": (np.log10, POSITIVE),
    "sqrt": (np.sqrt, POSITIVE),
    "rsqrt": (lambda x: 1 / np.sqrt(x), POSITIVE),
    "sin": (np.sin, WIDE),
    "cos": (np.cos, WIDE),
    "tan": (np.tan, UNIT * 1.5),
    "asin": (np.arcsin, UNIT),
    "acos": (np.arccos, UNIT),
    "atan": (np.arctan, WIDE),
    "sinh": (np.sinh, WIDE / 2),
    "cosh": (np.cosh, WIDE / 2),
    "tanh": (np.tanh, WIDE / 2),
    "asinh": (np.arcsinh, WIDE),
    "acosh": (np.arccosh, POSITIVE + 1),
    "atanh": (np.arctanh, UNIT),
    "sinpi": (lambda x: np.where(x == np.round(x), 0.0, np.sin(np.pi * x)), WIDE / 3),
    "cospi": (lambda x: np.where(x - 0.5 == np.round(x - 0.5), 0.0, np.cos(np.pi * x)), WIDE / 3),
    "tanpi": (lambda x: np.tan(np.pi * x), UNIT / 3),
    "fabs": (np.abs, WIDE),
    "abs": (np.abs, WIDE),
    "floor": (np.floor, WIDE),
    "ceil": (np.ceil, WIDE),
    "trunc": (np.trunc, WIDE),
    "rint": (np.rint, WIDE),
    "round": (lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5), WIDE),
    "sign": (np.sign, WIDE),
    "saturate": (lambda x: np.clip(x, 0, 1), WIDE / 8),
    "fract": (lambda x: x - np.floor(x), WIDE + 0.3),
}

# Maximum error in float32 ulps of the correctly rounded result. glibc's
# float functions are within 1 ulp; rsqrt rounds twice (sqrt, then divide);
# the pi functions multiply by pi in double; exp10 goes through powf.
FLOAT_ULPS = {"rsqrt": 2, "tan": 2, "tanpi": 2}
# On the GPU the functions are libdevice's, whose maximum errors the CUDA C++
# Programming Guide lists (single precision, full range): exp, exp2, exp10
# (powf) 2; log10 2; sin, cos 2; tan 4; asin, acos, atan 2; sinh 3; cosh,
# tanh 2; asinh 3; acosh 4; atanh 3; log and log2 1.
if ON_GPU:
    FLOAT_ULPS = {
        **FLOAT_ULPS,
        **dict.fromkeys(["exp", "exp2", "exp10", "log10", "sin", "cos", "asin", "acos"], 2),
        **dict.fromkeys(["atan", "cosh", "tanh"], 2),
        **dict.fromkeys(["sinh", "asinh", "atanh"], 3),
        **dict.fromkeys(["tan", "acosh"], 4),
    }

SPECIAL_INPUTS = [0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf"), float("nan")]


def _float_list(values) -> str:
    return ", ".join(hex_float(float(np.float32(v))) for v in values)


def _unary_program() -> str:
    lines = []
    for name, (_, domain) in UNARY.items():
        lines.append(f"{{ volatile float in[] = {{{_float_list(domain)}}};")
        lines.append("  for (float x : in) {")
        lines.append(f'    emit("f32_{name}", {name}(x));')
        lines.append(f'    emit("f16_{name}", {name}(half(x)));')
        lines.append(f'    emit("bf16_{name}", {name}(bfloat(x)));')
        lines.append(f'    emit("fast_{name}", fast::{name}(x), precise::{name}(x));')
        lines.append("  }")
        # The vector version computes component by component.
        lines.append("  float4 v = float4(in[0], in[1], in[2], in[3]);")
        lines.append(f'  emit("f32x4_{name}", {name}(v));')
        lines.append("}")
    return "\n".join(lines)


SPECIAL_BODY = r"""
float inf = INFINITY, nan = NAN;
volatile float vinf = inf, vnan = nan;
// Safe-math special values.
emit("exp_special", exp(-vinf), exp(vinf), exp(vnan), exp(half(-vinf)), exp(bfloat(-vinf)));
emit("log_special", log(0.0f), log(-1.0f), log(vinf), log2(0.0f), sqrt(-1.0f), sqrt(-0.0f));
emit("trig_special", sin(vnan), sin(vinf), tanh(vinf), tanh(-vinf), atan(vinf));
emit("nan_propagation", pow(vnan, 1.0f), fmod(vnan, 2.0f), fma(vnan, 1.0f, 1.0f), fract(vnan),
     floor(vnan), sign(vnan));
// fmin/fmax/min/max return the other argument when one is NaN.
emit("min_max_nan", fmin(vnan, 1.0f), fmax(2.0f, vnan), min(vnan, 3.0f), max(4.0f, vnan),
     min(-0.0f, 0.0f) == 0.0f, clamp(vnan, 0.0f, 1.0f));
emit("rounding", round(2.5f), round(-2.5f), rint(2.5f), rint(3.5f), round(half(0.5f)),
     rint(half(0.5f)), trunc(-1.7f), ceil(-0.5f));
emit("sign_values", sign(-0.0f), sign(0.0f), sign(-3.0f), sign(half(2.0f)));
emit("fract_bounds", fract(-1e-10f), fract(half(-1e-4f)), fract(bfloat(-1e-4f)), fract(-0.25f),
     fract(vinf));
emit("step_smooth", step(1.0f, 0.5f), step(1.0f, 1.0f), step(1.0f, float3(0.0f, 1.0f, 2.0f)),
     smoothstep(0.0f, 2.0f, 0.5f), smoothstep(0.0f, 2.0f, float2(-1.0f, 3.0f)));
emit("mix_clamp", mix(1.0f, 3.0f, 0.25f), mix(float2(0.0f, 10.0f), float2(1.0f, 20.0f), 0.5f),
     clamp(5.0f, 0.0f, 2.0f), clamp(float3(-1.0f, 0.5f, 9.0f), 0.0f, 1.0f),
     clamp(half(-1.0f), half(0.0f), half(1.0f)), saturate(float2(-2.0f, 0.25f)));
emit("pow", pow(2.0f, 10.0f), pow(-2.0f, 3.0f), pow(-2.0f, 0.5f), powr(2.0f, 0.5f),
     powr(-2.0f, 2.0f), pow(half(3.0f), half(2.0f)));
emit("binary", atan2(1.0f, -1.0f), fmod(7.5f, 2.0f), fmod(-7.5f, 2.0f), copysign(3.0f, -0.0f),
     fdim(5.0f, 3.0f), fdim(3.0f, 5.0f), fmin(float2(1.0f, 5.0f), 3.0f),
     fmax(float2(1.0f, 5.0f), 3.0f), max(half2(half(1.0f), half(-1.0f)), half(0.0f)));
emit("three", fmin3(3.0f, 1.0f, 2.0f), fmax3(3.0f, 1.0f, 2.0f), fmedian3(3.0f, 1.0f, 2.0f),
     median3(float2(1.0f, 9.0f), float2(5.0f, 2.0f), float2(3.0f, 4.0f)));
// fma of narrow types rounds once: a * a - 1 keeps the low bits of the
// product that a separate multiply would round away.
volatile half a = half(1.0f + 3 * 0x1p-10f), one = half(1.0f), eps = half(0x1p-11f),
              neg = half(-1.0f);
emit("fma", fma(2.0f, 3.0f, 1.0f), fma(a, a, neg), fma(one, one, eps));
float cosine;
float s = sincos(0.5f, cosine);
float2 cosine2;
float2 s2 = sincos(float2(0.5f, 1.0f), cosine2);
emit("sincos", s, cosine, s2, cosine2);
int exponent;
float mantissa = frexp(48.0f, exponent);
int2 exponents;
float2 mantissas = frexp(float2(0.375f, -5.0f), exponents);
emit("frexp_ldexp", mantissa, exponent, mantissas, exponents, ldexp(0.75f, 6),
     ldexp(float2(1.0f, 3.0f), int2(-1, 2)), ldexp(half(1.0f), 20), ilogb(48.0f));
float integral;
float frac = modf(-3.75f, integral);
emit("modf", frac, integral);
emit("nextafter", nextafter(1.0f, 2.0f), nextafter(half(1.0f), half(2.0f)),
     nextafter(bfloat(1.0f), bfloat(0.0f)), nextafter(0.0f, -1.0f));
emit("pi_exact", sinpi(1.0f), sinpi(-2.0f), sinpi(0.5f), cospi(0.5f), cospi(1.0f), tanpi(1.0f));
emit("divide", fast::divide(1.0f, 4.0f), precise::divide(1.0f, 3.0f));
// half math is computed in float and rounded once.
emit("half_once", exp(half(1.0f)), sqrt(half(2.0f)), sin(bfloat(1.0f)), log(bfloat(3.0f)));
"""


@pytest.fixture(scope="module")
def results() -> dict:
    return run_checks(_unary_program() + SPECIAL_BODY)


def _ulp32(x: np.ndarray) -> np.ndarray:
    x = np.abs(x.astype(np.float32))
    return np.spacing(np.maximum(x, np.float32(np.finfo(np.float32).tiny)))


@pytest.mark.parametrize("name", list(UNARY))
def test_float_matches_numpy_within_ulps(results: dict, name: str) -> None:
    reference, domain = UNARY[name]
    x = np.float32(domain).astype(np.float64)
    expected = reference(x)
    got = np.array(results[f"f32_{name}"])
    ulps = FLOAT_ULPS.get(name, 1)
    error = np.abs(got - expected) / _ulp32(expected)
    assert np.all(error <= ulps), (
        f"{name}: worst error {error.max():.2f} ulp at x={x[error.argmax()]}"
    )
    np.testing.assert_array_equal(np.array(results[f"f32x4_{name}"]), got[:4])


@pytest.mark.parametrize("name", list(UNARY))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_narrow_types_compute_in_float_and_round_once(
    results: dict, name: str, dtype: torch.dtype
) -> None:
    reference, domain = UNARY[name]
    x = torch.tensor(np.float32(domain)).to(dtype).double()
    expected = torch.from_numpy(reference(x.numpy())).to(dtype).double()
    got = torch.tensor(results[f"{'f16' if dtype == torch.float16 else 'bf16'}_{name}"]).double()
    # One rounding of a float result that is itself within an ulp or two of
    # exact: the narrow result is the correctly rounded one or its neighbour
    # when the exact value lies next to a rounding boundary.
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(
        got, expected, rtol=eps, atol=torch.finfo(dtype).tiny, equal_nan=True
    )


@pytest.mark.parametrize("name", list(UNARY))
def test_fast_and_precise_are_the_same_functions(results: dict, name: str) -> None:
    values = np.array(results[f"fast_{name}"]).reshape(-1, 2)
    np.testing.assert_array_equal(values[:, 0], values[:, 1])
    np.testing.assert_array_equal(values[:, 0], np.array(results[f"f32_{name}"]))


def _nan(values) -> list:
    return [math.isnan(v) for v in values]


def test_special_values(results: dict) -> None:
    inf = math.inf
    assert results["exp_special"][:2] == [0.0, inf]
    assert math.isnan(results["exp_special"][2])
    assert results["exp_special"][3:] == [0.0, 0.0]
    log_special = results["log_special"]
    assert log_special[0] == -inf and math.isnan(log_special[1]) and log_special[2] == inf
    assert log_special[3] == -inf and math.isnan(log_special[4])
    assert log_special[5] == 0.0 and math.copysign(1, log_special[5]) == -1
    trig = results["trig_special"]
    assert _nan(trig[:2]) == [True, True]
    assert trig[2:] == [1.0, -1.0, float(np.float32(math.pi / 2))]
    assert _nan(results["nan_propagation"]) == [True] * 5 + [False]
    assert results["nan_propagation"][5] == 0.0
    assert results["min_max_nan"] == [1.0, 2.0, 3.0, 4.0, 1, 0.0]


def test_rounding_and_sign(results: dict) -> None:
    assert results["rounding"] == [3.0, -3.0, 2.0, 4.0, 1.0, 0.0, -1.0, -0.0]
    sign = results["sign_values"]
    assert sign == [-0.0, 0.0, -1.0, 1.0]
    assert math.copysign(1, sign[0]) == -1 and math.copysign(1, sign[1]) == 1


def test_fract_stays_below_one_in_its_own_type(results: dict) -> None:
    got = results["fract_bounds"]
    assert got[:4] == [
        float.fromhex("0x1.fffffep-1"),
        float.fromhex("0x1.ffcp-1"),
        float.fromhex("0x1.fep-1"),
        0.75,
    ]
    assert math.isnan(got[4])


def test_common_functions(results: dict) -> None:
    assert results["step_smooth"] == [0.0, 1.0, 0.0, 1.0, 1.0, 0.15625, 0.0, 1.0]
    assert results["mix_clamp"] == [1.5, 0.5, 15.0, 2.0, 0.0, 0.5, 1.0, 0.0, 0.0, 0.25]
    pow_values = results["pow"]
    assert pow_values[0:2] == [1024.0, -8.0] and math.isnan(pow_values[2])
    assert pow_values[3] == float(np.float32(math.sqrt(2))) and math.isnan(pow_values[4])
    assert pow_values[5] == 9.0
    f32 = np.float32
    assert results["binary"] == [
        float(f32(3 * math.pi / 4)),
        1.5,
        -1.5,
        -3.0,
        2.0,
        0.0,
        1.0,
        3.0,
        3.0,
        5.0,
        1.0,
        0.0,
    ]
    assert results["three"] == [1.0, 3.0, 2.0, 3.0, 4.0]


def test_fma_rounds_once(results: dict) -> None:
    a = 1.0 + 3 * 2.0**-10  # exact half; a*a = 1 + 6 * 2^-10 + 9 * 2^-20
    exact = a * a - 1.0
    got = results["fma"]
    assert got[0] == 7.0
    assert got[1] == float(np.float16(exact))  # one rounding of the exact value
    assert got[1] != float(np.float16(np.float16(a * a) - np.float16(1.0)))
    assert got[2] == 1.0  # 1 + 2^-11 is a tie, rounded to even


def test_sincos_frexp_ldexp_modf_nextafter(results: dict) -> None:
    f32 = np.float32
    s, c = float(f32(math.sin(0.5))), float(f32(math.cos(0.5)))
    s1, c1 = float(f32(math.sin(1.0))), float(f32(math.cos(1.0)))
    if ON_GPU:  # libdevice's sinf and cosf: within 2 ulp (FLOAT_ULPS)
        ulp = float(np.spacing(f32(1.0)))
        assert np.allclose(results["sincos"], [s, c, s, s1, c, c1], rtol=2 * ulp, atol=0)
    else:
        assert results["sincos"] == [s, c, s, s1, c, c1]
    # ldexp(half(1), 20) overflows half.
    assert results["frexp_ldexp"] == [0.75, 6, 0.75, -0.625, -1, 3, 48.0, 0.5, 12.0, math.inf, 5]
    assert results["modf"] == [-0.75, -3.0]
    assert results["nextafter"] == [1.0 + 2.0**-23, 1.0 + 2.0**-10, 1.0 - 2.0**-8, -(2.0**-149)]


def test_pi_functions_are_exact_at_special_points(results: dict) -> None:
    got = results["pi_exact"]
    assert got == [0.0, -0.0, 1.0, 0.0, -1.0, 0.0]
    assert math.copysign(1, got[1]) == -1


def test_divide_and_narrow_rounding(results: dict) -> None:
    assert results["divide"] == [0.25, float(np.float32(1 / 3))]
    expected = [
        float(torch.tensor(math.e).half()),
        float(torch.tensor(math.sqrt(2)).half()),
        float(torch.tensor(math.sin(1.0)).bfloat16()),
        float(torch.tensor(math.log(3.0)).bfloat16()),
    ]
    assert results["half_once"] == expected

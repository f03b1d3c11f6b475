"""Relational and geometric functions of the CPU Metal library."""

from __future__ import annotations

import math

import numpy as np
import pytest
from support.msl_harness import run_checks

BODY = r"""
volatile float vnan = NAN, vinf = INFINITY;
float4 v = float4(1.0f, vnan, -vinf, -0.0f);
emit("isnan", isnan(v), isnan(vnan), isnan(1.0f), isnan(half(vnan)), isnan(bfloat(vnan)));
emit("isinf", isinf(v), isinf(half(65520.0f)));
emit("isfinite", isfinite(v), isfinite(half2(half(1.0f), half(vinf))));
emit("signbit", signbit(v), signbit(-0.0f), signbit(bfloat(-2.0f)));
emit("isnormal", isnormal(float3(1e-40f, 1e-5f, 0.0f)), isnormal(half(1e-5f)),
     isnormal(half(1e-4f)));
emit("ordered", isordered(float2(1.0f, vnan), float2(2.0f, 3.0f)),
     isunordered(float2(1.0f, vnan), float2(2.0f, 3.0f)));

// select(a, b, c) takes b where c holds.
float4 a = float4(1, 2, 3, 4), b = float4(10, 20, 30, 40);
emit("select_scalar", select(1.0f, 2.0f, true), select(1.0f, 2.0f, false), select(3, 4, true),
     select(half(1.0f), half(2.0f), true));
emit("select_mask", select(a, b, a > 2.5f));
emit("select_bool_vector", select(a, b, bool4(true, false, true, false)));
emit("select_scalar_condition", select(a, b, true), select(int2(1, 2), int2(3, 4), false));
emit("select_half", select(half2(a.xy), half2(b.xy), half2(a.xy) < half(1.5f)));
emit("all_any", all(bool3(true, true, true)), all(bool3(true, false, true)),
     any(bool2(false, false)), any(bool2(false, true)), all(int2(1, 2) == int2(1, 2)),
     any(isnan(v)), all(isfinite(a)), all(true), any(false));

// Geometric functions.
float3 x = float3(1.0f, 2.0f, 3.0f), y = float3(-4.0f, 0.5f, 2.0f);
emit("dot", dot(x, y), dot(float4(1.0f), float4(2.0f)), dot(half2(half(1.5f)), half2(half(2.0f))));
emit("length", length(x), length_squared(x), distance(x, y), distance_squared(x, y));
emit("normalize", normalize(x), normalize(half3(half(3.0f), half(0.0f), half(4.0f))));
emit("cross", cross(x, y), cross(half3(half(1.0f), half(0.0f), half(0.0f)),
                                  half3(half(0.0f), half(1.0f), half(0.0f))));
float2 incident = float2(1.0f, -1.0f), normal = float2(0.0f, 1.0f);
emit("reflect", reflect(incident, normal));
float2 unit = normalize(incident);
emit("refract", refract(unit, normal, 1.0f), refract(unit, normal, 2.0f));
emit("faceforward", faceforward(normal, incident, normal), faceforward(normal, -incident, normal));
"""


@pytest.fixture(scope="module")
def results() -> dict:
    return run_checks(BODY)


def test_classification(results: dict) -> None:
    # Vector tests give bool vectors with 0/1 components.
    assert results["isnan"] == [0, 1, 0, 0, 1, 0, 1, 1]
    assert results["isinf"] == [0, 0, 1, 0, 1]
    assert results["isfinite"] == [1, 0, 0, 1, 1, 0]
    assert results["signbit"] == [0, 0, 1, 1, 1, 1]
    # 1e-40 is subnormal in float; 1e-5 is normal in float but subnormal in half.
    assert results["isnormal"] == [0, 1, 0, 0, 1]
    assert results["ordered"] == [1, 0, 0, 1]


def test_select_all_any(results: dict) -> None:
    assert results["select_scalar"] == [2.0, 1.0, 4, 2.0]
    assert results["select_mask"] == [1, 2, 30, 40]
    assert results["select_bool_vector"] == [10, 2, 30, 4]
    assert results["select_scalar_condition"] == [10, 20, 30, 40, 1, 2]
    assert results["select_half"] == [10, 2]
    assert results["all_any"] == [1, 0, 0, 1, 1, 1, 1, 1, 0]


def test_geometric(results: dict) -> None:
    x, y = np.array([1.0, 2.0, 3.0]), np.array([-4.0, 0.5, 2.0])
    f32 = np.float32
    assert results["dot"] == [float(x @ y), 8.0, 6.0]
    # float32 results of sqrt of exact sums: one rounding.
    assert results["length"] == [
        float(f32(math.sqrt(14.0))),
        14.0,
        float(f32(np.linalg.norm(x - y))),
        float((x - y) @ (x - y)),
    ]
    np.testing.assert_allclose(results["normalize"][:3], x / np.linalg.norm(x), rtol=2**-23)
    # half: computed in float, rounded once.
    assert results["normalize"][3:] == np.float16([0.6, 0.0, 0.8]).astype(float).tolist()
    assert results["cross"] == [*np.cross(x, y).tolist(), 0.0, 0.0, 1.0]
    assert results["reflect"] == [1.0, 1.0]
    s = float(f32(math.sqrt(0.5)))
    refract = results["refract"]
    np.testing.assert_allclose(refract[:2], [s, -s], rtol=2**-22)
    assert refract[2:] == [0.0, 0.0]  # total internal reflection
    assert results["faceforward"] == [0.0, 1.0, -0.0, -1.0]

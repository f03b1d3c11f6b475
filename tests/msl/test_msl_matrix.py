"""Metal's matrix types (MSL specification, "Matrix Data Types" and "Matrix Functions").

Facts pinned here: column-major storage of column vectors (so float3x3 is 48
bytes: three 16-byte float3 columns), m[i] is column i, a scalar constructor
fills the diagonal, a list of scalars fills column by column, conversions
between element types go element by element, and the products are the usual
linear-algebra ones with vectors as columns (m * v) or rows (v * m).
"""

from __future__ import annotations

import numpy as np
import pytest
from support.msl_harness import compile_errors, run_checks

BODY = r"""
emit("sizes", sizeof(float3x3), alignof(float3x3), sizeof(half2x4), sizeof(float4x4),
     sizeof(bfloat4x4), sizeof(float2x3));

float2x3 d = float2x3(2.0f);  // 2 columns, 3 rows: 2 on the diagonal
emit("diagonal", d[0], d[1]);
float3x2 s = float3x2(1, 2, 3, 4, 5, 6);  // column by column
emit("scalars", s[0], s[1], s[2], s[2][1]);
float2x2 c = float2x2(float2(1, 2), float2(3, 4));
c[1][0] = 7.0f;
emit("columns", c[0], c[1]);

// Products: a 3x2 (3 columns, 2 rows) times a 2-row... checked against numpy.
float3x2 a = float3x2(1, -2, 3, 0.5f, -1, 4);
float4x3 b = float4x3(2, 1, 0, -1, 3, 2, 0.25f, -2, 1, 5, 0, -3);
float4x2 ab = a * b;
emit("ab", ab[0], ab[1], ab[2], ab[3]);
emit("mv", a * float3(1, 2, -1));
emit("vm", float2(3, -2) * a);
emit("sum", (a + a)[2], (a - a * 3.0f)[1], (2.0f * a / 4.0f)[0], (-a)[1]);
float2x2 sq = float2x2(1, 2, 3, 4);
sq *= float2x2(0, 1, 1, 0);
emit("compound", sq[0], sq[1]);
emit("transpose", transpose(a)[0], transpose(a)[1]);
emit("det", determinant(float2x2(3, 1, 2, 4)),
     determinant(float3x3(2, 0, 1, 1, 3, 2, 1, 1, 1)),
     determinant(float4x4(1, 2, 0, 1, 0, 1, 3, 2, 2, 0, 1, 1, 1, 1, 0, 3)),
     determinant(half2x2(half(1.5f), half(2), half(-1), half(4))));

// Element-wise conversions, by constructor and by C-style cast.
float2x4 f = float2x4(float4(1.0f / 3.0f, 65504.0f, 70000.0f, -2.5f), float4(0.1f));
half2x4 h1 = half2x4(f);
half2x4 h2 = (half2x4)f;
emit("convert", h1[0], h2[0], h2[1][0], float4x4(half4x4(1.0h))[3]);
bfloat2x2 bf = (bfloat2x2)float2x2(1.00390625f, 3.0f, -1.0f, 0.0f);
emit("to_bfloat", bf[0]);
"""


@pytest.fixture(scope="module")
def got() -> dict:
    return run_checks(BODY, metal_passes=True)


def _a() -> np.ndarray:
    # Metal fills column by column: column j holds values[2j : 2j + 2].
    return np.array([1, -2, 3, 0.5, -1, 4], dtype=np.float32).reshape(3, 2).T


def _b() -> np.ndarray:
    return np.array([2, 1, 0, -1, 3, 2, 0.25, -2, 1, 5, 0, -3], dtype=np.float32).reshape(4, 3).T


def test_layout_and_constructors(got: dict) -> None:
    assert got["sizes"] == [48, 16, 16, 64, 32, 32]
    assert got["diagonal"] == [2, 0, 0, 0, 2, 0]
    assert got["scalars"] == [1, 2, 3, 4, 5, 6, 6]
    assert got["columns"] == [1, 2, 7, 4]


def test_products_match_linear_algebra(got: dict) -> None:
    a, b = _a(), _b()
    # Small exact values: every product and sum is exact in float32.
    assert got["ab"] == (a @ b).T.ravel().tolist()
    assert got["mv"] == (a @ np.array([1, 2, -1], dtype=np.float32)).tolist()
    assert got["vm"] == (np.array([3, -2], dtype=np.float32) @ a).tolist()
    # Column 2 of a + a, column 1 of a - 3a, column 0 of 2a / 4, column 1 of -a.
    want = [2 * a[:, 2], -2 * a[:, 1], a[:, 0] / 2, -a[:, 1]]
    assert got["sum"] == np.concatenate(want).tolist()
    sq = np.array([[1, 3], [2, 4]]) @ np.array([[0, 1], [1, 0]])
    assert got["compound"] == sq.T.ravel().tolist()
    # Column i of the transpose is row i of a.
    assert got["transpose"] == a[0].tolist() + a[1].tolist()


def test_determinants(got: dict) -> None:
    m4 = np.array([1, 2, 0, 1, 0, 1, 3, 2, 2, 0, 1, 1, 1, 1, 0, 3], dtype=np.float64).reshape(4, 4)
    m3 = np.array([2, 0, 1, 1, 3, 2, 1, 1, 1], dtype=np.float64).reshape(3, 3)
    assert got["det"][0] == 3 * 4 - 2 * 1
    assert got["det"][1] == pytest.approx(np.linalg.det(m3.T))
    assert got["det"][2] == pytest.approx(np.linalg.det(m4.T))
    assert got["det"][3] == 1.5 * 4 - (-1) * 2


def test_conversions_go_element_by_element(got: dict) -> None:
    want = [float(np.float16(np.float32(1 / 3))), 65504.0, float("inf"), -2.5]
    assert got["convert"][:4] == want  # 70000 is past half's range: infinity
    assert got["convert"][4:8] == got["convert"][:4]  # the C-style cast converts too
    assert got["convert"][8] == float(np.float16(np.float32(0.1)))
    assert got["convert"][9:] == [0, 0, 0, 1]  # column 3 of the identity
    # 1 + 2^-8 is a tie between two bfloats: rounds to even (1.0).
    assert got["to_bfloat"] == [1.0, 3.0]


def test_shapes_that_do_not_multiply_are_refused() -> None:
    errors = compile_errors(
        [
            "float3x2 a(1.0f); float3x2 b(1.0f); auto c = a * b;",
            "float2x2 m = float2x2(float3(1), float3(2));",
        ]
    )
    assert "invalid operands to binary expression" in errors[0]
    assert "no matching" in errors[1] or "cannot" in errors[1]

"""Integer functions of the CPU Metal library against exact Python references."""

from __future__ import annotations

import itertools

import pytest
from support.msl_harness import run_checks

# C++ type, bits, signed
TYPES = {
    "char": ("int8_t", 8, True),
    "uchar": ("uchar", 8, False),
    "short": ("short", 16, True),
    "ushort": ("ushort", 16, False),
    "int": ("int", 32, True),
    "uint": ("uint", 32, False),
    "long": ("long", 64, True),
    "ulong": ("ulong", 64, False),
}


def _values(bits: int, signed: bool) -> list[int]:
    if signed:
        lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        return [lo, lo + 1, -77, -1, 0, 1, 5, 100, hi - 1, hi]
    hi = 2**bits - 1
    return [0, 1, 2, 5, 100, 2 ** (bits - 1), hi - 1, hi]


def _wrap(value: int, bits: int, signed: bool) -> int:
    value &= (1 << bits) - 1
    if signed and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def _saturate(value: int, bits: int, signed: bool) -> int:
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    return max(lo, min(hi, value))


def _unsigned(value: int, bits: int) -> int:
    return value & ((1 << bits) - 1)


def _rotate(x: int, by: int, bits: int, signed: bool) -> int:
    u, n = _unsigned(x, bits), _unsigned(by, bits) % bits
    return _wrap((u << n) | (u >> (bits - n)), bits, signed)


def _extract(x: int, offset: int, count: int, bits: int, signed: bool) -> int:
    if count == 0:
        return 0
    field = (_unsigned(x, bits) >> offset) & ((1 << count) - 1)
    return _wrap(field, count, signed) if signed else field


def _insert(base: int, insert: int, offset: int, count: int, bits: int, signed: bool) -> int:
    mask = ((1 << count) - 1) << offset
    u = (_unsigned(base, bits) & ~mask) | ((_unsigned(insert, bits) << offset) & mask)
    return _wrap(u, bits, signed)


BINARY = {
    "min": lambda a, b, bits, s: min(a, b),
    "max": lambda a, b, bits, s: max(a, b),
    "absdiff": lambda a, b, bits, s: _wrap(abs(a - b), bits, s),
    "addsat": lambda a, b, bits, s: _saturate(a + b, bits, s),
    "subsat": lambda a, b, bits, s: _saturate(a - b, bits, s),
    "mulhi": lambda a, b, bits, s: _wrap((a * b) >> bits, bits, s),
    "hadd": lambda a, b, bits, s: (a + b) >> 1,
    "rhadd": lambda a, b, bits, s: (a + b + 1) >> 1,
    "rotate": lambda a, b, bits, s: _rotate(a, b, bits, s),
}
TERNARY = {
    "clamp": lambda a, b, c, bits, s: min(max(a, b), c),
    "min3": lambda a, b, c, bits, s: min(a, b, c),
    "max3": lambda a, b, c, bits, s: max(a, b, c),
    "median3": lambda a, b, c, bits, s: sorted([a, b, c])[1],
    "madhi": lambda a, b, c, bits, s: _wrap(((a * b) >> bits) + c, bits, s),
    "madsat": lambda a, b, c, bits, s: _saturate(a * b + c, bits, s),
}
UNARY = {
    "abs": lambda a, bits, s: _wrap(abs(a), bits, s),
    "popcount": lambda a, bits, s: bin(_unsigned(a, bits)).count("1"),
    "clz": lambda a, bits, s: bits - _unsigned(a, bits).bit_length(),
    "ctz": lambda a, bits, s: (
        bits if a == 0 else (_unsigned(a, bits) & -_unsigned(a, bits)).bit_length() - 1
    ),
    "reverse_bits": lambda a, bits, s: _wrap(
        int(format(_unsigned(a, bits), f"0{bits}b")[::-1], 2), bits, s
    ),
}
BIT_FIELDS = [(0, 0), (0, 3), (2, 5), (1, 7)]


def _program() -> str:
    lines = []
    for name, (ctype, bits, signed) in TYPES.items():
        values = _values(bits, signed)
        literal = ", ".join(f"{ctype}({v}{'l' if signed else 'ul'})" for v in values)
        if signed and bits == 64:  # -2^63 has no literal
            literal = literal.replace(f"{ctype}({values[0]}l)", "numeric_limits<long>::min()")
        lines.append(f"{{ using T = {ctype}; volatile T in[] = {{{literal}}};")
        lines.append("  for (T a : in) {")
        for fn in UNARY:
            lines.append(f'    emit("{name}_{fn}", {fn}(a));')
        for offset, count in BIT_FIELDS:
            lines.append(f'    emit("{name}_extract", extract_bits(a, {offset}u, {count}u));')
        lines.append("    for (T b : in) {")
        for fn in BINARY:
            lines.append(f'      emit("{name}_{fn}", {fn}(a, b));')
        for offset, count in BIT_FIELDS:
            lines.append(f'      emit("{name}_insert", insert_bits(a, b, {offset}u, {count}u));')
        lines.append("      for (T c : in) {")
        for fn in TERNARY:
            lines.append(f'        emit("{name}_{fn}", {fn}(a, b, c));')
        lines.append("      }")
        lines.append("    }")
        lines.append("  }")
        # Vectors act per component; the scalar-broadcast overloads too.
        vec = "vec<T, 4>"
        lines.append(f"  {vec} v = {vec}{{in[0], in[1], in[2], in[3]}};")
        lines.append(f"  {vec} w = {vec}{{in[3], in[2], in[1], in[0]}};")
        lines.append(
            f'  emit("{name}_vector", popcount(v), clz(v), addsat(v, w), mulhi(v, w), '
            "clamp(v, in[1], in[2]), min(v, in[2]), max(v, w), abs(v), rotate(v, w), "
            "absdiff(v, w), extract_bits(v, 1u, 3u));"
        )
        lines.append("}")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def results() -> dict:
    return run_checks(_program())


@pytest.mark.parametrize("type_name", list(TYPES))
def test_integer_functions(results: dict, type_name: str) -> None:
    _, bits, signed = TYPES[type_name]
    values = _values(bits, signed)
    for fn, ref in UNARY.items():
        assert results[f"{type_name}_{fn}"] == [ref(a, bits, signed) for a in values], fn
    assert results[f"{type_name}_extract"] == [
        _extract(a, o, c, bits, signed) for a in values for o, c in BIT_FIELDS
    ]
    pairs = list(itertools.product(values, values))
    for fn, ref in BINARY.items():
        assert results[f"{type_name}_{fn}"] == [ref(a, b, bits, signed) for a, b in pairs], fn
    assert results[f"{type_name}_insert"] == [
        _insert(a, b, o, c, bits, signed) for a, b in pairs for o, c in BIT_FIELDS
    ]
    triples = list(itertools.product(values, values, values))
    for fn, ref in TERNARY.items():
        assert results[f"{type_name}_{fn}"] == [
            ref(a, b, c, bits, signed) for a, b, c in triples
        ], fn


@pytest.mark.parametrize("type_name", list(TYPES))
def test_integer_vectors_act_per_component(results: dict, type_name: str) -> None:
    _, bits, signed = TYPES[type_name]
    v = _values(bits, signed)[:4]
    w = v[::-1]
    lo, hi = v[1], v[2]
    expected = [
        *(UNARY["popcount"](a, bits, signed) for a in v),
        *(UNARY["clz"](a, bits, signed) for a in v),
        *(BINARY["addsat"](a, b, bits, signed) for a, b in zip(v, w, strict=True)),
        *(BINARY["mulhi"](a, b, bits, signed) for a, b in zip(v, w, strict=True)),
        *(min(max(a, lo), hi) for a in v),
        *(min(a, hi) for a in v),
        *(max(a, b) for a, b in zip(v, w, strict=True)),
        *(UNARY["abs"](a, bits, signed) for a in v),
        *(_rotate(a, b, bits, signed) for a, b in zip(v, w, strict=True)),
        *(BINARY["absdiff"](a, b, bits, signed) for a, b in zip(v, w, strict=True)),
        *(_extract(a, 1, 3, bits, signed) for a in v),
    ]
    assert results[f"{type_name}_vector"] == expected

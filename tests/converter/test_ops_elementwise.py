"""Elementwise, activation, comparison, logical, bitwise and selection lowerings.

Every case is converted, run in Core AI's CPU runtime and compared with eager
PyTorch. float32 tolerance: rtol=1e-5, atol=1e-6 -- the runtime evaluates
transcendental functions (exp, erf, tanh, pow) with its own approximations,
which differ from PyTorch's by a few ulp (1 ulp of float32 is ~1.2e-7 relative).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from support.coreai_run import Lambda, assert_converted_matches

RTOL, ATOL = 1e-5, 1e-6


def _signed(*shape: int) -> torch.Tensor:
    # A fixed generator keeps the values (and any failure) reproducible.
    generator = torch.Generator().manual_seed(sum(shape) + len(shape))
    return torch.randn(*shape, generator=generator) * 3


def _positive(*shape: int) -> torch.Tensor:
    return _signed(*shape).abs() + 0.1


def _ints(*shape: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(7)
    return torch.randint(-20, 20, shape, generator=generator)


UNARY_FLOAT = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "softplus": F.softplus,
    "softplus_beta": lambda x: F.softplus(x, beta=2.0, threshold=5.0),
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2),
    "elu": F.elu,
    "elu_alpha": lambda x: F.elu(x, alpha=0.5),
    "exp": torch.exp,
    "erf": torch.erf,
    "abs": torch.abs,
    "neg": torch.neg,
    "square": lambda x: x**2,
    "pow_scalar": lambda x: x**3,
    "clamp": lambda x: x.clamp(-1.0, 2.0),
    "clamp_min": lambda x: x.clamp(min=0.5),
    "clamp_max": lambda x: x.clamp(max=0.5),
    "floor": torch.floor,
    "ceil": torch.ceil,
    "round": torch.round,
    "trunc": torch.trunc,
    "sign": torch.sign,
    "where_scalar": lambda x: torch.where(x > 0, x, 0.0),
    "masked_fill": lambda x: x.masked_fill(x < -1, 7.0),
}

UNARY_POSITIVE = {
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "log": torch.log,
    "reciprocal": torch.reciprocal,
    "pow_tensor": lambda x: x.pow(x),
    "pow_half": lambda x: x**0.5,
}


@pytest.mark.parametrize("name", sorted(UNARY_FLOAT))
def test_unary_float(name: str) -> None:
    assert_converted_matches(Lambda(UNARY_FLOAT[name]), [_signed(3, 5)], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", sorted(UNARY_POSITIVE))
def test_unary_positive(name: str) -> None:
    assert_converted_matches(Lambda(UNARY_POSITIVE[name]), [_positive(4, 3)], rtol=RTOL, atol=ATOL)


BINARY = {
    "add": lambda x, y: x + y,
    "add_alpha": lambda x, y: torch.add(x, y, alpha=2),
    "sub": lambda x, y: x - y,
    "rsub_scalar": lambda x, y: 1.5 - x,
    "mul": lambda x, y: x * y,
    "div": lambda x, y: x / y,
    "div_floor": lambda x, y: torch.div(x, y, rounding_mode="floor"),
    "div_trunc": lambda x, y: torch.div(x, y, rounding_mode="trunc"),
    "remainder": torch.remainder,
    "fmod": torch.fmod,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "where": lambda x, y: torch.where(x > y, x, y),
    "clamp_tensor": lambda x, y: torch.clamp(x, min=y),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_float_broadcast(name: str) -> None:
    x, y = _signed(2, 3, 4), _positive(3, 1) * torch.tensor([[1.0], [-1.0], [1.0]])
    assert_converted_matches(Lambda(BINARY[name]), [x, y], rtol=RTOL, atol=ATOL)


INT_BINARY = {
    "add": lambda x, y: x + y,
    "mul": lambda x, y: x * y,
    "floordiv": lambda x, y: x // y,
    "div_trunc": lambda x, y: torch.div(x, y, rounding_mode="trunc"),
    "true_div": lambda x, y: x / y,
    "remainder": lambda x, y: x % y,
    "fmod": torch.fmod,
    "and": lambda x, y: x & y,
    "or": lambda x, y: x | y,
    "xor": lambda x, y: x ^ y,
    "and_scalar": lambda x, y: x & 6,
    "or_scalar": lambda x, y: x | 5,
    "xor_scalar": lambda x, y: x ^ 3,
    "not": lambda x, y: ~x,
    "shift_left": lambda x, y: x << 2,
    "shift_right": lambda x, y: x >> 1,
    "maximum": torch.maximum,
}


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("name", sorted(INT_BINARY))
def test_binary_int(name: str, dtype: torch.dtype) -> None:
    x = _ints(3, 4).to(dtype)
    y = torch.tensor([3, -5, 7, 2], dtype=dtype)
    # true division of ints gives float32: compare with the float tolerance.
    assert_converted_matches(Lambda(INT_BINARY[name]), [x, y], rtol=RTOL, atol=ATOL)


COMPARISONS = {
    "gt": lambda x, y: x > y,
    "ge": lambda x, y: x >= y,
    "lt": lambda x, y: x < y,
    "le": lambda x, y: x <= y,
    "eq": lambda x, y: x == y,
    "ne": lambda x, y: x != y,
    "gt_scalar": lambda x, y: x > 0.5,
    "le_scalar": lambda x, y: x <= 0,
    "logical_and": lambda x, y: (x > 0) & (y > 0),
    "logical_or": lambda x, y: (x > 0) | (y > 0),
    "logical_xor": lambda x, y: (x > 0) ^ (y > 0),
    "logical_not": lambda x, y: ~(x > 0),
    "logical_and_float": torch.logical_and,
    "logical_not_float": lambda x, y: torch.logical_not(x),
}


@pytest.mark.parametrize("name", sorted(COMPARISONS))
def test_comparison_and_logical(name: str) -> None:
    x = torch.tensor([[-1.0, 0.0, 0.5, 2.0], [3.0, -2.0, 0.5, 0.0]])
    y = torch.tensor([0.0, 0.0, 0.5, 3.0])
    assert_converted_matches(Lambda(COMPARISONS[name]), [x, y])


def test_mixed_dtype_promotion() -> None:
    x = _ints(2, 3).to(torch.int32)
    y = _signed(2, 3)
    assert_converted_matches(Lambda(lambda a, b: a * b + a), [x, y], rtol=RTOL, atol=ATOL)


def test_float16_arithmetic() -> None:
    x, y = _signed(4, 4).half(), _signed(4, 4).half()
    # float16 has a 10-bit mantissa: one rounding of the product/sum is 2^-11 relative.
    assert_converted_matches(Lambda(lambda a, b: a * b + a), [x, y], rtol=1e-3, atol=1e-3)

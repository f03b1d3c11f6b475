"""Elementwise arithmetic and unary math.

Binary ops compute in the dtype torch promotes their operands to (the node's
result dtype): both operands are cast to it first, because Core AI's
broadcasting ops require equal element types.
"""

from __future__ import annotations

import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import Value

from ..lowering_context import LoweringContext
from ..registry import register_lowering
from ._common import operands

aten = torch.ops.aten


def _pair(ctx: LoweringContext, dtype: torch.dtype) -> list[Value]:
    """``self`` and ``other``, both as values of ``dtype``."""
    return operands(ctx, [ctx.arg("self"), ctx.arg("other")], dtype)


def _binary(ctx: LoweringContext, op) -> Value:
    return op(*_pair(ctx, ctx.result_dtype()))


def _alpha_scaled(ctx: LoweringContext, dtype: torch.dtype) -> Value:
    """``other * alpha``."""
    y = ctx.value(ctx.arg("other"), dtype)
    alpha = ctx.arg("alpha")
    if alpha != 1:
        y = coreai.broadcasting_mul(y, ctx.constant(alpha, dtype))
    return y


@register_lowering(aten.add.Tensor, aten.add.Scalar)
def add(ctx: LoweringContext, node: fx.Node) -> Value:
    dtype = ctx.result_dtype()
    return coreai.broadcasting_add(ctx.value(ctx.arg("self"), dtype), _alpha_scaled(ctx, dtype))


@register_lowering(aten.sub.Tensor, aten.sub.Scalar)
def sub(ctx: LoweringContext, node: fx.Node) -> Value:
    dtype = ctx.result_dtype()
    return coreai.broadcasting_sub(ctx.value(ctx.arg("self"), dtype), _alpha_scaled(ctx, dtype))


@register_lowering(aten.rsub.Scalar, aten.rsub.Tensor)
def rsub(ctx: LoweringContext, node: fx.Node) -> Value:
    dtype = ctx.result_dtype()
    return coreai.broadcasting_sub(_alpha_scaled(ctx, dtype), ctx.value(ctx.arg("self"), dtype))


@register_lowering(aten.mul.Tensor, aten.mul.Scalar)
def mul(ctx: LoweringContext, node: fx.Node) -> Value:
    return _binary(ctx, coreai.broadcasting_mul)


@register_lowering(aten.div.Tensor, aten.div.Scalar, aten.div.Tensor_mode, aten.div.Scalar_mode)
def div(ctx: LoweringContext, node: fx.Node) -> Value:
    mode = ctx.args.get("rounding_mode", None)
    dtype = ctx.result_dtype()
    if mode is None:
        return _binary(ctx, coreai.broadcasting_divide)
    x, y = _pair(ctx, dtype)
    if mode == "floor":
        return coreai.broadcasting_floor_divide(x, y)
    # "trunc": round the true quotient toward zero.
    if dtype.is_floating_point:
        return _trunc(coreai.broadcasting_divide(x, y), dtype, ctx)
    quotient = coreai.broadcasting_floor_divide(x, y)
    # Floor and trunc differ when the division is inexact and the signs differ.
    remainder = coreai.broadcasting_sub(x, coreai.broadcasting_mul(quotient, y))
    zero = ctx.constant(0, dtype)
    inexact = coreai.broadcasting_not_equal(remainder, zero)
    negative = coreai.broadcasting_not_equal(
        coreai.broadcasting_greater(zero, x), coreai.broadcasting_greater(zero, y)
    )
    adjust = coreai.broadcasting_and(inexact, negative)
    return coreai.broadcasting_where(
        adjust, coreai.broadcasting_add(quotient, ctx.constant(1, dtype)), quotient
    )


@register_lowering(aten.floor_divide.default, aten.floor_divide.Scalar)
def floor_divide(ctx: LoweringContext, node: fx.Node) -> Value:
    return _binary(ctx, coreai.broadcasting_floor_divide)


@register_lowering(aten.remainder.Tensor, aten.remainder.Scalar)
def remainder(ctx: LoweringContext, node: fx.Node) -> Value:
    # Python semantics: the result takes the sign of the divisor.
    x, y = _pair(ctx, ctx.result_dtype())
    quotient = coreai.broadcasting_floor_divide(x, y)
    return coreai.broadcasting_sub(x, coreai.broadcasting_mul(quotient, y))


@register_lowering(aten.fmod.Tensor, aten.fmod.Scalar)
def fmod(ctx: LoweringContext, node: fx.Node) -> Value:
    # C semantics (sign of the dividend), which is what coreai.modulo computes.
    return _binary(ctx, coreai.broadcasting_modulo)


@register_lowering(aten.maximum.default, aten.max.other)
def maximum(ctx: LoweringContext, node: fx.Node) -> Value:
    return _binary(ctx, coreai.broadcasting_maximum)


@register_lowering(aten.minimum.default, aten.min.other)
def minimum(ctx: LoweringContext, node: fx.Node) -> Value:
    return _binary(ctx, coreai.broadcasting_minimum)


@register_lowering(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar)
def pow_(ctx: LoweringContext, node: fx.Node) -> Value:
    dtype = ctx.result_dtype()
    base, exponent = ctx.arg("self"), ctx.arg("exponent")
    if isinstance(exponent, int | float) and not isinstance(exponent, bool):
        x = ctx.value(base, dtype)
        # Small integer powers as products: exact, and defined for negative bases.
        if exponent == 2:
            return coreai.broadcasting_mul(x, x)
        if exponent == 1:
            return x
        if exponent == 0.5 and dtype.is_floating_point:
            return coreai.sqrt(x)
        if exponent == -1 and dtype.is_floating_point:
            return coreai.broadcasting_divide(ctx.constant(1, dtype), x)
    x, y = operands(ctx, [base, exponent], dtype)
    return coreai.broadcasting_pow(x, y)


def _unary(*targets, op):
    @register_lowering(*targets)
    def lower(ctx: LoweringContext, node: fx.Node) -> Value:
        return op(ctx.value(ctx.arg("self"), ctx.result_dtype()))

    return lower


# Unary math that Core AI has as one op. Integer inputs of exp & co. promote
# to float in torch; the cast to the result dtype does that here.
exp = _unary(aten.exp.default, op=coreai.exp)
log = _unary(aten.log.default, op=coreai.log)
sqrt = _unary(aten.sqrt.default, op=coreai.sqrt)
rsqrt = _unary(aten.rsqrt.default, op=coreai.rsqrt)
erf = _unary(aten.erf.default, op=coreai.erf)
abs_ = _unary(aten.abs.default, op=coreai.abs_)
sin = _unary(aten.sin.default, op=coreai.sin)
cos = _unary(aten.cos.default, op=coreai.cos)
round_ = _unary(aten.round.default, op=coreai.round_)


@register_lowering(aten.neg.default)
def neg(ctx: LoweringContext, node: fx.Node) -> Value:
    dtype = ctx.result_dtype()
    return coreai.broadcasting_sub(ctx.constant(0, dtype), ctx.value(ctx.arg("self"), dtype))


@register_lowering(aten.square.default)
def square(ctx: LoweringContext, node: fx.Node) -> Value:
    x = ctx.value(ctx.arg("self"), ctx.result_dtype())
    return coreai.broadcasting_mul(x, x)


@register_lowering(aten.reciprocal.default)
def reciprocal(ctx: LoweringContext, node: fx.Node) -> Value:
    dtype = ctx.result_dtype()
    return coreai.broadcasting_divide(ctx.constant(1, dtype), ctx.value(ctx.arg("self"), dtype))


@register_lowering(aten.expm1.default)
def expm1(ctx: LoweringContext, node: fx.Node) -> Value:
    dtype = ctx.result_dtype()
    return coreai.broadcasting_sub(
        coreai.exp(ctx.value(ctx.arg("self"), dtype)), ctx.constant(1, dtype)
    )


@register_lowering(aten.log1p.default)
def log1p(ctx: LoweringContext, node: fx.Node) -> Value:
    dtype = ctx.result_dtype()
    return coreai.log(
        coreai.broadcasting_add(ctx.value(ctx.arg("self"), dtype), ctx.constant(1, dtype))
    )


def _floor(x: Value, dtype: torch.dtype, ctx: LoweringContext) -> Value:
    return coreai.broadcasting_floor_divide(x, ctx.constant(1, dtype))


def _trunc(x: Value, dtype: torch.dtype, ctx: LoweringContext) -> Value:
    floor = _floor(x, dtype, ctx)
    ceil = coreai.broadcasting_sub(
        ctx.constant(0, dtype), _floor(_negate(x, dtype, ctx), dtype, ctx)
    )
    negative = coreai.broadcasting_greater(ctx.constant(0, dtype), x)
    return coreai.broadcasting_where(negative, ceil, floor)


def _negate(x: Value, dtype: torch.dtype, ctx: LoweringContext) -> Value:
    return coreai.broadcasting_sub(ctx.constant(0, dtype), x)


@register_lowering(aten.floor.default)
def floor(ctx: LoweringContext, node: fx.Node) -> Value:
    dtype = ctx.result_dtype()
    x = ctx.value(ctx.arg("self"), dtype)
    return _floor(x, dtype, ctx) if dtype.is_floating_point else x


@register_lowering(aten.ceil.default)
def ceil(ctx: LoweringContext, node: fx.Node) -> Value:
    dtype = ctx.result_dtype()
    x = ctx.value(ctx.arg("self"), dtype)
    if not dtype.is_floating_point:
        return x
    return _negate(_floor(_negate(x, dtype, ctx), dtype, ctx), dtype, ctx)


@register_lowering(aten.trunc.default)
def trunc(ctx: LoweringContext, node: fx.Node) -> Value:
    dtype = ctx.result_dtype()
    x = ctx.value(ctx.arg("self"), dtype)
    return _trunc(x, dtype, ctx) if dtype.is_floating_point else x


@register_lowering(aten.sign.default)
def sign(ctx: LoweringContext, node: fx.Node) -> Value:
    dtype = ctx.result_dtype()
    x = ctx.value(ctx.arg("self"), dtype)
    zero = ctx.constant(0, dtype)
    positive = ctx.cast(coreai.broadcasting_greater(x, zero), dtype)
    negative = ctx.cast(coreai.broadcasting_greater(zero, x), dtype)
    return coreai.broadcasting_sub(positive, negative)

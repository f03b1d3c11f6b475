"""Comparison, logical and bitwise ops.

Core AI compares with ``equal``, ``not_equal`` and ``greater`` only; the other
comparisons are built from them so that NaN compares false as in torch (so
``a >= b`` is ``a > b or a == b``, never ``not (a < b)``).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import Value

from .. import dtypes
from ..lowering_context import LoweringContext
from ..registry import register_lowering
from ._common import common_dtype, operands

aten = torch.ops.aten


def _compared(ctx: LoweringContext) -> list[Value]:
    pair = [ctx.arg("self"), ctx.arg("other")]
    return operands(ctx, pair, common_dtype(ctx, *pair))


@register_lowering(aten.eq.Tensor, aten.eq.Scalar)
def eq(ctx: LoweringContext, node: fx.Node) -> Value:
    return coreai.broadcasting_equal(*_compared(ctx))


@register_lowering(aten.ne.Tensor, aten.ne.Scalar)
def ne(ctx: LoweringContext, node: fx.Node) -> Value:
    return coreai.broadcasting_not_equal(*_compared(ctx))


@register_lowering(aten.gt.Tensor, aten.gt.Scalar)
def gt(ctx: LoweringContext, node: fx.Node) -> Value:
    x, y = _compared(ctx)
    return coreai.broadcasting_greater(x, y)


@register_lowering(aten.lt.Tensor, aten.lt.Scalar)
def lt(ctx: LoweringContext, node: fx.Node) -> Value:
    x, y = _compared(ctx)
    return coreai.broadcasting_greater(y, x)


def _at_least(x: Value, y: Value) -> Value:
    """x >= y. Without NaNs (integers, bools) that is not y > x: one op fewer."""
    if dtypes.torch_dtype_of(x.type).is_floating_point:
        return coreai.broadcasting_or(
            coreai.broadcasting_greater(x, y), coreai.broadcasting_equal(x, y)
        )
    return coreai.not_(coreai.broadcasting_greater(y, x))


@register_lowering(aten.ge.Tensor, aten.ge.Scalar)
def ge(ctx: LoweringContext, node: fx.Node) -> Value:
    x, y = _compared(ctx)
    return _at_least(x, y)


@register_lowering(aten.le.Tensor, aten.le.Scalar)
def le(ctx: LoweringContext, node: fx.Node) -> Value:
    x, y = _compared(ctx)
    return _at_least(y, x)


def _as_bools(ctx: LoweringContext, names: tuple[str, ...]) -> list[Value]:
    """Logical ops treat any nonzero value as true."""
    values = []
    for arg in (ctx.arg(name) for name in names):
        if ctx.dtype(arg) == torch.bool:
            values.append(ctx.value(arg, torch.bool))
        else:
            dtype = ctx.dtype(arg)
            values.append(coreai.broadcasting_not_equal(ctx.value(arg), ctx.constant(0, dtype)))
    return values


def _logical_result(ctx: LoweringContext, result: Value) -> Value:
    return ctx.cast(result, ctx.result_dtype())


@register_lowering(aten.logical_and.default)
def logical_and(ctx: LoweringContext, node: fx.Node) -> Value:
    return _logical_result(ctx, coreai.broadcasting_and(*_as_bools(ctx, ("self", "other"))))


@register_lowering(aten.logical_or.default)
def logical_or(ctx: LoweringContext, node: fx.Node) -> Value:
    return _logical_result(ctx, coreai.broadcasting_or(*_as_bools(ctx, ("self", "other"))))


@register_lowering(aten.logical_xor.default)
def logical_xor(ctx: LoweringContext, node: fx.Node) -> Value:
    return _logical_result(ctx, coreai.broadcasting_xor(*_as_bools(ctx, ("self", "other"))))


@register_lowering(aten.logical_not.default)
def logical_not(ctx: LoweringContext, node: fx.Node) -> Value:
    (x,) = _as_bools(ctx, ("self",))
    return _logical_result(ctx, coreai.not_(x))


def _bitwise(bool_op, int_op):
    def lower(ctx: LoweringContext, node: fx.Node) -> Value:
        dtype = ctx.result_dtype()
        x, y = operands(ctx, [ctx.arg("self"), ctx.arg("other")], dtype)
        return (bool_op if dtype == torch.bool else int_op)(x, y)

    return lower


register_lowering(
    aten.bitwise_and.Tensor,
    aten.bitwise_and.Scalar,
    aten.__and__.Tensor,
    aten.__and__.Scalar,
)(_bitwise(coreai.broadcasting_and, coreai.broadcasting_bitwise_and))
register_lowering(
    aten.bitwise_or.Tensor,
    aten.bitwise_or.Scalar,
    aten.__or__.Tensor,
    aten.__or__.Scalar,
)(_bitwise(coreai.broadcasting_or, coreai.broadcasting_bitwise_or))
register_lowering(
    aten.bitwise_xor.Tensor,
    aten.bitwise_xor.Scalar,
    aten.__xor__.Tensor,
    aten.__xor__.Scalar,
)(_bitwise(coreai.broadcasting_xor, coreai.broadcasting_bitwise_xor))


@register_lowering(aten.bitwise_not.default)
def bitwise_not(ctx: LoweringContext, node: fx.Node) -> Value:
    dtype = ctx.result_dtype()
    x = ctx.value(ctx.arg("self"), dtype)
    if dtype == torch.bool:
        return coreai.not_(x)
    # All bits set: -1 for signed types, the maximum for unsigned ones.
    ones = -1 if dtype.is_signed else np.iinfo(np.dtype(str(dtype).removeprefix("torch."))).max
    return coreai.broadcasting_bitwise_xor(x, ctx.constant(ones, dtype))


def _shift(ctx: LoweringContext, left: bool) -> Value:
    dtype = ctx.result_dtype()
    x, amount = ctx.arg("self"), ctx.arg("other")
    if isinstance(amount, fx.Node):
        factor = coreai.broadcasting_pow(ctx.constant(2, dtype), ctx.value(amount, dtype))
    else:
        factor = ctx.constant(2 ** int(amount), dtype)
    value = ctx.value(x, dtype)
    # For signed values an arithmetic right shift is a floor division.
    if left:
        return coreai.broadcasting_mul(value, factor)
    return coreai.broadcasting_floor_divide(value, factor)


@register_lowering(aten.__lshift__.Scalar, aten.__lshift__.Tensor)
def lshift(ctx: LoweringContext, node: fx.Node) -> Value:
    return _shift(ctx, left=True)


@register_lowering(aten.__rshift__.Scalar, aten.__rshift__.Tensor)
def rshift(ctx: LoweringContext, node: fx.Node) -> Value:
    return _shift(ctx, left=False)

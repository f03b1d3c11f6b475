"""Selection: where, masked_fill and clamp."""

from __future__ import annotations

import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import Value

from ..lowering_context import LoweringContext
from ..registry import register_lowering
from ._common import operands

aten = torch.ops.aten


def _condition(ctx: LoweringContext, arg) -> Value:
    if ctx.dtype(arg) == torch.bool:
        return ctx.value(arg)
    return coreai.broadcasting_not_equal(ctx.value(arg), ctx.constant(0, ctx.dtype(arg)))


@register_lowering(
    aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar
)
def where(ctx: LoweringContext, node: fx.Node) -> Value:
    a, b = operands(ctx, [ctx.arg("self"), ctx.arg("other")], ctx.result_dtype())
    return coreai.broadcasting_where(_condition(ctx, ctx.arg("condition")), a, b)


@register_lowering(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(ctx: LoweringContext, node: fx.Node) -> Value:
    a, b = operands(ctx, [ctx.arg("self"), ctx.arg("value")], ctx.result_dtype())
    return coreai.broadcasting_where(_condition(ctx, ctx.arg("mask")), b, a)


def _bound(ctx: LoweringContext, value, dtype: torch.dtype) -> Value | None:
    return None if value is None else ctx.value(value, dtype)


def _clamp(ctx: LoweringContext, low, high) -> Value:
    dtype = ctx.result_dtype()
    result = ctx.value(ctx.arg("self"), dtype)
    low_value, high_value = _bound(ctx, low, dtype), _bound(ctx, high, dtype)
    # torch applies min after max, so high wins when low > high.
    if low_value is not None:
        result = coreai.broadcasting_maximum(result, low_value)
    if high_value is not None:
        result = coreai.broadcasting_minimum(result, high_value)
    return result


@register_lowering(aten.clamp.default, aten.clamp.Tensor)
def clamp(ctx: LoweringContext, node: fx.Node) -> Value:
    return _clamp(ctx, ctx.arg("min"), ctx.arg("max"))


@register_lowering(aten.clamp_min.default, aten.clamp_min.Tensor)
def clamp_min(ctx: LoweringContext, node: fx.Node) -> Value:
    return _clamp(ctx, ctx.arg("min"), None)


@register_lowering(aten.clamp_max.default, aten.clamp_max.Tensor)
def clamp_max(ctx: LoweringContext, node: fx.Node) -> Value:
    return _clamp(ctx, None, ctx.arg("max"))

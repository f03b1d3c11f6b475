"""Activation functions.

``silu``, ``hardswish`` and ``hardsigmoid`` are kept out of the decomposition
table so that they arrive here whole; the others are core ATen ops already.
"""

from __future__ import annotations

import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import Value

from ..lowering_context import LoweringContext
from ..registry import register_lowering

aten = torch.ops.aten


def _input(ctx: LoweringContext) -> tuple[Value, torch.dtype]:
    dtype = ctx.result_dtype()
    return ctx.value(ctx.arg("self"), dtype), dtype


@register_lowering(aten.relu.default)
def relu(ctx: LoweringContext, node: fx.Node) -> Value:
    x, _ = _input(ctx)
    return coreai.relu(x)


@register_lowering(aten.gelu.default)
def gelu(ctx: LoweringContext, node: fx.Node) -> Value:
    x, _ = _input(ctx)
    return coreai.gelu(x, approximate=ctx.arg("approximate"))


@register_lowering(aten.silu.default, keep_in_export=True)
def silu(ctx: LoweringContext, node: fx.Node) -> Value:
    x, _ = _input(ctx)
    return coreai.silu(x)


@register_lowering(aten.sigmoid.default)
def sigmoid(ctx: LoweringContext, node: fx.Node) -> Value:
    x, _ = _input(ctx)
    return coreai.sigmoid(x)


@register_lowering(aten.tanh.default)
def tanh(ctx: LoweringContext, node: fx.Node) -> Value:
    x, _ = _input(ctx)
    return coreai.tanh(x)


@register_lowering(aten.softplus.default)
def softplus(ctx: LoweringContext, node: fx.Node) -> Value:
    x, dtype = _input(ctx)
    beta, threshold = ctx.arg("beta"), ctx.arg("threshold")
    scaled = coreai.broadcasting_mul(x, ctx.constant(beta, dtype)) if beta != 1 else x
    # log(1 + exp(beta x)) / beta; torch returns x itself above the threshold,
    # which also keeps exp from overflowing there.
    soft = coreai.log(coreai.broadcasting_add(coreai.exp(scaled), ctx.constant(1, dtype)))
    if beta != 1:
        soft = coreai.broadcasting_divide(soft, ctx.constant(beta, dtype))
    linear = coreai.broadcasting_greater(scaled, ctx.constant(threshold, dtype))
    return coreai.broadcasting_where(linear, x, soft)


def _hard_sigmoid(ctx: LoweringContext, x: Value, dtype: torch.dtype) -> Value:
    """relu6(x + 3) / 6."""
    shifted = coreai.broadcasting_add(x, ctx.constant(3, dtype))
    clipped = coreai.broadcasting_minimum(
        coreai.broadcasting_maximum(shifted, ctx.constant(0, dtype)), ctx.constant(6, dtype)
    )
    return coreai.broadcasting_divide(clipped, ctx.constant(6, dtype))


@register_lowering(aten.hardsigmoid.default, keep_in_export=True)
def hardsigmoid(ctx: LoweringContext, node: fx.Node) -> Value:
    x, dtype = _input(ctx)
    return _hard_sigmoid(ctx, x, dtype)


@register_lowering(aten.hardswish.default, keep_in_export=True)
def hardswish(ctx: LoweringContext, node: fx.Node) -> Value:
    x, dtype = _input(ctx)
    return coreai.broadcasting_mul(x, _hard_sigmoid(ctx, x, dtype))


@register_lowering(aten.leaky_relu.default)
def leaky_relu(ctx: LoweringContext, node: fx.Node) -> Value:
    x, dtype = _input(ctx)
    negative = coreai.broadcasting_mul(x, ctx.constant(ctx.arg("negative_slope"), dtype))
    return coreai.broadcasting_where(
        coreai.broadcasting_greater(x, ctx.constant(0, dtype)), x, negative
    )


@register_lowering(aten.elu.default)
def elu(ctx: LoweringContext, node: fx.Node) -> Value:
    x, dtype = _input(ctx)
    alpha, scale, input_scale = ctx.arg("alpha"), ctx.arg("scale"), ctx.arg("input_scale")
    scaled_x = coreai.broadcasting_mul(x, ctx.constant(input_scale, dtype))
    expm1 = coreai.broadcasting_sub(coreai.exp(scaled_x), ctx.constant(1, dtype))
    negative = coreai.broadcasting_mul(expm1, ctx.constant(alpha, dtype))
    result = coreai.broadcasting_where(
        coreai.broadcasting_greater(x, ctx.constant(0, dtype)), x, negative
    )
    if scale != 1:
        result = coreai.broadcasting_mul(result, ctx.constant(scale, dtype))
    return result


@register_lowering(aten.hardtanh.default)
def hardtanh(ctx: LoweringContext, node: fx.Node) -> Value:
    x, dtype = _input(ctx)
    low, high = ctx.arg("min_val"), ctx.arg("max_val")
    return coreai.broadcasting_minimum(
        coreai.broadcasting_maximum(x, ctx.constant(low, dtype)), ctx.constant(high, dtype)
    )

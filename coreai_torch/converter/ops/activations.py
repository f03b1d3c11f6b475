"""Activation functions.

``silu``, ``hardswish`` and ``hardsigmoid`` are kept out of the decomposition
table so that they arrive here whole; the others are core ATen ops already.
"""

from __future__ import annotations

import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import Value

from ..registry import LoweringContext, register_lowering

aten = torch.ops.aten


def _input(ctx: LoweringContext, node: fx.Node) -> tuple[Value, torch.dtype]:
    dtype = ctx.result_dtype()
    return ctx.value(node.args[0], dtype), dtype


def _arg(node: fx.Node, index: int, name: str, default):
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


@register_lowering(aten.relu.default)
def relu(ctx: LoweringContext, node: fx.Node) -> Value:
    x, _ = _input(ctx, node)
    return coreai.relu(x)


@register_lowering(aten.gelu.default)
def gelu(ctx: LoweringContext, node: fx.Node) -> Value:
    x, _ = _input(ctx, node)
    approximate = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
    return coreai.gelu(x, approximate=approximate)


@register_lowering(aten.silu.default, keep_in_export=True)
def silu(ctx: LoweringContext, node: fx.Node) -> Value:
    x, _ = _input(ctx, node)
    return coreai.silu(x)


@register_lowering(aten.sigmoid.default)
def sigmoid(ctx: LoweringContext, node: fx.Node) -> Value:
    x, _ = _input(ctx, node)
    return coreai.sigmoid(x)


@register_lowering(aten.tanh.default)
def tanh(ctx: LoweringContext, node: fx.Node) -> Value:
    x, _ = _input(ctx, node)
    return coreai.tanh(x)


@register_lowering(aten.softplus.default)
def softplus(ctx: LoweringContext, node: fx.Node) -> Value:
    x, dtype = _input(ctx, node)
    beta = _arg(node, 1, "beta", 1)
    threshold = _arg(node, 2, "threshold", 20)
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
    x, dtype = _input(ctx, node)
    return _hard_sigmoid(ctx, x, dtype)


@register_lowering(aten.hardswish.default, keep_in_export=True)
def hardswish(ctx: LoweringContext, node: fx.Node) -> Value:
    x, dtype = _input(ctx, node)
    return coreai.broadcasting_mul(x, _hard_sigmoid(ctx, x, dtype))


@register_lowering(aten.leaky_relu.default)
def leaky_relu(ctx: LoweringContext, node: fx.Node) -> Value:
    x, dtype = _input(ctx, node)
    slope = _arg(node, 1, "negative_slope", 0.01)
    negative = coreai.broadcasting_mul(x, ctx.constant(slope, dtype))
    return coreai.broadcasting_where(
        coreai.broadcasting_greater(x, ctx.constant(0, dtype)), x, negative
    )


@register_lowering(aten.elu.default)
def elu(ctx: LoweringContext, node: fx.Node) -> Value:
    x, dtype = _input(ctx, node)
    alpha = _arg(node, 1, "alpha", 1.0)
    scale = _arg(node, 2, "scale", 1.0)
    input_scale = _arg(node, 3, "input_scale", 1.0)
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
    x, dtype = _input(ctx, node)
    low = _arg(node, 1, "min_val", -1.0)
    high = _arg(node, 2, "max_val", 1.0)
    return coreai.broadcasting_minimum(
        coreai.broadcasting_maximum(x, ctx.constant(low, dtype)), ctx.constant(high, dtype)
    )

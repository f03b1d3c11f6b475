"""Tensor creation: arange, full, zeros, ones, the ``*_like`` and ``new_*`` ops, ``to``.

Fills are a broadcast of one scalar, so a symbolic shape only changes the
shape operand. Static ``arange`` results are folded to constants with torch's
own values (no rounding differences in the length or the elements).
"""

from __future__ import annotations

import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import Value

from ..registry import LoweringContext, register_lowering

aten = torch.ops.aten


def _fill(ctx: LoweringContext, value) -> Value:
    dtype = ctx.result_dtype()
    scalar = ctx.value(value, dtype)
    fake = ctx.fake()
    if fake.dim() == 0:
        return scalar
    return coreai.broadcast_to(scalar, ctx.shape_of(ctx.node))


@register_lowering(aten.full.default, aten.full_like.default)
def full(ctx: LoweringContext, node: fx.Node) -> Value:
    return _fill(ctx, node.args[1])


@register_lowering(
    aten.zeros.default, aten.zeros_like.default, aten.empty.memory_format, aten.empty_like.default
)
def zeros(ctx: LoweringContext, node: fx.Node) -> Value:
    # empty: the contents are unspecified, zeros are as good as any.
    return _fill(ctx, 0)


@register_lowering(aten.ones.default, aten.ones_like.default, aten.new_ones.default)
def ones(ctx: LoweringContext, node: fx.Node) -> Value:
    return _fill(ctx, 1)


@register_lowering(aten.new_zeros.default, aten.new_empty.default)
def new_zeros(ctx: LoweringContext, node: fx.Node) -> Value:
    # new_empty: unspecified contents, as for empty.
    return _fill(ctx, 0)


@register_lowering(aten.new_full.default)
def new_full(ctx: LoweringContext, node: fx.Node) -> Value:
    # (self, size, fill_value): the shape and dtype come from the result.
    return _fill(ctx, node.args[2])


@register_lowering(aten.scalar_tensor.default)
def scalar_tensor(ctx: LoweringContext, node: fx.Node) -> Value:
    return ctx.value(node.args[0], ctx.result_dtype())


@register_lowering(aten.arange.default, aten.arange.start, aten.arange.start_step)
def arange(ctx: LoweringContext, node: fx.Node) -> Value:
    if node.target == aten.arange.default:
        start, end, step = 0, node.args[0], 1
    else:
        start, end = node.args[:2]
        step = node.args[2] if len(node.args) > 2 else 1
    dtype = ctx.result_dtype()
    fake = ctx.fake()
    if all(isinstance(v, int | float) for v in (start, end, step)):
        return ctx.constant(torch.arange(start, end, step, dtype=dtype), dtype)
    # A symbolic bound: Core AI's range op, computed in the result dtype.
    values = [ctx.value(v, dtype) for v in (start, end, step)]
    result = coreai.range_(*values)
    if fake.dim() != 1:
        raise ValueError("arange result must be 1-D")
    return result


@register_lowering(aten.lift_fresh.default)
def lift_fresh(ctx: LoweringContext, node: fx.Node) -> Value:
    return ctx.value(node.args[0])


@register_lowering(aten._to_copy.default, aten.to.dtype, aten.to.dtype_layout, aten.to.device)
def to_copy(ctx: LoweringContext, node: fx.Node) -> Value:
    # A converted program has one device; only the dtype of the result matters.
    source = node.args[0]
    dtype = ctx.result_dtype()
    x = ctx.value(source)
    if dtype == torch.bool and ctx.dtype(source) != torch.bool:
        # Nonzero is true, as in torch (a numeric cast might truncate 0.5 to 0).
        return coreai.broadcasting_not_equal(x, ctx.constant(0, ctx.dtype(source)))
    return ctx.cast(x, dtype)


@register_lowering(aten.type_as.default)
def type_as(ctx: LoweringContext, node: fx.Node) -> Value:
    return ctx.cast(ctx.value(node.args[0]), ctx.result_dtype())

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

from ..lowering_context import LoweringContext
from ..registry import register_lowering

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
    return _fill(ctx, ctx.arg("fill_value"))


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
    # The shape and dtype come from the result.
    return _fill(ctx, ctx.arg("fill_value"))


@register_lowering(aten.scalar_tensor.default)
def scalar_tensor(ctx: LoweringContext, node: fx.Node) -> Value:
    return ctx.value(ctx.arg("s"), ctx.result_dtype())


@register_lowering(aten.arange.default, aten.arange.start, aten.arange.start_step)
def arange(ctx: LoweringContext, node: fx.Node) -> Value:
    start, end, step = ctx.args.get("start", 0), ctx.arg("end"), ctx.args.get("step", 1)
    dtype = ctx.result_dtype()
    if all(isinstance(v, int | float) for v in (start, end, step)):
        return ctx.constant(torch.arange(start, end, step, dtype=dtype), dtype)
    # A symbolic bound: Core AI's range op, computed in the result dtype.
    return coreai.range_(*(ctx.value(v, dtype) for v in (start, end, step)))


@register_lowering(aten.lift_fresh.default)
def lift_fresh(ctx: LoweringContext, node: fx.Node) -> Value:
    return ctx.value(ctx.arg("self"))


@register_lowering(aten._to_copy.default, aten.to.dtype, aten.to.dtype_layout, aten.to.device)
def to_copy(ctx: LoweringContext, node: fx.Node) -> Value:
    # A converted program has one device; only the dtype of the result matters.
    source = ctx.arg("self")
    dtype = ctx.result_dtype()
    x = ctx.value(source)
    if dtype == torch.bool and ctx.dtype(source) != torch.bool:
        # Nonzero is true, as in torch (a numeric cast might truncate 0.5 to 0).
        return coreai.broadcasting_not_equal(x, ctx.constant(0, ctx.dtype(source)))
    return ctx.cast(x, dtype)


@register_lowering(aten.type_as.default)
def type_as(ctx: LoweringContext, node: fx.Node) -> Value:
    return ctx.cast(ctx.value(ctx.arg("self")), ctx.result_dtype())


@register_lowering(aten.copy.default)
def copy(ctx: LoweringContext, node: fx.Node) -> Value:
    # self's shape and dtype with src's values: what slice assignment writes.
    src = ctx.value(ctx.arg("src"), ctx.result_dtype())
    if list(ctx.fake(ctx.arg("src")).shape) == list(ctx.fake().shape):
        return src
    return coreai.broadcast_to(src, ctx.shape_of(node))


@register_lowering(aten.fill.Scalar, aten.fill.Tensor)
def fill(ctx: LoweringContext, node: fx.Node) -> Value:
    return _fill(ctx, ctx.arg("value"))


@register_lowering(aten.zero.default)
def zero(ctx: LoweringContext, node: fx.Node) -> Value:
    return _fill(ctx, 0)


@register_lowering(aten.meshgrid.default, aten.meshgrid.indexing)
def meshgrid(ctx: LoweringContext, node: fx.Node) -> list[Value]:
    tensors = list(ctx.arg("tensors"))
    result = ctx.fake()[0]
    rank = result.dim()
    # "xy" indexing swaps the first two dimensions of the grid.
    axes = list(range(rank))
    if ctx.args.get("indexing", "ij") == "xy" and rank >= 2:
        axes[0], axes[1] = 1, 0
    grids = []
    for tensor, axis in zip(tensors, axes, strict=True):
        sizes = [1] * rank
        sizes[axis] = -1
        line = coreai.reshape(
            ctx.value(tensor, ctx.result_dtype(0)), ctx.shape_tensor(sizes, unsigned=False)
        )
        grids.append(coreai.broadcast_to(line, ctx.shape_of(result)))
    return grids

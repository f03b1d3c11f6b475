"""Size arithmetic: ``sym_size`` and the Python operators export uses on sizes.

Sizes are 0-d ``si32`` values (see ``symbolic.py``); comparisons of sizes give
0-d bools, which is what a ``torch.cond`` predicate on a shape needs.
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import Value

from ..lowering_context import LoweringContext
from ..registry import register_lowering
from ..symbolic import dim_of
from ._common import normalize_dim

aten = torch.ops.aten


@register_lowering(aten.sym_size.int)
def sym_size(ctx: LoweringContext, node: fx.Node) -> Value:
    tensor, dim = ctx.arg("self"), ctx.arg("dim")
    return dim_of(ctx.value(tensor), normalize_dim(dim, ctx.rank(tensor)))


def _size_operands(ctx: LoweringContext, node: fx.Node) -> list[Value]:
    """The operands of a Python operator (parameters ``a`` and ``b``) as 0-d si32 values."""
    return [ctx.scalar(arg) for _, arg in ctx.args.items()]


_ARITHMETIC = {
    operator.add: coreai.broadcasting_add,
    operator.sub: coreai.broadcasting_sub,
    operator.mul: coreai.broadcasting_mul,
    operator.floordiv: coreai.broadcasting_floor_divide,
    operator.gt: coreai.broadcasting_greater,
    operator.ne: coreai.broadcasting_not_equal,
    operator.eq: coreai.broadcasting_equal,
    torch.sym_max: coreai.broadcasting_maximum,
    torch.sym_min: coreai.broadcasting_minimum,
}


def _arithmetic(op):
    @register_lowering(op)
    def lower(ctx: LoweringContext, node: fx.Node) -> Value:
        x, y = _size_operands(ctx, node)
        return _ARITHMETIC[op](x, y)

    return lower


for _op in _ARITHMETIC:
    _arithmetic(_op)


@register_lowering(operator.lt)
def less(ctx: LoweringContext, node: fx.Node) -> Value:
    x, y = _size_operands(ctx, node)
    return coreai.broadcasting_greater(y, x)


@register_lowering(operator.ge)
def greater_equal(ctx: LoweringContext, node: fx.Node) -> Value:
    x, y = _size_operands(ctx, node)
    return coreai.not_(coreai.broadcasting_greater(y, x))


@register_lowering(operator.le)
def less_equal(ctx: LoweringContext, node: fx.Node) -> Value:
    x, y = _size_operands(ctx, node)
    return coreai.not_(coreai.broadcasting_greater(x, y))


@register_lowering(operator.mod)
def modulo(ctx: LoweringContext, node: fx.Node) -> Value:
    x, y = _size_operands(ctx, node)
    return coreai.broadcasting_sub(
        x, coreai.broadcasting_mul(coreai.broadcasting_floor_divide(x, y), y)
    )


@register_lowering(operator.neg)
def negate(ctx: LoweringContext, node: fx.Node) -> Value:
    (x,) = _size_operands(ctx, node)
    return coreai.broadcasting_sub(ctx.scalar(0), x)

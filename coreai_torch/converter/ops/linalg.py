"""Matrix products: mm, bmm, addmm, baddbmm, matmul, linear.

``linear`` and ``matmul`` are kept out of the decomposition table: lowered
directly they are one broadcasting matmul, where their decompositions are
chains of view/expand/permute nodes around ``mm`` that slow conversion down and
carry symbolic sizes through every step.
"""

from __future__ import annotations

import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import Value

from ..lowering_context import LoweringContext
from ..registry import register_lowering
from ._layout import mul_scalar, rank, squeeze, swap_last_two, unsqueeze

aten = torch.ops.aten


def matmul(a: Value, b: Value) -> Value:
    """torch.matmul on values of rank >= 1, with batch broadcasting."""
    a_vector, b_vector = rank(a) == 1, rank(b) == 1
    if a_vector:
        a = unsqueeze(a, 0)
    if b_vector:
        b = unsqueeze(b, 1)
    same_batch = rank(a) == rank(b) and list(a.type.shape[:-2]) == list(b.type.shape[:-2])
    if same_batch and all(s >= 0 for s in a.type.shape[:-2]):
        product = coreai.batch_matmul(a, b)
    else:
        product = coreai.broadcasting_batch_matmul(a, b)
    # The vector operands' unit dimensions are dropped again, as torch does.
    if a_vector and b_vector:
        return squeeze(product, [-2, -1])
    if a_vector:
        return squeeze(product, [-2])
    if b_vector:
        return squeeze(product, [-1])
    return product


def _add_scaled(
    ctx: LoweringContext,
    product: Value,
    bias_arg: object,
    alpha: float,
    beta: float,
    dtype: torch.dtype,
) -> Value:
    """``beta * bias + alpha * product`` as torch's addmm family computes it."""
    product = mul_scalar(ctx, product, alpha, dtype)
    # torch ignores the bias entirely when beta is 0 (NaN and inf included).
    if beta == 0:
        return product
    bias = mul_scalar(ctx, ctx.value(bias_arg, dtype), beta, dtype)
    return coreai.broadcasting_add(product, bias)


@register_lowering(aten.mm.default, aten.bmm.default)
def lower_mm(ctx: LoweringContext, node: fx.Node) -> Value:
    dtype = ctx.result_dtype()
    return coreai.batch_matmul(ctx.value(ctx.arg("self"), dtype), ctx.value(ctx.arg("mat2"), dtype))


@register_lowering(aten.matmul.default, keep_in_export=True)
def lower_matmul(ctx: LoweringContext, node: fx.Node) -> Value:
    dtype = ctx.result_dtype()
    return matmul(ctx.value(ctx.arg("self"), dtype), ctx.value(ctx.arg("other"), dtype))


@register_lowering(aten.linear.default, keep_in_export=True)
def lower_linear(ctx: LoweringContext, node: fx.Node) -> Value:
    dtype = ctx.result_dtype()
    x = ctx.value(ctx.arg("input"), dtype)
    weight = ctx.value(ctx.arg("weight"), dtype)
    weight_t = swap_last_two(weight) if rank(weight) == 2 else weight
    out = matmul(x, weight_t)
    bias = ctx.arg("bias")
    if bias is None:
        return out
    return coreai.broadcasting_add(out, ctx.value(bias, dtype))


def _add_product(ctx: LoweringContext, first: str, second: str) -> Value:
    """``beta * self + alpha * (first @ second)``: the addmm family."""
    dtype = ctx.result_dtype()
    product = coreai.batch_matmul(
        ctx.value(ctx.arg(first), dtype), ctx.value(ctx.arg(second), dtype)
    )
    return _add_scaled(ctx, product, ctx.arg("self"), ctx.arg("alpha"), ctx.arg("beta"), dtype)


@register_lowering(aten.addmm.default)
def lower_addmm(ctx: LoweringContext, node: fx.Node) -> Value:
    return _add_product(ctx, "mat1", "mat2")


@register_lowering(aten.baddbmm.default, keep_in_export=True)
def lower_baddbmm(ctx: LoweringContext, node: fx.Node) -> Value:
    return _add_product(ctx, "batch1", "batch2")

"""Higher-order ops: ``torch.cond`` as ``coreai.if``; grad-mode and autocast regions inline."""

from __future__ import annotations

import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import RankedTensorType, Value

from ..lowering_context import LoweringContext
from ..registry import register_lowering


@register_lowering(torch.ops.higher_order.cond)
def cond(ctx: LoweringContext, node: fx.Node) -> list[Value]:
    predicate, operands = ctx.arg("pred"), ctx.arg("operands")
    true_branch, false_branch = ctx.arg("true_fn"), ctx.arg("false_fn")
    condition = ctx.value(predicate)
    if condition.type.rank != 0:
        condition = coreai.reshape(condition, [])
    if str(condition.type.element_type) != "i1":
        condition = ctx.cast(condition, torch.bool)
    fakes = ctx.fake()
    fakes = list(fakes) if isinstance(fakes, list | tuple) else [fakes]
    result_types = [ctx.tensor_type(fake) for fake in fakes]
    inputs = [ctx.value(arg) for arg in operands]
    results, (then_builder, else_builder) = coreai.if_(results=result_types, condition=condition)
    for builder, branch in ((then_builder, true_branch), (else_builder, false_branch)):
        graph_module = getattr(ctx.graph_module, str(branch.target))
        with builder:
            outputs = ctx.lower_subgraph(graph_module, inputs)
            coreai.yield_([_match(out, ty) for out, ty in zip(outputs, result_types, strict=True)])
    results = [results] if isinstance(results, Value) else list(results)
    return results


def _match(value: Value, expected: RankedTensorType) -> Value:
    """Branch results must carry exactly the types the ``if`` declares."""
    if value.type == expected:
        return value
    return coreai.cast(value, expected)


@register_lowering(torch.ops.higher_order.wrap_with_set_grad_enabled)
def grad_mode_region(ctx: LoweringContext, node: fx.Node) -> list[Value]:
    """``with torch.no_grad():`` in a forward: the region, inline (a converted program
    computes no gradients)."""
    return _inline(ctx, ctx.arg("wrapped_func"), ctx.arg("args"))


@register_lowering(torch.ops.higher_order.wrap_with_autocast)
def autocast_region(ctx: LoweringContext, node: fx.Node) -> list[Value]:
    """``with torch.autocast(...):`` in a forward: the region, inline.

    The exported region already carries autocast's dtypes (an autocast matmul's
    node has the reduced-precision result type, so its lowering computes in
    it), and a disabled region carries the dtypes it computes in.
    """
    return _inline(ctx, ctx.arg("wrapped_func"), ctx.arg("args"))


def _inline(ctx: LoweringContext, body: fx.Node, operands: tuple) -> list[Value]:
    graph_module = getattr(ctx.graph_module, str(body.target))
    inputs = [ctx.value(arg) for arg in operands]
    fakes = ctx.fake()
    outputs = ctx.lower_subgraph(graph_module, inputs)
    return [ctx.cast(out, fake.dtype) for out, fake in zip(outputs, fakes, strict=True)]

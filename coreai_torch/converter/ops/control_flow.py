"""``torch.cond``: both branches lowered into the regions of ``coreai.if``."""

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

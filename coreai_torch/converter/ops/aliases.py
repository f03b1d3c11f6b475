"""torch's alias ops (``multiply``, ``subtract``, ``clip``, ...) lowered as the ops they alias.

A raw export keeps the name the model called (``torch.multiply(a, b)`` is
``aten.multiply.Tensor``); decomposition would rename it, at the cost of
decomposing the whole program. An alias has the arguments of its op, under
the same names, so its op's lowering reads it as it is.
"""

from __future__ import annotations

import torch
import torch.fx as fx
from coreai._compiler.ir import Value

from ..lowering_context import LoweringContext
from ..registry import Lowering, lookup, register_lowering

aten = torch.ops.aten

_ALIASES = {
    "multiply": "mul",
    "subtract": "sub",
    "divide": "div",
    "true_divide": "div",
    "greater": "gt",
    "less": "lt",
    "greater_equal": "ge",
    "less_equal": "le",
    "not_equal": "ne",
    "absolute": "abs",
    "negative": "neg",
    "clip": "clamp",
    "arccos": "acos",
    "arcsin": "asin",
    "arctan": "atan",
    "fix": "trunc",
    "special_expit": "sigmoid",
}


def _as(canonical: torch._ops.OpOverload) -> Lowering:
    # Looked up when a node is lowered: this module may be imported before
    # the one that registers the op's lowering.
    def lower(ctx: LoweringContext, node: fx.Node) -> Value:
        return lookup(canonical)(ctx, node)

    return lower


for _alias, _op in _ALIASES.items():
    for _overload in getattr(aten, _alias).overloads():
        _target = getattr(getattr(aten, _op), _overload, None)
        if _target is not None and "out" not in _overload:
            register_lowering(getattr(getattr(aten, _alias), _overload))(_as(_target))

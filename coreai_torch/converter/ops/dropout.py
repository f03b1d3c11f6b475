"""Dropout in inference: the identity.

``torch.export.export`` keeps ``dropout`` (and its feature / alpha variants)
whole, with the module's training flag as the ``train`` argument. A converted
program is an inference program, so dropout must be off: ``train=False``, or a
probability of 0, for which dropout returns its input unchanged.
"""

from __future__ import annotations

import torch
import torch.fx as fx
from coreai._compiler.ir import Value

from ..lowering_context import LoweringContext
from ..registry import register_lowering

aten = torch.ops.aten


@register_lowering(
    aten.dropout.default,
    aten.feature_dropout.default,
    aten.alpha_dropout.default,
    aten.feature_alpha_dropout.default,
)
def lower_dropout(ctx: LoweringContext, node: fx.Node) -> Value:
    probability, train = ctx.arg("p"), ctx.arg("train")
    if train and probability != 0:
        op = node.target.name() if hasattr(node.target, "name") else str(node.target)
        raise NotImplementedError(
            f"{node.name} ({op}): argument train must be False in a converted program, got "
            f"train=True with p={probability}. Dropout is random in training mode; call "
            "model.eval() before torch.export.export"
        )
    return ctx.value(ctx.arg("input"))

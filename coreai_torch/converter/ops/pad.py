"""Padding: constant (negative amounts crop), reflect, replicate and circular.

torch lists paddings from the last dimension backwards, two numbers per
dimension; Core AI wants two numbers for every dimension, first to last.
``pad`` and the reflect and replicate ops are kept out of the decomposition
table: their decompositions are index arithmetic and gathers (or, for circular
padding, slices copied into a new tensor), where Core AI has one op.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import Value

from ..lowering_context import LoweringContext
from ..registry import register_lowering
from ._layout import i32, rank, u32

aten = torch.ops.aten


def core_ai_widths(torch_pad: list[int], n: int) -> list[int]:
    """torch's (last-dim-first) pad list as Core AI's [before0, after0, before1, ...]."""
    if len(torch_pad) % 2 or len(torch_pad) // 2 > n:
        raise ValueError(f"a pad list of {len(torch_pad)} entries does not fit a rank-{n} tensor")
    widths = [0] * (2 * n)
    for i in range(len(torch_pad) // 2):
        dim = n - 1 - i
        widths[2 * dim] = torch_pad[2 * i]
        widths[2 * dim + 1] = torch_pad[2 * i + 1]
    return widths


def _crop(ctx: LoweringContext, x: Value, widths: list[int], sizes: list[Any]) -> Value:
    """Remove ``-w`` elements wherever a width ``w`` is negative."""
    n = len(sizes)
    starts = [max(0, -widths[2 * d]) for d in range(n)]
    ends: list[Any] = []
    for d in range(n):
        cut = max(0, -widths[2 * d + 1])
        ends.append(sizes[d] - cut if cut else sizes[d])
    return coreai.slice_(x, i32(starts), ctx.shape_tensor(ends, unsigned=False), i32([1] * n))


def _constant_pad(ctx: LoweringContext, value: float) -> Value:
    x_arg, torch_pad = ctx.arg("self"), ctx.arg("pad")
    dtype = ctx.result_dtype()
    x = ctx.value(x_arg)
    n = rank(x)
    widths = core_ai_widths(list(torch_pad), n)
    grow = [max(0, w) for w in widths]
    if any(grow):
        x = coreai.pad(x, u32(grow), ctx.constant(value, dtype), "constant")
    if any(w < 0 for w in widths):
        padded = list(ctx.fake(x_arg).shape)
        for d in range(n):
            padded[d] = padded[d] + grow[2 * d] + grow[2 * d + 1]
        x = _crop(ctx, x, widths, padded)
    return x


@register_lowering(aten.constant_pad_nd.default)
def lower_constant_pad_nd(ctx: LoweringContext, node: fx.Node) -> Value:
    return _constant_pad(ctx, ctx.arg("value"))


_CORE_AI_MODES = {"reflect": "reflect", "replicate": "replicate", "circular": "circular"}


@register_lowering(aten.pad.default, keep_in_export=True)
def lower_pad(ctx: LoweringContext, node: fx.Node) -> Value:
    mode = ctx.arg("mode")
    if mode == "constant":
        value = ctx.arg("value")
        return _constant_pad(ctx, 0 if value is None else value)
    if mode not in _CORE_AI_MODES:
        raise NotImplementedError(f"{node.name}: padding mode {mode!r}")
    return _mode_pad(ctx, node, _CORE_AI_MODES[mode], ctx.arg("pad"))


def _mode_pad(ctx: LoweringContext, node: fx.Node, mode: str, torch_pad: list[int]) -> Value:
    x_arg = ctx.arg("self")
    x = ctx.value(x_arg)
    widths = core_ai_widths(list(torch_pad), rank(x))
    if any(w < 0 for w in widths):
        raise NotImplementedError(
            f"{node.name}: {mode} padding by a negative amount ({list(torch_pad)})"
        )
    # The fill value is unused outside constant mode but must be a constant.
    return coreai.pad(x, u32(widths), ctx.constant(0, ctx.result_dtype()), mode)


@register_lowering(
    aten.reflection_pad1d.default,
    aten.reflection_pad2d.default,
    aten.reflection_pad3d.default,
    keep_in_export=True,
)
def lower_reflection_pad(ctx: LoweringContext, node: fx.Node) -> Value:
    return _mode_pad(ctx, node, "reflect", ctx.arg("padding"))


@register_lowering(
    aten.replication_pad1d.default,
    aten.replication_pad2d.default,
    aten.replication_pad3d.default,
    keep_in_export=True,
)
def lower_replication_pad(ctx: LoweringContext, node: fx.Node) -> Value:
    return _mode_pad(ctx, node, "replicate", ctx.arg("padding"))

"""scaled_dot_product_attention: masks, causal attention and grouped-query heads.

The op is kept out of the decomposition table so that a transformer layer's
attention reaches Core AI as one matmul, softmax and matmul rather than the
thirty-odd nodes of torch's math decomposition.

Half-precision inputs are attended in float32 and the result rounded back,
which is what torch's CPU kernels do (their accumulators are float32).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import Value

from ..lowering_context import LoweringContext
from ..registry import register_lowering
from ._layout import broadcast, i32, rank, reshape, swap_last_two, unsqueeze
from .linalg import matmul

aten = torch.ops.aten

_REDUCED_FLOATS = (torch.float16, torch.bfloat16)


def _repeat_heads(ctx: LoweringContext, kv: Value, fake: Any, repeats: int) -> Value:
    """Grouped-query attention: key/value head h serves query heads h*r .. h*r+r-1."""
    if repeats == 1:
        return kv
    sizes = list(fake.shape)
    head_axis = len(sizes) - 3
    widened = unsqueeze(kv, head_axis + 1)
    target = [*sizes[: head_axis + 1], repeats, *sizes[head_axis + 1 :]]
    widened = broadcast(ctx, widened, target)
    merged = [*sizes[:head_axis], sizes[head_axis] * repeats, *sizes[head_axis + 1 :]]
    return reshape(ctx, widened, merged)


def _causal_mask(ctx: LoweringContext, q_len: Any, kv_len: Any) -> Value:
    """Boolean [L, S] mask, true where query i may attend to key j (j <= i)."""
    if isinstance(q_len, int) and isinstance(kv_len, int):
        return coreai.constant(np.tril(np.ones((q_len, kv_len), dtype=np.bool_)))
    rows = coreai.range_(np.int32(0), ctx.scalar(q_len), np.int32(1))
    cols = coreai.range_(np.int32(0), ctx.scalar(kv_len), np.int32(1))
    later = coreai.broadcasting_greater(unsqueeze(cols, 0), unsqueeze(rows, 1))
    return coreai.not_(later)


def _may_close_a_row(ctx: LoweringContext, mask_arg: Any) -> bool:
    """Whether a mask may leave a query nothing to attend to.

    A mask known before the run (a causal mask built from constants) that
    leaves every query a key spares the guard's three ops per layer. Each
    layer reads the same mask: it is inspected once per graph.
    """
    mask = ctx.known(mask_arg)
    if mask is None:
        return True
    key = ("attention mask closes a row", mask_arg)
    closes = ctx.facts.get(key)
    if closes is None:
        if mask.dtype == torch.bool:
            closes = bool((~mask.any(dim=-1)).any())
        else:
            closes = bool((mask == -math.inf).all(dim=-1).any())
        ctx.facts[key] = closes
    return closes


@register_lowering(aten.scaled_dot_product_attention.default, keep_in_export=True)
def lower_sdpa(ctx: LoweringContext, node: fx.Node) -> Value:
    q_arg, k_arg, v_arg = ctx.arg("query"), ctx.arg("key"), ctx.arg("value")
    mask_arg = ctx.arg("attn_mask")
    dropout_p, is_causal = ctx.arg("dropout_p"), ctx.arg("is_causal")
    scale, enable_gqa = ctx.arg("scale"), ctx.arg("enable_gqa")
    if dropout_p:
        raise NotImplementedError(
            f"{node.name}: scaled_dot_product_attention with dropout_p={dropout_p}; a converted "
            "model runs inference, so export it with dropout_p=0 (model.eval())"
        )
    dtype = ctx.result_dtype()
    compute = torch.float32 if dtype in _REDUCED_FLOATS else dtype
    q_fake, k_fake = ctx.fake(q_arg), ctx.fake(k_arg)
    head_dim = q_fake.shape[-1]
    if scale is None:
        if not isinstance(head_dim, int):
            raise NotImplementedError(f"{node.name}: attention with a symbolic head size")
        scale = 1.0 / math.sqrt(head_dim)

    q = ctx.value(q_arg, compute)
    k = ctx.value(k_arg, compute)
    v = ctx.value(v_arg, compute)
    if enable_gqa and rank(q) >= 3:
        q_heads, kv_heads = q_fake.shape[-3], k_fake.shape[-3]
        if not isinstance(q_heads, int) or not isinstance(kv_heads, int):
            raise NotImplementedError(f"{node.name}: grouped-query attention with symbolic heads")
        repeats = q_heads // kv_heads
        k = _repeat_heads(ctx, k, k_fake, repeats)
        v = _repeat_heads(ctx, v, ctx.fake(v_arg), repeats)

    scores = matmul(coreai.broadcasting_mul(q, ctx.constant(scale, compute)), swap_last_two(k))
    masked = mask_arg is not None
    if is_causal:
        allowed = _causal_mask(ctx, q_fake.shape[-2], k_fake.shape[-2])
        scores = coreai.broadcasting_where(allowed, scores, ctx.constant(-math.inf, compute))
    if mask_arg is not None:
        if ctx.dtype(mask_arg) == torch.bool:
            allowed = ctx.value(mask_arg)
            scores = coreai.broadcasting_where(allowed, scores, ctx.constant(-math.inf, compute))
        else:
            scores = coreai.broadcasting_add(scores, ctx.value(mask_arg, compute))
    last = rank(scores) - 1
    weights = coreai.softmax(scores, i32(last))
    if masked and _may_close_a_row(ctx, mask_arg):
        # A row that may attend to nothing is all -inf; torch returns zeros for
        # it where a plain softmax would give NaN.
        row_max = coreai.reduce_max(scores, i32([last]))
        live = coreai.broadcasting_greater(row_max, ctx.constant(-math.inf, compute))
        weights = coreai.broadcasting_where(live, weights, ctx.constant(0.0, compute))
    return ctx.cast(matmul(weights, v), dtype)

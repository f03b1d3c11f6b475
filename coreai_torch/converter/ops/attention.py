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

from ..arguments import bind
from ..lowering_context import LoweringContext
from ..registry import register_lowering
from ._layout import i32, rank, reshape, swap_last_two, unsqueeze
from .linalg import matmul

aten = torch.ops.aten

_REDUCED_FLOATS = (torch.float16, torch.bfloat16)

# The most elements a known mask laid out for grouped heads may have (the
# largest value folding.py computes in PyTorch).
_LARGEST_MASK = 1 << 16


# Views that merge the repeated axis into the heads axis (repeat_kv's last step).
_MERGES = (aten.reshape.default, aten.view.default, aten._unsafe_view.default)


def _same_size(a: Any, b: Any) -> bool:
    """Sizes equal as ints, or as the same symbolic expression (no guard is added)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, torch.SymInt) and isinstance(b, torch.SymInt):
        return a.node.expr == b.node.expr
    return False


def _repeated_heads(arg: Any) -> tuple[fx.Node, int] | None:
    """``(x, r)`` when ``arg`` is ``x`` with each head repeated ``r`` times in a row.

    That is transformers' ``repeat_kv`` for grouped-query attention:
    ``x[:, :, None].expand(b, kv, r, s, d).reshape(b, kv * r, s, d)``, which
    exports as unsqueeze, expand and reshape (or view) of ``x``.
    """
    if not (isinstance(arg, fx.Node) and arg.op == "call_function" and arg.target in _MERGES):
        return None
    expand = arg.args[0]
    if not (isinstance(expand, fx.Node) and expand.target == aten.expand.default):
        return None
    unsqueezed = expand.args[0]
    if not (isinstance(unsqueezed, fx.Node) and unsqueezed.target == aten.unsqueeze.default):
        return None
    source = unsqueezed.args[0]
    fakes = [n.meta.get("val") for n in (source, expand, arg)]
    if not isinstance(source, fx.Node) or not all(isinstance(f, torch.Tensor) for f in fakes):
        return None
    x, expanded, merged = (list(f.shape) for f in fakes)
    head = len(x) - 3
    if head < 0 or len(merged) != len(x) or len(expanded) != len(x) + 1:
        return None
    if unsqueezed.args[1] not in (head + 1, head + 1 - len(expanded)):
        return None
    repeats, heads = expanded[head + 1], x[head]
    if not (isinstance(repeats, int) and isinstance(heads, int) and repeats > 1):
        return None
    same = [_same_size(a, b) for a, b in zip(expanded, [*x[: head + 1], repeats, *x[head + 1 :]])]
    kept = [_same_size(a, b) for i, (a, b) in enumerate(zip(merged, x)) if i != head]
    if not (all(same) and all(kept) and merged[head] == heads * repeats):
        return None
    return source, repeats


def _grouped_kv(node: fx.Node) -> tuple[fx.Node, fx.Node, int] | None:
    """``(key, value, g)`` when attention can read the key and value before ``repeat_kv``.

    Then each key head is attended with ``g`` query heads in a row (``g`` is
    the repeat, times ``enable_gqa``'s own), and the repeated copies are never
    built. Key and value must repeat their heads the same way, be read only as
    the key and value, and the heads of the query and the mask (if it has a
    heads axis) must be static: a multiple of the key's, and 1 or the query's.
    """
    bound = bind(node.target, node.args, node.kwargs)
    key, value, query, mask = bound["key"], bound["value"], bound["query"], bound.get("attn_mask")
    if key in (query, mask) or value in (query, mask):
        return None
    key_source, value_source = _repeated_heads(key), _repeated_heads(value)
    if key_source is None or value_source is None or key_source[1] != value_source[1]:
        return None
    query_fake = query.meta.get("val") if isinstance(query, fx.Node) else None
    if not isinstance(query_fake, torch.Tensor) or query_fake.dim() < 3:
        return None
    q_heads, kv_heads = query_fake.shape[-3], key_source[0].meta["val"].shape[-3]
    if not isinstance(q_heads, int) or q_heads % kv_heads:
        return None
    if isinstance(mask, fx.Node):
        mask_fake = mask.meta.get("val")
        if not isinstance(mask_fake, torch.Tensor):
            return None
        if mask_fake.dim() >= 3 and not (
            isinstance(mask_fake.shape[-3], int) and mask_fake.shape[-3] in (1, q_heads)
        ):
            return None
    return key_source[0], value_source[0], q_heads // kv_heads


def _attention_reads(node: fx.Node) -> list[fx.Node]:
    grouped = _grouped_kv(node)
    if grouped is None:
        return node.all_input_nodes
    bound = bind(node.target, node.args, node.kwargs)
    skipped = (bound["key"], bound["value"])
    return [n for n in node.all_input_nodes if n not in skipped] + list(grouped[:2])


def _regroup(ctx: LoweringContext, x: Value, sizes: list[Any]) -> Value:
    """``x`` reshaped to ``sizes``, one symbolic size of which may be left implied."""
    symbolic = [i for i, size in enumerate(sizes) if not isinstance(size, int)]
    if len(symbolic) == 1 and 0 not in sizes:
        sizes = [-1 if i == symbolic[0] else size for i, size in enumerate(sizes)]
    return reshape(ctx, x, sizes)


def _group_mask(ctx: LoweringContext, mask: Value, fake: Any, kv_heads: int, groups: int) -> Value:
    """A mask over ``[..., heads, L, S]`` laid out over ``[..., kv_heads, groups, L, S]``."""
    sizes = list(fake.shape)
    if len(sizes) < 3:
        return mask  # [L, S] or [S]: broadcasts over the heads as it is
    head = len(sizes) - 3
    if sizes[head] == 1:
        if all(size == 1 for size in sizes[:head] if isinstance(size, int)) and all(
            isinstance(size, int) for size in sizes[:head]
        ):
            return mask  # [1, ..., 1, L, S] broadcasts over [kv_heads, groups] as it is
        return unsqueeze(mask, head)
    return _regroup(ctx, mask, [*sizes[:head], kv_heads, groups, *sizes[head + 1 :]])


def _rows_layout(
    ctx: LoweringContext, q_fake: Any, k_fake: Any, mask_arg: Any, is_causal: bool, groups: int
) -> bool:
    """Whether the queries of a group can be rows of one matrix: [kv_heads, groups * L, E].

    Then attention is a plain batched matmul over [..., kv_heads] and needs
    no broadcasting over a groups axis, provided the masks take that layout
    too: a causal mask or a known mask of static sizes (at most
    ``_LARGEST_MASK`` elements once laid out), or a mask with one row per
    query of every head, reshaped.
    """
    q_len, kv_len, heads = q_fake.shape[-2], k_fake.shape[-2], q_fake.shape[-3]
    static = isinstance(q_len, int) and isinstance(kv_len, int)
    if is_causal and not static:
        return False
    if mask_arg is None:
        return True
    fake = ctx.fake(mask_arg)
    if ctx.known(mask_arg) is not None:
        lead = list(fake.shape[:-3])
        return (
            static
            and all(isinstance(s, int) for s in lead)
            and (math.prod(lead) * heads * q_len * kv_len <= _LARGEST_MASK)
        )
    sizes = list(fake.shape)
    return len(sizes) >= 3 and sizes[-3] == heads and _same_size(sizes[-2], q_len)


def _rows_mask(
    ctx: LoweringContext, mask_arg: Any, dtype: torch.dtype, heads: tuple[int, int], lengths: Any
) -> Value:
    """The mask laid out as [..., kv_heads, groups * L, S] (see ``_rows_layout``).

    ``heads`` is ``(kv_heads, groups)``, ``lengths`` the queries' and keys' ``(L, S)``.
    """
    kv_heads, groups = heads
    known = ctx.known(mask_arg)
    if known is None:
        sizes = list(ctx.fake(mask_arg).shape)
        head = len(sizes) - 3
        rows = [*sizes[:head], kv_heads, groups * sizes[head + 1], sizes[-1]]
        return _regroup(ctx, ctx.value(mask_arg, dtype), rows)
    # Each layer reads the same mask: laid out once per graph.
    key = ("attention mask as rows of groups", mask_arg, groups)
    found = ctx.facts.get(key)
    if found is None:
        mask = known.reshape((1,) * max(3 - known.dim(), 0) + tuple(known.shape))
        lead = list(mask.shape[:-3])
        q_len, kv_len = lengths
        mask = mask.expand(*lead, kv_heads * groups, q_len, kv_len)
        found = ctx.facts[key] = ctx.constant(mask.reshape(*lead, kv_heads, -1, kv_len), dtype)
    return found


def _causal_mask(ctx: LoweringContext, q_len: Any, kv_len: Any, groups: int = 1) -> Value:
    """Boolean [L, S] mask, true where query i may attend to key j (j <= i).

    With ``groups``, [groups * L, S]: the mask of each query head of a group,
    one after the other (static sizes only).
    """
    if isinstance(q_len, int) and isinstance(kv_len, int):
        allowed = np.tril(np.ones((q_len, kv_len), dtype=np.bool_))
        return coreai.constant(np.tile(allowed, (groups, 1)))
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


@register_lowering(
    aten.scaled_dot_product_attention.default, keep_in_export=True, reads=_attention_reads
)
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

    # Grouped-query attention: each key/value head serves ``groups`` query
    # heads in a row. The query heads are split into [kv_heads, groups] and the
    # key and value broadcast over the groups, rather than repeated.
    groups = 1
    grouped = _grouped_kv(node) if ctx.reads_apply else None
    if grouped is not None:
        k_arg, v_arg, groups = grouped
        k_fake = ctx.fake(k_arg)
    elif enable_gqa and q_fake.dim() >= 3:
        q_heads, kv_heads = q_fake.shape[-3], k_fake.shape[-3]
        if not isinstance(q_heads, int) or not isinstance(kv_heads, int):
            raise NotImplementedError(f"{node.name}: grouped-query attention with symbolic heads")
        groups = q_heads // kv_heads
    q = ctx.value(q_arg, compute)
    k = ctx.value(k_arg, compute)
    v = ctx.value(v_arg, compute)
    # The queries of a group as rows of one matrix when the masks allow it
    # (one batched matmul per key head), else along a groups axis that the
    # key and value are broadcast over.
    rows = groups > 1 and _rows_layout(ctx, q_fake, k_fake, mask_arg, is_causal, groups)
    if groups > 1:
        q_sizes = list(q_fake.shape)
        head = len(q_sizes) - 3
        kv_heads = q_sizes[head] // groups
        if rows:
            q = _regroup(ctx, q, [*q_sizes[:head], kv_heads, groups * q_sizes[-2], q_sizes[-1]])
        else:
            q = _regroup(ctx, q, [*q_sizes[:head], kv_heads, groups, *q_sizes[head + 1 :]])
            k, v = unsqueeze(k, head + 1), unsqueeze(v, head + 1)

    scores = matmul(coreai.broadcasting_mul(q, ctx.constant(scale, compute)), swap_last_two(k))
    masked = mask_arg is not None
    if is_causal:
        allowed = _causal_mask(ctx, q_fake.shape[-2], k_fake.shape[-2], groups if rows else 1)
        scores = coreai.broadcasting_where(allowed, scores, ctx.constant(-math.inf, compute))
    if mask_arg is not None:
        is_bool = ctx.dtype(mask_arg) == torch.bool
        if rows:
            mask_dtype = torch.bool if is_bool else compute
            lengths = (q_fake.shape[-2], k_fake.shape[-2])
            mask = _rows_mask(ctx, mask_arg, mask_dtype, (kv_heads, groups), lengths)
        else:
            mask = ctx.value(mask_arg, None if is_bool else compute)
        if groups > 1 and not rows:
            mask = _group_mask(ctx, mask, ctx.fake(mask_arg), kv_heads, groups)
        if is_bool:
            scores = coreai.broadcasting_where(mask, scores, ctx.constant(-math.inf, compute))
        else:
            scores = coreai.broadcasting_add(scores, mask)
    last = rank(scores) - 1
    weights = coreai.softmax(scores, i32(last))
    if masked and _may_close_a_row(ctx, mask_arg):
        # A row that may attend to nothing is all -inf; torch returns zeros for
        # it where a plain softmax would give NaN.
        row_max = coreai.reduce_max(scores, i32([last]))
        live = coreai.broadcasting_greater(row_max, ctx.constant(-math.inf, compute))
        weights = coreai.broadcasting_where(live, weights, ctx.constant(0.0, compute))
    attended = matmul(weights, v)
    if groups > 1:
        attended = _regroup(ctx, attended, list(ctx.fake().shape))
    return ctx.cast(attended, dtype)

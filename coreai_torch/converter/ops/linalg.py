"""Matrix products: mm, bmm, addmm, baddbmm, matmul, linear.

``linear`` and ``matmul`` are kept out of the decomposition table: lowered
directly they are one broadcasting matmul, where their decompositions are
chains of view/expand/permute nodes around ``mm`` that slow conversion down and
carry symbolic sizes through every step.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import Operation, OpView, Value

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
    if rank(a) == 2 and rank(b) == 2:
        # As a batch of one: Core AI's rewrite passes (coreai-core 1.0.0b3) abort
        # the process on some programs that use a 2-D batch_matmul of a reshaped
        # tensor in two places (flattened tokens through an MoE or gated MLP).
        # A constant (a weight) is broadcast over that batch as it is: the
        # rewrite would fold its unsqueeze into a second, hashed copy of it.
        if _is_constant(b):
            product = coreai.broadcasting_batch_matmul(unsqueeze(a, 0), b)
        else:
            product = coreai.batch_matmul(unsqueeze(a, 0), unsqueeze(b, 0))
        product = squeeze(product, [0])
    elif same_batch and all(s >= 0 for s in a.type.shape[:-2]):
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


def _is_constant(value: Value) -> bool:
    owner = value.owner
    return isinstance(owner, OpView | Operation) and owner.name == "coreai.constant"


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
    return matmul(ctx.value(ctx.arg("self"), dtype), ctx.value(ctx.arg("mat2"), dtype))


@register_lowering(aten.matmul.default, keep_in_export=True)
def lower_matmul(ctx: LoweringContext, node: fx.Node) -> Value:
    dtype = ctx.result_dtype()
    return matmul(ctx.value(ctx.arg("self"), dtype), ctx.value(ctx.arg("other"), dtype))


@register_lowering(aten.linear.default, keep_in_export=True)
def lower_linear(ctx: LoweringContext, node: fx.Node) -> Value:
    dtype = ctx.result_dtype()
    x = ctx.value(ctx.arg("input"), dtype)
    weight_arg = ctx.arg("weight")
    stored = ctx.weights.get(weight_arg.name)
    if stored is not None:
        # A parameter only linears read: one constant of the transposed weight
        # (kept under a name no FX node has, for the other linears using it).
        key = f"{weight_arg.name}.T"
        if key not in ctx.values:
            # dtypes.constant lays the transposed view out contiguously.
            ctx.values[key] = ctx.constant(stored.t(), dtype)
        weight_t = ctx.cast(ctx.values[key], dtype)
    else:
        weight = ctx.value(weight_arg, dtype)
        weight_t = swap_last_two(weight) if rank(weight) == 2 else weight
    out = matmul(x, weight_t)
    bias = ctx.arg("bias")
    if bias is None:
        return out
    return coreai.broadcasting_add(out, ctx.value(bias, dtype))


def _add_product(ctx: LoweringContext, first: str, second: str) -> Value:
    """``beta * self + alpha * (first @ second)``: the addmm family."""
    dtype = ctx.result_dtype()
    product = matmul(ctx.value(ctx.arg(first), dtype), ctx.value(ctx.arg(second), dtype))
    return _add_scaled(ctx, product, ctx.arg("self"), ctx.arg("alpha"), ctx.arg("beta"), dtype)


@register_lowering(aten.addmm.default)
def lower_addmm(ctx: LoweringContext, node: fx.Node) -> Value:
    return _add_product(ctx, "mat1", "mat2")


@register_lowering(aten.baddbmm.default, keep_in_export=True)
def lower_baddbmm(ctx: LoweringContext, node: fx.Node) -> Value:
    return _add_product(ctx, "batch1", "batch2")


def _einsum_terms(equation: str, ranks: list[int]) -> tuple[list[str], str]:
    """The subscripts of each operand and of the result, with ``...`` spelled out.

    The dims an ellipsis covers get letters of their own, aligned from the
    right across operands as torch broadcasts them.
    """
    inputs, arrow, output = equation.replace(" ", "").partition("->")
    terms = inputs.split(",")
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in equation]
    counts = [
        rank - (len(t) - 3) if "..." in t else 0 for t, rank in zip(terms, ranks, strict=True)
    ]
    width = max(counts, default=0)
    letters = "".join(spare[:width])
    terms = [t.replace("...", letters[width - n :]) for t, n in zip(terms, counts, strict=True)]
    if not arrow:
        # Implicit result: the ellipsis dims, then the letters used once, sorted.
        used = "".join(terms)
        once = sorted(c for c in set(used) - set(letters) if used.count(c) == 1)
        return terms, letters + "".join(once)
    return terms, output.replace("...", letters)


def _sum_out(x: Value, term: str, keep: set[str]) -> tuple[Value, str]:
    drop = [i for i, c in enumerate(term) if c not in keep]
    if not drop:
        return x, term
    reduced = coreai.reduce_sum(x, np.array(drop, dtype=np.int32))
    return squeeze(reduced, drop), "".join(c for c in term if c in keep)


def _transposed_to(x: Value, term: str, order: str) -> Value:
    permutation = [term.index(c) for c in order]
    if permutation == sorted(permutation):
        return x
    return coreai.transpose(x, np.array(permutation, dtype=np.uint32))


@register_lowering(aten.einsum.default)
def lower_einsum(ctx: LoweringContext, node: fx.Node) -> Value:
    """Contract the operands pairwise, each pair as one batched matmul.

    For a pair, the letters both share and that a later operand or the result
    needs are batch dimensions, the other shared letters are contracted, and
    each operand's own letters are its rows or columns. Letters no one needs
    any more are summed out first.
    """
    dtype = ctx.result_dtype()
    tensors = list(ctx.arg("tensors"))
    terms, output = _einsum_terms(ctx.arg("equation"), [ctx.rank(t) for t in tensors])
    for term in terms:
        if len(set(term)) != len(term):
            raise NotImplementedError(
                f"{node.name}: einsum {ctx.arg('equation')!r} repeats a subscript within one "
                "operand (a diagonal), which is not converted"
            )
    sizes: dict[str, Any] = {}
    for tensor, term in zip(tensors, terms, strict=True):
        for letter, size in zip(term, ctx.fake(tensor).shape, strict=True):
            if sizes.get(letter, 1) == 1:
                sizes[letter] = size
    value, term = ctx.value(tensors[0], dtype), terms[0]
    for index in range(1, len(tensors)):
        later = set(output).union(*terms[index + 1 :])
        other, other_term = ctx.value(tensors[index], dtype), terms[index]
        value, term = _sum_out(value, term, later | set(other_term))
        other, other_term = _sum_out(other, other_term, later | set(term))
        batch = "".join(c for c in term if c in other_term and c in later)
        contracted = "".join(c for c in term if c in other_term and c not in later)
        rows = "".join(c for c in term if c not in other_term)
        cols = "".join(c for c in other_term if c not in term)
        left = _arranged(ctx, value, term, [batch, rows, contracted], sizes)
        right = _arranged(ctx, other, other_term, [batch, contracted, cols], sizes)
        product = coreai.batch_matmul(left, right)
        term = batch + rows + cols
        value = coreai.reshape(product, ctx.shape_tensor([sizes[c] for c in term], False))
    value, term = _sum_out(value, term, set(output))
    return _transposed_to(value, term, output)


def _arranged(
    ctx: LoweringContext, x: Value, term: str, groups: list[str], sizes: dict[str, Any]
) -> Value:
    """``x`` transposed to the letters of ``groups`` in order, size-1 dims broadcast to the
    size their letter has elsewhere, and reshaped to one dim per group."""
    order = "".join(groups)
    x = _transposed_to(x, term, order)
    if any(s != sizes[c] for c, s in zip(order, x.type.shape, strict=True) if s >= 0):
        x = coreai.broadcast_to(x, ctx.shape_tensor([sizes[c] for c in order]))
    extents = []
    for group in groups:
        extent: Any = 1
        for letter in group:
            extent = extent * sizes[letter]
        extents.append(extent)
    return coreai.reshape(x, ctx.shape_tensor(extents, False))

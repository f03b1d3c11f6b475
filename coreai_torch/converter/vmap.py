"""``torch.vmap`` regions, inlined: batched values become tensors with explicit batch dims.

transformers builds custom attention masks (bidirectional or packed-sequence
overlays) by vmapping an index function over batch, head, query and key
positions. ``torch.export`` keeps such a region as calls of
``torch._functorch.predispatch``: ``_add_batch_dim(x, dim, level)`` makes
``x``'s dim ``dim`` the batch dim of vmap level ``level``, the ops in between
act on one element per batch entry, and ``_remove_batch_dim(x, level, size,
out_dim)`` turns the level back into a dim. The nesting bookkeeping
(``_vmap_increment_nesting`` ...) produces nothing and is dropped as dead code.

Here a batched value is a plain tensor laid out as ``[one dim per level it
is batched over, in level order] + [its logical dims]``. Pointwise ops
broadcast such tensors once their level dims are lined up (a unit dim for a
level an operand lacks, unit dims in front of a shorter logical shape), so
they are lowered by their ordinary lowerings; creating a tensor "like" a
batched one does not depend on the batch and stays unbatched; indexing with
batched indices (``flat_apply`` of ``ModIndex``, what ``mask[b, kv]`` becomes)
is one gather. Any other op on a batched value is not inlined: the program is
decomposed instead, which removes the region with torch's own batching rules.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import Value
from torch._functorch import predispatch

from .lowering_context import LoweringContext
from .registry import Lowering, register_lowering

aten = torch.ops.aten

_MOD_INDEX = "torch._dynamo._trace_wrapped_higher_order_op.ModIndex"
_FLAT_APPLY = torch.ops.higher_order.flat_apply

# Ops whose result is built from a tensor's dtype and shape only, not its values.
_LIKE = {
    aten.new_ones.default,
    aten.new_zeros.default,
    aten.new_full.default,
    aten.new_empty.default,
    aten.zeros_like.default,
    aten.ones_like.default,
    aten.full_like.default,
    aten.empty_like.default,
}
# Conversions that act element by element without the pointwise tag.
_ELEMENTWISE = {
    aten.__and__.Tensor,
    aten.__or__.Tensor,
    aten.__xor__.Tensor,
    aten.__and__.Scalar,
    aten.__or__.Scalar,
    aten.__xor__.Scalar,
    aten.to.dtype,
    aten.to.dtype_layout,
    aten.to.device,
    aten._to_copy.default,
    aten.type_as.default,
    aten.alias.default,
    aten.clone.default,
    aten.detach.default,
}


def is_batched(val: Any) -> bool:
    return isinstance(val, torch.Tensor) and torch._C._functorch.is_batchedtensor(val)


def _elementwise(target: Any) -> bool:
    if target in _ELEMENTWISE or target is operator.getitem:
        return True
    return isinstance(target, torch._ops.OpOverload) and torch.Tag.pointwise in target.tags


def _is_mod_index(node: fx.Node) -> bool:
    func_spec, in_spec, *flat = node.args
    if not all(isinstance(a, fx.Node) and a.op == "get_attr" for a in (func_spec, in_spec)):
        return False
    return bool(flat) and flat[0] == _MOD_INDEX


def unsupported_batched(nodes: Iterable[fx.Node]) -> list[tuple[fx.Node, str]]:
    """Which of these (live) call nodes of a vmap region cannot be inlined, and why."""
    nodes = list(nodes)
    if not any(n.target is predispatch._add_batch_dim or n.target is _FLAT_APPLY for n in nodes):
        return []  # no vmap region (values are batched only inside one)
    problems = []
    # Whether a node's value is batched, asked once per node rather than per use.
    batched: dict[fx.Node, bool] = {}
    for node in nodes:
        if node.target is _FLAT_APPLY and not _is_mod_index(node):
            problems.append((node, "flat_apply of a function other than tensor indexing"))
        batched_inputs = False
        for arg in node.all_input_nodes:
            found = batched.get(arg)
            if found is None:
                found = batched[arg] = is_batched(arg.meta.get("val"))
            if found:
                batched_inputs = True
                break
        if not batched_inputs or node.target in _LOWERINGS:
            continue
        if not (_elementwise(node.target) or node.target in _LIKE):
            problems.append((node, f"{node.target} on a vmapped (batched) value"))
    return problems


class Batching:
    """The vmap levels of the values of one graph and the size of each level."""

    def __init__(self) -> None:
        self.levels: dict[str, tuple[int, ...]] = {}
        self.sizes: dict[int, Any] = {}

    @staticmethod
    def needed(graph: fx.Graph) -> bool:
        return any(n.target is predispatch._add_batch_dim for n in graph.nodes)

    @staticmethod
    def is_vmap_op(target: Any) -> bool:
        return target in _LOWERINGS

    def of(self, arg: Any) -> tuple[int, ...]:
        return self.levels.get(arg.name, ()) if isinstance(arg, fx.Node) else ()

    def involves(self, node: fx.Node) -> bool:
        return any(self.of(a) for a in node.all_input_nodes)

    def lower(self, ctx: LoweringContext, node: fx.Node, lowering: Lowering) -> Any:
        """Lower ``node``, whose inputs include batched values, by its ordinary lowering."""
        if node.target in _LIKE:
            return lowering(ctx, node)  # the batch cannot change a fill
        if node.target is operator.getitem:
            raise NotImplementedError(f"{node.name}: a batched value with several results")
        tensors = [a for a in node.all_input_nodes if isinstance(ctx.fake(a), torch.Tensor)]
        levels = tuple(sorted(set().union(*(self.of(a) for a in tensors))))
        rank = max(self._logical_rank(ctx, a) for a in tensors)
        saved = {a.name: ctx.values[a.name] for a in tensors}
        try:
            for a in tensors:
                ctx.values[a.name] = self.aligned(ctx, a, levels, rank)
            result = lowering(ctx, node)
        finally:
            ctx.values.update(saved)
        self.levels[node.name] = levels
        return result

    def _logical_rank(self, ctx: LoweringContext, arg: fx.Node) -> int:
        return ctx.values[arg.name].type.rank - len(self.of(arg))

    def aligned(
        self, ctx: LoweringContext, arg: fx.Node, levels: tuple[int, ...], rank: int
    ) -> Value:
        """``arg``'s value with a dim for each of ``levels`` and ``rank`` logical dims."""
        value, own = ctx.values[arg.name], self.of(arg)
        if not own:
            return value  # broadcasting lines up its logical dims on the right
        logical = value.type.rank - len(own)
        axes = [i for i, level in enumerate(levels) if level not in own]
        axes += list(range(len(levels), len(levels) + rank - logical))
        if not axes:
            return value
        return coreai.expand_dims(value, np.array(axes, dtype=np.int32))

    def physical_sizes(self, levels: tuple[int, ...], logical: list[Any]) -> list[Any]:
        return [self.sizes[level] for level in levels] + logical


def _batching(ctx: LoweringContext) -> Batching:
    if ctx.batching is None:
        raise AssertionError("a vmap op outside a graph with vmap regions")
    return ctx.batching


def _add_batch_dim(ctx: LoweringContext, node: fx.Node) -> Value:
    batching = _batching(ctx)
    source, dim, level = ctx.arg("self"), ctx.arg("batch_dim"), ctx.arg("level")
    own = batching.of(source)
    x = ctx.value(source)
    batching.sizes[level] = _logical_shape(ctx, source)[dim]
    # The dim moves to the new level's place, after the levels the value has.
    order = list(range(x.type.rank))
    order.insert(len(own), order.pop(len(own) + dim))
    batching.levels[node.name] = (*own, level)
    if order == sorted(order):
        return x
    return coreai.transpose(x, np.array(order, dtype=np.uint32))


def _remove_batch_dim(ctx: LoweringContext, node: fx.Node) -> Value:
    batching = _batching(ctx)
    source, level, out_dim = ctx.arg("self"), ctx.arg("level"), ctx.arg("out_dim")
    own = batching.of(source)
    x = ctx.value(source)
    rest = tuple(lv for lv in own if lv != level)
    batching.levels[node.name] = rest
    if level not in own:
        # Not batched over this level: every batch entry is the same value.
        x = coreai.expand_dims(x, np.array([len(rest) + out_dim], dtype=np.int32))
        logical = _logical_shape(ctx, node)
        return coreai.broadcast_to(x, ctx.shape_tensor(batching.physical_sizes(rest, logical)))
    position = own.index(level)
    order = list(range(x.type.rank))
    order.insert(len(rest) + out_dim, order.pop(position))
    if order == sorted(order):
        return x
    return coreai.transpose(x, np.array(order, dtype=np.uint32))


def _logical_shape(ctx: LoweringContext, node: fx.Node) -> list[Any]:
    return list(ctx.fake(node).shape)


def _flat_apply(ctx: LoweringContext, node: fx.Node) -> Value:
    """``x[i, j, ...]`` with batched index tensors: one gather of their broadcast."""
    batching = _batching(ctx)
    in_spec = getattr(ctx.graph_module, str(node.args[1].target))
    (_name, source, indices), _ = pytree.tree_unflatten(list(node.args[2:]), in_spec)
    if batching.of(source):
        raise NotImplementedError(f"{node.name}: indexing a batched tensor inside vmap")
    indices = list(indices)
    levels = tuple(sorted(set().union(*(batching.of(i) for i in indices))))
    rank = max(len(_logical_shape(ctx, i)) for i in indices)
    logical = list(torch.broadcast_shapes(*(tuple(_logical_shape(ctx, i)) for i in indices)))
    shape = ctx.shape_tensor(batching.physical_sizes(levels, logical))
    columns = []
    for index in indices:
        value = ctx.cast(batching.aligned(ctx, index, levels, rank), torch.int32)
        columns.append(
            coreai.expand_dims(coreai.broadcast_to(value, shape), np.array([-1], dtype=np.int32))
        )
    stacked = (
        columns[0] if len(columns) == 1 else coreai.concat(np.int32(len(levels) + rank), columns)
    )
    batching.levels[node.name] = levels
    return coreai.gather_nd(ctx.value(source), stacked)


_LOWERINGS = {
    predispatch._add_batch_dim: _add_batch_dim,
    predispatch._remove_batch_dim: _remove_batch_dim,
    torch.ops.higher_order.flat_apply: _flat_apply,
}
for _target, _lowering in _LOWERINGS.items():
    register_lowering(_target)(_lowering)

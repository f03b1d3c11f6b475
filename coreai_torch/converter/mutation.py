"""In-place ops lowered as values: functionalization during the FX walk.

The raw output of ``torch.export.export`` keeps in-place ops: ``x.add_(y)``,
``scores.div_(t)``, and slice assignment (``mask[:, :n] = 0`` is a ``slice``
view and a ``copy_`` or ``fill_`` into it). Core AI values are immutable, so
each in-place op is lowered as its out-of-place twin (``add_`` as ``add``),
and the result is written back into the tensor it mutated:

- Which FX nodes share memory is read from their fake values
  (``meta["val"].untyped_storage()``), which ``torch.export`` recorded with
  torch's real aliasing: ``contiguous`` or ``reshape`` of a tensor that needs a
  copy is a new tensor, ``view`` and ``select`` are not.
- A storage has one *base* node (the op that allocated it) and *views* made
  from it by view ops. A write into a view is carried back to the base
  through the inverse of each view op on the way (a ``slice`` becomes a slice
  update, a ``permute`` its inverse permutation, ...).
- Each write gives the storage a new version. A view lowered before the write
  is stale; it is computed again from the base when a later node reads it.

Programs with a mutation this cannot follow (through ``expand`` or
``as_strided`` views, an op without an out-of-place twin) are decomposed by
``decomp.prepare`` instead, which functionalizes them with torch's machinery.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import Value
from torch._ops import OpOverload

from .arguments import Arguments
from .lowering_context import LoweringContext
from .ops._common import normalize_dim
from .ops.indexing import select_update, slice_update
from .registry import lookup

aten = torch.ops.aten


def mutates_input(target: Any) -> bool:
    """In-place and ``out=`` ops: their schema marks an argument as written."""
    return _schema_fact(_MUTATES, target, lambda op: op._schema.is_mutable)


def _schema_fact(
    memo: dict[int, tuple[Any, bool]], target: Any, fact: Callable[[OpOverload], bool]
) -> bool:
    """``fact(target)`` for an ``OpOverload`` (False for other targets), memoized in ``memo``.

    Keyed by id(): hashing an OpOverload runs Python code, and a conversion asks
    these of every node several times. The entry keeps its target alive, so the
    id cannot be reused.
    """
    found = memo.get(id(target))
    if found is not None and found[0] is target:
        return found[1]
    value = isinstance(target, OpOverload) and bool(fact(target))
    memo[id(target)] = (target, value)
    return value


_MUTATES: dict[int, tuple[Any, bool]] = {}


def in_place_calls(graph: fx.Graph) -> list[fx.Node]:
    """The calls of ``graph`` that write into an input (``mutates_input``), in graph order."""
    return [n for n in graph.nodes if n.op == "call_function" and mutates_input(n.target)]


def functional_target(target: Any) -> OpOverload | None:
    """The out-of-place twin of an in-place op (``add_.Tensor`` -> ``add.Tensor``), if any."""
    if not mutates_input(target):
        return None
    name = target._schema.name.split("::", 1)[1]
    if not name.endswith("_") or name.endswith("__"):
        return None
    packet = getattr(torch.ops.aten, name[:-1], None)
    overload = getattr(packet, target._overloadname, None) if packet is not None else None
    return overload if isinstance(overload, OpOverload) else None


def storage(node: Any) -> int | None:
    """An identity of the memory a node's tensor lives in (``None`` for non-tensors)."""
    if not isinstance(node, fx.Node):
        return None
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or torch._C._functorch.is_batchedtensor(val):
        return None  # batched values of a vmap region are never written in place
    return val.untyped_storage()._cdata


def _self_argument(node: fx.Node) -> Any:
    if node.op != "call_function" or not isinstance(node.target, OpOverload):
        return None
    if node.args and _self_first(node.target):
        return node.args[0]  # what binding every argument would give, for less
    return Arguments(node.target, node.args, node.kwargs).get("self", None)


def _self_first(target: OpOverload) -> bool:
    """Whether the first parameter of ``target``'s schema is ``self``."""
    found = _SELF_FIRST.get(id(target))
    if found is not None and found[0] is target:
        return found[1]
    arguments = target._schema.arguments
    first = bool(arguments) and arguments[0].name == "self" and not arguments[0].kwarg_only
    _SELF_FIRST[id(target)] = (target, first)
    return first


# Keyed by id(), as _MUTATES is.
_SELF_FIRST: dict[int, tuple[Any, bool]] = {}


def view_parent(node: fx.Node) -> fx.Node | None:
    """The node whose memory ``node`` is a view of, or ``None`` when it owns its memory.

    An in-place op returns the tensor it wrote; a view op (``_update_of`` knows
    how to write through it) shares its input's memory when their fake values
    share a storage, which tells a ``reshape`` that viewed from one that copied.
    """
    if node.target is operator.getitem:
        source = node.args[0]
        if source.target not in _PIECES:
            return None
        parent = _self_argument(source)
    elif mutates_input(node.target) or node.target in _VIEWS:
        parent = _self_argument(node)
    else:
        return None
    return parent if storage(parent) == storage(node) is not None else None


def _may_view(node: fx.Node) -> bool:
    """Whether ``view_parent`` can find a parent for ``node``: false for most calls."""
    target = node.target
    return target is operator.getitem or mutates_input(target) or target in _VIEWS


def memory_root(node: fx.Node) -> fx.Node:
    """The node that allocated the memory ``node`` reads: itself, or the base of its views."""
    while (parent := view_parent(node)) is not None:
        node = parent
    return node


# -- writing through views -----------------------------------------------------

# update(ctx, view node, parent value, new view value) -> new parent value.
ViewUpdate = Callable[[LoweringContext, fx.Node, Value, Value], Value]


def _bound(node: fx.Node) -> Arguments:
    return Arguments(node.target, node.args, node.kwargs)


def _sizes(ctx: LoweringContext, node: fx.Node) -> list[Any]:
    return list(ctx.fake(view_parent(node)).shape)


def _same_memory(ctx: LoweringContext, view: fx.Node, parent: Value, new: Value) -> Value:
    return new


def _reshaped_back(ctx: LoweringContext, view: fx.Node, parent: Value, new: Value) -> Value:
    return coreai.reshape(new, ctx.shape_of(view_parent(view)))


def _permuted_back(ctx: LoweringContext, view: fx.Node, parent: Value, new: Value) -> Value:
    rank = new.type.rank
    args = _bound(view)
    if view.target == aten.permute.default:
        order = [normalize_dim(d, rank) for d in args["dims"]]
    elif view.target == aten.transpose.int:
        order = list(range(rank))
        a, b = normalize_dim(args["dim0"], rank), normalize_dim(args["dim1"], rank)
        order[a], order[b] = order[b], order[a]
    elif view.target == aten.t.default or view.target == aten.numpy_T.default:
        order = list(range(rank))[::-1]
    else:  # mT
        order = [*range(rank - 2), rank - 1, rank - 2]
    inverse = [order.index(d) for d in range(rank)]
    return coreai.transpose(new, np.array(inverse, dtype=np.uint32))


def _sliced_back(ctx: LoweringContext, view: fx.Node, parent: Value, new: Value) -> Value:
    args = _bound(view)
    if view.target == aten.narrow.default:
        start = args["start"]
        end, step = start + args["length"], 1
    else:
        start, end, step = args["start"], args["end"], args["step"]
    return slice_update(ctx, parent, _sizes(ctx, view), new, args["dim"], start, end, step)


def _selected_back(ctx: LoweringContext, view: fx.Node, parent: Value, new: Value) -> Value:
    args = _bound(view)
    return select_update(ctx, parent, _sizes(ctx, view), new, args["dim"], args["index"])


def _piece_back(ctx: LoweringContext, view: fx.Node, parent: Value, new: Value) -> Value:
    """A result of split/chunk/unbind: a slice (or index) along the split dimension."""
    source, index = view.args
    args = _bound(source)
    sizes = _sizes(ctx, view)
    dim = normalize_dim(args["dim"], len(sizes))
    if source.target == aten.unbind.int:
        return select_update(ctx, parent, sizes, new, dim, index)
    pieces = ctx.fake(source)
    start = sum(int(piece.shape[dim]) for piece in pieces[:index])
    end = start + int(pieces[index].shape[dim])
    return slice_update(ctx, parent, sizes, new, dim, start, end, 1)


_UPDATES: dict[Any, ViewUpdate] = {
    **dict.fromkeys(
        [
            aten.alias.default,
            aten.detach.default,
            aten.contiguous.default,
            aten.lift_fresh.default,
            # Conversions that had nothing to convert return their input.
            aten.to.dtype,
            aten.to.dtype_layout,
            aten.to.device,
            aten.type_as.default,
        ],
        _same_memory,
    ),
    **dict.fromkeys(
        [
            aten.view.default,
            aten.reshape.default,
            aten._unsafe_view.default,
            aten.flatten.using_ints,
            aten.unflatten.int,
            aten.unsqueeze.default,
            aten.squeeze.default,
            aten.squeeze.dim,
            aten.squeeze.dims,
        ],
        _reshaped_back,
    ),
    **dict.fromkeys(
        [
            aten.permute.default,
            aten.transpose.int,
            aten.t.default,
            aten.mT.default,
            aten.numpy_T.default,
        ],
        _permuted_back,
    ),
    aten.slice.Tensor: _sliced_back,
    aten.narrow.default: _sliced_back,
    aten.select.int: _selected_back,
}
_PIECES = (aten.split.Tensor, aten.split_with_sizes.default, aten.chunk.default, aten.unbind.int)
# Views that are read but never written through: a write into their memory
# makes them stale (they are computed again from their parent, like any
# view), a write through one is refused (``unsupported_mutations``).
# transformers' repeat_kv expands a KV cache that the same step writes.
_READ_ONLY = frozenset({aten.expand.default})
# Every view op view_parent follows: one lookup (an OpOverload's hash runs Python code).
_VIEWS = frozenset(_UPDATES) | _READ_ONLY


def _update_of(view: fx.Node) -> ViewUpdate | None:
    if view.target is operator.getitem:
        return _piece_back if view.args[0].target in _PIECES else None
    if mutates_input(view.target):
        return _same_memory  # an in-place op returns the tensor it wrote
    return _UPDATES.get(view.target)


# -- checks before lowering ----------------------------------------------------


def unsupported_mutations(
    graph: fx.Graph, is_lowerable: Callable[[Any], bool]
) -> list[tuple[fx.Node, str]]:
    """The nodes that stop ``graph``'s in-place ops from being lowered as values, and why."""
    problems: list[tuple[fx.Node, str]] = []
    written: set[int] = set()
    for node in graph.nodes:
        if node.op != "call_function" or not mutates_input(node.target):
            continue
        twin = functional_target(node.target)
        target = _self_argument(node)
        if twin is None or not is_lowerable(twin):
            problems.append((node, f"{node.target} has no out-of-place lowering"))
        elif view_parent(node) is not target:
            problems.append((node, f"{node.target} does not write into its `self` argument"))
        elif (view := _read_only_on_the_way(target)) is not None:
            reason = f"writes through a view made by {view.target}, which cannot be written through"
            problems.append((node, reason))
        else:
            written.add(storage(target))
    if not written:
        return problems
    # Memory that is written must be reached through views this module can
    # write through: a node that shares it with its input in any other way
    # (an as_strided or expand view, say) would not see the write.
    for node in graph.nodes:
        # An op whose schema returns no alias of its arguments allocates, whatever
        # its fake value says (a lifted constant's copy shares the constant's
        # storage there). Asked first: reading a node's storage is the costly part.
        if node.op != "call_function" or _allocates(node.target):
            continue
        if storage(node) not in written:
            continue
        if view_parent(node) is None and storage(_self_argument(node)) == storage(node):
            reason = f"is a view made by {node.target}, which cannot be written through"
            problems.append((node, reason))
    return problems


def constant_writes(graph: fx.Graph, constants: dict[str, str]) -> list[tuple[fx.Node, str]]:
    """The in-place calls of ``graph`` that write into a constant tensor, with its name.

    ``constants`` maps the placeholders of the program's constant tensors
    (``InputKind.CONSTANT_TENSOR``: tensors the module holds as plain
    attributes, not buffers) to their names. The written memory is followed
    through the schema's aliasing (a view, an in-place result, ``to`` of the
    same dtype), not through the fake values' storages: ``torch.export``
    gives a lifted constant's placeholder a fake value of its own, so the
    storages of a write and its constant differ.
    """
    found = []
    for node in in_place_calls(graph):
        written = _aliased_base(_self_argument(node))
        if written is not None and written.op == "placeholder" and written.name in constants:
            found.append((node, constants[written.name]))
    return found


def _aliased_base(node: Any) -> fx.Node | None:
    """The node whose memory ``node`` may alias, by the schemas of the ops in between."""
    while isinstance(node, fx.Node) and node.op == "call_function":
        if node.target is operator.getitem:
            node = node.args[0]
            continue
        parent = _self_argument(node)
        if not _returns_alias(node.target) or not _same_dtype(node, parent):
            break  # a new tensor (``to`` another dtype copies)
        node = parent
    return node if isinstance(node, fx.Node) else None


def _same_dtype(node: fx.Node, parent: Any) -> bool:
    value = node.meta.get("val")
    source = parent.meta.get("val") if isinstance(parent, fx.Node) else None
    return isinstance(value, torch.Tensor) and getattr(source, "dtype", None) == value.dtype


def _returns_alias(target: Any) -> bool:
    """Whether ``target``'s schema says its result may alias an argument (views, in-place ops)."""
    return _schema_fact(
        _RETURNS_ALIAS,
        target,
        lambda op: bool(op._schema.returns) and op._schema.returns[0].alias_info is not None,
    )


_RETURNS_ALIAS: dict[int, tuple[Any, bool]] = {}


def _read_only_on_the_way(node: fx.Node) -> fx.Node | None:
    """The first read-only view (``_READ_ONLY``) from ``node`` up to its memory's root, if any."""
    while (parent := view_parent(node)) is not None:
        if node.target in _READ_ONLY:
            return node
        node = parent
    return None


def _allocates(target: Any) -> bool:
    """Whether ``target``'s schema says each result is new memory (``clone``, ``mul``)."""
    return _schema_fact(
        _ALLOCATES, target, lambda op: all(r.alias_info is None for r in op._schema.returns)
    )


_ALLOCATES: dict[int, tuple[Any, bool]] = {}


# -- during lowering -------------------------------------------------------------

# A memo entry not made yet.
_UNSEEN = object()


class Functionalizer:
    """Tracks the versions of written memory while one graph is lowered."""

    def __init__(self, writes: list[fx.Node]) -> None:
        """``writes``: the graph's in-place calls (``in_place_calls``)."""
        self._roots: dict[str, fx.Node] = {}
        roots = {self._root(_self_argument(n)) for n in writes}
        self._version: dict[str, int] = dict.fromkeys((r.name for r in roots), 0)
        self._computed_at: dict[str, int] = {}
        # A node shares a written root's memory only if it is a view (or an
        # in-place result) sharing the root's storage: every other node is
        # never stale, which its target and one storage lookup tell.
        self._written_storages = {storage(r) for r in roots} - {None}
        # Each node's written root (its name), or None: found once per node.
        self._written_root: dict[str, str | None] = {}

    def _root(self, node: fx.Node) -> fx.Node:
        """``memory_root(node)``, with the roots of the views on the way kept too."""
        root = self._roots.get(node.name)
        if root is None:
            parent = view_parent(node)
            root = node if parent is None else self._root(parent)
            self._roots[node.name] = root
        return root

    def _written(self, node: fx.Node) -> str | None:
        """The name of the written root whose memory ``node`` is in, or ``None``."""
        name = node.name
        found = self._written_root.get(name, _UNSEEN)
        if found is _UNSEEN:
            if name in self._version:
                found = name
            elif _may_view(node) and storage(node) in self._written_storages:
                root = self._root(node).name
                found = root if root in self._version else None
            else:
                found = None  # its own root (see view_parent), and not written
            self._written_root[name] = found
        return found

    def record(self, node: fx.Node) -> None:
        """``node`` was just lowered: its value is that of the current version."""
        root = self._written(node)
        if root is not None:
            self._computed_at[node.name] = self._version[root]

    def is_stale(self, node: fx.Node) -> bool:
        root = self._written(node)
        return root is not None and self._computed_at.get(node.name, 0) < self._version[root]

    def current(self, ctx: LoweringContext, node: fx.Node) -> Any:
        """The value of ``node`` now, computed again from its base if a write made it stale."""
        if self.is_stale(node):
            parent = view_parent(node)
            self.current(ctx, parent)
            if node.target is operator.getitem:
                source, index = node.args
                self._lower_again(ctx, source)
                ctx.values[node.name] = ctx.values[source.name][index]
            elif mutates_input(node.target):
                ctx.values[node.name] = ctx.values[parent.name]
            else:
                self._lower_again(ctx, node)
            self.record(node)
        return ctx.values[node.name]

    def _lower_again(self, ctx: LoweringContext, node: fx.Node) -> None:
        with ctx.lowering(node):
            ctx.values[node.name] = lookup(node.target)(ctx, node)

    def mutate(self, ctx: LoweringContext, node: fx.Node) -> Value:
        """Lower the in-place op ``node`` (the current node) and write its result back."""
        new = lookup(functional_target(node.target))(ctx, node)
        target = _self_argument(node)
        value, view = new, target
        while (parent := view_parent(view)) is not None:
            value = _update_of(view)(ctx, view, self.current(ctx, parent), value)
            view = parent
        self._version[view.name] += 1
        ctx.values[view.name] = value
        ctx.values[target.name] = new
        self.record(view)
        self.record(target)
        return new

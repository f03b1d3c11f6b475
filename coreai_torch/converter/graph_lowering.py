"""The FX walk: lower every live node of a graph at the current insertion point."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import Location, RankedTensorType, ShapedType, Value
from torch._ops import HigherOrderOperator, OpOverload

from ..contract import OP_NAMESPACE
from . import dtypes, ops  # noqa: F401  (importing ops registers the built-in lowerings)
from .errors import UnsupportedOpsError, lowering_context, source_line
from .lowering_context import LoweringContext
from .mutation import Functionalizer, in_place_calls, mutates_input
from .registry import lookup, reads_of
from .vmap import Batching

KERNEL_NAMESPACE = OP_NAMESPACE

# A lowering in the form Apple's coreai-torch documents for user code:
# fn(values_map, node, loc) -> Value | list[Value].
UserLowering = Callable[[dict[str, Any], fx.Node, Location], Any]
# Lowers one call of a registered kernel; see kernels.py.
KernelLowering = Callable[[LoweringContext, fx.Node], Any]


def _qualified_names(target: Any) -> list[str]:
    """The names a user may register a lowering under: ``ns::op.overload``, ``ns::op``."""
    if isinstance(target, OpOverload):
        full = target.name()
        if "." in full:
            return [full, full.split(".", 1)[0]]
        return [full, f"{full}.default"]
    return []


def kernel_name(target: Any) -> str | None:
    """The kernel a call target runs (a ``coreai_metal_kernels`` op), or ``None``."""
    found = _KERNEL_NAMES.get(id(target))
    if found is not None and found[0] is target:
        return found[1]
    name = None
    if isinstance(target, OpOverload) and target.namespace == KERNEL_NAMESPACE:
        name = target.name().split("::", 1)[1].split(".", 1)[0]
    _KERNEL_NAMES[id(target)] = (target, name)
    return name


# Keyed by id(), as mutation.mutates_input's memo is (it says why).
_KERNEL_NAMES: dict[int, tuple[Any, str | None]] = {}


def user_lowering(user_lowerings: dict[str, UserLowering], target: Any) -> UserLowering | None:
    if not user_lowerings:
        return None
    for name in _qualified_names(target):
        if name in user_lowerings:
            return user_lowerings[name]
    return None


def is_lowerable(target: Any, user_lowerings: dict[str, UserLowering]) -> bool:
    """Whether a call target has a lowering: built in, a user's, a kernel or ``getitem``."""
    if target is operator.getitem:
        return True
    if user_lowering(user_lowerings, target) is not None:
        return True
    if kernel_name(target) is not None:
        return True  # unregistered kernels get their own error from check()
    return lookup(target) is not None


class GraphLowerer:
    """Lowers FX graphs with the built-in registry, user lowerings and kernels."""

    def __init__(
        self,
        user_lowerings: dict[str, UserLowering],
        kernel_lowerings: dict[str, KernelLowering],
    ) -> None:
        self.user_lowerings = user_lowerings
        self.kernel_lowerings = kernel_lowerings
        # Live nodes by graph, found by check() and used again by lower_nodes():
        # a lowerer converts one set of programs, which nothing changes meanwhile.
        self._live: dict[fx.Graph, set[fx.Node]] = {}
        # The nodes lowerings registered with ``reads`` read (found with the
        # live nodes): a parameter read this way needs a value though no user
        # of it is lowered.
        self.read_by_hooks: set[fx.Node] = set()
        # The in-place calls of each graph, found once: liveness, constant
        # folding and the lowering of the graph each need them.
        self._writes: dict[fx.Graph, list[fx.Node]] = {}
        # Whether every value lowered so far came out of a built-in lowering
        # with exactly the static type torch states for it (``_checked_one``)
        # and every graph input has static sizes: the module's types are then
        # all static, and Core AI's type propagation would leave them as they
        # are (converter._rewrite skips it).
        self.exact_types = True

    def live(self, graph: fx.Graph) -> set[fx.Node]:
        found = self._live.get(graph)
        if found is None:
            reads = self._reads if reads_apply(graph, self.writes(graph)) else None
            found = self._live[graph] = live_nodes(graph, reads)
        return found

    def writes(self, graph: fx.Graph) -> list[fx.Node]:
        """The calls of ``graph`` that write into an input (``mutation.in_place_calls``)."""
        found = self._writes.get(graph)
        if found is None:
            found = self._writes[graph] = in_place_calls(graph)
        return found

    def _reads(self, node: fx.Node) -> list[fx.Node] | None:
        """The nodes lowering ``node`` reads (see ``register_lowering``'s ``reads``).

        ``None`` where those are its inputs.
        """
        reads = reads_of(node.target) if node.op == "call_function" else None
        if reads is None or user_lowering(self.user_lowerings, node.target) is not None:
            return None
        found = reads(node)
        self.read_by_hooks.update(found)
        return found

    # -- checks before any IR is built ---------------------------------------

    def check(self, graph_module: fx.GraphModule) -> None:
        """Raise before conversion: unregistered kernels, then every unsupported op."""
        nodes = all_call_nodes(graph_module, self.live)
        # Asked once per target, then (only when something is missing) per node
        # for the error.
        if all(self._supported(target) for target in distinct_targets(nodes)):
            return
        missing_kernels: dict[str, fx.Node] = {}
        unsupported: list[fx.Node] = []
        for node in nodes:
            if self._supported(node.target):
                continue
            name = kernel_name(node.target)
            if name is not None:
                missing_kernels.setdefault(name, node)
            else:
                unsupported.append(node)
        if missing_kernels:
            details = "; ".join(
                f"kernel {name!r} (node {node.name}, from {source_line(node) or 'unknown line'})"
                for name, node in missing_kernels.items()
            )
            raise ValueError(
                f"the program calls Metal kernels that are not registered with this "
                f"converter: {details}. Pass the TorchMetalKernel objects to "
                "converter.register_custom_kernels([...]) before to_coreai()."
            )
        if unsupported:
            raise UnsupportedOpsError(unsupported)

    def _supported(self, target: Any) -> bool:
        """Whether calls of ``target`` can be lowered: else check() names them."""
        name = kernel_name(target)
        if name is not None and name not in self.kernel_lowerings:
            # A kernel that was not registered, unless the user lowers its op.
            return user_lowering(self.user_lowerings, target) is not None
        # In-place ops are lowered as their out-of-place twins (mutation.py);
        # decomp.prepare decomposed the programs where that is not possible.
        return mutates_input(target) or is_lowerable(target, self.user_lowerings)

    # -- lowering --------------------------------------------------------------

    def lower_nodes(self, graph_module: fx.GraphModule, ctx: LoweringContext) -> list[Any]:
        """Lower every live call node; placeholders must already be in ``ctx.values``.

        Returns the graph's output arguments resolved to values.
        """
        ctx.lowerer = self
        writes = self.writes(graph_module.graph)
        if writes:
            ctx.functionalizer = Functionalizer(writes)
        if Batching.needed(graph_module.graph):
            ctx.batching = Batching()
        live = self.live(graph_module.graph)
        # Calls that repeat an earlier call with the same arguments reuse its
        # value (the same mask or position table built once per layer): unless
        # an in-place op can change a value between the two.
        first_call: dict[Any, fx.Node] | None = None if ctx.functionalizer else {}
        # Folded calls that repeat an earlier one count as it (folding.py).
        canonical: dict[fx.Node, fx.Node] = dict(ctx.folded.repeats)
        outputs: list[Any] = []
        for node in graph_module.graph.nodes:
            if node.op == "call_function" and node in live and node not in ctx.folded.values:
                key = call_key(node, canonical) if first_call is not None else None
                if key is not None:
                    try:
                        # One lookup that also records the first call: a key's
                        # hash is computed anew on every use.
                        earlier = first_call.setdefault(key, node)
                    except TypeError:  # an argument that cannot be hashed
                        earlier = node
                    if earlier is not node:
                        canonical[node] = earlier
                        _reuse(ctx, node, earlier)
                        continue
                self._lower_node(node, ctx)
            elif node.op == "output":
                outputs = [self._output_value(arg, ctx) for arg in _flat(node.args[0])]
        return outputs

    def lower_subgraph(
        self, graph_module: fx.GraphModule, inputs: list[Value], parent: LoweringContext
    ) -> list[Value]:
        """Lower a sub-graph (a ``torch.cond`` branch) inline with ``inputs`` bound."""
        ctx = LoweringContext(parent.symbols, graph_module, parent.locations)
        placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(inputs):
            raise ValueError(
                f"sub-graph takes {len(placeholders)} inputs, {len(inputs)} were given"
            )
        for node, value in zip(placeholders, inputs, strict=True):
            ctx.values[node.name] = value
        return self.lower_nodes(graph_module, ctx)

    def _output_value(self, arg: Any, ctx: LoweringContext) -> Value:
        if isinstance(arg, fx.Node):
            return ctx.value(arg)
        raise ValueError(
            f"graph output {arg!r} is not a tensor; Core AI programs return tensors only"
        )

    def _lower_node(self, node: fx.Node, ctx: LoweringContext) -> None:
        try:
            with ctx.lowering(node):
                result = self._dispatch(node, ctx)
                if ctx.batching is None or not ctx.batching.of(node):
                    result = _checked(node, result, ctx.types, self)
                else:
                    self.exact_types = False  # batched values carry batch dims: not checked
        except Exception as exc:
            exc.add_note(lowering_context(node))
            raise
        if isinstance(result, list | tuple):
            results = list(result)
            ctx.values[node.name] = results
            for index, value in enumerate(results):
                ctx.values[f"{node.name}#{index}"] = value
        else:
            ctx.values[node.name] = result
        if ctx.functionalizer is not None:
            ctx.functionalizer.record(node)

    def _dispatch(self, node: fx.Node, ctx: LoweringContext) -> Any:
        target = node.target
        if target is operator.getitem:
            source, index = node.args
            return ctx.values[source.name][index]
        user = user_lowering(self.user_lowerings, target)
        if user is not None:
            self.exact_types = False  # whatever types the user's ops have inside
            return user(ctx.values, node, ctx.loc)
        name = kernel_name(target)
        if name is not None:
            return self.kernel_lowerings[name](ctx, node)
        if mutates_input(target):
            return ctx.functionalizer.mutate(ctx, node)
        lowering = lookup(target)  # check() made sure there is one
        batched = ctx.batching is not None and ctx.batching.involves(node)
        if batched and not Batching.is_vmap_op(target):
            return ctx.batching.lower(ctx, node, lowering)
        return lowering(ctx, node)


def call_key(node: fx.Node, canonical: dict[fx.Node, fx.Node]) -> Any:
    """A description of a pure call, with repeated calls mapped to their first.

    Hashable unless an argument is not. This runs for every node of every
    conversion, so the common arguments (nodes, ints, lists of them) take the
    shortest paths.
    """
    target = node.target
    if not _repeatable(target):
        return None  # regions and kernel calls are lowered each time they appear
    kwargs = node.kwargs
    # The target by identity: an OpOverload's own hash runs Python code, and
    # every target is kept alive by its node while the graph is lowered.
    return (
        id(target),
        tuple([_canon(v, canonical) for v in node.args]),
        _canon(kwargs, canonical) if kwargs else (),
    )


def _repeatable(target: Any) -> bool:
    found = _REPEATABLE.get(id(target))
    if found is not None and found[0] is target:
        return found[1]
    repeatable = not isinstance(target, HigherOrderOperator) and kernel_name(target) is None
    _REPEATABLE[id(target)] = (target, repeatable)
    return repeatable


# Keyed by id(), as kernel_name's memo is.
_REPEATABLE: dict[int, tuple[Any, bool]] = {}

# Argument types that stand for themselves in a call key, tagged with their type:
# 1 and True (and 1.0) are equal in Python but give values of other dtypes.
_PLAIN_TYPES = frozenset({int, str, bool, type(None)})
_SEQUENCES = (list, tuple)  # immutable_list and named tuples too
_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


def _canon(value: Any, canonical: dict[fx.Node, fx.Node]) -> Any:
    kind = type(value)
    if kind is fx.Node:
        return canonical.get(value, value)
    if kind in _PLAIN_TYPES:
        return kind, value
    if isinstance(value, _SEQUENCES):
        return tuple([_canon(v, canonical) for v in value])
    if isinstance(value, float):  # numpy's float64 too
        return float, repr(value)  # 0.0 and -0.0 differ
    if isinstance(value, dict):
        return tuple(sorted((k, _canon(v, canonical)) for k, v in value.items()))
    if isinstance(value, _SYMBOLIC):
        return str(value)
    return kind, value


def _reuse(ctx: LoweringContext, node: fx.Node, earlier: fx.Node) -> None:
    value = ctx.values[earlier.name]
    ctx.values[node.name] = value
    if isinstance(value, list):
        for index, item in enumerate(value):
            ctx.values[f"{node.name}#{index}"] = item
    if ctx.batching is not None and ctx.batching.of(earlier):
        ctx.batching.levels[node.name] = ctx.batching.of(earlier)


# A types-cache entry not made yet.
_UNSEEN = object()


def _checked(node: fx.Node, result: Any, types: dict[Any, Any], lowerer: GraphLowerer) -> Any:
    """``result`` checked against what torch says the node is, with the sizes torch knows.

    A disagreement is a lowering bug. Builders that take computed shapes give
    results of unknown sizes; those are refined to the sizes torch knows
    statically, which the verifier of a later op (a concat) may need. A value
    whose type is not exactly torch's static one clears ``lowerer.exact_types``.
    """
    expected = node.meta.get("val")
    if isinstance(result, list | tuple):
        if not isinstance(expected, list | tuple):
            lowerer.exact_types = False
            return result
        return [
            _checked_one(node, value, fake, types, lowerer)
            for value, fake in zip(result, list(expected) + [None] * len(result), strict=False)
        ]
    return _checked_one(node, result, expected, types, lowerer)


def _checked_one(
    node: fx.Node, value: Any, fake: Any, types: dict[Any, Any], lowerer: GraphLowerer
) -> Any:
    if not isinstance(fake, torch.Tensor) or not isinstance(value, Value):
        if isinstance(fake, _SYMBOLIC):
            lowerer.exact_types = False  # a size computed at run time
        return value
    # The common case, first: exactly the type torch's sizes give, made once
    # per (sizes, dtype). IR types are unique per context, so comparing them
    # is comparing two pointers. Symbolic sizes cannot be hashed (TypeError);
    # dtypes the IR narrows are left to the checks below (None).
    try:
        key = (tuple(fake.shape), fake.dtype)
        expected = types.get(key, _UNSEEN)
    except TypeError:
        expected = None
    if expected is _UNSEEN:
        supported = dtypes.is_supported(fake.dtype)
        expected = types[key] = dtypes.tensor_type(fake) if supported else None
    actual = value.type
    if expected is not None and actual == expected:
        return value
    lowerer.exact_types = False
    if not isinstance(actual, RankedTensorType):
        return value
    supported = dtypes.is_supported(fake.dtype)
    if actual.rank != fake.dim():
        raise TypeError(f"lowering produced rank {actual.rank}, torch has rank {fake.dim()}")
    if supported and actual.element_type != dtypes.element_type(fake.dtype):
        raise TypeError(
            f"lowering produced element type {actual.element_type}, "
            f"torch has {fake.dtype} ({dtypes.element_type(fake.dtype)})"
        )
    dynamic = ShapedType.get_dynamic_size()
    known = list(actual.shape)
    for dim, (got, size) in enumerate(zip(actual.shape, fake.shape, strict=True)):
        if isinstance(size, torch.SymInt):
            continue
        if got == dynamic:
            known[dim] = int(size)
        elif got != int(size):
            raise TypeError(
                f"lowering produced shape {list(actual.shape)}, torch has {list(fake.shape)} "
                f"(dimension {dim})"
            )
    if known == list(actual.shape):
        return value
    # A cast to the same element type states the sizes.
    return coreai.cast(value, RankedTensorType.get(known, actual.element_type))


def _flat(args: Any) -> list[Any]:
    if isinstance(args, list | tuple):
        out: list[Any] = []
        for arg in args:
            out.extend(_flat(arg))
        return out
    return [args]


def live_nodes(
    graph: fx.Graph, reads: Callable[[fx.Node], list[fx.Node] | None] | None = None
) -> set[fx.Node]:
    """The nodes the graph's outputs depend on.

    Everything else is dropped from the converted program: a converted program
    has no side effects, so a call whose results are all unused (a kernel call
    included) computes nothing the program returns. Run-time assertions that
    ``torch.export`` inserts are dropped with them; the exporter already
    checked the shapes they guard. ``reads(node)``, if given, lists the nodes
    lowering ``node`` reads where that is not its inputs (``None`` where it is).
    """
    live: set[fx.Node] = set()
    # The live nodes that read their inputs, and the nodes the other live
    # nodes read. Only later nodes read a node, so one sweep from the output
    # back finds every live node with a set test or two per node (a walk
    # over each live node's inputs built a list per node).
    readers: set[fx.Node] = set()
    read: set[fx.Node] = set()
    for node in reversed(graph.nodes):
        if (
            readers.isdisjoint(node.users)
            and node not in read
            and node.op != "output"
            # An op that mutates an input is kept whatever its users: the
            # program it is in gets decomposed, which turns the mutation into
            # a value (decomp.py).
            and not mutates_input(node.target)
        ):
            continue
        live.add(node)
        found = reads(node) if reads is not None else None
        if found is None:
            readers.add(node)
        else:
            read.update(found)
    return live


def reads_apply(graph: fx.Graph, writes: list[fx.Node]) -> bool:
    """Whether lowerings may read other nodes than their inputs (``register_lowering``).

    Not in graphs with in-place ops (``writes``, the graph's in-place calls),
    whose values change between a node and its users (mutation.py), nor in
    graphs with vmap regions (vmap.py).
    """
    return not writes and not Batching.needed(graph)


def distinct_targets(nodes: list[fx.Node]) -> list[Any]:
    """The targets of ``nodes``, each once: a graph calls a few ops many times.

    By identity: hashing an ``OpOverload`` runs Python code.
    """
    return list({id(node.target): node.target for node in nodes}.values())


def all_call_nodes(
    graph_module: fx.GraphModule,
    live: Callable[[fx.Graph], set[fx.Node]] = live_nodes,
) -> list[fx.Node]:
    """Live call nodes of a graph and of the sub-graphs its higher-order ops use."""
    nodes: list[fx.Node] = []
    live_here = live(graph_module.graph)
    for node in graph_module.graph.nodes:
        if node.op != "call_function" or node not in live_here:
            continue
        nodes.append(node)
        if isinstance(node.target, HigherOrderOperator):
            for arg in node.args:
                if isinstance(arg, fx.Node) and arg.op == "get_attr":
                    sub = getattr(graph_module, str(arg.target), None)
                    if isinstance(sub, fx.GraphModule):
                        nodes.extend(all_call_nodes(sub, live))
    return nodes

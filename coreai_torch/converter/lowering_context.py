"""``LoweringContext``: what a lowering reads and builds while one graph is lowered."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai, debuginfo
from coreai._compiler.ir import Attribute, Location, RankedTensorType, ShapedType, Value
from coreai.authoring import CompileUnitScope, FileInfo

from . import dtypes
from .arguments import Arguments
from .constants import i32, small_constant
from .errors import source_line
from .symbolic import SymbolTable, index_constant

if TYPE_CHECKING:
    from .graph_lowering import GraphLowerer
    from .mutation import Functionalizer
    from .vmap import Batching


class Folded(NamedTuple):
    """The calls of a graph computed in PyTorch before lowering (``folding.py``)."""

    # Each folded call's value, in graph order.
    values: dict[fx.Node, torch.Tensor]
    # Folded calls that repeat an earlier folded call (the same target and
    # arguments), mapped to it: they share its value, computed once.
    repeats: dict[fx.Node, fx.Node]


class LoweringContext:
    """What a lowering needs from the converter while it lowers one graph.

    One context serves a whole FX graph (a ``torch.cond`` branch gets its own).
    ``node`` and ``loc`` describe the node being lowered right now, and
    :meth:`arg` reads that node's arguments by the names of its op's schema.
    """

    def __init__(
        self,
        symbols: SymbolTable,
        graph_module: fx.GraphModule,
        locations: SourceLocations | None = None,
    ) -> None:
        self.values: dict[str, Value | list[Value]] = {}
        # Shared with the contexts of sub-graphs.
        self.locations = SourceLocations() if locations is None else locations
        # 0-d constants of Python numbers, built once per graph block.
        self._scalars: dict[tuple[Any, ...], Value] = {}
        # Parameters that only a linear reads, as tensors: ops/linalg.py makes
        # each a constant of the transposed weight.
        self.weights: dict[str, torch.Tensor] = {}
        # Calls computed in PyTorch before lowering (folding.py): not lowered.
        self.folded = Folded({}, {})
        # The IR type of each (sizes, dtype) a node's result has had, made once.
        self.types: dict[Any, RankedTensorType | None] = {}
        # The tensors of the graph's constants and folded calls (see known()).
        self.constants: dict[fx.Node, torch.Tensor] = {}
        # What lowerings worked out from those tensors, kept for the graph's
        # other nodes that ask the same (keyed by the lowering's choosing).
        self.facts: dict[Any, Any] = {}
        self.symbols = symbols
        self.graph_module = graph_module
        self.node: fx.Node | None = None
        self.loc: Location | None = None
        self._args: Arguments | None = None
        # Set by the lowerer of this graph, for lower_subgraph. It holds no
        # context: a context that referred to itself (a closure over it) would
        # keep its IR, and with it Core AI's context and the model's weights,
        # alive after the conversion until a garbage collection.
        self.lowerer: GraphLowerer | None = None
        # Set by the converter for graphs with in-place ops (see mutation.py)
        # and for graphs with vmap regions (see vmap.py).
        self.functionalizer: Functionalizer | None = None
        self.batching: Batching | None = None

    def lower_subgraph(self, graph_module: fx.GraphModule, inputs: list[Value]) -> list[Value]:
        """Lower a sub-graph (a ``torch.cond`` branch) inline; returns its output values."""
        return self.lowerer.lower_subgraph(graph_module, inputs, self)

    @property
    def reads_apply(self) -> bool:
        """Whether lowerings registered with ``reads`` read what it lists.

        As ``graph_lowering.reads_apply`` says of this graph: no in-place ops,
        no vmap regions (``lower_nodes`` sets up neither helper then).
        """
        return self.functionalizer is None and self.batching is None

    def lowering(self, node: fx.Node) -> _Lowering:
        """Make ``node`` the node being lowered; ops built meanwhile carry its location.

        A context manager (a class, not ``contextlib``'s generator: this runs
        once per node of every conversion).
        """
        return _Lowering(self, node)

    # -- arguments --------------------------------------------------------------

    @property
    def args(self) -> Arguments:
        """The current node's arguments by parameter name (see ``arguments.py``)."""
        if self._args is None:
            self._args = Arguments(self.node.target, self.node.args, self.node.kwargs)
        return self._args

    def arg(self, name: str) -> Any:
        """The current node's argument ``name``, or its schema default when not passed.

        ``ctx.arg("dim")`` on ``aten.sum.dim_IntList`` is the node's ``dim`` (an FX
        node for a tensor, a Python value otherwise); a name that the op's schema
        does not have raises ``KeyError`` listing the names it has.
        """
        return self.args[name]

    # -- values ---------------------------------------------------------------

    def value(self, arg: Any, dtype: torch.dtype | None = None) -> Value:
        """The Core AI value of an FX argument.

        A node gives its lowered value; a Python number gives a 0-d constant of
        ``dtype`` (default: float32, int32 or bool by its Python type); a
        ``torch.SymInt`` gives its computation; a list of sizes gives a 1-D si32
        tensor. With ``dtype``, a node's value is cast to it.
        """
        if isinstance(arg, fx.Node):
            found = self.values.get(arg.name)
            if self.functionalizer is not None and self.functionalizer.is_stale(arg):
                found = self.functionalizer.current(self, arg)
            if found is None:
                raise KeyError(f"node {arg.name} has no lowered value yet")
            if isinstance(found, list):
                raise TypeError(f"node {arg.name} has several results; index it first")
            return self.cast(found, dtype) if dtype is not None else found
        if isinstance(arg, torch.SymInt):
            return self.scalar(arg) if dtype is None else self.cast(self.scalar(arg), dtype)
        if isinstance(arg, bool | int | float):
            return self.constant(arg, dtype or _python_dtype(arg))
        if isinstance(arg, list | tuple):
            sizes = self.shape_tensor(arg, unsigned=False)
            return sizes if isinstance(sizes, Value) else coreai.constant(sizes)
        if isinstance(arg, torch.Tensor):
            return self.constant(arg, dtype or arg.dtype)
        raise TypeError(f"cannot turn argument {arg!r} ({type(arg).__name__}) into a Core AI value")

    def known(self, arg: Any) -> torch.Tensor | None:
        """The value of a tensor argument known before the program runs, else ``None``.

        Parameters, buffers and constants of the program are known, and so are
        the calls computed from them alone (``folding.py``). A lowering may use
        the value to emit fewer ops, never to compute another result than it
        would for an unknown value.
        """
        return self.constants.get(arg) if isinstance(arg, fx.Node) else None

    def fake(self, arg: Any = None) -> Any:
        """The fake value (``meta["val"]``) of a node; of the current node by default."""
        node = self.node if arg is None else arg
        if isinstance(node, fx.Node):
            return node.meta.get("val")
        return node

    def result_dtype(self, index: int | None = None) -> torch.dtype:
        """The torch dtype of the current node's result (``index`` for tuples)."""
        val = self.fake()
        if index is not None:
            val = val[index]
        return val.dtype

    def dtype(self, arg: Any) -> torch.dtype:
        """The torch dtype of an argument: a node's fake tensor, or a Python scalar's."""
        val = self.fake(arg)
        if isinstance(val, torch.Tensor):
            return val.dtype
        if isinstance(val, torch.SymInt | int) and not isinstance(val, bool):
            return torch.int64
        if isinstance(val, torch.SymFloat | float):
            return torch.float32
        if isinstance(val, torch.SymBool | bool):
            return torch.bool
        raise TypeError(f"argument {arg!r} has no dtype")

    def rank(self, arg: Any) -> int:
        val = self.fake(arg)
        return val.dim() if isinstance(val, torch.Tensor) else 0

    # -- constants and types --------------------------------------------------

    def constant(self, value: Any, dtype: torch.dtype) -> Value:
        """A constant of torch ``dtype`` (narrowed to what the IR stores).

        A Python number gives a 0-d constant, made once per graph and reused.
        """
        if not isinstance(value, bool | int | float):
            return dtypes.constant(value, dtype)
        key = (type(value), repr(value), dtype)
        found = self._scalars.get(key)
        if found is None:
            found = self._scalars[key] = dtypes.constant(value, dtype)
        return found

    def tensor_type(self, fake: torch.Tensor) -> RankedTensorType:
        """The IR tensor type of a fake tensor; symbolic sizes become dynamic dims."""
        return dtypes.tensor_type(fake)

    def cast(self, value: Value, dtype: torch.dtype | None) -> Value:
        """``value`` converted to torch ``dtype``; no op when it already is."""
        if dtype is None:
            return value
        target = dtypes.element_type(dtype)
        if value.type.element_type == target:
            return value
        source = dtypes.torch_dtype_of(value.type)
        if source.is_floating_point and not dtype.is_floating_point and dtype != torch.bool:
            # Round toward zero explicitly, as torch does. Core AI's rewrite
            # passes fold cast(cast(x, int), float) to x, which would drop the
            # truncation if the cast were the only thing doing it.
            value = _round_toward_zero(value)
        return coreai.cast(value, RankedTensorType.get(value.type.shape, target))

    # -- sizes ----------------------------------------------------------------

    def size(self, arg: Any, dim: int) -> int | Value:
        """Size of a tensor argument along ``dim``: an int, or a 0-d si32 value."""
        val = self.fake(arg)
        size = val.shape[dim]
        if isinstance(size, torch.SymInt):
            return self.scalar(size)
        return int(size)

    def scalar(self, size: int | torch.SymInt | fx.Node) -> Value:
        """A 0-d si32 value for a size that may be symbolic."""
        if isinstance(size, fx.Node):
            return self.cast(self.value(size), torch.int32)
        if isinstance(size, torch.SymInt):
            expr = size.node.expr
            what = self.node.name if self.node is not None else "size"
            return self.symbols.lower(expr, what)
        return index_constant(int(size))

    def is_static(self, sizes: Iterable[Any]) -> bool:
        return all(isinstance(s, int) and not isinstance(s, bool) for s in sizes)

    def shape_tensor(self, sizes: Sequence[Any], unsigned: bool = True) -> Value | np.ndarray:
        """A 1-D size vector (ui32, or si32) from ints, SymInts and FX nodes.

        Static sizes give a constant in exactly the element type the op needs
        (shared, see ``constants.py``), from which the builder infers a static
        result type. (A constant of another element type would make the builder
        cast it first, and infer fully dynamic results.) Symbolic sizes give a
        computed value.
        """
        np_type = np.uint32 if unsigned else np.int32
        if self.is_static(sizes):
            return small_constant(np.array([int(s) for s in sizes], dtype=np_type))
        pieces = [coreai.expand_dims(self.scalar(s), i32([0])) for s in sizes]
        vector = pieces[0] if len(pieces) == 1 else coreai.concat(i32(0), pieces)
        return coreai.cast(vector, np_type) if unsigned else vector

    def shape_of(self, arg: Any) -> np.ndarray | Value:
        """The shape of a tensor argument as a ui32 size vector (see :meth:`shape_tensor`)."""
        val = self.fake(arg)
        return self.shape_tensor(list(val.shape))

    def dynamic_dims(self, fake: torch.Tensor) -> list[int]:
        return [
            ShapedType.get_dynamic_size() if isinstance(s, torch.SymInt) else int(s)
            for s in fake.shape
        ]


class _Lowering:
    """``LoweringContext.lowering``'s context manager."""

    __slots__ = ("ctx", "node", "saved")

    def __init__(self, ctx: LoweringContext, node: fx.Node) -> None:
        self.ctx, self.node = ctx, node

    def __enter__(self) -> None:
        ctx, node = self.ctx, self.node
        self.saved = ctx.node, ctx.loc, ctx._args
        loc = ctx.locations.of(node)
        ctx.node, ctx.loc, ctx._args = node, loc, None
        loc.__enter__()

    def __exit__(self, *exc: Any) -> None:
        ctx = self.ctx
        try:
            ctx.loc.__exit__(*exc)
        finally:
            ctx.node, ctx.loc, ctx._args = self.saved


class SourceLocations:
    """The user's source line of each node as a Core AI debug location (or unknown).

    Core AI's rewrite passes accept only its own debug-info locations: a file
    position in a compile unit, the form ``coreai.authoring.DebugInfo`` builds.
    They are built here from the dialect's attributes, with the compile unit of
    each file made once: through ``DebugInfo`` each location cost about 50 µs,
    a tenth of converting a small transformer. Locations are kept per stack
    trace, which the nodes of every layer of a model share, and one instance
    serves every graph of a conversion (entry points of one model share their
    lines too).
    """

    def __init__(self) -> None:
        self._by_trace: dict[str, Location] = {}
        self._units: dict[str, Attribute] = {}

    def of(self, node: fx.Node) -> Location:
        trace = node.meta.get("stack_trace") or ""
        loc = self._by_trace.get(trace)
        if loc is None:
            loc = self._by_trace[trace] = self._location(node)
        return loc

    def _location(self, node: fx.Node) -> Location:
        where = source_line(node)
        if where is None:
            return Location.unknown()
        unit = self._units.get(where.file)
        if unit is None:
            unit = self._units[where.file] = _compile_unit(where.file)
        return debuginfo.location_attr(src=Location.file(where.file, where.line, 0), scope=unit)


def _compile_unit(file: str) -> Attribute:
    """The compile unit ``DebugInfo.with_scope(CompileUnitScope(...))`` gives ``file``."""
    scope = CompileUnitScope(file=FileInfo(file))  # its defaults: language, producer
    return debuginfo.compile_unit_attr(
        scope.source_language,
        debuginfo.file_attr(
            scope.file.filename, directory=scope.file.directory, sha256_sum=scope.file.sha256_sum
        ),
        producer=scope.producer,
        optimized=scope.optimized,
        flags=scope.flags,
        all_files=[],
    )


def _round_toward_zero(x: Value) -> Value:
    element = x.type.element_type
    one = coreai.constant(np.array(1), dtype=element)
    zero = coreai.constant(np.array(0), dtype=element)
    down = coreai.broadcasting_floor_divide(x, one)
    up = coreai.broadcasting_sub(
        zero, coreai.broadcasting_floor_divide(coreai.broadcasting_sub(zero, x), one)
    )
    return coreai.broadcasting_where(coreai.broadcasting_greater(zero, x), up, down)


def _python_dtype(value: bool | int | float) -> torch.dtype:
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, int):
        return torch.int32
    return torch.float32

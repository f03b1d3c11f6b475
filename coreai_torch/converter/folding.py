"""Constant folding in PyTorch: calls computed from constants alone become one constant.

A transformer's export computes tables from its buffers and from literal
shapes at every run: the rotary embedding's cos and sin from ``inv_freq`` and
an ``arange``, the causal mask from two more. With static shapes these are
constants. Lowering them op by op costs twice: each op is built, and then
Core AI's pre-compilation rewrite folds them. Here each such call runs once
in eager PyTorch instead, and only the values that the rest of the program
reads become ``coreai.constant`` ops (through :class:`ConstantPool`, which
also shares equal ones). With the attention lowering's use of a known mask
(``ops/attention.py``), the 4-layer tiny Llama of
``benchmarks/bench_conversion.py`` reaches the rewrite with 296 ops instead
of 398.

A call is folded when all of this holds:

- It is an ATen op that writes no input, is not random (the
  ``nondeterministic_seeded`` tag), does not leave its contents unspecified
  (``empty``), and has no lowering of the user's.
- Every tensor it reads is a parameter, buffer or constant of the program,
  or another folded call's result; every other argument is a plain Python
  value (no ``SymInt``).
- Its result is one tensor of static shape with at most ``LARGEST`` elements,
  so that a constant never stands in for a large computation (a weight times
  two would double the weights stored).
- No in-place op of the graph writes the memory it reads or returns: such
  memory changes during the run (see ``mutation.py``), so it is not constant.

Folding changes no result beyond rounding: the eager op is the reference the
lowering is tested against. Debug locations are kept: each constant carries
the source line of the call that computed it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx
from coreai._compiler.ir import Value
from torch._ops import OpOverload

from . import dtypes
from .graph_lowering import call_key
from .lowering_context import Folded
from .mutation import in_place_calls, mutates_input, storage

aten = torch.ops.aten

# Largest folded result, in elements: a mask or a rotary table of a few
# thousand positions, not a weight.
LARGEST = 1 << 16

# Ops whose result's contents torch leaves unspecified; the lowering makes zeros.
_UNSPECIFIED = {
    aten.empty.memory_format,
    aten.empty_like.default,
    aten.empty_strided.default,
    aten.new_empty.default,
    aten.new_empty_strided.default,
}

_FOLDABLE: dict[int, tuple[Any, bool]] = {}


def _foldable_target(target: Any) -> bool:
    """Whether a target's result depends on its arguments alone (memoised, see mutation.py)."""
    found = _FOLDABLE.get(id(target))
    if found is not None and found[0] is target:
        return found[1]
    ok = (
        isinstance(target, OpOverload)
        and target.namespace == "aten"
        and not mutates_input(target)
        and torch.Tag.nondeterministic_seeded not in target.tags
        and target not in _UNSPECIFIED
    )
    _FOLDABLE[id(target)] = (target, ok)
    return ok


def fold_constants(
    graph: fx.Graph,
    constants: dict[fx.Node, torch.Tensor],
    live: set[fx.Node],
    has_user_lowering: Any,
    writes: list[fx.Node] | None = None,
) -> Folded:
    """The calls of ``graph`` computed from constants alone, and their values.

    ``constants`` maps the graph's parameter, buffer and constant placeholders
    to their tensors; ``live`` is the set of nodes the outputs depend on;
    ``has_user_lowering(target)`` says whether the user lowers a target
    themselves (those calls are left to their lowering); and ``writes`` lists
    the graph's in-place calls (``mutation.in_place_calls``, found here if not
    given).
    """
    if writes is None:
        writes = in_place_calls(graph)
    written = {storage(node) for node in writes}
    written.discard(None)
    known: dict[fx.Node, torch.Tensor] = dict(constants)
    folded = Folded({}, {})
    first: dict[Any, fx.Node] = {}
    # Inference mode: no autograd bookkeeping (views' version counters) for
    # values that only ever become constants.
    with torch.inference_mode():
        for node in graph.nodes:
            if node.op != "call_function" or node not in live:
                continue
            if not _foldable(node, known, written, has_user_lowering):
                continue
            try:
                earlier = first.setdefault(call_key(node, folded.repeats), node)
            except TypeError:  # an argument that cannot be hashed
                earlier = node
            if earlier is not node and earlier in folded.values:
                folded.repeats[node] = earlier
                value = folded.values[earlier]
            else:
                value = _evaluate(node, known)
                if value is None:
                    continue
            known[node] = folded.values[node] = value
    return folded


def _foldable(
    node: fx.Node,
    known: dict[fx.Node, torch.Tensor],
    written: set[int],
    has_user_lowering: Any,
) -> bool:
    inputs = node.all_input_nodes
    for n in inputs:
        if n not in known:
            return False  # the common case, checked first
    if not _foldable_target(node.target) or has_user_lowering(node.target):
        return False
    fake = node.meta.get("val")
    if not isinstance(fake, torch.Tensor):
        return False
    numel = fake.numel()  # a SymInt when a size is symbolic
    if type(numel) is not int or numel > LARGEST or not dtypes.is_supported(fake.dtype):
        return False
    return not (
        written and (storage(node) in written or any(storage(n) in written for n in inputs))
    )


def _evaluate(node: fx.Node, known: dict[fx.Node, torch.Tensor]) -> torch.Tensor | None:
    """The node's value computed by eager PyTorch, or ``None`` where that is not possible."""
    args = _concrete(node.args, known)
    kwargs = _concrete(node.kwargs, known)
    if args is None or kwargs is None:
        return None
    try:
        value = node.target(*args, **kwargs)
    except Exception:  # an op eager torch refuses here (another device): lower it instead
        return None
    fake = node.meta["val"]
    if (
        not isinstance(value, torch.Tensor)
        or value.dtype != fake.dtype
        or tuple(value.shape) != tuple(fake.shape)
    ):
        return None
    return value


def _concrete(value: Any, known: dict[fx.Node, torch.Tensor]) -> Any:
    """``value`` with nodes replaced by their tensors; ``None`` if it holds a symbol."""
    if type(value) is fx.Node:
        return known[value]
    if isinstance(value, _SEQUENCES):  # immutable_list too
        items = []
        for v in value:
            item = _concrete(v, known)
            if item is None and v is not None:
                return None
            items.append(item)
        return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, dict):
        mapping = {}
        for k, v in value.items():
            item = _concrete(v, known)
            if item is None and v is not None:
                return None
            mapping[k] = item
        return mapping
    if isinstance(value, _SYMBOLIC):
        return None
    return value


_SEQUENCES = (list, tuple)
_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


class ConstantPool:
    """The constants of one graph: small tensors of equal contents share one op.

    The nine RMSNorm weights of a freshly initialised Llama are all ones, and
    each layer's rotary table folds to the same values; Core AI's rewrite would
    merge such duplicates, at its cost per op.
    """

    # Tensors up to this many elements are compared by contents: a table or
    # a norm's weight, not a matrix (hashing large weights costs more than
    # the rewrite does merging the rare equal ones).
    SHARED = 1 << 12

    def __init__(self) -> None:
        self._made: dict[tuple[Any, ...], Value] = {}

    def constant(self, tensor: torch.Tensor) -> Value:
        if tensor.numel() > self.SHARED or tensor.dtype == torch.bfloat16:
            return dtypes.constant(tensor, tensor.dtype)
        data = tensor.detach().cpu().contiguous()
        key = (data.dtype, tuple(data.shape), data.numpy().tobytes())
        found = self._made.get(key)
        if found is None:
            found = self._made[key] = dtypes.constant(data, data.dtype)
        return found

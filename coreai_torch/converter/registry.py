"""The lowering registry: which function turns an FX node into Core AI.

A lowering is registered for one or more ATen overloads (or Python operators
such as ``operator.mul``, which ``torch.export`` uses for size arithmetic) and
receives a :class:`~.lowering_context.LoweringContext` and the node::

    from coreai._compiler.dialects import coreai
    from coreai_torch.converter import LoweringContext, register_lowering

    @register_lowering(torch.ops.aten.relu.default)
    def relu(ctx: LoweringContext, node: torch.fx.Node):
        return coreai.relu(ctx.value(ctx.arg("self")))

It returns one Core AI value, or a list for a node with several results. Ops
are emitted by calling the builders of ``coreai._compiler.dialects.coreai``:
the converter has already set the insertion point and the source location of
the node. See ``README.md`` in this directory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch.fx as fx
from coreai._compiler.ir import Value
from torch._ops import OpOverload, OpOverloadPacket

if TYPE_CHECKING:
    from .lowering_context import LoweringContext

LoweringResult = Value | Sequence[Value] | None
Lowering = Callable[["LoweringContext", fx.Node], LoweringResult]
# The nodes a lowering reads for a call node, where they are not its arguments.
Reads = Callable[[fx.Node], list[fx.Node]]
# The constant arguments of a call node that its lowering stores itself.
Stores = Callable[[fx.Node], list[fx.Node]]


@dataclass(frozen=True)
class Registration:
    lowering: Lowering
    # Keep the op out of get_decomp_table() so that exported programs still
    # contain it and this lowering, rather than its decomposition, is used.
    keep_in_export: bool
    # See register_lowering.
    reads: Reads | None = None
    stores: Stores | None = None


_REGISTRY: dict[Any, Registration] = {}


def register_lowering(
    *targets: OpOverload | Callable[..., Any],
    keep_in_export: bool = False,
    reads: Reads | None = None,
    stores: Stores | None = None,
) -> Callable[[Lowering], Lowering]:
    """Register the decorated function as the lowering of each of ``targets``.

    ``targets`` are op overloads (``torch.ops.aten.add.Tensor``), never packets:
    the overloads of one op take different arguments. Registering a target
    twice is a programming error and raises ``ValueError``.
    ``keep_in_export=True`` removes the op from :func:`get_decomp_table` so that
    this lowering sees it undecomposed.

    ``reads(node)``, when given, lists the nodes the lowering reads for
    ``node`` where that is not the node's own inputs: attention that reads
    the key before its heads were repeated, for one. Nodes that only lead to
    the inputs it skips are then not lowered at all. It applies where
    ``LoweringContext.reads_apply`` is true (graphs without in-place ops or
    vmap regions, whose nodes are lowered as they stand), and the lowering
    must then read exactly the nodes it listed.

    ``stores(node)``, when given, lists the constant arguments (parameters,
    buffers) of ``node`` that the lowering stores in a form of its own, from
    ``ctx.known``, rather than reading their values: compressed data kept as
    4-bit elements. Such a constant gets no constant of its own unless
    another lowering reads it.
    """
    for target in targets:
        if isinstance(target, OpOverloadPacket):
            raise TypeError(
                f"register_lowering needs op overloads, got the packet {target}; "
                f"name one of {target.overloads()}"
            )

    def decorator(lowering: Lowering) -> Lowering:
        for target in targets:
            if target in _REGISTRY:
                raise ValueError(f"a lowering for {target} is already registered")
            _REGISTRY[target] = Registration(lowering, keep_in_export, reads, stores)
            _BY_ID.pop(id(target), None)
        return lowering

    return decorator


def _registration(target: Any) -> Registration | None:
    found = _BY_ID.get(id(target))
    if found is None or found[0] is not target:
        found = _BY_ID[id(target)] = (target, _REGISTRY.get(target))
    return found[1]


# _registration's memo, keyed by id(): hashing an OpOverload runs Python code
# (mutation.mutates_input's memo says more).
_BY_ID: dict[int, tuple[Any, Registration | None]] = {}


def lookup(target: Any) -> Lowering | None:
    registration = _registration(target)
    return registration.lowering if registration is not None else None


def reads_of(target: Any) -> Reads | None:
    """The ``reads`` a target's built-in lowering was registered with, if any."""
    registration = _registration(target)
    return registration.reads if registration is not None else None


def stores_of(target: Any) -> Stores | None:
    """The ``stores`` a target's built-in lowering was registered with, if any."""
    registration = _registration(target)
    return registration.stores if registration is not None else None


def ops_kept_in_export() -> list[OpOverload]:
    return [t for t, r in _REGISTRY.items() if r.keep_in_export and isinstance(t, OpOverload)]

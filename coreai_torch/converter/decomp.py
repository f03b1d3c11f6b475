"""The decomposition table and the preparation of exported programs."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from . import ops  # noqa: F401  (registers the lowerings whose ops stay undecomposed)
from .errors import source_line
from .graph_lowering import all_call_nodes, distinct_targets
from .mutation import constant_writes, mutates_input, unsupported_mutations
from .registry import ops_kept_in_export
from .vmap import unsupported_batched


def get_decomp_table() -> dict:
    """The table to pass to ``ExportedProgram.run_decompositions``.

    torch's default (core ATen) decompositions, minus the ops this converter
    lowers directly (``silu``, ``hardswish``, ...), so that they reach Core AI
    as single ops. Each call returns a new dict.

    Example::

        ep = torch.export.export(model, (x,))
        ep = ep.run_decompositions(coreai_torch.get_decomp_table())
    """
    table = torch.export.default_decompositions()
    for op in ops_kept_in_export():
        table.pop(op, None)
    return table


def prepare(program: ExportedProgram, is_lowerable: Callable[[Any], bool]) -> ExportedProgram:
    """The program itself when every op in it can be lowered, else its decomposition.

    ``run_decompositions`` has a fixed cost of about half a second, several
    times the cost of lowering a small transformer, so a program whose ops all
    have lowerings (``is_lowerable(target)``) is converted as it is: the raw
    output of ``torch.export.export`` for common models, and any program
    already decomposed with :func:`get_decomp_table`. In-place ops count as
    lowerable when ``mutation.py`` can lower them as values. Otherwise the
    whole program is decomposed with that table, which also functionalizes
    in-place ops; our kernel ops (``coreai_metal_kernels::*``) have no
    decomposition and stay as they are.

    When ``run_decompositions`` fails, the error names what called for it:
    ``ValueError`` for writes into the program's constant tensors
    (:func:`constant_write_error`), ``RuntimeError`` otherwise.
    """
    reasons = _not_lowerable_as_is(program, is_lowerable)
    if not reasons:
        return program
    try:
        return decompose(program)
    except Exception as exc:
        error = constant_write_error(program)
        if error is None:
            lines = [
                "the program cannot be lowered as torch.export wrote it:",
                *_listed(reasons),
                "and torch's run_decompositions, which the converter then uses to rewrite it "
                f"into ops it lowers, failed: {type(exc).__name__}: {exc}. Change the model code "
                "at the lines above, or register a lowering for the op with "
                "converter.register_torch_lowering.",
            ]
            error = RuntimeError("\n".join(lines))
        raise error from exc


# How many writes or reasons an error message lists.
_SHOWN = 8


def _not_lowerable_as_is(
    program: ExportedProgram, is_lowerable: Callable[[Any], bool]
) -> list[tuple[fx.Node, str]]:
    """The nodes that keep ``program`` from being lowered without decomposing it, and why."""
    nodes = all_call_nodes(program.graph_module)
    targets = [t for t in distinct_targets(nodes) if not (mutates_input(t) or is_lowerable(t))]
    if targets:
        missing = set(map(id, targets))
        return [(n, f"{n.target} has no lowering") for n in nodes if id(n.target) in missing]
    reasons = unsupported_batched(nodes)
    for module in program.graph_module.modules():
        if isinstance(module, fx.GraphModule):
            reasons += unsupported_mutations(module.graph, is_lowerable)
    return reasons


def constant_write_error(program: ExportedProgram) -> ValueError | None:
    """The error for a program whose in-place ops write into its constant tensors, if any.

    A tensor the model holds as a plain attribute (not a buffer) becomes a
    constant of the exported program, and ``torch.export`` does not record a
    write into it as a mutation: such a write is no state of the program, and
    ``run_decompositions`` refuses the program, in words that do not name the
    write (transformers' static KV cache exported through its
    ``TorchExportableModuleWithStaticCache``, transformers 5.24, stops it
    with an ``AssertionError``). The writes are found through the ops'
    schemas (``mutation.constant_writes``). That wrapper registers the cache
    tensors as buffers, but its layers reach them through the cache object,
    which a non-strict export does not see as the module's: exported with
    ``strict=True`` they are buffers, and convert to state.
    """
    constants = {
        spec.arg.name: spec.target
        for spec in program.graph_signature.input_specs
        if spec.kind == InputKind.CONSTANT_TENSOR
    }
    writes = constant_writes(program.graph, constants) if constants else []
    if not writes:
        return None
    lines = [
        f"the program writes in place into {len(writes)} tensor(s) that torch.export lifted as "
        "constants: the model holds them as plain attributes, not buffers, so the writes are "
        "no state of the program, and torch's run_decompositions refuses it:"
    ]
    lines += _listed([(n, f"{n.target} writes into constant {name!r}") for n, name in writes])
    lines.append(
        "Register each such tensor with nn.Module.register_buffer before exporting: "
        "torch.export then records its writes as buffer mutations, which convert to Core AI "
        "state (see add_exported_program's state_names). If they are buffers already, "
        "reached through another object (transformers' StaticCache), export with "
        "strict=True: a non-strict export lifts such a tensor as a constant."
    )
    return ValueError("\n".join(lines))


def _listed(items: list[tuple[fx.Node, str]]) -> list[str]:
    """One message line per node (the first ``_SHOWN``) with its source line, then how many more."""
    lines = []
    for node, what in items[:_SHOWN]:
        where = source_line(node) or "no source line recorded"
        lines.append(f"  node {node.name}: {what} ({where})")
    if len(items) > _SHOWN:
        lines.append(f"  and {len(items) - _SHOWN} more")
    return lines


def decompose(program: ExportedProgram) -> ExportedProgram:
    """``program.run_decompositions(get_decomp_table())``, without torch's own noise."""
    with warnings.catch_warnings():
        # run_decompositions deep-copies the module call graph, whose pytree
        # specs trip a deprecation warning inside torch itself (torch 2.13,
        # from copyreg); nothing in our code or the user's can act on it.
        warnings.filterwarnings(
            "ignore",
            message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
            category=FutureWarning,
        )
        return program.run_decompositions(get_decomp_table())

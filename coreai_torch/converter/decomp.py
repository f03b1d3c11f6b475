"""The decomposition table and the preparation of exported programs."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx
from torch.export import ExportedProgram

from . import ops  # noqa: F401  (registers the lowerings whose ops stay undecomposed)
from .graph_lowering import all_call_nodes, distinct_targets
from .mutation import mutates_input, unsupported_mutations
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
    """
    nodes = all_call_nodes(program.graph_module)
    lowerable = all(mutates_input(t) or is_lowerable(t) for t in distinct_targets(nodes))
    if (
        lowerable
        and not unsupported_batched(nodes)
        and not any(
            unsupported_mutations(module.graph, is_lowerable)
            for module in program.graph_module.modules()
            if isinstance(module, fx.GraphModule)
        )
    ):
        return program
    return decompose(program)


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

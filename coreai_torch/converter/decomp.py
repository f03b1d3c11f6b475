"""The decomposition table and the preparation of exported programs."""

from __future__ import annotations

import torch
from torch.export import ExportedProgram

from . import ops  # noqa: F401  (registers the lowerings whose ops stay undecomposed)
from .registry import ops_kept_in_export


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


def prepare(program: ExportedProgram) -> ExportedProgram:
    """Decompose a program to the ops the converter lowers.

    Accepts the raw output of ``torch.export.export`` as well as a program
    already decomposed with :func:`get_decomp_table` (decomposing again leaves
    such a program unchanged). Our kernel ops (``coreai_metal_kernels::*``)
    have no decomposition and stay as they are.
    """
    return program.run_decompositions(get_decomp_table())

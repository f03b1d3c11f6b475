"""Externalized submodules in the converter: their own graphs, invoked by the program.

``coreai_torch.externalize`` leaves each call of an externalized submodule
as a ``coreai_torch_ext::<op>`` node and exports the submodule on its own,
once per call. Each such program becomes a ``coreai.graph noinline`` (also
``private`` with a ``composite_decl`` when it is a composite op), emitted
before the graphs that call it, deepest first; each call node becomes a
``coreai.invoke`` of its graph. The graph's name is the program's
(``<module path>_<suffix>``), as in Apple's converter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import Attribute, Location
from torch.export import ExportedProgram

from .._composite_declaration import generate_composite_decl
from ..externalize import _ExternalizedExportedProgram, externalized_op
from .errors import source_line
from .mutation import mutates_input
from .state import State


def checked(programs: Sequence[Any], entrypoint: str) -> list[_ExternalizedExportedProgram]:
    """The list ``_subexport_and_restore`` returned, or ``TypeError`` saying what was given."""
    if isinstance(programs, _ExternalizedExportedProgram) or not isinstance(programs, Sequence):
        programs = [programs]
    for program in programs:
        if not isinstance(program, _ExternalizedExportedProgram):
            raise TypeError(
                f"entry point {entrypoint!r}: _externalized_exported_programs takes the list "
                "coreai_torch._subexport_and_restore(model, exported_program) returns, got "
                f"a {type(program).__module__}.{type(program).__name__}. Patch and "
                "sub-export with coreai_torch's functions (not another package's)."
            )
    # Deepest first: a graph exists before the graphs that invoke it.
    return sorted(programs, key=lambda p: p.name.count("."), reverse=True)


def check_calls(graphs: Sequence[tuple[str, fx.Graph]], subgraphs: Sequence[Any]) -> None:
    """Every externalized call in ``graphs`` has its program in ``subgraphs``.

    ``graphs`` are (what, graph) pairs: the program's and each sub-program's.
    """
    known = {(p.target, name) for p in subgraphs for name in p.source_nodes}
    for what, graph in graphs:
        for node in graph.nodes:
            name = externalized_op(node)
            if name is not None and (name, node.name) not in known:
                where = source_line(node) or "no source line recorded"
                raise ValueError(
                    f"{what}: node {node.name} calls the externalized submodule op {name} "
                    f"({where}) but no externalized program stands for it. Pass "
                    "_externalized_exported_programs=_subexport_and_restore(model, ep) for "
                    "this very ep (export the model once, after "
                    "_patch_model_for_externalization)."
                )


def refuse_state(name: str, program: ExportedProgram, states: Sequence[State]) -> None:
    """``NotImplementedError`` naming the write, if an externalized program has state."""
    if not states:
        return
    writes = [n for n in program.graph.nodes if n.op == "call_function" and mutates_input(n.target)]
    write = writes[0] if writes else states[0].new_value
    where = (source_line(write) if write is not None else None) or "no source line recorded"
    raise NotImplementedError(
        f"externalized submodule {name!r} writes into "
        f"{[s.source for s in states]} ({where}): state inside an externalized graph is "
        "not supported by coreai_torch's converter yet. Keep the write outside the "
        "externalized submodule (pass the cache in, return the new values), or do not "
        "externalize it."
    )


def graph_attributes(program: _ExternalizedExportedProgram, context: Any) -> dict[str, Any]:
    """The ``coreai.GraphOp`` keywords of an externalized program's graph."""
    declaration: Attribute | None = None
    if program.composite_op_name is not None:
        attributes = {k: v for k, v in program.composite_decl_attrs.items() if v is not None}
        declaration = generate_composite_decl(
            context,
            program.composite_op_name,
            program.composite_input_names,
            program.composite_output_names,
            attributes,
        )
    return {
        "no_inline": True,
        "private": declaration is not None,
        "composite_decl": declaration,
    }


def invocation(graphs: dict[tuple[str, str], Any]) -> Any:
    """The lowering of an externalized call: ``coreai.invoke`` of the graph of its node.

    A lowering in the user form (``values_map, node, loc``), registered for
    each externalized op; ``graphs`` maps (op, node name) to its graph and is
    filled as the graphs are emitted.
    """

    def lower(values: dict[str, Any], node: fx.Node, loc: Location) -> list[Any]:
        graph = graphs[(externalized_op(node), node.name)]
        operands = [values[a.name] for a in node.args if isinstance(a, fx.Node)]
        found = coreai.invoke(list(graph.type.results), graph.symbol_name, operands, loc=loc)
        return found if len(found) != 1 else found[0]

    return lower

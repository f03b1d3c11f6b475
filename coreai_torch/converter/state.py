"""Mutated buffers and inputs as Core AI state.

A program that writes into a buffer (a KV cache filled with ``index_copy_``,
slice assignment or ``copy_``) or into one of its inputs has *state*: memory
that outlives one call. Core AI keeps it in ``!coreai.handle`` arguments that
the program reads and writes in order, through tokens. The converter emits
the form Core AI's pre-compilation rewrite turns into that (the form Apple's
converter emits): each state is a tensor argument of the graph carrying the
attribute ``MutableBuffers.buffer_mutation`` with the name of the output that
holds its new value; the rewrite makes the argument a handle, its reads
``read_handle``\\ s, and that output the token of the last ``write_handle``.

Where the new value comes from depends on the form of the program:

- decomposed (``run_decompositions``): torch functionalized the writes; the
  graph signature lists a ``BUFFER_MUTATION`` or ``USER_INPUT_MUTATION``
  output per state, holding its new value;
- raw ``torch.export.export`` output: the graph keeps the in-place ops on the
  placeholder (or views of it) and its signature lists no mutation;
  ``mutation.py`` lowers them as values, and the state's new value is the
  placeholder's last version.

Names follow Apple's converter: a state is named after its placeholder, as
torch names it in a decomposed program (``b_cache`` for a buffer ``cache``,
``y`` for an input ``y``; ``default_name``) unless
``state_names`` gives one name per state, in placeholder order (buffers first,
then mutated inputs). State outputs come before the program's outputs, named
as their states.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch.fx as fx
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

from .mutation import memory_root, mutates_input

# The argument attribute Core AI's rewrite reads: the output holding the new value.
MUTATION_ATTRIBUTE = "MutableBuffers.buffer_mutation"

_MUTATION_OUTPUTS = (OutputKind.BUFFER_MUTATION, OutputKind.USER_INPUT_MUTATION)


@dataclass(frozen=True)
class State:
    """One piece of state: the placeholder it enters by, and where its new value is."""

    placeholder: fx.Node
    # The graph output holding the new value (decomposed programs); ``None``
    # when it is the placeholder's last version after the in-place writes.
    new_value: fx.Node | None
    # What the user wrote: the buffer's name, or the input's.
    source: str


def find_states(program: ExportedProgram) -> list[State]:
    """The states of ``program`` in placeholder order (buffers, then inputs)."""
    signature = program.graph_signature
    graph = program.graph_module.graph
    output_node = next(n for n in reversed(graph.nodes) if n.op == "output")
    outputs = list(output_node.args[0])
    by_placeholder: dict[str, fx.Node | None] = {}
    buffer_placeholders = {buffer: name for name, buffer in signature.inputs_to_buffers.items()}
    for spec, arg in zip(signature.output_specs, outputs, strict=True):
        if spec.kind == OutputKind.BUFFER_MUTATION:
            by_placeholder[buffer_placeholders[spec.target]] = arg
        elif spec.kind == OutputKind.USER_INPUT_MUTATION:
            by_placeholder[spec.target] = arg
    for node in graph.nodes:
        if node.op == "call_function" and mutates_input(node.target):
            root = memory_root(node)
            if root.op == "placeholder":
                by_placeholder.setdefault(root.name, None)
    specs = {spec.arg.name: spec for spec in signature.input_specs}
    states = []
    for node in graph.nodes:
        if node.op != "placeholder" or node.name not in by_placeholder:
            continue
        spec = specs[node.name]
        if spec.kind not in (InputKind.BUFFER, InputKind.USER_INPUT):
            raise ValueError(
                f"the program writes into {node.name!r}, a {spec.kind.name.lower()} "
                f"({spec.target}); only buffers and inputs can be Core AI state. Register "
                "the tensor as a buffer (register_buffer) to make it state."
            )
        source = spec.target if spec.kind == InputKind.BUFFER else node.name
        states.append(State(node, by_placeholder[node.name], str(source)))
    return states


def is_state_output(program: ExportedProgram, index: int) -> bool:
    """Whether the ``index``-th graph output is the new value of a state."""
    return program.graph_signature.output_specs[index].kind in _MUTATION_OUTPUTS


def default_name(state: State) -> str:
    """A state's name when ``state_names`` gives none: its placeholder's, as torch names it.

    torch names a buffer's placeholder ``b_<buffer>`` (lowercased, every other
    character than a letter or digit made ``_``) in a non-strict export and in
    ``run_decompositions``, the programs Apple's converter takes. A strict
    export names it after the path dynamo found the tensor by
    (``b_static_cache_layers_0_keys`` for transformers' ``key_cache_0``): the
    buffer's own name gives the same state name as the decomposed program.
    A name that another placeholder of the graph already has keeps the
    placeholder's.
    """
    node = state.placeholder
    if state.source == node.name:
        return node.name  # a mutated input: its name
    name = "b_" + re.sub(r"[^a-zA-Z0-9]", "_", state.source.lower())
    taken = {n.name for n in node.graph.nodes if n.op == "placeholder" and n is not node}
    return node.name if name in taken else name


def state_names(
    states: Sequence[State], given: Sequence[str] | None, entrypoint_name: str
) -> list[str]:
    """``given`` checked against the program's states, or the default names."""
    if not given:
        return [default_name(state) for state in states]
    given = list(given)
    if len(given) != len(states):
        described = [f"{s.placeholder.name} ({s.source})" for s in states] or "none"
        raise ValueError(
            f"entry point {entrypoint_name!r}: state_names has {len(given)} entries "
            f"{given}, but the program has {len(states)} stateful inputs {described} "
            "(mutated buffers first, then mutated inputs, in placeholder order). Give one "
            "name per state, or leave state_names out for the default names."
        )
    if len(set(given)) != len(given):
        raise ValueError(f"entry point {entrypoint_name!r}: state_names {given} contain duplicates")
    return given

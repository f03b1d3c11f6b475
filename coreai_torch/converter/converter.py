"""``TorchConverter``: exported PyTorch programs to a Core AI ``AIProgram``."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import coreai.authoring
import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import ArrayAttr, DictAttr, InsertionPoint, Location, MLIRError, StringAttr
from coreai._compiler.ir import Module as MLIRModule
from coreai._compiler.passmanager import PassManager
from coreai.authoring import AIProgram, Context, Module
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from ..externalize import _patch_model_for_externalization, _restore, _subexport_and_restore
from . import constants, dtypes, externalized
from .decomp import prepare
from .folding import ConstantPool, fold_constants
from .graph_lowering import (
    KERNEL_NAMESPACE,
    GraphLowerer,
    UserLowering,
    is_lowerable,
    user_lowering,
)
from .kernels import kernel_lowering
from .lowering_context import LoweringContext, SourceLocations
from .registry import lookup, stores_of
from .state import MUTATION_ATTRIBUTE, State, find_states, is_state_output
from .state import state_names as resolve_state_names
from .symbolic import SymbolTable

# Namespaces whose ops the converter itself must lower (control flow, Core AI ops).
_NOT_OVERRIDABLE = ("higher_order", "coreai", "coreaix")

# The pipeline coreai-core's run_pre_compilation_rewrite runs.
COREAI_REWRITE_PIPELINE = "builtin.module(coreai-pre-compilation-rewrite)"
# Its passes (what COREAI_REWRITE_PIPELINE expands to in coreai-core 1.0.0b3),
# in its order, less those in SKIPPED_PASSES.
_REWRITE_PASSES = (
    "canonicalize",
    "enumerated-shape-entry-points-from-arg-attrs",
    "type-propagation",
    "coreai.graph(fuse-gelu-tanh-approximation)",
    "coreai.graph(fold-transpose-reshape)",
    "coreai.graph(squash-slice-updates)",
    "deduplicate-graphs",
    "canonicalize",
    "cse",
    "symbol-dce",
    "coreai.graph(core-elide-broadcast)",
    "coreai.graph(fuse-conv-and-batch-norm)",
    "update-signature-to-handles",
    "coreai.graph(propagate-handle-updates)",
    "internal-add-unique-id{replace-existing=true tag=coreai}",
    "resolve-output-maps{source-level=torch}",
    "prune-metadata-locations",
)
# Passes of the pipeline that can find nothing to do in the IR the converter
# builds. elim-redundant-handle-ops removes redundant reads and writes of
# !coreai.handle values, and it runs before update-signature-to-handles makes
# the state arguments handles: until then no op of ours reads or writes one.
# It cost 0.1-0.2 ms a graph of a small transformer.
SKIPPED_PASSES = ("coreai.graph(elim-redundant-handle-ops)",)
_REWRITE_PIPELINE = f"builtin.module({','.join(_REWRITE_PASSES)})"
# type-propagation refines types with sizes unknown where they could be
# inferred; in a module whose types are all static it has nothing to do
# (GraphLowerer.exact_types), and it cost 0.15-0.2 ms a graph of
# a small transformer. The pipeline for such modules goes without it.
_TYPE_PROPAGATION = "type-propagation"
_STATIC_REWRITE_PIPELINE = (
    f"builtin.module({','.join(p for p in _REWRITE_PASSES if p != _TYPE_PROPAGATION)})"
)


@dataclass
class _Entry:
    program: ExportedProgram
    input_names: list[str] | None
    output_names: list[str] | None
    entrypoint_name: str
    states: list[State]
    state_names: list[str]
    # The programs of the externalized submodules it calls (deepest first).
    subgraphs: list[_Entry] = field(default_factory=list)
    # For such a program: what _subexport_and_restore returned for it.
    externalized: Any = None


class TorchConverter:
    """Converts exported PyTorch programs, with their Metal kernels, to Core AI.

    Example::

        ep = torch.export.export(model, (x,))
        program = (
            TorchConverter()
            .register_custom_kernels([my_kernel])
            .add_exported_program(ep, input_names=["x"], output_names=["y"])
            .to_coreai()
        )
        program.save_asset(Path("model.aimodel"))

    Staged programs, kernel registrations and user lowerings stay with the
    converter: ``to_coreai`` can be called again, and ``clear`` removes only
    staged programs.
    """

    def __init__(self) -> None:
        self._context = Context()
        # Numbers the weight resources of the context (constants.begin).
        self._resource_numbers = itertools.count()
        self._entries: list[_Entry] = []
        self._user_lowerings: dict[str, UserLowering] = {}
        self._kernels: dict[str, Any] = {}

    # -- registration ----------------------------------------------------------

    def register_custom_kernels(self, kernels: Sequence[Any]) -> TorchConverter:
        """Make the converter lower calls of these ``TorchMetalKernel`` objects.

        Each call becomes one ``coreai.metal4_kernel``. Registering a kernel name
        twice, or a kernel whose op already has a user lowering, is an error.
        Returns ``self``.
        """
        kernels = list(kernels)
        seen: set[str] = set()
        for kernel in kernels:
            name = getattr(kernel, "name", None)
            if not isinstance(name, str) or not hasattr(kernel, "input_names"):
                raise TypeError(
                    f"register_custom_kernels expects TorchMetalKernel objects, got {kernel!r}"
                )
            if name in self._kernels or name in seen:
                raise ValueError(f"a kernel named {name!r} is already registered")
            op_name = f"{KERNEL_NAMESPACE}::{name}"
            if op_name in self._user_lowerings or f"{op_name}.default" in self._user_lowerings:
                raise ValueError(
                    f"kernel {name!r}: a lowering for {op_name}.default is already registered "
                    "with register_torch_lowering"
                )
            seen.add(name)
        for kernel in kernels:
            self._kernels[kernel.name] = kernel
        return self

    def register_torch_lowering(
        self, qualified_name: str, allow_override: bool = False
    ) -> Callable[[UserLowering], UserLowering]:
        """Decorator: lower the op ``qualified_name`` (``"namespace::op.overload"``).

        The function has the signature of Apple's coreai-torch,
        ``fn(values_map, node, loc) -> Value | list[Value]``: ``values_map`` maps
        FX node names to Core AI values, ``node`` is the ``torch.fx.Node`` and
        ``loc`` its Core AI location. Ops are emitted with the builders of
        ``coreai._compiler.dialects.coreai``. An op that already has a lowering
        (built in, a registered kernel, or an earlier call) raises ``ValueError``
        unless ``allow_override=True``.

        Example::

            @converter.register_torch_lowering("my_lib::scaled_add", allow_override=False)
            def lower(values_map, node, loc):
                x, y = (values_map[a.name] for a in node.args[:2])
                return coreai.broadcasting_add(x, y, loc=loc)
        """
        namespace, _, rest = qualified_name.partition("::")
        if not namespace or not rest:
            raise ValueError(
                f"register_torch_lowering expects 'namespace::op' or 'namespace::op.overload', "
                f"got {qualified_name!r}"
            )
        if not allow_override:
            if self._has_lowering(namespace, rest):
                raise ValueError(
                    f"{qualified_name!r} is already registered; pass allow_override=True to "
                    "replace its lowering"
                )
        elif namespace in _NOT_OVERRIDABLE:
            raise ValueError(f"ops of the reserved namespace {namespace!r} cannot be overridden")

        def decorator(function: UserLowering) -> UserLowering:
            self._user_lowerings[qualified_name] = function
            return function

        return decorator

    def _has_lowering(self, namespace: str, rest: str) -> bool:
        op, _, overload = rest.partition(".")
        names = {f"{namespace}::{op}", f"{namespace}::{op}.{overload or 'default'}"}
        if names & self._user_lowerings.keys():
            return True
        if namespace == KERNEL_NAMESPACE and op in self._kernels:
            return True
        packet = getattr(getattr(torch.ops, namespace, None), op, None)
        target = getattr(packet, overload or "default", None) if packet is not None else None
        return target is not None and lookup(target) is not None

    # -- staging ---------------------------------------------------------------

    def add_exported_program(
        self,
        exported_program: ExportedProgram,
        *,
        input_names: Sequence[str] | None = None,
        output_names: Sequence[str] | None = None,
        state_names: Sequence[str] | None = None,
        entrypoint_name: str = "main",
        _externalized_exported_programs: Sequence[Any] | None = None,
    ) -> TorchConverter:
        """Stage a program as the entry point ``entrypoint_name``. Returns ``self``.

        Raw ``torch.export.export`` output is accepted: it is converted as it
        is when every op in it has a lowering (built in, a registered kernel, or
        a ``register_torch_lowering`` made before this call), and decomposed
        with :func:`get_decomp_table` otherwise. ``input_names`` / ``output_names``
        name the inputs and outputs that are not state, and default to the FX
        names (the ``forward`` argument names, and the names of the nodes
        producing the outputs).

        Buffers and inputs the program writes into (a KV cache filled with
        ``index_copy_`` or slice assignment) become Core AI state
        (``state.py``): ``state_names`` gives one name per state, mutated
        buffers first, then mutated inputs, in placeholder order; by default a
        state is named after its placeholder (``b_cache`` for a buffer
        ``cache``). Entry points that name the same state share it at run time.

        ``_externalized_exported_programs`` takes what
        :func:`coreai_torch._subexport_and_restore` returned for this program:
        each externalized submodule call becomes a ``coreai.invoke`` of a graph
        of its own (``converter/externalized.py``).
        """
        if not isinstance(exported_program, ExportedProgram):
            raise TypeError(
                "add_exported_program expects a torch.export.ExportedProgram, got "
                f"{type(exported_program).__name__}"
            )
        check_entrypoint_name(entrypoint_name)
        subprograms = []
        if _externalized_exported_programs is not None:
            subprograms = externalized.checked(_externalized_exported_programs, entrypoint_name)
        if any(e.entrypoint_name == entrypoint_name for e in self._entries):
            raise ValueError(
                f"an entry point named {entrypoint_name!r} is already staged; give each "
                "program a unique entrypoint_name"
            )
        # Lowerings registered so far decide whether the program must be
        # decomposed; see decomp.prepare.
        user_lowerings = dict(self._user_lowerings)
        # An externalized call is lowered (an invoke), never decomposed.
        user_lowerings.update({p.target: externalized.invocation({}) for p in subprograms})

        def lowerable(target: Any) -> bool:
            return is_lowerable(target, user_lowerings)

        program = prepare(exported_program, lowerable)
        subgraphs = [
            _subgraph_entry(p, prepare(p.exported_program, lowerable)) for p in subprograms
        ]
        externalized.check_calls(
            [(f"entry point {entrypoint_name!r}", program.graph)]
            + [
                (f"externalized submodule {e.entrypoint_name!r}", e.program.graph)
                for e in subgraphs
            ],
            subprograms,
        )
        states = find_states(program)
        self._entries.append(
            _Entry(
                program=program,
                input_names=list(input_names) if input_names is not None else None,
                output_names=list(output_names) if output_names is not None else None,
                entrypoint_name=entrypoint_name,
                states=states,
                state_names=resolve_state_names(states, state_names, entrypoint_name),
                subgraphs=subgraphs,
            )
        )
        return self

    def add_pytorch_module(
        self,
        model: torch.nn.Module,
        *,
        export_fn: Callable[[torch.nn.Module], ExportedProgram],
        externalize_modules: Sequence[Any] | None = None,
        input_names: Sequence[str] | None = None,
        output_names: Sequence[str] | None = None,
        state_names: Sequence[str] | None = None,
        entrypoint_name: str = "main",
    ) -> TorchConverter:
        """Export ``model`` with ``export_fn`` and stage the result. Returns ``self``.

        ``externalize_modules`` (classes or :class:`coreai_torch.ExternalizeSpec`)
        names the submodules converted as graphs of their own: the model is
        patched, exported with ``export_fn``, its submodules exported, and
        restored (``coreai_torch.externalize``), before this returns.
        """
        subprograms = None
        if externalize_modules:
            _patch_model_for_externalization(model, list(externalize_modules))
        try:
            program = export_fn(model)
        except Exception as exc:
            _restore(model)
            raise RuntimeError(
                f"export_fn failed to export {type(model).__name__}: {exc}. The model must "
                "export with torch.export before it can be converted."
            ) from exc
        if externalize_modules:
            subprograms = _subexport_and_restore(model, program)
        return self.add_exported_program(
            program,
            input_names=input_names,
            output_names=output_names,
            state_names=state_names,
            entrypoint_name=entrypoint_name,
            _externalized_exported_programs=subprograms,
        )

    def clear(self, *, entrypoints: Sequence[str] | None = None) -> None:
        """Remove staged programs (only ``entrypoints`` if given); keep registrations."""
        if entrypoints is None:
            self._entries.clear()
        else:
            names = set(entrypoints)
            self._entries = [e for e in self._entries if e.entrypoint_name not in names]

    # -- conversion --------------------------------------------------------------

    def to_coreai(self, *, entrypoints: Sequence[str] | None = None) -> AIProgram:
        """Convert the staged programs (or only ``entrypoints``) to one ``AIProgram``.

        Raises ``ValueError`` listing every op without a lowering, or naming a
        kernel the program calls that was not registered.
        """
        entries = self._entries
        if entrypoints is not None:
            unknown = set(entrypoints) - {e.entrypoint_name for e in entries}
            if unknown:
                raise ValueError(
                    f"no staged entry point named {sorted(unknown)}; staged: "
                    f"{[e.entrypoint_name for e in entries]}"
                )
            entries = [e for e in entries if e.entrypoint_name in set(entrypoints)]
        if not entries:
            raise RuntimeError(
                "no program to convert: add one with add_exported_program() or "
                "add_pytorch_module() first"
            )
        # The graph of each externalized call, by (op, node name), as emitted.
        invoked: dict[tuple[str, str], Any] = {}
        invoke = externalized.invocation(invoked)
        lowerer = GraphLowerer(
            {
                **self._user_lowerings,
                **{s.externalized.target: invoke for e in entries for s in e.subgraphs},
            },
            {name: kernel_lowering(kernel) for name, kernel in self._kernels.items()},
        )
        for entry in entries:
            for program in (*(s.program for s in entry.subgraphs), entry.program):
                lowerer.check(program.graph_module)
        # Ops built outside a node's lowering (the graph op, the input sizes'
        # computations) have no line of the user's: their location is unknown.
        # Under a location, Module.create takes it rather than walking the
        # stack for its caller's line, a line of this file.
        with self._context, Location.unknown():
            module = Module.create()
            constants.begin(self._resource_numbers)
            try:
                # What `with module:` does (coreai-core 1.0.0b3), less its stack
                # walk for a location this code never uses: a few percent of
                # converting a small transformer. The rewrite runs only when
                # every entry point was built.
                # One location per source line for every graph: the entry
                # points of one model share their lines.
                locations = SourceLocations()
                with InsertionPoint(module._mlir_module.body):
                    for entry in entries:
                        for sub in entry.subgraphs:
                            _emit_subgraph(sub, lowerer, invoked, locations)
                        _emit_entry(entry, lowerer, locations)
            finally:
                constants.forget()
            _rewrite(module._mlir_module, propagate_types=not lowerer.exact_types)
        return AIProgram(module)

    def __repr__(self) -> str:
        entries = ", ".join(e.entrypoint_name for e in self._entries) or "none"
        kernels = ", ".join(self._kernels) or "none"
        return f"TorchConverter(entry points: {entries}; kernels: {kernels})"


def check_entrypoint_name(name: object) -> str:
    """``name`` if it can name an entry point of a saved asset; ``ValueError`` if not.

    Core AI's runtime cannot load an asset with an entry point named ``""``
    (it stops the process), so that name is refused before anything is built.

    >>> check_entrypoint_name("main")
    'main'
    """
    if not isinstance(name, str) or not name:
        raise ValueError(
            f"entrypoint_name must be a non-empty string, got {name!r}: Core AI's runtime "
            "cannot load an asset whose entry point has no name. Use a name such as 'main'."
        )
    return name


def _subgraph_entry(subprogram: Any, program: ExportedProgram) -> _Entry:
    """The entry of an externalized submodule's program: a graph with no state."""
    externalized.refuse_state(subprogram.name, program, find_states(program))
    return _Entry(
        program=program,
        input_names=None,
        output_names=None,
        entrypoint_name=subprogram.name,
        states=[],
        state_names=[],
        externalized=subprogram,
    )


def _emit_subgraph(
    entry: _Entry, lowerer: GraphLowerer, invoked: dict[Any, Any], locations: SourceLocations
) -> None:
    """Emit an externalized program's graph, once per conversion, and note its calls."""
    subprogram = entry.externalized
    calls = [(subprogram.target, name) for name in subprogram.source_nodes]
    if all(call in invoked for call in calls):
        return  # the same program staged with two entry points
    context = Location.current.context
    attributes = externalized.graph_attributes(subprogram, context)
    graph = _emit_entry(entry, lowerer, locations, attributes)
    invoked.update(dict.fromkeys(calls, graph))


def _rewrite(module: MLIRModule, propagate_types: bool = True) -> None:
    """Run Core AI's pre-compilation rewrite on ``module``, verified before and after.

    ``run_pre_compilation_rewrite`` verifies the whole module after each of
    its 18 passes (coreai-core 1.0.0b3): half of the rewrite's time, a fifth
    of converting a small transformer. The same pipeline runs here with the
    module verified once before it (the passes assume valid input) and once
    after; the result is the same IR (tests/converter/test_rewrite.py).

    Apple's converter runs ``canonicalize,cse`` once more after this
    pipeline; this one does not. On a two-entry-point decoder that round
    merges the ``create_token`` ops of the state reads and costs about 1 ms;
    the IR verifies and runs the same without it (tests/converter/test_state.py).

    Small modules are verified and rewritten without MLIR's thread pool
    (``_worth_threads``); the IR is the same either way (test_rewrite.py).

    The pipeline leaves out the passes of ``SKIPPED_PASSES``, which have
    nothing to act on in the converter's IR, and type-propagation unless
    ``propagate_types`` (a module whose types are all static);
    test_rewrite.py checks that the rest is coreai-core's pipeline and that
    the IR is the same.
    """
    context = module.context
    threaded = _worth_threads(module)
    if not threaded:
        # The verifier, too, checks graphs on the thread pool when it has one.
        context.enable_multithreading(False)
    try:
        _verify(module, "a lowering built an op that Core AI's verifier rejects")
        pipeline = _REWRITE_PIPELINE if propagate_types else _STATIC_REWRITE_PIPELINE
        passes = PassManager.parse(pipeline, context=context)
        passes.enable_verifier(False)
        try:
            passes.run(module.operation)
        except MLIRError as exc:
            raise RuntimeError(
                f"Core AI's pre-compilation rewrite failed:\n{_diagnostics(exc)}"
            ) from exc
        _verify(module, "Core AI's pre-compilation rewrite left an op that its verifier rejects")
    finally:
        if not threaded:
            # The context outlives the conversion (the program lives in it):
            # later passes on it (compilation) keep their threads.
            context.enable_multithreading(True)


# The rewrite runs its per-graph passes on a thread pool when the context has
# one. Starting it costs more than the passes of a small module take (1-2 ms
# against 6 ms for a two-entry-point decoder); threads pay off only with
# several graphs and many ops to share out.
_THREADED_GRAPHS = 2
_THREADED_OPS = 20_000


def _worth_threads(module: MLIRModule) -> bool:
    """Whether the rewrite of ``module`` is large enough to run on threads."""
    graphs = module.body.operations
    if len(graphs) < _THREADED_GRAPHS:
        return False
    ops = 0
    for graph in graphs:
        for region in graph.regions:
            for block in region.blocks:
                ops += len(block.operations)
                if ops >= _THREADED_OPS:
                    return True
    return False


def _verify(module: MLIRModule, what: str) -> None:
    try:
        module.operation.verify()
    except MLIRError as exc:
        raise RuntimeError(
            f"the converted program does not verify: {what}:\n{_diagnostics(exc)}"
        ) from exc


def _diagnostics(error: MLIRError) -> str:
    """One line per diagnostic, at the model's source line where the op has one."""
    lines = []
    for diagnostic in error.error_diagnostics:
        where = re.search(r'loc\("([^"]*)":(\d+)', str(diagnostic.location))
        prefix = f"{where[1]}:{where[2]}: " if where else ""
        lines.append(f"  {prefix}{diagnostic.message}")
        lines.extend(f"    {note.message}" for note in diagnostic.notes)
    return "\n".join(lines) or f"  {error}"


def _emit_entry(
    entry: _Entry,
    lowerer: GraphLowerer,
    locations: SourceLocations,
    attributes: dict[str, Any] | None = None,
) -> Any:
    """Emit the graph of ``entry`` (``attributes``: more ``coreai.GraphOp`` keywords)."""
    program = entry.program
    graph_module = program.graph_module
    signature = program.graph_signature
    kinds = {spec.arg.name: spec for spec in signature.input_specs}
    placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
    state_of = {
        state.placeholder: name for state, name in zip(entry.states, entry.state_names, strict=True)
    }
    # The graph's arguments, in placeholder order: inputs and states.
    arguments = [
        n for n in placeholders if kinds[n.name].kind == InputKind.USER_INPUT or n in state_of
    ]
    user_inputs = [n for n in arguments if n not in state_of]

    for node in user_inputs:
        if not isinstance(node.meta.get("val"), torch.Tensor):
            raise ValueError(
                f"entry point {entry.entrypoint_name!r}: input {node.name!r} is a "
                f"{type(node.meta.get('val')).__name__}, Core AI programs take tensors only"
            )
    input_names = iter(
        _names(entry.input_names, [n.name for n in user_inputs], "input", entry.entrypoint_name)
    )
    argument_names = [state_of[n] if n in state_of else next(input_names) for n in arguments]
    output_node = next(n for n in graph_module.graph.nodes if n.op == "output")
    output_args = [
        arg for index, arg in enumerate(output_node.args[0]) if not is_state_output(program, index)
    ]
    default_outputs = [a.name if isinstance(a, fx.Node) else str(a) for a in output_args]
    output_names = _names(entry.output_names, default_outputs, "output", entry.entrypoint_name)

    input_types = [dtypes.tensor_type(n.meta["val"]) for n in arguments]
    if not all(kind.has_static_shape for kind in input_types):
        lowerer.exact_types = False
    graph = coreai.GraphOp(
        name=entry.entrypoint_name,
        input_types=input_types,
        result_types=[],
        input_names=argument_names,
        loc=Location.unknown(),
        **(attributes or {}),
    )
    symbols = SymbolTable()
    ctx = LoweringContext(symbols, graph_module, locations)
    with graph.block:
        for node, argument in zip(arguments, graph.arguments, strict=True):
            ctx.values[node.name] = argument
            symbols.add_source(node.meta["val"], argument)
        symbols.materialize()
        lifted = {
            node: _lifted_tensor(program, kinds[node.name], node)
            for node in placeholders
            if node.name not in ctx.values and node.users
        }
        live = lowerer.live(graph_module.graph)
        ctx.folded = fold_constants(
            graph_module.graph,
            lifted,
            live,
            lambda target: user_lowering(lowerer.user_lowerings, target) is not None,
            lowerer.writes(graph_module.graph),
        )
        folded = ctx.folded.values
        ctx.constants = {**lifted, **folded}
        pool = ConstantPool()
        for node, tensor in lifted.items():
            if not _read_by_lowered(node, folded, live, lowerer):
                continue
            if _only_linear_weight(node, lowerer):
                # ops/linalg.py stores it transposed: no transpose op per linear.
                ctx.weights[node.name] = tensor
                continue
            with Location.unknown():
                ctx.values[node.name] = pool.constant(tensor)
        for node, tensor in folded.items():
            if _read_by_lowered(node, folded, live, lowerer):
                earlier = ctx.folded.repeats.get(node)
                if earlier is not None and earlier.name in ctx.values:
                    ctx.values[node.name] = ctx.values[earlier.name]
                    continue
                with ctx.lowering(node):
                    ctx.values[node.name] = pool.constant(tensor)
        outputs = lowerer.lower_nodes(graph_module, ctx)
        new_states = [
            ctx.value(state.new_value)
            if state.new_value is not None
            # A raw export's writes leave the placeholder's last version here.
            else ctx.values[state.placeholder.name]
            for state in entry.states
        ]
        outputs = [
            value for index, value in enumerate(outputs) if not is_state_output(program, index)
        ]
        graph.outputs_spec = [
            *zip(entry.state_names, new_states, strict=True),
            *zip(output_names, outputs, strict=True),
        ]
    if state_of:
        _mark_states(graph, arguments, state_of)
    return graph


def _mark_states(graph: Any, arguments: list[fx.Node], state_of: dict[fx.Node, str]) -> None:
    """Give each state argument the attribute naming the output of its new value."""
    attributes = []
    for node, existing in zip(arguments, graph.arg_attrs, strict=True):
        entries = {named.name: named.attr for named in existing}
        if node in state_of:
            entries[MUTATION_ATTRIBUTE] = StringAttr.get(state_of[node])
        attributes.append(DictAttr.get(entries))
    graph.arg_attrs = ArrayAttr.get(attributes)


def _read_by_lowered(node: fx.Node, folded: Any, live: set[fx.Node], lowerer: GraphLowerer) -> bool:
    """Whether a lowered call (or the output) reads ``node``: it then needs a value.

    A lowering registered with ``reads`` may read a node it is not a user of
    (attention reading the key before ``repeat_kv``); one registered with
    ``stores`` may store a constant itself (compressed data at 4 bits).
    """
    if node in lowerer.read_by_hooks:
        return True
    return any(
        user in live and user not in folded and not _stored_by(user, node, lowerer)
        for user in node.users
    )


def _stored_by(user: fx.Node, node: fx.Node, lowerer: GraphLowerer) -> bool:
    stores = stores_of(user.target)
    if stores is None or user_lowering(lowerer.user_lowerings, user.target) is not None:
        return False
    return node in stores(user)


def _only_linear_weight(node: fx.Node, lowerer: GraphLowerer) -> bool:
    """Whether every use of ``node`` is as the 2-D weight of a built-in ``linear``."""
    linear = torch.ops.aten.linear.default
    if node.meta["val"].dim() != 2 or user_lowering(lowerer.user_lowerings, linear):
        return False
    return all(
        user.target == linear
        and (user.args[1:2] == (node,) or user.kwargs.get("weight") is node)
        and node not in user.args[:1] + user.args[2:]
        for user in node.users
    )


def _lifted_tensor(program: ExportedProgram, spec: Any, node: fx.Node) -> torch.Tensor:
    """The parameter, buffer or constant tensor behind a placeholder of the program."""
    target = spec.target
    tensor = program.state_dict.get(target)
    if tensor is None:
        tensor = program.constants.get(target)
    if tensor is None:
        raise ValueError(f"placeholder {node.name} ({spec.kind.name} {target}) has no value")
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(
            f"placeholder {node.name} ({spec.kind.name} {target}) is a "
            f"{type(tensor).__name__}; only tensor constants are converted"
        )
    return tensor.detach()


def _names(given: list[str] | None, default: list[str], what: str, entry: str) -> list[str]:
    if given is None:
        return default
    if len(given) != len(default):
        raise ValueError(
            f"entry point {entry!r}: {len(given)} {what}_names given {given}, but the program "
            f"has {len(default)} {what}s {default}"
        )
    if len(set(given)) != len(given):
        raise ValueError(f"entry point {entry!r}: {what}_names {given} contain duplicates")
    return list(given)

"""Externalized submodules: converted as Core AI graphs of their own, invoked by the model.

The names and the calling sequence are those of Apple's ``coreai-torch``:

1. ``_patch_model_for_externalization(model, targets)`` replaces the
   ``forward`` of every submodule matching a target with a ``torch.library``
   custom op (namespace ``coreai_torch_ext``), so ``torch.export`` (or a
   quantization pass) keeps each call as one opaque node.
2. The user exports the patched model.
3. ``_subexport_and_restore(model, ep)`` exports each matched submodule on
   its own, once per call site found in ``ep`` (nested matches are found in
   their parent's export), restores every ``forward`` and returns the
   programs.
4. ``TorchConverter().add_exported_program(ep,
   _externalized_exported_programs=...)`` converts each to a
   ``coreai.graph noinline`` (with ``private`` and a composite declaration
   when the target names a composite op) and each call to a
   ``coreai.invoke`` of it.

Example::

    from coreai_torch import ExternalizeSpec, TorchConverter
    from coreai_torch import _patch_model_for_externalization, _subexport_and_restore
    from coreai_torch.composite_ops import RMSNormImpl

    _patch_model_for_externalization(
        model, [Attention, ExternalizeSpec(RMSNormImpl, "rms_norm", ["eps"])]
    )
    ep = torch.export.export(model, (x,))
    externalized = _subexport_and_restore(model, ep)
    program = (
        TorchConverter()
        .add_exported_program(ep, _externalized_exported_programs=externalized)
        .to_coreai()
    )

Unlike Apple's, the submodule programs are not decomposed: the converter
lowers raw exports (it decomposes a program only when an op needs it).
"""

from __future__ import annotations

import inspect
import re
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch.export import Dim, ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

# The torch.library namespace of the patched forwards (Apple's name).
NAMESPACE = "coreai_torch_ext"

# What _patch_model_for_externalization leaves on a patched submodule.
_MARK = "_coreai_externalize"


@dataclass
class ExternalizeSpec:
    """Which submodules to externalize, and whether they are a composite op.

    ``target_class`` matches submodules with ``isinstance``. With
    ``composite_op_name`` the submodule's graph is ``private`` and carries a
    Core AI composite declaration of that name, whose ``op_attrs`` hold the
    submodule attributes named in ``composite_attrs`` (and ``version``).

    >>> from coreai_torch.composite_ops import RMSNormImpl
    >>> spec = ExternalizeSpec(RMSNormImpl, composite_op_name="rms_norm", composite_attrs=["eps"])
    >>> spec.target_class.__name__, spec.composite_op_name, spec.composite_attrs
    ('RMSNormImpl', 'rms_norm', ['eps'])
    """

    target_class: type
    composite_op_name: str | None = None
    composite_attrs: list[str] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.target_class, type):
            raise TypeError(
                f"ExternalizeSpec: target_class must be an nn.Module subclass, got "
                f"{self.target_class!r}"
            )
        if self.composite_attrs is not None and self.composite_op_name is None:
            raise ValueError(
                f"ExternalizeSpec({self.target_class.__name__}): composite_attrs "
                f"{self.composite_attrs} are the attributes of a composite op; give "
                "composite_op_name too, or leave composite_attrs out"
            )


@dataclass
class _ExternalizedExportedProgram:
    """One call site of an externalized submodule, exported on its own.

    ``name`` is the Core AI graph's name (the module path and a suffix unique
    to the call site); ``op_name`` the custom op the parent program calls;
    ``source_nodes`` the names of the parent's nodes this graph replaces.
    """

    name: str
    op_name: str
    exported_program: ExportedProgram
    composite_op_name: str | None = None
    composite_decl_attrs: dict[str, Any] = field(default_factory=dict)
    composite_input_names: list[str] = field(default_factory=list)
    composite_output_names: list[str] = field(default_factory=list)
    source_nodes: list[str] = field(default_factory=list)

    @property
    def target(self) -> str:
        """The qualified name of the custom op the parent program calls."""
        return f"{NAMESPACE}::{self.op_name}"


@dataclass
class _Mark:
    path: str  # dotted path in the model ("layers.0.attn")
    op_name: str
    spec: ExternalizeSpec
    forward: Callable[..., Any]  # the forward before patching


def _patch_model_for_externalization(
    model: torch.nn.Module, targets: list[type | ExternalizeSpec]
) -> None:
    """Replace the ``forward`` of each submodule matching ``targets`` by a custom op.

    A target is an ``nn.Module`` subclass or an :class:`ExternalizeSpec`; each
    submodule takes the first target it matches. The patched ``forward``
    computes what the original does (eagerly, under ``torch.export``'s fake
    tensors and in backward). The forward's tensor arguments must be
    annotated (``torch.library`` reads the op's schema from them). A target
    that matches nothing is warned about. Call :func:`_subexport_and_restore`
    after exporting the patched model; it undoes the patch.
    """
    specs = [t if isinstance(t, ExternalizeSpec) else ExternalizeSpec(t) for t in targets]
    used = [False] * len(specs)
    # torch.library ops live as long as the process and cannot be removed:
    # a suffix per call keeps two models' "norm" submodules apart.
    suffix = uuid.uuid4().hex[:8]
    patched: list[torch.nn.Module] = []
    try:
        for path, submodule in model.named_modules():
            if not path:
                continue
            index = next(
                (i for i, s in enumerate(specs) if isinstance(submodule, s.target_class)), None
            )
            if index is None:
                continue
            _patch(submodule, path, f"{path.replace('.', '_')}_{suffix}", specs[index])
            patched.append(submodule)
            used[index] = True
    except BaseException:
        for submodule in patched:  # this call's patches only: earlier ones stay
            _unpatch(submodule, vars(submodule)[_MARK])
        raise
    unused = [s.target_class.__name__ for s, u in zip(specs, used, strict=True) if not u]
    if unused:
        warnings.warn(
            f"_patch_model_for_externalization: no submodule of {type(model).__name__} is a "
            f"{', '.join(unused)}; nothing is externalized for them. Check the classes "
            "passed (ignore this if they are meant for other models).",
            UserWarning,
            stacklevel=2,
        )


def _patch(submodule: torch.nn.Module, path: str, op_name: str, spec: ExternalizeSpec) -> None:
    if _MARK in vars(submodule):
        raise RuntimeError(
            f"submodule {path!r} is already patched for externalization; call "
            "_subexport_and_restore(model, exported_program) before patching it again"
        )
    forward = submodule.forward
    qualified = f"{NAMESPACE}::{op_name}"
    try:
        op = torch.library.custom_op(qualified, forward, mutates_args=())
    except ValueError as exc:
        raise TypeError(
            f"cannot externalize {path!r} ({type(submodule).__name__}): its forward's "
            f"signature cannot be an op's schema ({exc}). Annotate every argument "
            "(torch.Tensor, torch.Tensor | None, int, float, bool) and the result."
        ) from exc
    op.register_fake(forward)
    _register_backward(op, forward)
    vars(submodule)[_MARK] = _Mark(path, op_name, spec, forward)
    submodule.forward = op  # type: ignore[method-assign]


def _register_backward(op: Any, forward: Callable[..., Any]) -> None:
    """Gradients through a patched forward: it is run again with autograd on.

    A model may be trained (quantization-aware) between patching and export:
    the arguments get their gradients, and so do the submodule's parameters.
    """

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        tensors = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)]
        ctx.tensor_positions = tensors
        ctx.others = [None if i in tensors else x for i, x in enumerate(inputs)]
        ctx.save_for_backward(*(inputs[i] for i in tensors))

    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        inputs = list(ctx.others)
        for position, saved in zip(ctx.tensor_positions, ctx.saved_tensors, strict=True):
            inputs[position] = saved.detach().requires_grad_(saved.is_floating_point())
        with torch.enable_grad():
            outputs = forward(*inputs)
        outputs = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs)
        # backward (not grad): the submodule's parameters, which the op does not
        # take as inputs, get their gradients accumulated too.
        torch.autograd.backward(outputs, grads)
        return tuple(x.grad if isinstance(x, torch.Tensor) else None for x in inputs)

    if any(
        p.kind is inspect.Parameter.KEYWORD_ONLY
        for p in inspect.signature(forward).parameters.values()
    ):
        # Keyword-only arguments are configuration, not differentiated; the
        # op's autograd contract then passes them separately.
        def setup(ctx: Any, inputs: tuple[Any, ...], keyword_only: Any, output: Any) -> None:
            setup_context(ctx, inputs, output)

        op.register_autograd(backward, setup_context=setup)
    else:
        op.register_autograd(backward, setup_context=setup_context)


def _marked(model: torch.nn.Module) -> list[tuple[torch.nn.Module, _Mark]]:
    return [
        (module, vars(module)[_MARK])
        for _, module in model.named_modules()
        if _MARK in vars(module)
    ]


def _restore(model: torch.nn.Module) -> None:
    for module, mark in _marked(model):
        _unpatch(module, mark)


def _unpatch(module: torch.nn.Module, mark: _Mark) -> None:
    vars(module).pop(_MARK)
    vars(module).pop("forward", None)  # the class's forward again
    if module.forward != mark.forward:  # the forward was an attribute of the instance
        module.forward = mark.forward  # type: ignore[method-assign]


def _subexport_and_restore(
    model: torch.nn.Module, exported_program: ExportedProgram, *, progress_bar: Any = None
) -> list[_ExternalizedExportedProgram]:
    """Export every call site of the patched submodules; restore the model.

    ``exported_program`` is the export of ``model`` patched by
    :func:`_patch_model_for_externalization`. Each call of a patched
    submodule in it (or, for a submodule inside another patched one, in that
    one's export) gives one program, exported with the shapes of that call
    (its symbolic sizes stay symbolic). A patched submodule with no call is
    warned about and skipped. The ``forward`` of every patched submodule is
    restored whatever happens. ``progress_bar`` is accepted for Apple's
    signature and unused. Returns ``[]`` for a model with nothing patched.
    """
    try:
        marks = sorted(_marked(model), key=lambda found: found[1].path.count("."))
        # Programs in which calls are looked for, by module path ("" = model).
        programs: dict[str, list[ExportedProgram]] = {"": [exported_program]}
        results: list[_ExternalizedExportedProgram] = []
        for module, mark in marks:
            calls = _call_sites(mark, programs)
            _unpatch(module, mark)  # export the original forward; nested patches stay
            if not calls:
                warnings.warn(
                    f"externalized submodule {mark.path!r} is not called in the exported "
                    "program (was the model exported before it was patched?); it is not "
                    "externalized",
                    UserWarning,
                    stacklevel=2,
                )
                continue
            for node in calls:
                program = _export_call(module, mark, node)
                programs.setdefault(mark.path, []).append(program)
                results.append(_result(module, mark, node, program))
        return results
    finally:
        _restore(model)


def _call_sites(mark: _Mark, programs: dict[str, list[ExportedProgram]]) -> list[fx.Node]:
    """The calls of ``mark``'s op in the export of its nearest patched ancestor."""
    parts = mark.path.split(".")
    for depth in range(len(parts) - 1, -1, -1):
        ancestor = ".".join(parts[:depth])
        for program in programs.get(ancestor, []):
            qualified = f"{NAMESPACE}::{mark.op_name}"
            found = [n for n in program.graph.nodes if externalized_op(n) == qualified]
            if found:
                return found
    return []


def externalized_op(node: fx.Node) -> str | None:
    """The patched forward's op a node calls (``coreai_torch_ext::<op>``), or ``None``."""
    target = node.target
    if node.op != "call_function" or getattr(target, "namespace", None) != NAMESPACE:
        return None
    return target.name().split(".", 1)[0]  # without the overload


def _export_call(module: torch.nn.Module, mark: _Mark, node: fx.Node) -> ExportedProgram:
    parameters = list(inspect.signature(module.forward).parameters)
    args: dict[str, torch.Tensor] = {}
    shapes: dict[str, Any] = {}
    dims: dict[str, Any] = {}
    for position, arg in enumerate(node.args):
        if arg is None:
            continue  # an optional tensor left out: the forward's default applies
        fake = arg.meta.get("val") if isinstance(arg, fx.Node) else arg
        if not isinstance(fake, torch.Tensor):
            raise TypeError(
                f"externalized submodule {mark.path!r}: argument {parameters[position]!r} "
                f"is {fake!r}, not a tensor; only tensor arguments can be inputs of its "
                "graph. Make the value an attribute of the module (set in __init__)."
            )
        name = parameters[position]
        args[name] = torch.zeros([int(s) for s in fake.shape], dtype=fake.dtype)
        symbolic = {
            axis: _dim(size, dims)
            for axis, size in enumerate(fake.shape)
            if isinstance(size, torch.SymInt)
        }
        shapes[name] = symbolic or None
    try:
        return torch.export.export(module, (), args, dynamic_shapes=shapes)
    except Exception as exc:
        raise RuntimeError(
            f"externalized submodule {mark.path!r} ({type(module).__name__}) failed to export "
            f"on its own with the shapes of its call {node.name}: {exc}. It exported as part "
            "of the model; report this with the model to coreai_torch."
        ) from exc


def _dim(size: torch.SymInt, dims: dict[str, Any]) -> Any:
    """One ``Dim`` per symbol of the parent export; derived sizes are left to export."""
    expression = size.node.expr
    key = str(expression)
    if key not in dims:
        if not expression.is_symbol:
            dims[key] = Dim.AUTO
        else:
            bounds = size.node.shape_env.var_to_range.get(expression)
            name = re.sub(r"\W", "_", key)
            lower = int(bounds.lower) if bounds is not None else 0
            try:
                upper = int(bounds.upper)
            except (AttributeError, TypeError, OverflowError):  # no bound, or infinity
                dims[key] = Dim(name, min=lower)
            else:
                dims[key] = Dim(name, min=lower, max=upper)
    return dims[key]


def _result(
    module: torch.nn.Module, mark: _Mark, node: fx.Node, program: ExportedProgram
) -> _ExternalizedExportedProgram:
    spec = mark.spec
    attributes: dict[str, Any] = {}
    if spec.composite_op_name is not None:
        for attribute in spec.composite_attrs or []:
            if not hasattr(module, attribute):
                raise AttributeError(
                    f"ExternalizeSpec({spec.target_class.__name__}): composite attribute "
                    f"{attribute!r} is not an attribute of {mark.path!r}; name attributes "
                    "the module sets in __init__"
                )
            attributes[attribute] = getattr(module, attribute)
    inputs, outputs = _io_names(program)
    return _ExternalizedExportedProgram(
        name=f"{mark.path}_{uuid.uuid4().hex[:8]}",
        op_name=mark.op_name,
        exported_program=program,
        composite_op_name=spec.composite_op_name,
        composite_decl_attrs=attributes,
        composite_input_names=inputs,
        composite_output_names=outputs,
        source_nodes=[node.name],
    )


def _io_names(program: ExportedProgram) -> tuple[list[str], list[str]]:
    """A composite's argument names (forward arguments, then weights by attribute name)."""
    inputs = [
        spec.arg.name if spec.kind == InputKind.USER_INPUT else spec.target
        for spec in program.graph_signature.input_specs
        if spec.kind in (InputKind.USER_INPUT, InputKind.PARAMETER, InputKind.BUFFER)
    ]
    count = sum(
        spec.kind == OutputKind.USER_OUTPUT for spec in program.graph_signature.output_specs
    )
    outputs = ["output"] if count == 1 else [f"output_{i}" for i in range(count)]
    return inputs, outputs

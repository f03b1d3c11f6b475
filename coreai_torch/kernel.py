"""``TorchMetalKernel``: a Metal kernel body as a real PyTorch operator.

Each kernel defines one op, ``torch.ops.coreai_metal_kernels.<name>``, with the
kernel's tensors and scalars followed by ``SymInt[]`` grid, threadgroup and
result shapes. On CPU, CUDA and MPS tensors the op runs the Metal source itself (through
``torch.ops.coreai_torch.launch``); under FakeTensor/Meta it allocates results
whose dtypes come from ``torch_defn`` and whose shapes come from
``result_shapes``, so ``torch.export`` and ``torch.compile`` trace it as one node.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from . import (
    _C,  # also registers torch.ops.coreai_torch
    modes,
    validation,
)
from .contract import (
    INT32_MAX,
    INT32_MIN,
    PARAMETER_LIMIT,
    KernelDefinition,
    ScalarArg,
    Specialization,
    TensorArg,
    metal_type,
    render_buffer_source,
)
from .errors import MetalCompileError, reraise_compile_error

NAMESPACE = "coreai_metal_kernels"
_MAX_THREADS_PER_GROUP = 1024
_SCHEMA_SCALAR = {int: "SymInt", float: "float", bool: "bool"}
_ARG_KIND = {int: "i", float: "f", bool: "b"}
_OPTION_DEBUG, _OPTION_FAST_MATH = 1, 2
_RETURN_KIND_CODE = {"tensor": 0, "tuple": 1, "list": 2}  # csrc/fast_call.cpp
# Devices whose tensors a backend runs the Metal source on (csrc/ops.cpp).
_BACKEND_DEVICES = ("cpu", "cuda", "mps")

# The live kernel behind each op name; an op always runs this object's definition.
_ACTIVE: dict[str, TorchMetalKernel] = {}
_LIBRARIES: dict[str, torch.library.Library] = {}
_WARNED_DEVICES: set[str] = set()


class TorchMetalKernel:
    """A Metal compute kernel with a PyTorch reference, callable as a torch op.

    Args:
        name: kernel identifier; the op is ``torch.ops.coreai_metal_kernels.<name>``.
        input_names: names of the kernel's inputs, in ``torch_defn``'s parameter order.
        result_names: names of the results the kernel writes.
        src: the body of the ``[[kernel]]`` function; the signature is generated.
        torch_defn: PyTorch reference. Parameters annotated ``torch.Tensor``, ``int``,
            ``float`` or ``bool``; returns ``torch.Tensor``, ``list[torch.Tensor]`` or
            ``tuple[torch.Tensor, ...]``. Gives result dtypes while tracing, and runs
            instead of the kernel in reference mode.
        metal_params: thread attributes to declare, e.g.
            ``MetalParameter("id", "uint", "thread_position_in_grid")``.
        helper_src: Metal source placed before the kernel function.
        template_dtypes: input name -> placeholder replaced by that input's Metal type
            in ``src`` and ``helper_src``.

    Settable per kernel after construction: ``execution_mode`` (``None`` follows
    :func:`coreai_torch.set_execution_mode`; ``"kernel"`` or ``"reference"``),
    ``debug`` (CPU bounds checks and unwritten-result report; default from
    ``COREAI_TORCH_DEBUG``) and ``fast_math`` (MPS and CUDA; default safe math).

    Example::

        >>> import torch
        >>> from coreai_torch import TorchMetalKernel, MetalParameter
        >>> def torch_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        ...     return x + y
        >>> add = TorchMetalKernel("doc_add", ["x", "y"], ["out"],
        ...     src="if (id < out.get_extent(0)) out[id] = x[id] + y[id];",
        ...     torch_defn=torch_add,
        ...     metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")])
        >>> x = torch.arange(4.0)
        >>> add(x, x, threads_per_grid=(4, 1, 1), threads_per_thread_group=(4, 1, 1),
        ...     result_shapes=[[4]])
        tensor([0., 2., 4., 6.])
    """

    def __init__(
        self,
        name: str,
        input_names: list[str],
        result_names: list[str],
        src: str,
        torch_defn: Callable[..., Any],
        metal_params: list[Any] | None = None,
        helper_src: str | None = None,
        template_dtypes: dict[str, str] | None = None,
    ) -> None:
        name = validation.check_kernel_name(name)
        inputs, results = validation.check_io_names(name, input_names, result_names)
        scalar_types, return_kind = validation.torch_defn_signature(name, torch_defn, inputs)
        validation.check_return_count(name, torch_defn, results, return_kind)
        definition = KernelDefinition(
            name=name,
            input_names=inputs,
            result_names=results,
            src=validation.check_source(name, "src", src, optional=False),
            helper_src=validation.check_source(name, "helper_src", helper_src, optional=True),
            metal_params=validation.check_metal_params(name, metal_params, inputs + results),
            template_dtypes=validation.check_template_dtypes(name, template_dtypes, inputs),
        )
        if definition.parameter_count > PARAMETER_LIMIT:
            raise ValueError(
                f"kernel '{name}': metal kernels support {PARAMETER_LIMIT} inputs, got "
                f"{definition.parameter_count} (inputs + results + metal_params)."
            )

        # Public attributes with the names Apple's package uses.
        self.name = name
        self.input_names = list(inputs)
        self.result_names = list(results)
        self.src = definition.src
        self.helper_src = definition.helper_src
        self.torch_defn = torch_defn
        self.metal_params = list(metal_params or [])
        self.template_dtypes = dict(template_dtypes or {})

        self.definition = definition
        self.scalar_types: dict[str, type] = scalar_types
        self.return_kind = return_kind
        self.execution_mode: str | None = None
        self.debug: bool = modes.debug_default()
        self.fast_math: bool = False
        self._is_scalar = tuple(n in scalar_types for n in inputs)
        # Eager specializations: key -> (handle, result dtypes). See _launch.
        self._launch_cache: dict[tuple, tuple[int, list[torch.dtype]]] = {}
        self._identity = (definition, _schema(self))
        # The C++ side of the eager fast path (csrc/fast_call.cpp): the
        # specializations of default-option calls, filled in by _launch.
        self._fast = _C._fast_path_new(
            self._arg_kinds(), len(results), _RETURN_KIND_CODE[return_kind]
        )
        self.op = _define_op(self)

    # ------------------------------------------------------------------ call

    def __call__(
        self,
        *args: Any,
        threads_per_grid: Sequence[int],
        threads_per_thread_group: Sequence[int],
        result_shapes: Sequence[Sequence[int]],
    ) -> Any:
        """Run the kernel: ``args`` in ``input_names`` order; returns as ``torch_defn`` does."""
        if (
            _ACTIVE.get(self.name) is self
            and (modes._mode if self.execution_mode is None else self.execution_mode) == "kernel"
            and not (self.debug or self.fast_math)
            and not torch.compiler.is_compiling()
        ):
            # A specialization that ran before, called with plain arguments on
            # plain tensors, is checked and launched in C++ without the
            # dispatcher; None means the call needs the general path below,
            # which raises every error a call can have.
            try:
                out = _C._fast_launch(
                    self._fast, args, threads_per_grid, threads_per_thread_group, result_shapes
                )
            except RuntimeError as exc:
                reraise_compile_error(exc)
                raise
            if out is not None:
                return out
        active = _ACTIVE.get(self.name)
        if active is not self and (active is None or active._identity != self._identity):
            raise RuntimeError(
                f"kernel '{self.name}' was redefined with a different definition after this "
                "object was created; call the new TorchMetalKernel object instead."
            )
        grid = _dispatch_triple(self.name, "threads_per_grid", threads_per_grid, minimum=0)
        group = _dispatch_triple(
            self.name, "threads_per_thread_group", threads_per_thread_group, minimum=1
        )
        shapes = self._check_result_shapes(result_shapes)
        self._check_args(args)
        if _plain_eager(args):
            # Same work as the op's CPU/CUDA/MPS kernel, without the dispatcher round
            # trip; anything being traced, faked or differentiated takes the op.
            return self._run(args, grid, group, shapes)
        return self.op(*args, grid, group, *shapes)

    def _check_args(self, args: tuple[Any, ...]) -> None:
        if len(args) != len(self.input_names):
            raise TypeError(
                f"kernel '{self.name}' takes {len(self.input_names)} inputs "
                f"{self.input_names}, got {len(args)}."
            )
        device = None
        for name, is_scalar, value in zip(self.input_names, self._is_scalar, args):
            if is_scalar:
                _check_scalar(self.name, name, self.scalar_types[name], value)
                continue
            if not isinstance(value, torch.Tensor):
                raise TypeError(
                    f"kernel '{self.name}': input '{name}' is declared torch.Tensor in "
                    f"torch_defn, got {type(value).__name__} {value!r}."
                )
            if device is None:
                device, first = value.device, name
            elif value.device != device:
                raise ValueError(
                    f"kernel '{self.name}': all tensors must be on one device; input '{first}' "
                    f"is on {device} but '{name}' is on {value.device}."
                )
            metal_type(value.dtype, kernel=self.name, what=f"input '{name}'")

    def _check_result_shapes(self, result_shapes: Any) -> list[list[Any]]:
        if (
            type(result_shapes) in (list, tuple)
            and len(result_shapes) == len(self.result_names)
            and all(
                type(shape) in (list, tuple)
                and shape
                and all(type(d) is int and d >= 0 for d in shape)
                for shape in result_shapes
            )
        ):
            return [list(shape) for shape in result_shapes]  # the common, valid case
        if isinstance(result_shapes, (str, bytes)) or not isinstance(result_shapes, Sequence):
            raise ValueError(
                f"kernel '{self.name}': result_shapes must be a list with one shape per result "
                f"{self.result_names}, got {result_shapes!r}."
            )
        if len(result_shapes) != len(self.result_names):
            raise ValueError(
                f"kernel '{self.name}': result_shapes must contain one shape per result name; "
                f"expected {len(self.result_names)} (for {self.result_names}), got "
                f"{len(result_shapes)}."
            )
        shapes = []
        for rname, shape in zip(self.result_names, result_shapes):
            if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
                raise ValueError(
                    f"kernel '{self.name}': result_shapes entry for '{rname}' must be a list of "
                    f"ints, got {shape!r}."
                )
            dims = list(shape)
            for d in dims:
                if isinstance(d, bool) or not isinstance(d, (int, torch.SymInt)):
                    raise ValueError(
                        f"kernel '{self.name}': result_shapes entry for '{rname}' must hold "
                        f"ints, got {shape!r}."
                    )
                if isinstance(d, int) and d < 0:
                    raise ValueError(
                        f"kernel '{self.name}': result '{rname}' has a negative dimension in "
                        f"shape {list(shape)}."
                    )
            if not dims:
                raise ValueError(
                    f"kernel '{self.name}': result '{rname}' has shape []; rank-0 results are "
                    "not supported, use shape [1]."
                )
            shapes.append(dims)
        return shapes

    # ------------------------------------------------------ specializations

    def specialization(
        self, inputs: Sequence[Any], result_ranks: Sequence[int], result_dtypes: Sequence[Any]
    ) -> Specialization:
        """The specialization of a call with these inputs and results."""
        args = tuple(
            ScalarArg(n, self.scalar_types[n])
            if is_scalar
            else TensorArg(n, value.dim(), value.dtype)
            for n, is_scalar, value in zip(self.input_names, self._is_scalar, inputs)
        )
        res = tuple(
            TensorArg(n, rank, dtype)
            for n, rank, dtype in zip(self.result_names, result_ranks, result_dtypes)
        )
        return Specialization(args, res)

    def _result_dtypes(self, inputs: Sequence[Any], shapes: Sequence[Sequence[int]]) -> list:
        """Result dtypes of a new specialization, from ``torch_defn`` run once.

        The reference runs on the real inputs first: the first meta computation
        in a process imports torch's compiler stack (over a second), which would
        dominate a warm start, while one reference call per specialization is
        cheap next to compiling the kernel. A reference that cannot run on these
        inputs (an op torch lacks for the device or dtype) runs on meta copies.
        It also checks ``result_shapes`` against the reference on the first call.
        """
        with torch.no_grad():
            try:
                outs = self.torch_defn(*inputs)
            except Exception as real_failure:
                meta = [
                    torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
                    if isinstance(v, torch.Tensor)
                    else v
                    for v in inputs
                ]
                try:
                    outs = self.torch_defn(*meta)
                except Exception:
                    raise real_failure from None
        outs = self._as_result_list(outs)
        _check_shapes_agree(self.name, self.result_names, outs, shapes)
        for rname, out in zip(self.result_names, outs):
            metal_type(out.dtype, kernel=self.name, what=f"result '{rname}'")
        return [o.dtype for o in outs]

    def _as_result_list(self, outs: Any) -> list[torch.Tensor]:
        items = [outs] if isinstance(outs, torch.Tensor) else list(outs)
        if len(items) != len(self.result_names) or not all(
            isinstance(o, torch.Tensor) for o in items
        ):
            raise ValueError(
                f"kernel '{self.name}': torch_defn returned {len(items)} values but the kernel "
                f"has {len(self.result_names)} results {self.result_names}."
            )
        return items

    def _shape_results(self, outs: list[torch.Tensor]) -> Any:
        if self.return_kind == "tensor":
            return outs[0]
        return tuple(outs) if self.return_kind == "tuple" else list(outs)

    # -------------------------------------------------------------- eager

    def _options(self) -> int:
        return (_OPTION_DEBUG if self.debug else 0) | (_OPTION_FAST_MATH if self.fast_math else 0)

    def _launch(self, inputs: tuple, grid: list, group: list, shapes: list[list[int]]) -> Any:
        """Run the kernel source on CPU, CUDA or MPS tensors (the hot path of an eager call)."""
        tensors = [v for v, s in zip(inputs, self._is_scalar) if not s]
        key = (
            tuple((t.dtype, t.dim()) for t in tensors),
            tuple(len(s) for s in shapes),
            self._options(),
        )
        cached = self._launch_cache.get(key)
        if cached is None:
            cached = self._register(inputs, shapes)
            self._launch_cache[key] = cached
            if key[2] == 0:  # the fast path serves default-option calls only
                _C._fast_path_add(
                    self._fast,
                    [t.dtype for t in tensors],
                    [t.dim() for t in tensors],
                    list(key[1]),
                    cached[0],
                    cached[1],
                )
        handle, dtypes = cached
        scalars = [v for v, s in zip(inputs, self._is_scalar) if s]
        flat = [d for s in shapes for d in s]
        try:
            outs = torch.ops.coreai_torch.launch.default(
                handle, tensors, scalars, grid, group, flat, [len(s) for s in shapes], dtypes
            )
        except RuntimeError as exc:
            reraise_compile_error(exc)
            raise
        return self._shape_results(outs)

    def _arg_kinds(self) -> str:
        """``register_kernel``'s ``arg_kinds``: one of ``t``/``i``/``f``/``b`` per input."""
        return "".join(
            _ARG_KIND[self.scalar_types[n]] if s else "t"
            for n, s in zip(self.input_names, self._is_scalar)
        )

    def registration(self, spec: Specialization) -> tuple:
        """The arguments of ``torch.ops.coreai_torch.register_kernel`` for ``spec``.

        ``(name, buffer source, entry, arg_kinds, tensor names, thread attributes,
        options)``: what a C++ caller needs to launch this specialization without
        Python (``docs/internals.md``).
        """
        entry, source = render_buffer_source(self.definition, spec)
        kinds = self._arg_kinds()
        tensor_names = [n for n, s in zip(self.input_names, self._is_scalar) if not s]
        return (
            self.name,
            source,
            entry,
            kinds,
            tensor_names + self.result_names,
            [attr for _, _, attr in self.definition.metal_params],
            self._options(),
        )

    def _register(self, inputs: tuple, shapes: list[list[int]]) -> tuple[int, list]:
        dtypes = self._result_dtypes(inputs, shapes)
        spec = self.specialization(inputs, [len(s) for s in shapes], dtypes)
        handle = torch.ops.coreai_torch.register_kernel.default(*self.registration(spec))
        return handle, dtypes

    def _reference(self, inputs: tuple, shapes: list[list[int]]) -> Any:
        outs = self._as_result_list(self.torch_defn(*inputs))
        _check_shapes_agree(self.name, self.result_names, outs, shapes)
        # An op's results must not alias its inputs (torch.library's contract).
        storages = {v.untyped_storage().data_ptr() for v in inputs if isinstance(v, torch.Tensor)}
        outs = [o.clone() if o.untyped_storage().data_ptr() in storages else o for o in outs]
        return self._shape_results(outs)

    def _eager(self, *flat: Any) -> Any:
        """The op's CPU, CUDA and MPS kernel."""
        n = len(self.input_names)
        shapes = [list(s) for s in flat[n + 2 :]]
        return self._run(flat[:n], list(flat[n]), list(flat[n + 1]), shapes)

    def _run(self, inputs: tuple, grid: list, group: list, shapes: list[list[int]]) -> Any:
        if modes.resolve(self.execution_mode) == "reference":
            return self._reference(inputs, shapes)
        return self._launch(inputs, grid, group, shapes)

    def _other_device(self, *flat: Any) -> Any:
        n = len(self.input_names)
        device = next((v.device for v in flat[:n] if isinstance(v, torch.Tensor)), None)
        key = str(device.type if device is not None else "none")
        if key not in _WARNED_DEVICES:
            _WARNED_DEVICES.add(key)
            warnings.warn(
                f"coreai_torch has no backend for {key} tensors: kernel '{self.name}' (and "
                f"every kernel on {key}) runs its torch_defn reference instead of the Metal "
                "source. Move the tensors to the CPU, CUDA or MPS to run the kernel itself.",
                stacklevel=3,
            )
        return self._reference(flat[:n], [list(s) for s in flat[n + 2 :]])

    def _fake(self, *flat: Any) -> Any:
        n = len(self.input_names)
        inputs, shapes = flat[:n], [list(s) for s in flat[n + 2 :]]
        for name, is_scalar, v in zip(self.input_names, self._is_scalar, inputs):
            if not is_scalar:
                metal_type(v.dtype, kernel=self.name, what=f"input '{name}'")
        outs = self._as_result_list(self.torch_defn(*inputs))
        _check_shapes_agree(self.name, self.result_names, outs, shapes)
        device = next((v.device for v in inputs if isinstance(v, torch.Tensor)), outs[0].device)
        results = []
        for rname, out, shape in zip(self.result_names, outs, shapes):
            metal_type(out.dtype, kernel=self.name, what=f"result '{rname}'")
            results.append(torch.empty(shape, dtype=out.dtype, device=device))
        return self._shape_results(results)


# --------------------------------------------------------------------- checks


def _dispatch_triple(kernel: str, label: str, value: Any, *, minimum: int) -> list[Any]:
    if type(value) in (tuple, list) and len(value) == 3:
        a, b, c = value
        if type(a) is int and type(b) is int and type(c) is int:
            # The common case: three plain ints.
            if a < minimum or b < minimum or c < minimum:
                raise ValueError(
                    f"kernel '{kernel}': {label} entries must be >= {minimum}, got {tuple(value)}."
                )
            if minimum == 1 and a * b * c > _MAX_THREADS_PER_GROUP:
                raise ValueError(
                    f"kernel '{kernel}': {label} {tuple(value)} has {a * b * c} threads; a "
                    f"threadgroup holds at most {_MAX_THREADS_PER_GROUP}."
                )
            return [a, b, c]
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ValueError(f"kernel '{kernel}': {label} must be a 3-tuple of ints, got {value!r}.")
    if len(value) != 3:
        raise ValueError(
            f"kernel '{kernel}': {label} must be a 3-tuple, got {len(value)} elements: {value!r}."
        )
    dims = list(value)
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, torch.SymInt)):
            raise ValueError(f"kernel '{kernel}': {label} must hold ints, got {value!r}.")
        if isinstance(d, int) and d < minimum:
            raise ValueError(
                f"kernel '{kernel}': {label} entries must be >= {minimum}, got {tuple(value)}."
            )
    if minimum == 1 and all(isinstance(d, int) for d in dims):
        threads = math.prod(dims)
        if threads > _MAX_THREADS_PER_GROUP:
            raise ValueError(
                f"kernel '{kernel}': {label} {tuple(value)} has {threads} threads; a "
                f"threadgroup holds at most {_MAX_THREADS_PER_GROUP}."
            )
    return dims


def _plain_eager(args: tuple[Any, ...]) -> bool:
    """True when a call can skip the dispatcher: plain tensors, nothing tracing or recording."""
    if torch.compiler.is_compiling():
        return False
    if torch._C._len_torch_dispatch_stack() or torch._C._len_torch_function_stack():
        return False
    grad = torch.is_grad_enabled()
    for a in args:
        if type(a) is torch.Tensor:
            if (grad and a.requires_grad) or a.device.type not in _BACKEND_DEVICES:
                return False
        elif isinstance(a, torch.Tensor):  # FakeTensor, FunctionalTensor, other subclasses
            return False
    return True


def _check_scalar(kernel: str, name: str, expected: type, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        raise TypeError(
            f"kernel '{kernel}': input '{name}' is declared {expected.__name__} in torch_defn, "
            f"got a tensor; pass a Python {expected.__name__}."
        )
    symbolic = {int: torch.SymInt, float: torch.SymFloat, bool: torch.SymBool}[expected]
    if isinstance(value, symbolic):
        return
    if expected is bool:
        ok = isinstance(value, bool)
    elif expected is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok:
        raise TypeError(
            f"kernel '{kernel}': input '{name}' is declared {expected.__name__} in torch_defn, "
            f"got {type(value).__name__} {value!r}."
        )
    if expected is int and not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(
            f"kernel '{kernel}': int input '{name}' = {value} does not fit Metal's 32-bit int "
            f"({INT32_MIN} .. {INT32_MAX})."
        )
    if expected is float and not math.isfinite(value):
        raise ValueError(
            f"kernel '{kernel}': float input '{name}' = {value} is not finite; converted models "
            "bake scalars as literals, which cannot be inf or nan."
        )


def _check_shapes_agree(
    kernel: str, names: Sequence[str], outs: Sequence[torch.Tensor], shapes: Sequence[Sequence]
) -> None:
    for rname, out, shape in zip(names, outs, shapes):
        ref = list(out.shape)
        if len(ref) != len(shape) or any(
            isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(ref, shape)
        ):
            raise ValueError(
                f"kernel '{kernel}': result_shapes gives {list(shape)} for result '{rname}', "
                f"but torch_defn returns shape {ref}."
            )


# ------------------------------------------------------------------ the op


def _schema(kernel: TorchMetalKernel) -> str:
    params = [
        f"{_SCHEMA_SCALAR[kernel.scalar_types[n]]} {n}" if s else f"Tensor {n}"
        for n, s in zip(kernel.input_names, kernel._is_scalar)
    ]
    params += ["SymInt[] threads_per_grid", "SymInt[] threads_per_thread_group"]
    params += [f"SymInt[] result_shape_{r}" for r in kernel.result_names]
    count = len(kernel.result_names)
    returns = {
        "tensor": "Tensor",
        "tuple": "(" + ", ".join(["Tensor"] * count) + ")",
        "list": "Tensor[]",
    }[kernel.return_kind]
    return f"({', '.join(params)}) -> {returns}"


def _define_op(kernel: TorchMetalKernel) -> torch._ops.OpOverload:
    """Defines (or reuses) ``coreai_metal_kernels::<name>`` for ``kernel``."""
    name = kernel.name
    previous = _ACTIVE.get(name)
    if previous is not None and previous._identity == kernel._identity:
        # Re-running the same definition (a notebook cell): keep the op, and let
        # it serve the new object, whose torch_defn may be a new function.
        _ACTIVE[name] = kernel
        return getattr(torch.ops.coreai_metal_kernels, name).default
    if previous is not None:
        warnings.warn(
            f"Redefining kernel '{name}': later calls of "
            f"torch.ops.{NAMESPACE}.{name} run the new definition.",
            stacklevel=3,
        )
        _LIBRARIES.pop(name)._destroy()

    lib = torch.library.Library(NAMESPACE, "FRAGMENT")
    lib.define(name + kernel._identity[1])

    def active() -> TorchMetalKernel:
        return _ACTIVE[name]

    for key in ("CPU", "CUDA", "MPS"):
        lib.impl(name, lambda *a: active()._eager(*a), key)
    lib.impl(name, lambda *a: active()._other_device(*a), "CompositeExplicitAutograd")
    torch.library.register_fake(f"{NAMESPACE}::{name}", lambda *a: active()._fake(*a), lib=lib)
    _LIBRARIES[name] = lib
    _ACTIVE[name] = kernel
    return getattr(torch.ops.coreai_metal_kernels, name).default


__all__ = ["MetalCompileError", "TorchMetalKernel"]

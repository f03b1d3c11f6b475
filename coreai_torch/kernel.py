"""``TorchMetalKernel``: a Metal kernel body as a real PyTorch operator.

Construction checks the definition (``definition``) and defines the kernel's
op (``kernel_op``). A call is read and checked in C++
(``csrc/python/kernel_call.cpp``), which launches a registered specialization
of a call that may launch directly; every other call (a new specialization,
tracing, autograd, modes) takes the Python ``__call__`` and the kernel's op,
whose C++ kernels register the new specialization, asking ``specializations``
once.
"""

from __future__ import annotations

import atexit
from collections.abc import Callable, Sequence
from typing import Any

import torch

from . import _C, autograd, definition, kernel_op, modes, specializations
from .contract import (
    OPTION_DEBUG,
    OPTION_FAST_MATH,
    PARAMETER_LIMIT,
    RETURN_KINDS,
    KernelDefinition,
    Registration,
    ScalarArg,
    Specialization,
    TensorArg,
    registration,
)
from .errors import MetalCompileError, reraise_compile_error

_ACTIVE = kernel_op.ACTIVE


class TorchMetalKernel(_C.KernelCall):
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
        name = definition.check_kernel_name(name)
        inputs, results = definition.check_io_names(name, input_names, result_names)
        scalar_types, return_kind = definition.torch_defn_signature(name, torch_defn, inputs)
        definition.check_return_count(name, torch_defn, results, return_kind)
        defn = KernelDefinition(
            name=name,
            input_names=inputs,
            result_names=results,
            src=definition.check_source(name, "src", src, optional=False),
            helper_src=definition.check_source(name, "helper_src", helper_src, optional=True),
            metal_params=definition.check_metal_params(name, metal_params, inputs + results),
            template_dtypes=definition.check_template_dtypes(name, template_dtypes, inputs),
        )
        if defn.parameter_count > PARAMETER_LIMIT:
            raise ValueError(
                f"kernel '{name}': metal kernels support {PARAMETER_LIMIT} inputs, got "
                f"{defn.parameter_count} (inputs + results + metal_params)."
            )
        definition.warn_placeholders_in_identifiers(defn)

        # Public attributes with the names Apple's package uses.
        self.name = name
        self.input_names = list(inputs)
        self.result_names = list(results)
        self.src = defn.src
        self.helper_src = defn.helper_src
        self.torch_defn = torch_defn
        self.metal_params = list(metal_params or [])
        self.template_dtypes = dict(template_dtypes or {})

        self.definition = defn
        self.scalar_types: dict[str, type] = scalar_types
        self.return_kind = return_kind
        self.execution_mode: str | None = None
        self.options = 0  # registration option bits, kept in step with debug and fast_math
        self.debug = modes.debug_default()
        self.fast_math = False
        self.identity = (defn, kernel_op.schema(self))
        # The kernel's specializations, and what its calls are checked against (C++).
        self.table = _C.KernelTable(
            name, list(inputs), kernel_op.arg_kinds(self), list(results),
            RETURN_KINDS.index(return_kind),
        )  # fmt: skip
        # The registered backward; define() shares an identical predecessor's.
        self.backward_slot = autograd.BackwardSlot()
        self.op = kernel_op.define(self)
        # The first kernel of a process starts the compiler search, which a
        # new cache's first launch would otherwise wait for (docs/cpu.md).
        _C._start_compiler_check(name)

    @property
    def debug(self) -> bool:
        """CPU bounds checks and unwritten-result report (default from ``COREAI_TORCH_DEBUG``)."""
        return bool(self.options & OPTION_DEBUG)

    @debug.setter
    def debug(self, on: bool) -> None:
        self.options = (self.options & ~OPTION_DEBUG) | (OPTION_DEBUG if on else 0)

    @property
    def fast_math(self) -> bool:
        """MPS and CUDA: compile with fast math (default: safe math)."""
        return bool(self.options & OPTION_FAST_MATH)

    @fast_math.setter
    def fast_math(self, on: bool) -> None:
        self.options = (self.options & ~OPTION_FAST_MATH) | (OPTION_FAST_MATH if on else 0)

    # ------------------------------------------------------------------ call

    def __call__(
        self,
        *args: Any,
        threads_per_grid: Sequence[int],
        threads_per_thread_group: Sequence[int],
        result_shapes: Sequence[Sequence[int]],
    ) -> Any:
        """Run the kernel: ``args`` in ``input_names`` order; returns as ``torch_defn`` does.

        A call's arguments are read and checked in C++ before this runs, and a
        call that may launch directly is launched there. This is the one slow
        path (and what torch.compile traces): the kernel's op.
        """
        self._check_current("call")
        try:
            return self.op(*args, threads_per_grid, threads_per_thread_group, *result_shapes)
        except RuntimeError as exc:
            reraise_compile_error(exc)
            raise

    def __copy__(self) -> TorchMetalKernel:
        """The kernel itself: a kernel object stands for its op, as a function does.

        So ``copy.deepcopy`` of a model that holds kernels shares them with the
        original, as it shares the model's functions.
        """
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> TorchMetalKernel:
        return self

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickles the kernel by its definition, for ``torch.save`` and ``mp.spawn``.

        A kernel object stands for its op, as a function does, but unlike a
        function it is often held by a model (``self.norm = rms_norm``) that
        ``torch.save`` pickles, or passed to ``torch.multiprocessing.spawn``. It
        pickles as the arguments of its constructor. Unpickled in a process
        whose kernel of that name has the same definition and ``torch_defn``, it
        is that kernel (so a model saved and loaded in one process shares its
        kernels, as ``copy.deepcopy`` does); otherwise the kernel is
        constructed, which defines its op in that process. What is set after
        construction (``execution_mode``, ``debug``, ``fast_math``, a backward
        from ``register_autograd``) is not carried: the module that defines the
        kernel sets it, when the unpickling process imports it.
        """
        d = self.definition
        return _kernel_from_definition, (
            d.name,
            list(d.input_names),
            list(d.result_names),
            d.src,
            self.torch_defn,
            [tuple(p) for p in d.metal_params],
            d.helper_src,
            dict(d.template_dtypes),
        )

    def _check_current(self, action: str) -> None:
        """Refuses an object whose kernel was redefined with another definition since."""
        active = _ACTIVE.get(self.name)
        if active is not self and (active is None or active.identity != self.identity):
            raise RuntimeError(
                f"kernel '{self.name}' was redefined with a different definition after this "
                f"object was created; {action} the new TorchMetalKernel object instead."
            )

    # ------------------------------------------------------------- autograd

    def register_autograd(
        self,
        backward: Callable[..., Any],
        /,
        *,
        setup_context: Callable[..., Any] | None = None,
    ) -> None:
        """Gives the kernel a backward of your own, e.g. one that runs backward kernels.

        Without one, the gradient of a call is the vector-Jacobian product of
        ``torch_defn`` at the call's inputs: the forward runs the kernel, the
        backward differentiates the reference (``docs/autograd.md``). The split
        is that of ``torch.library.register_autograd``:

        - ``setup_context(ctx, inputs, output)`` runs after the forward, with
          the kernel's inputs (``input_names`` order, scalars included) and its
          output as the call returns it; it saves what the backward needs
          (``ctx.save_for_backward(...)``, or attributes of ``ctx``).
        - ``backward(ctx, *grads)`` gets one gradient per result and returns one
          gradient per input, as a tuple (or a tensor for a one-input kernel):
          a tensor of the input's shape, or ``None`` for a scalar input and an
          input that needs none (``ctx.needs_input_grad[i]`` is False).

        The backward may call any ``TorchMetalKernel``, so hand-written backward
        kernels run eagerly on every backend and appear in compiled and
        exported training graphs. Forward mode (``torch.func.jvp``) still
        differentiates ``torch_defn``. Registering again replaces the backward
        for calls recorded from then on; a redefinition of the kernel with the
        same definition keeps it, a changed definition drops it.

        Example::

            >>> import torch
            >>> from coreai_torch import TorchMetalKernel, MetalParameter
            >>> ID = [MetalParameter("id", "uint", "thread_position_in_grid")]
            >>> def square(x: torch.Tensor) -> torch.Tensor:
            ...     return x * x
            >>> def twice_product(g: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
            ...     return 2 * g * x
            >>> sq = TorchMetalKernel("doc_square", ["x"], ["out"],
            ...     src="out[id] = x[id] * x[id];", torch_defn=square, metal_params=ID)
            >>> sq_grad = TorchMetalKernel("doc_square_grad", ["g", "x"], ["dx"],
            ...     src="dx[id] = 2.0f * g[id] * x[id];", torch_defn=twice_product,
            ...     metal_params=ID)
            >>> def setup_context(ctx, inputs, output):
            ...     ctx.save_for_backward(inputs[0])
            >>> def backward(ctx, grad):
            ...     (x,) = ctx.saved_tensors
            ...     return sq_grad(grad, x, threads_per_grid=(x.numel(), 1, 1),
            ...         threads_per_thread_group=(32, 1, 1), result_shapes=[list(x.shape)])
            >>> sq.register_autograd(backward, setup_context=setup_context)
            >>> x = torch.arange(4.0, requires_grad=True)
            >>> y = sq(x, threads_per_grid=(4, 1, 1), threads_per_thread_group=(32, 1, 1),
            ...     result_shapes=[[4]])
            >>> y.sum().backward()
            >>> x.grad
            tensor([0., 2., 4., 6.])
        """
        self._check_current("register the backward on")
        autograd.register(self, backward, setup_context)

    # ------------------------------------------------------ specializations

    def specialization(
        self, inputs: Sequence[Any], result_ranks: Sequence[int], result_dtypes: Sequence[Any]
    ) -> Specialization:
        """The specialization of a call with these inputs and results."""
        args = tuple(
            ScalarArg(n, self.scalar_types[n])
            if n in self.scalar_types
            else TensorArg(n, value.dim(), value.dtype)
            for n, value in zip(self.input_names, inputs)
        )
        res = tuple(
            TensorArg(n, rank, dtype)
            for n, rank, dtype in zip(self.result_names, result_ranks, result_dtypes)
        )
        return Specialization(args, res)

    def registration(self, spec: Specialization, *, options: int | None = None) -> Registration:
        """The registration of ``spec``: ``torch.ops.coreai_torch.register_kernel``'s arguments.

        What a C++ caller needs to launch this specialization without Python
        (``docs/internals.md`` §2). ``options`` defaults to the kernel's own
        (``debug``, ``fast_math``).
        """
        return registration(self.definition, spec, self.options if options is None else options)

    # ------------------------------------------------------------ results

    def as_result_list(self, outs: Any) -> list[torch.Tensor]:
        """``torch_defn``'s return value as a list, one tensor per result name."""
        items = [outs] if isinstance(outs, torch.Tensor) else list(outs)
        if len(items) != len(self.result_names) or not all(
            isinstance(o, torch.Tensor) for o in items
        ):
            raise ValueError(
                f"kernel '{self.name}': torch_defn returned {len(items)} values but the kernel "
                f"has {len(self.result_names)} results {self.result_names}."
            )
        return items

    def shape_results(self, outs: Sequence[torch.Tensor]) -> Any:
        """Results as ``torch_defn`` returns them: a tensor, a tuple or a list."""
        if self.return_kind == "tensor":
            return outs[0]
        return tuple(outs) if self.return_kind == "tuple" else list(outs)


def _kernel_from_definition(
    name: str,
    input_names: list[str],
    result_names: list[str],
    src: str,
    torch_defn: Callable[..., Any],
    metal_params: list[tuple[str, str, str]],
    helper_src: str,
    template_dtypes: dict[str, str],
) -> TorchMetalKernel:
    """An unpickled kernel: the process's own if it has this definition, else a new one."""
    # The package's MetalParameter: Core AI's class when coreai-core is installed.
    from . import MetalParameter

    active = _ACTIVE.get(name)
    if active is not None and active.torch_defn is torch_defn:
        d = active.definition
        same = (
            list(d.input_names) == input_names
            and list(d.result_names) == result_names
            and d.src == src
            and d.helper_src == helper_src
            and [tuple(p) for p in d.metal_params] == metal_params
            and dict(d.template_dtypes) == template_dtypes
        )
        if same:
            return active
    return TorchMetalKernel(
        name,
        input_names,
        result_names,
        src,
        torch_defn,
        metal_params=[MetalParameter(*p) for p in metal_params],
        helper_src=helper_src or None,
        template_dtypes=template_dtypes or None,
    )


# What the C++ route asks Python, given once; calls of TorchMetalKernel
# objects by vectorcall.
_C._install(
    _ACTIVE,
    modes,
    torch.compiler,
    reraise_compile_error,
    specializations.describe,
    kernel_op.reference,
)
_C._kernel_call_install(TorchMetalKernel)
# A compiler search still running at exit ends before the extension's statics go.
atexit.register(_C._wait_for_compiler_check)

__all__ = ["MetalCompileError", "TorchMetalKernel"]

"""How a kernel call is differentiated.

The forward of a kernel call runs the kernel (``torch_defn`` in reference
mode). Its derivatives come from ``torch_defn``, recomputed at the call's
inputs, unless a backward was registered with
:meth:`TorchMetalKernel.register_autograd`:

- reverse mode (``backward()``, ``torch.autograd.grad``, ``torch.func.grad``
  and ``vjp``): the vector-Jacobian product of ``torch_defn`` at the saved
  inputs, through ``torch.func.vjp``, which traces, so compiled and exported
  training graphs hold it as ATen ops; or the registered backward;
- forward mode (``torch.func.jvp``, ``torch.autograd.forward_ad``): the
  Jacobian-vector product of ``torch_defn``, always, from ``torch_defn`` run
  on dual tensors of the caller's forward-AD level.

Only the inputs are kept for the backward, never the kernel's results or any
intermediate value of ``torch_defn``. The op's Autograd kernel
(``csrc/python/kernel_op.cpp``) hands this module only the calls that autograd
records; the others never reach Python.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.autograd.forward_ad as forward_ad
from torch._functorch.utils import enable_single_level_autograd_function

if TYPE_CHECKING:
    from .kernel import TorchMetalKernel


@dataclass(frozen=True)
class Backward:
    """A backward registered with :meth:`TorchMetalKernel.register_autograd`."""

    backward: Callable[..., Any]
    setup_context: Callable[..., Any] | None

    def same_code(self, other: Backward) -> bool:
        """Whether ``other`` is this registration, or one made from the same source."""
        return all(
            a is b or (_code(a) is not None and _code(a) == _code(b))
            for a, b in ((self.backward, other.backward), (self.setup_context, other.setup_context))
        )


class BackwardSlot:
    """The backward of one kernel definition (``None``: differentiate ``torch_defn``).

    Every object made from the same definition shares one slot, as they share
    the op (``kernel_op.define``): a registration through any of them holds
    for all. A changed definition starts with an empty slot.
    """

    def __init__(self) -> None:
        self.registered: Backward | None = None


def register(
    kernel: TorchMetalKernel,
    backward: Callable[..., Any],
    setup_context: Callable[..., Any] | None,
) -> None:
    """Checks a backward registration and makes it the kernel's (see ``register_autograd``)."""
    results = ", ".join(f"grad_{r}" for r in kernel.result_names)
    _check_callable(
        kernel.name, "backward", backward, f"(ctx, {results})", 1 + len(kernel.result_names)
    )
    if setup_context is not None:
        _check_callable(kernel.name, "setup_context", setup_context, "(ctx, inputs, output)", 3)
    new = Backward(backward, setup_context)
    old = kernel.backward_slot.registered
    if old is not None and not old.same_code(new):
        warnings.warn(
            f"Replacing the backward of kernel '{kernel.name}': gradients recorded from now "
            "on use the new one.",
            stacklevel=3,
        )
    kernel.backward_slot.registered = new


def _code(fn: Any) -> Any:
    return getattr(fn, "__code__", None)


def _check_callable(kernel: str, what: str, fn: Any, expected: str, count: int) -> None:
    if not callable(fn):
        raise TypeError(
            f"kernel '{kernel}': register_autograd's {what} must be a function {expected}, "
            f"got {type(fn).__name__}."
        )
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: the call will tell
        return
    try:
        signature.bind(*([None] * count))
    except TypeError:
        raise TypeError(
            f"kernel '{kernel}': register_autograd's {what} is called as {what}{expected}, "
            f"but {getattr(fn, '__qualname__', fn)!r} takes {signature}."
        ) from None


# ------------------------------------------------------------- recording


def record(kernel: TorchMetalKernel, flat: tuple) -> Any:
    """Runs a call of ``kernel``'s op that autograd records, and records it.

    ``flat`` is the op's arguments: the kernel's inputs, then grid, threadgroup
    and result shapes.
    """
    call = _Call(kernel, kernel.backward_slot.registered)
    inputs = flat[: len(kernel.input_names)]
    # The primals are kept for the forward-mode rule only when a tangent needs it.
    call.keep_primals = any(
        isinstance(v, torch.Tensor) and forward_ad.unpack_dual(v).tangent is not None
        for v in inputs
    )
    if torch._C._are_functorch_transforms_active():
        # Under a functorch transform (torch.func.grad, jvp, ...) this Autograd
        # kernel runs at the transform's level on its wrapped tensors, as an
        # ATen op's does: autograd at that one level records the call.
        # functorch's own rule for autograd.Function does the same with a
        # single-level Function.
        with enable_single_level_autograd_function():
            out = _SINGLE_LEVEL_APPLY(call, *flat)
    else:
        out = _KernelCall.apply(call, *flat)
    # autograd.Function records tensors and tuples of them: a list travels as a tuple.
    return list(out) if kernel.return_kind == "list" else out


class _Call:
    """What one recorded call's backward and forward-mode rule need."""

    def __init__(self, kernel: TorchMetalKernel, registered: Backward | None) -> None:
        self.kernel = kernel
        self.registered = registered  # as at the forward: a later registration is for later calls
        self.keep_primals = False
        self.scalars: tuple = ()  # each input's value if a scalar, else None (a tensor)
        self.input_shapes: tuple = ()  # each tensor input's shape (None for scalars)
        self.primals: tuple | None = None  # the inputs, kept for the forward-mode rule
        self.differentiable: tuple = ()  # per result: floating-point or complex


class _KernelCall(torch.autograd.Function):
    """One recorded kernel call. Applied with a ``_Call`` followed by the op's arguments."""

    @staticmethod
    def forward(call: _Call, *flat: Any) -> Any:
        with torch._C._AutoDispatchBelowAutograd():
            out = call.kernel.op(*flat)
        return tuple(out) if isinstance(out, list) else out

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        call: _Call = inputs[0]
        kernel = call.kernel
        args = inputs[1 : 1 + len(kernel.input_names)]
        ctx.coreai_call = call
        call.scalars = tuple(None if isinstance(v, torch.Tensor) else v for v in args)
        call.input_shapes = tuple(v.shape if isinstance(v, torch.Tensor) else None for v in args)
        outs = list(output) if isinstance(output, tuple) else [output]
        call.differentiable = tuple(_differentiable(o) for o in outs)
        if call.keep_primals:
            call.primals = args
        if call.registered is None:
            ctx.save_for_backward(*(v for v in args if isinstance(v, torch.Tensor)))
        elif call.registered.setup_context is not None:
            call.registered.setup_context(ctx, args, kernel.shape_results(outs))

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        call: _Call = ctx.coreai_call
        n = len(call.kernel.input_names)
        needs = tuple(ctx.needs_input_grad[1 : 1 + n])
        if call.registered is None:
            inputs = _merge(call.scalars, ctx.saved_tensors)
            grad_inputs = _torch_defn_vjp(call, inputs, needs, grads)
        else:
            everything = ctx.needs_input_grad
            ctx.needs_input_grad = needs  # one entry per kernel input, as the user expects
            try:
                result = call.registered.backward(ctx, *grads)
            finally:
                ctx.needs_input_grad = everything
            grad_inputs = _checked_gradients(call, result)
        return (None, *grad_inputs, *([None] * (len(ctx.needs_input_grad) - 1 - n)))

    @staticmethod
    def jvp(ctx: Any, *tangents: Any) -> Any:
        call: _Call = ctx.coreai_call
        primals, call.primals = call.primals, None  # needed for this one evaluation only
        assert primals is not None, "record() saw no tangent at the forward"
        out = _torch_defn_jvp(call, primals, tangents[1 : 1 + len(call.kernel.input_names)])
        return out[0] if call.kernel.return_kind == "tensor" else out


# The apply of a single-level autograd.Function (what autograd.Function.apply
# runs when no functorch transform is active).
_SINGLE_LEVEL_APPLY = super(torch.autograd.Function, _KernelCall).apply


def _merge(scalars: tuple, tensors: Sequence[torch.Tensor]) -> list[Any]:
    """The inputs in order, from the scalars (None where a tensor goes) and the tensors."""
    it = iter(tensors)
    return [next(it) if s is None else s for s in scalars]


# ------------------------------------------------- derivatives of torch_defn


def _restricted(kernel: TorchMetalKernel, inputs: Sequence[Any], positions: list[int]):
    """``torch_defn`` as a function of the inputs at ``positions``, the others fixed,
    returning its differentiable results as a tuple."""

    def defn(*chosen: torch.Tensor) -> tuple[torch.Tensor, ...]:
        args = list(inputs)
        for i, value in zip(positions, chosen):
            args[i] = value
        outs = kernel.as_result_list(kernel.torch_defn(*args))
        return tuple(o for o in outs if _differentiable(o))

    return defn


def _differentiable(t: torch.Tensor) -> bool:
    return t.is_floating_point() or t.is_complex()


def _torch_defn_vjp(
    call: _Call, inputs: list[Any], needs: Sequence[bool], grads: Sequence[torch.Tensor]
) -> list[torch.Tensor | None]:
    positions = [i for i, need in enumerate(needs) if need]
    grad_inputs: list[torch.Tensor | None] = [None] * len(inputs)
    if not positions:
        return grad_inputs
    defn = _restricted(call.kernel, inputs, positions)
    cotangents = tuple(g for g, keep in zip(grads, call.differentiable) if keep)
    with _differentiating(call.kernel, "backward"):
        _, pullback = torch.func.vjp(defn, *(inputs[i] for i in positions))
        for i, g in zip(positions, pullback(cotangents)):
            grad_inputs[i] = g
    return grad_inputs


def _torch_defn_jvp(
    call: _Call, primals: Sequence[Any], tangents: Sequence[Any]
) -> tuple[torch.Tensor | None, ...]:
    # The forward-AD level of the caller (torch.autograd.forward_ad, or the
    # one torch.func.jvp runs) is open: torch_defn runs on dual tensors of it,
    # so each of its ops adds its own forward-mode formula, as they would have
    # without the kernel. (A nested torch.func.jvp or vjp cannot run here: torch
    # has one forward-AD level, and functorch is mid-way through this op.)
    duals = list(primals)
    for i, tangent in enumerate(tangents):
        if tangent is not None:
            duals[i] = forward_ad.make_dual(forward_ad.unpack_dual(primals[i]).primal, tangent)
    with (
        _differentiating(call.kernel, "forward-mode derivative"),
        forward_ad._set_fwd_grad_enabled(True),
    ):
        outs = call.kernel.as_result_list(call.kernel.torch_defn(*duals))
        out_tangents = [forward_ad.unpack_dual(o).tangent for o in outs]
    # A result that does not depend on the inputs has a zero tangent; integer
    # results have none.
    return tuple(
        (torch.zeros_like(o) if t is None else t) if keep else None
        for o, t, keep in zip(outs, out_tangents, call.differentiable)
    )


@contextmanager
def _differentiating(kernel: TorchMetalKernel, what: str) -> Iterator[None]:
    """Re-raises a failure to differentiate ``torch_defn`` with the kernel's name and a way out."""
    try:
        yield
    except (RuntimeError, TypeError, ValueError) as exc:
        hint = (
            "register a backward with kernel.register_autograd(backward, setup_context=...)"
            if what == "backward"
            else "forward mode always differentiates torch_defn; compute this part with "
            "reverse mode (torch.func.vjp, backward()) instead"
        )
        raise RuntimeError(
            f"kernel '{kernel.name}': the {what} differentiates torch_defn at the call's "
            f"inputs, and that failed: {exc}. Make torch_defn differentiable, or {hint}."
        ) from exc


# ------------------------------------------------------ user backward results


def _checked_gradients(call: _Call, result: Any) -> list[torch.Tensor | None]:
    """The registered backward's return value as one gradient (or None) per input."""
    kernel = call.kernel
    names = kernel.input_names
    grads = list(result) if isinstance(result, (tuple, list)) else [result]
    if len(grads) != len(names):
        raise RuntimeError(
            f"kernel '{kernel.name}': the registered backward returned {len(grads)} "
            f"gradient(s); it must return one per input {names} (None for a scalar input "
            "or one that needs no gradient), as a tuple."
        )
    for name, grad, scalar, shape in zip(names, grads, call.scalars, call.input_shapes):
        if grad is None:
            continue
        if scalar is not None:
            raise RuntimeError(
                f"kernel '{kernel.name}': the registered backward returned a gradient for "
                f"the scalar input '{name}'; return None there (scalars get no gradient)."
            )
        if not isinstance(grad, torch.Tensor):
            raise RuntimeError(
                f"kernel '{kernel.name}': the registered backward returned "
                f"{type(grad).__name__} as the gradient of input '{name}'; expected a tensor "
                "or None."
            )
        if grad.shape != shape:
            raise RuntimeError(
                f"kernel '{kernel.name}': the registered backward returned a gradient of "
                f"shape {list(grad.shape)} for input '{name}' of shape {list(shape)}."
            )
    return grads

"""The op behind each kernel: ``torch.ops.coreai_metal_kernels.<name>``.

Its schema is the kernel's tensors and scalars followed by ``SymInt[]`` grid,
threadgroup and result shapes. Its implementations always run the kernel that
is active under the name now (``ACTIVE``), so redefining a kernel with the same
signature swaps one dictionary entry and leaves the op alone: a call running
in another thread finishes with the kernel it started with.

- CPU and MPS: the Metal source itself (or ``torch_defn`` in reference mode).
- Other devices: ``torch_defn``, with a warning.
- Fake/Meta (export, compile): results whose dtypes come from ``torch_defn`` and
  whose shapes come from ``result_shapes``.
- Autograd: the calls autograd records are recorded by ``autograd.record``
  (the backward and forward-mode rule of ``torch_defn``, or the kernel's
  registered backward); the others go on in C++.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import torch

from . import _C, autograd, call_checks, modes
from .contract import OP_NAMESPACE, SCALAR_KINDS, TENSOR_KIND, metal_type
from .errors import reraise_compile_error

if TYPE_CHECKING:
    from .kernel import TorchMetalKernel

# The kernel each op runs, by name; replaced, never mutated, on redefinition.
ACTIVE: dict[str, TorchMetalKernel] = {}
# name -> (library, schema, the C++ Autograd kernel's registration)
_LIBRARIES: dict[str, tuple[torch.library.Library, str, Any]] = {}
_WARNED_DEVICES: set[str] = set()

_SCHEMA_SCALAR = {int: "SymInt", float: "float", bool: "bool"}


def schema(kernel: TorchMetalKernel) -> str:
    """The op's schema, without its name."""
    params = [
        f"{_SCHEMA_SCALAR[kernel.scalar_types[n]]} {n}"
        if n in kernel.scalar_types
        else f"Tensor {n}"
        for n in kernel.input_names
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


def arg_kinds(kernel: TorchMetalKernel) -> str:
    """One argument kind per input (``register_kernel``'s ``arg_kinds``)."""
    return "".join(
        SCALAR_KINDS[kernel.scalar_types[n]] if n in kernel.scalar_types else TENSOR_KIND
        for n in kernel.input_names
    )


def define(kernel: TorchMetalKernel) -> torch._ops.OpOverload:
    """Makes ``kernel`` the one its op runs, defining the op on first use.

    An identical redefinition shares its predecessor's backward registration;
    a changed one starts with none (the derivative of ``torch_defn``).
    """
    name = kernel.name
    sig = schema(kernel)
    previous = ACTIVE.get(name)
    if previous is not None and previous.identity == kernel.identity:
        kernel.backward_slot = previous.backward_slot
    elif previous is not None:
        dropped = (
            " The backward registered for the old definition does not carry over: register "
            "it on the new object."
            if previous.backward_slot.registered is not None
            else ""
        )
        warnings.warn(
            f"Redefining kernel '{name}': later calls of torch.ops.{OP_NAMESPACE}.{name} run "
            f"the new definition.{dropped}",
            stacklevel=3,
        )
    library = _LIBRARIES.get(name)
    if library is not None and library[1] == sig:
        # Same signature: the op stays as it is and runs the new kernel from
        # now on (one dictionary assignment, atomic for other threads).
        ACTIVE[name] = kernel
        return _op(name)
    if library is not None:
        # A new signature needs a new op: the old one goes. (A call of the old
        # op running in another thread at this moment is not protected.)
        old, _, autograd_kernel = _LIBRARIES.pop(name)
        del autograd_kernel  # deregisters the Autograd kernel
        old._destroy()

    lib = torch.library.Library(OP_NAMESPACE, "FRAGMENT")
    lib.define(name + sig)

    def active() -> TorchMetalKernel:
        return ACTIVE[name]

    lib.impl(name, lambda *a: _eager(active(), a), "CPU")
    lib.impl(name, lambda *a: _eager(active(), a), "MPS")
    lib.impl(name, lambda *a: _other_device(active(), a), "CompositeExplicitAutograd")
    torch.library.register_fake(f"{OP_NAMESPACE}::{name}", lambda *a: _fake(active(), a), lib=lib)
    # In C++: a call autograd does not record goes on without Python.
    autograd_kernel = _C._register_autograd_kernel(
        OP_NAMESPACE, name, lambda *a: autograd.record(active(), a)
    )
    _LIBRARIES[name] = (lib, sig, autograd_kernel)
    ACTIVE[name] = kernel
    return _op(name)


# ------------------------------------------------------------ implementations


def _split(kernel: TorchMetalKernel, flat: tuple) -> tuple[tuple, list, list, list[list]]:
    n = len(kernel.input_names)
    return flat[:n], list(flat[n]), list(flat[n + 1]), [list(s) for s in flat[n + 2 :]]


def _eager(kernel: TorchMetalKernel, flat: tuple) -> Any:
    """The op's CPU and MPS kernel."""
    inputs, grid, group, shapes = _split(kernel, flat)
    if modes.resolve(kernel.execution_mode) == "reference":
        return _reference(kernel, inputs, shapes)
    options = kernel.options
    try:
        out = _C._launch_registered(kernel.table, options, inputs, grid, group, shapes)
        if out is not None:
            return out
        # A new specialization, or arguments only the checked launch takes
        # (and reports on): register, then launch through the op.
        handle = kernel.specializations.handle(kernel, inputs, shapes, options)
        tensors = [v for n, v in zip(kernel.input_names, inputs) if n not in kernel.scalar_types]
        scalars = [v for n, v in zip(kernel.input_names, inputs) if n in kernel.scalar_types]
        outs = torch.ops.coreai_torch.launch.default(
            handle, tensors, scalars, grid, group, [d for s in shapes for d in s]
        )
    except RuntimeError as exc:
        reraise_compile_error(exc)
        raise
    return kernel.shape_results(outs)


def _reference(kernel: TorchMetalKernel, inputs: tuple, shapes: list[list[int]]) -> Any:
    outs = kernel.as_result_list(kernel.torch_defn(*inputs))
    call_checks.shapes_agree(kernel.name, kernel.result_names, outs, shapes)
    # An op's results must not alias its inputs (torch.library's contract).
    storages = {v.untyped_storage().data_ptr() for v in inputs if isinstance(v, torch.Tensor)}
    outs = [o.clone() if o.untyped_storage().data_ptr() in storages else o for o in outs]
    return kernel.shape_results(outs)


def _other_device(kernel: TorchMetalKernel, flat: tuple) -> Any:
    inputs, _, _, shapes = _split(kernel, flat)
    device = next((v.device for v in inputs if isinstance(v, torch.Tensor)), None)
    key = str(device.type if device is not None else "none")
    if key not in _WARNED_DEVICES:
        _WARNED_DEVICES.add(key)
        warnings.warn(
            f"coreai_torch has no backend for {key} tensors: kernel '{kernel.name}' (and "
            f"every kernel on {key}) runs its torch_defn reference instead of the Metal "
            "source. Move the tensors to the CPU or MPS to run the kernel itself.",
            stacklevel=3,
        )
    return _reference(kernel, inputs, shapes)


def _fake(kernel: TorchMetalKernel, flat: tuple) -> Any:
    inputs, _, _, shapes = _split(kernel, flat)
    call_checks.inputs(kernel.name, kernel.input_names, kernel.scalar_types, inputs)
    outs = kernel.as_result_list(kernel.torch_defn(*inputs))
    call_checks.shapes_agree(kernel.name, kernel.result_names, outs, shapes)
    device = next((v.device for v in inputs if isinstance(v, torch.Tensor)), outs[0].device)
    results = []
    for rname, out, shape in zip(kernel.result_names, outs, shapes):
        metal_type(out.dtype, kernel=kernel.name, what=f"result '{rname}'")
        results.append(torch.empty(shape, dtype=out.dtype, device=device))
    return kernel.shape_results(results)


def _op(name: str) -> torch._ops.OpOverload:
    return getattr(getattr(torch.ops, OP_NAMESPACE), name).default

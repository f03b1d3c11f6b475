"""The op behind each kernel: ``torch.ops.coreai_metal_kernels.<name>``.

Its schema is the kernel's tensors and scalars followed by ``SymInt[]`` grid,
threadgroup and result shapes. Its implementations always run the kernel that
is active under the name now (``ACTIVE``), so redefining a kernel with the same
signature swaps one dictionary entry and leaves the op alone: a call running
in another thread finishes with the kernel it started with. A redefinition
with a new signature adds an overload (``<name>.v2`` ...) and leaves the
earlier ones defined, refusing calls while the active kernel is not theirs.

- CPU, CUDA and MPS: C++ (``csrc/python/kernel_op.cpp``), over the active
  kernel's table, as the kernel's own fast path: the Metal source itself, or
  ``torch_defn`` in reference mode (:func:`reference`).
- Other devices: ``torch_defn``, with a warning.
- Fake/Meta (export, compile): the call's checks (the table's, as on every
  route), then results whose dtypes come from ``torch_defn`` and whose shapes
  come from ``result_shapes``.
- Autograd: C++: the calls autograd records are recorded by ``autograd.record``
  (the backward and forward-mode rule of ``torch_defn``, or the kernel's
  registered backward); the others go on to the device's kernel.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import torch

from . import _C, autograd, modes
from .contract import OP_NAMESPACE, SCALAR_KINDS, TENSOR_KIND, metal_type
from .specializations import shapes_agree

if TYPE_CHECKING:
    from .kernel import TorchMetalKernel

# The kernel each op runs, by name; replaced, never mutated, on redefinition.
ACTIVE: dict[str, TorchMetalKernel] = {}
# name -> schema -> (overload name, library, the registration of its C++ kernels)
_OVERLOADS: dict[str, dict[str, tuple[str, torch.library.Library, Any]]] = {}
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
    overloads = _OVERLOADS.setdefault(name, {})
    known = overloads.get(sig)
    if known is not None:
        # A signature this name had: that op runs the new kernel from now on
        # (one dictionary assignment, atomic for other threads).
        ACTIVE[name] = kernel
        return _op(name, known[0])
    # A new signature is a new overload of the op. Ops are never destroyed: a
    # call of an earlier overload running in another thread (or made later
    # through a kept reference) finishes safely, and is refused once the
    # active kernel's signature is not its own (csrc/python/kernel_op.cpp).
    overload = "default" if not overloads else f"v{len(overloads) + 1}"
    qualified = name if overload == "default" else f"{name}.{overload}"
    lib = torch.library.Library(OP_NAMESPACE, "FRAGMENT")
    lib.define(qualified + sig)

    def active() -> TorchMetalKernel:
        return ACTIVE[name]

    lib.impl(qualified, lambda *a: _other_device(active(), a), "CompositeExplicitAutograd")
    torch.library.register_fake(
        f"{OP_NAMESPACE}::{qualified}", lambda *a: _fake(active(), a), lib=lib
    )
    # Autograd, CPU, CUDA and MPS in C++: a call autograd does not record goes
    # on to the device's kernel without Python.
    kernels = _C._register_kernel_op_kernels(
        OP_NAMESPACE, qualified, kernel.table, lambda *a: autograd.record(active(), a)
    )
    overloads[sig] = (overload, lib, kernels)
    ACTIVE[name] = kernel
    return _op(name, overload)


# ------------------------------------------------------------ implementations


def _split(kernel: TorchMetalKernel, flat: tuple) -> tuple[tuple, list, list, list[list]]:
    n = len(kernel.input_names)
    return flat[:n], list(flat[n]), list(flat[n + 1]), [list(s) for s in flat[n + 2 :]]


def reference(kernel: TorchMetalKernel, inputs: tuple, shapes: list[list[int]]) -> Any:
    """A call of the op that runs ``torch_defn`` (reference mode, other devices)."""
    modes.resolve(kernel.execution_mode)  # refuses a mode that is not one
    outs = kernel.as_result_list(kernel.torch_defn(*inputs))
    shapes_agree(kernel.name, kernel.result_names, outs, shapes)
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
            "source. Move the tensors to the CPU, a CUDA GPU or MPS to run the kernel itself.",
            stacklevel=3,
        )
    return reference(kernel, inputs, shapes)


def _fake(kernel: TorchMetalKernel, flat: tuple) -> Any:
    inputs, grid, group, shapes = _split(kernel, flat)
    kernel.table.check(tuple(inputs), grid, group, shapes)
    outs = kernel.as_result_list(kernel.torch_defn(*inputs))
    shapes_agree(kernel.name, kernel.result_names, outs, shapes)
    device = next((v.device for v in inputs if isinstance(v, torch.Tensor)), outs[0].device)
    results = []
    for rname, out, shape in zip(kernel.result_names, outs, shapes):
        metal_type(out.dtype, kernel=kernel.name, what=f"result '{rname}'")
        results.append(torch.empty(shape, dtype=out.dtype, device=device))
    return kernel.shape_results(results)


def _op(name: str, overload: str) -> torch._ops.OpOverload:
    return getattr(getattr(getattr(torch.ops, OP_NAMESPACE), name), overload)

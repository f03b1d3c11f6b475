"""The metal4_kernel adapter: one ``TorchMetalKernel`` call -> one Core AI op.

This is the only module that touches coreai-core internals (the generated
``metal4_kernel`` builder, the ``coreaix`` copy ops and the tensor-type facade
that attaches Metal buffer constraints), so a coreai-core upgrade that moves
them is absorbed here.

A call node of ``torch.ops.coreai_metal_kernels.<name>.default`` carries the
kernel inputs (tensors and Python or symbolic scalars, in ``input_names``
order), then ``threads_per_grid`` and ``threads_per_thread_group`` (3 sizes
each), then one shape per result. It becomes::

    coreaix.copy_with_constraints        (each input, to a Metal buffer)
    coreai.metal4_kernel                 (Core AI rendering of the specialization)
    coreaix.copy_discarding_constraints  (each result, back to a plain tensor)

Scalars are baked into the kernel source as literals (the Core AI runtime cannot
read scalar buffers) and also passed as 0-d constants, because the signature
keeps their ``constant T&`` parameters. A 0-d tensor input is reshaped to one
element, a tensor the runtime can bind (the rendering reads it into a local of
the input's name). Grid, threadgroup and result shapes are ``ui32`` tensors;
symbolic entries are computed from the inputs' shapes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.dialects._coreai_ops_gen import metal4_kernel
from coreai._compiler.dialects._coreaix_ops_gen import (
    copy_discarding_constraints,
    copy_with_constraints,
)
from coreai._compiler.ir import RankedTensorType, Type, Value
from coreai.authoring.tensor_type import TensorType as _TensorTypeFacade

from .. import _C
from ..contract import (
    ScalarArg,
    Specialization,
    TensorArg,
    render_buffer_source,
    render_coreai_source,
)
from ..errors import reraise_compile_error
from . import dtypes
from .lowering_context import LoweringContext

# Core AI's metal4_kernel takes no 64-bit element types, and the rest of a
# converted program computes in 32 bits (see dtypes.py). So an int64 tensor
# reaches the kernel as int32: its specialization is rendered with `int` where
# the eager backends render `int64_t` (the body indexes tensors the same way).

# Scalar parameters as 0-d constants. bool is ui8: the metal4_kernel verifier
# rejects i1 operands, while the source still declares `constant bool&`.
_SCALAR_CONSTANTS: dict[type, type] = {bool: np.uint8, int: np.int32, float: np.float32}


def _metal_buffer_type(plain: RankedTensorType) -> Type:
    facade = _TensorTypeFacade._from_mlir_tensor(plain)
    return facade.with_default_mtl_constraints()._to_mlir_type()


def kernel_lowering(kernel: Any) -> Callable[[LoweringContext, fx.Node], Any]:
    """The lowering of every call of ``kernel`` (a ``TorchMetalKernel``)."""

    def lower(ctx: LoweringContext, node: fx.Node) -> Value | list[Value]:
        return _lower_call(kernel, ctx, node)

    return lower


def _lower_call(kernel: Any, ctx: LoweringContext, node: fx.Node) -> Value | list[Value]:
    # The op's schema names the inputs as the kernel does, then the two thread
    # settings, then one shape parameter per result (see kernel.py).
    inputs = [ctx.arg(name) for name in kernel.input_names]
    grid, group = ctx.arg("threads_per_grid"), ctx.arg("threads_per_thread_group")
    named = {*kernel.input_names, "threads_per_grid", "threads_per_thread_group"}
    shapes = [value for name, value in ctx.args.items() if name not in named]
    if len(shapes) != len(kernel.result_names):
        raise ValueError(
            f"kernel {kernel.name!r}: the call node {node.name} passes {len(shapes)} result "
            f"shapes for the results {kernel.result_names}; was the program exported with "
            "another definition of this kernel?"
        )

    result_fakes = _result_fakes(kernel, node)
    scalar_values = _scalar_values(kernel, inputs)
    spec = Specialization(
        tuple(
            ScalarArg(name, kernel.scalar_types[name])
            if name in kernel.scalar_types
            else TensorArg(name, ctx.rank(arg), dtypes.narrow(ctx.dtype(arg)))
            for name, arg in zip(kernel.input_names, inputs, strict=True)
        ),
        tuple(
            TensorArg(name, fake.dim(), dtypes.narrow(fake.dtype))
            for name, fake in zip(kernel.result_names, result_fakes, strict=True)
        ),
    )
    _refuse_non_metal(kernel, spec)
    entry, source = render_coreai_source(kernel.definition, spec, scalar_values=scalar_values)

    kernel_args = [
        _kernel_input(kernel, ctx, name, arg, name in kernel.scalar_types)
        for name, arg in zip(kernel.input_names, inputs, strict=True)
    ]
    result_types = [
        _metal_buffer_type(
            RankedTensorType.get(ctx.dynamic_dims(fake), dtypes.element_type(fake.dtype))
        )
        for fake in result_fakes
    ]
    outputs = metal4_kernel(
        outputs=result_types,
        kernel_args=kernel_args,
        threads_per_grid=_dispatch_sizes(kernel, ctx, "threads_per_grid", grid),
        threads_per_thread_group=_dispatch_sizes(kernel, ctx, "threads_per_thread_group", group),
        result_shapes=[_size_value(ctx.shape_tensor(list(shape))) for shape in shapes],
        kernel_source=source,
        kernel_name=entry,
    )
    if isinstance(outputs, Value):
        outputs = [outputs]
    results = []
    for output, fake in zip(list(outputs), result_fakes, strict=True):
        plain = RankedTensorType.get(ctx.dynamic_dims(fake), dtypes.element_type(fake.dtype))
        results.append(copy_discarding_constraints(plain, output))
    if isinstance(node.meta.get("val"), list | tuple):
        return results
    return results[0]


def _refuse_non_metal(kernel: Any, spec: Specialization) -> None:
    """Refuses a kernel whose source Metal would not compile, as the eager backends do.

    The checks read the buffer rendering of the same specialization: its
    user text (src and helper_src, placeholders replaced) is the asset's, and
    its #line directives tell that text apart. They are the checks of the
    source (metal_fidelity.h); what only a compile finds (recursion,
    variable-length arrays, threadgroup memory, refused words a macro makes)
    the converter does not compile for. COREAI_TORCH_METAL_FIDELITY=0 turns
    them off here too.
    """
    if not _C._metal_fidelity_enabled():
        return
    _, rendering = render_buffer_source(kernel.definition, spec)
    try:
        _C._refuse_non_metal_in_asset(kernel.name, rendering)
    except RuntimeError as exc:
        reraise_compile_error(exc)
        raise


def _result_fakes(kernel: Any, node: fx.Node) -> list[torch.Tensor]:
    val = node.meta.get("val")
    fakes = list(val) if isinstance(val, list | tuple) else [val]
    if len(fakes) != len(kernel.result_names) or not all(
        isinstance(f, torch.Tensor) for f in fakes
    ):
        raise ValueError(
            f"kernel {kernel.name!r}: node {node.name} has no fake value for each of the "
            f"results {kernel.result_names}; was the program produced by torch.export?"
        )
    return fakes


def _scalar_values(kernel: Any, inputs: list[Any]) -> dict[str, object]:
    values: dict[str, object] = {}
    for name, arg in zip(kernel.input_names, inputs, strict=True):
        if name not in kernel.scalar_types:
            continue
        if isinstance(arg, fx.Node | torch.SymInt | torch.SymFloat | torch.SymBool):
            raise ValueError(
                f"kernel {kernel.name!r}: scalar input {name!r} is computed at run time "
                f"({arg}), but a converted kernel bakes its scalars into the source; pass a "
                "Python constant, or make it a 0-d tensor input"
            )
        values[name] = arg
    return values


def _kernel_input(kernel: Any, ctx: LoweringContext, name: str, arg: Any, scalar: bool) -> Value:
    if scalar:
        np_type = _SCALAR_CONSTANTS[kernel.scalar_types[name]]
        value = coreai.constant(np.array(arg, dtype=np_type))
    else:
        if not isinstance(arg, fx.Node):
            raise TypeError(
                f"kernel {kernel.name!r}: tensor input {name!r} is {arg!r}, not a tensor"
            )
        value = ctx.value(arg)
        if ctx.rank(arg) == 0:
            value = coreai.reshape(value, np.array([1], dtype=np.int32))
    return copy_with_constraints(_metal_buffer_type(value.type), value)


def _dispatch_sizes(kernel: Any, ctx: LoweringContext, what: str, sizes: Any) -> Value:
    sizes = list(sizes)
    if len(sizes) != 3:
        raise ValueError(f"kernel {kernel.name!r}: {what} has {len(sizes)} entries, expected 3")
    return _size_value(ctx.shape_tensor(sizes))


def _size_value(sizes: np.ndarray | Value) -> Value:
    """The generated ``metal4_kernel`` builder takes built values only."""
    return sizes if isinstance(sizes, Value) else coreai.constant(sizes)

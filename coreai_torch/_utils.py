"""Operand helpers for user lowerings (``TorchConverter.register_torch_lowering``).

Apple's documentation imports these names from ``coreai_torch._utils``; they
keep user lowerings written for that package working unchanged:

    @converter.register_torch_lowering("my_lib::scaled_add.default")
    def lower(values_map, node, loc):
        x, y = get_operands(values_map, node, [0, 1], loc)
        ...
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.fx as fx

__all__ = ["get_operand", "get_operands"]


def _float_operands_are_half(node: fx.Node) -> bool:
    fakes = [a.meta.get("val") for a in node.args if isinstance(a, fx.Node) and "val" in a.meta]
    floats = [f for f in fakes if isinstance(f, torch.Tensor) and f.dtype.is_floating_point]
    return bool(floats) and all(f.dtype == torch.float16 for f in floats)


def get_operand(values_map: dict[str, Any], node: fx.Node, idx: int, loc: Any = None) -> Any:
    """The Core AI value of ``node.args[idx]``.

    An FX node maps to its lowered value; Python numbers, lists and tensors
    become constants (ints as 32-bit, like the rest of a converted program;
    floats as float32, or float16 when every float tensor operand is float16);
    a list that mixes ints and symbolic sizes becomes a rank-1 int32 vector.
    """
    import coreai.authoring  # must precede the dialect import
    from coreai._compiler.dialects import coreai

    if not 0 <= idx < len(node.args):
        raise IndexError(
            f"get_operand: node {node.name} has {len(node.args)} arguments, no index {idx}."
        )
    arg = node.args[idx]
    if isinstance(arg, fx.Node):
        return values_map[arg.name]
    if isinstance(arg, (list, tuple)) and any(isinstance(a, fx.Node) for a in arg):
        parts = [
            coreai.reshape(coreai.cast(values_map[a.name], np.int32), np.array([1]))
            if isinstance(a, fx.Node)
            else coreai.constant(np.array([a], dtype=np.int32))
            for a in arg
        ]
        return coreai.concat(0, parts) if len(parts) > 1 else parts[0]
    if isinstance(arg, bool):
        return coreai.constant(np.array(arg, dtype=np.bool_))
    if isinstance(arg, int):
        return coreai.constant(np.array(arg, dtype=np.int32))
    if isinstance(arg, float):
        half = _float_operands_are_half(node) and abs(arg) <= float(np.finfo(np.float16).max)
        return coreai.constant(np.array(arg, dtype=np.float16 if half else np.float32))
    if isinstance(arg, torch.Tensor):
        data = arg.detach().cpu()
        if data.dtype == torch.int64:
            data = data.to(torch.int32)
        return coreai.constant(data.numpy())
    if isinstance(arg, (list, tuple)):
        array = np.array(arg)
        if array.dtype == np.int64:
            array = array.astype(np.int32)
        elif array.dtype == np.float64:
            array = array.astype(np.float32)
        return coreai.constant(array)
    raise ValueError(
        f"get_operand: argument {idx} of node {node.name} is a {type(arg).__name__} ({arg!r}); "
        "expected a node, a number, a list or a tensor."
    )


def get_operands(
    values_map: dict[str, Any], node: fx.Node, indices: list[int], loc: Any = None
) -> list[Any]:
    """``get_operand`` for each of ``indices``."""
    return [get_operand(values_map, node, i, loc) for i in indices]

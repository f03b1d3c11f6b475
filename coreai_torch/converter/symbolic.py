"""Symbolic sizes as Core AI computations.

``torch.export`` names every dynamic size with a sympy symbol (``s77``) and
derives the others from it (``2*s77``, ``(s77//2)``). A symbol is read from the
shape of the graph input it came from; an expression is rebuilt from Core AI
scalar arithmetic. Scalars here are 0-d ``si32`` tensors.
"""

from __future__ import annotations

import numpy as np
import sympy
import torch
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import Value
from torch.utils._sympy.functions import FloorDiv, Mod, PythonMod
from torch.utils._sympy.functions import Max as IntMax
from torch.utils._sympy.functions import Min as IntMin


def index_constant(value: int) -> Value:
    return coreai.constant(np.array(value, dtype=np.int32))


def dim_of(tensor: Value, dim: int) -> Value:
    """The size of ``tensor`` along ``dim`` as a 0-d si32 value."""
    shape = coreai.get_shape(tensor)
    one = coreai.slice_(
        shape,
        np.array([dim], dtype=np.int32),
        np.array([dim + 1], dtype=np.int32),
        np.array([1], dtype=np.int32),
    )
    scalar = coreai.reshape(one, np.array([], dtype=np.uint32))
    return coreai.cast(scalar, np.int32)


class SymbolTable:
    """Where each size symbol of a graph can be read from."""

    def __init__(self) -> None:
        self._sources: dict[sympy.Symbol, tuple[Value, int]] = {}
        self._values: dict[sympy.Symbol, Value] = {}

    def add_source(self, fake: object, value: Value) -> None:
        """Record the symbols that appear bare in the shape of a graph input."""
        if not isinstance(fake, torch.Tensor):
            return
        for dim, size in enumerate(fake.shape):
            if isinstance(size, torch.SymInt):
                expr = size.node.expr
                if isinstance(expr, sympy.Symbol) and expr not in self._sources:
                    self._sources[expr] = (value, dim)

    def materialize(self) -> None:
        """Emit the reads of every known symbol at the current insertion point.

        Done once at the top of the graph so that the values dominate every use,
        including uses inside the regions of control-flow operations.
        """
        for symbol, (tensor, dim) in self._sources.items():
            self._values[symbol] = dim_of(tensor, dim)

    def lower(self, expr: sympy.Expr, what: str) -> Value:
        """A 0-d si32 value computing ``expr``."""
        if isinstance(expr, sympy.Integer | int):
            return index_constant(int(expr))
        if isinstance(expr, sympy.Symbol):
            if expr not in self._values:
                raise ValueError(
                    f"{what}: the symbolic size {expr} does not appear in the shape of any "
                    "graph input, so the converted program cannot compute it"
                )
            return self._values[expr]
        args = [self.lower(arg, what) for arg in expr.args]
        if isinstance(expr, sympy.Add):
            return _fold(coreai.broadcasting_add, args)
        if isinstance(expr, sympy.Mul):
            return _fold(coreai.broadcasting_mul, args)
        if isinstance(expr, FloorDiv):
            return coreai.broadcasting_floor_divide(args[0], args[1])
        if isinstance(expr, (Mod, PythonMod)):
            quotient = coreai.broadcasting_floor_divide(args[0], args[1])
            return coreai.broadcasting_sub(args[0], coreai.broadcasting_mul(quotient, args[1]))
        if isinstance(expr, sympy.Max | IntMax):
            return _fold(coreai.broadcasting_maximum, args)
        if isinstance(expr, sympy.Min | IntMin):
            return _fold(coreai.broadcasting_minimum, args)
        raise ValueError(
            f"{what}: the symbolic size expression {expr} ({type(expr).__name__}) "
            "has no Core AI equivalent in this converter"
        )


def _fold(op, args: list[Value]) -> Value:
    result = args[0]
    for arg in args[1:]:
        result = op(result, arg)
    return result

"""Call-node arguments bound to the parameter names of the op's signature.

An FX call node keeps its arguments as ``torch.export`` wrote them: some
positional, some keyword, the rest left to their defaults. Lowerings read
them by the names of the op's schema (``"self"``, ``"dim"``, ``"keepdim"``),
so that a lowering does not depend on which arguments were passed by position
and which overloads of an op order them differently. Targets without a
schema (Python operators on sizes, higher-order ops) are bound with their
Python signature.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from torch._ops import OpOverload

# A parameter without a default value.
REQUIRED: Any = inspect.Parameter.empty
# The default recorded for a ``*args`` parameter: it takes the remaining positional arguments.
_REST = object()

# id(target) -> (target, ((name, default), ...)), built once per target. Keyed
# by id(), as registry.lookup's memo is: hashing an OpOverload runs Python code,
# and every node's arguments are bound. The entry keeps its target alive.
_SIGNATURES: dict[int, tuple[Any, tuple[tuple[str, Any], ...]]] = {}


def parameters(target: Any) -> tuple[tuple[str, Any], ...]:
    """``(name, default)`` of each parameter of a call target, in order."""
    found = _SIGNATURES.get(id(target))
    if found is None or found[0] is not target:
        found = _SIGNATURES[id(target)] = (target, _read_parameters(target))
    return found[1]


def _read_parameters(target: Any) -> tuple[tuple[str, Any], ...]:
    if isinstance(target, OpOverload):
        return tuple(
            (a.name, a.default_value if a.has_default_value() else REQUIRED)
            for a in target._schema.arguments
        )
    if not callable(target):
        raise TypeError(f"call target {target!r} is not callable")
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"call target {_name(target)} has no readable signature") from exc
    return tuple(
        (p.name, _REST if p.kind == p.VAR_POSITIONAL else p.default)
        for p in signature.parameters.values()
        if p.kind != p.VAR_KEYWORD
    )


def bind(target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Every parameter of ``target`` mapped to the argument the call passed, or its default.

    Parameters that were neither passed nor have a default are left out, so
    that :class:`Arguments` can name them when a lowering asks for one.
    """
    params = parameters(target)
    bound: dict[str, Any] = {}
    position = 0
    for name, default in params:
        if default is _REST:
            bound[name] = tuple(args[position:])
            position = len(args)
        elif position < len(args):
            bound[name] = args[position]
            position += 1
        elif name in kwargs:
            bound[name] = kwargs[name]
        elif default is not REQUIRED:
            bound[name] = default
    if position < len(args):
        raise TypeError(
            f"{_name(target)} takes {len(params)} arguments, the call node passes {len(args)}"
        )
    return bound


class Arguments:
    """The arguments of one call node, by parameter name (see the module docstring).

    ``arguments["dim"]`` is the argument or its schema default;
    ``arguments.get("rounding_mode", None)`` also serves lowerings shared by
    overloads of which only some have the parameter.
    """

    def __init__(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._target = target
        self._bound = bind(target, args, kwargs)

    def __getitem__(self, name: str) -> Any:
        try:
            return self._bound[name]
        except KeyError:
            raise KeyError(self._missing(name)) from None

    def get(self, name: str, default: Any) -> Any:
        """The argument ``name``, or ``default`` when this overload has no such parameter."""
        if name in self._bound:
            return self._bound[name]
        if any(param == name for param, _ in parameters(self._target)):
            raise KeyError(self._missing(name))
        return default

    def items(self) -> list[tuple[str, Any]]:
        """``(name, argument)`` for every bound parameter, in the schema's order."""
        return [
            (name, self._bound[name]) for name, _ in parameters(self._target) if name in self._bound
        ]

    def _missing(self, name: str) -> str:
        names = [param for param, _ in parameters(self._target)]
        if name in names:
            return f"{_name(self._target)}: the call node does not pass the argument {name!r}"
        return f"{_name(self._target)} has no parameter {name!r}; its parameters are {names}"


def _name(target: Callable[..., Any]) -> str:
    if isinstance(target, OpOverload):
        return str(target)
    return getattr(target, "__name__", repr(target))

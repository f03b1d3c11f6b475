"""Call-node arguments bound by the parameter names of the op's signature."""

from __future__ import annotations

import operator

import pytest
import torch

from coreai_torch.converter.arguments import Arguments

aten = torch.ops.aten


def test_positional_keyword_and_default_arguments_bind_to_schema_names() -> None:
    # sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None)
    args = Arguments(aten.sum.dim_IntList, ("x", [1]), {"keepdim": True})
    assert (args["self"], args["dim"], args["keepdim"], args["dtype"]) == ("x", [1], True, None)
    defaults = Arguments(aten.sum.dim_IntList, ("x", [0, 1]), {})
    assert defaults["keepdim"] is False
    assert defaults.items() == [("self", "x"), ("dim", [0, 1]), ("keepdim", False), ("dtype", None)]


def test_list_defaults_come_from_the_schema() -> None:
    # max_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, ...)
    args = Arguments(aten.max_pool2d.default, ("x", [3, 3]), {})
    assert args["stride"] == [] and args["padding"] == [0, 0] and args["dilation"] == [1, 1]


def test_parameters_of_other_overloads_fall_back_only_through_get() -> None:
    plain = Arguments(aten.div.Tensor, ("a", "b"), {})
    assert plain.get("rounding_mode", None) is None
    with pytest.raises(KeyError, match=r"div.Tensor has no parameter 'rounding_mode'.*'other'"):
        plain["rounding_mode"]
    rounding = Arguments(aten.div.Tensor_mode, ("a", "b"), {"rounding_mode": "floor"})
    assert rounding.get("rounding_mode", None) == "floor"


def test_a_required_argument_the_node_lacks_is_named() -> None:
    # div.Tensor_mode's rounding_mode is keyword-only and has no default.
    args = Arguments(aten.div.Tensor_mode, ("a", "b"), {})
    with pytest.raises(KeyError, match="does not pass the argument 'rounding_mode'"):
        args["rounding_mode"]
    with pytest.raises(KeyError, match="does not pass"):
        args.get("rounding_mode", None)


def test_python_operators_and_higher_order_ops_bind_by_signature() -> None:
    assert Arguments(operator.floordiv, (7, 2), {}).items() == [("a", 7), ("b", 2)]
    cond = Arguments(torch.ops.higher_order.cond, ("p", "t", "f", ("x",)), {})
    assert cond["pred"] == "p" and cond["operands"] == ("x",)


def test_too_many_positional_arguments_are_refused() -> None:
    with pytest.raises(TypeError, match="takes 1 arguments, the call node passes 2"):
        Arguments(aten.relu.default, ("x", "y"), {})

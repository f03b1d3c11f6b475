"""Raw exports lowered as they are: in-place ops, vmap regions, grad-mode and autocast regions.

Each test checks that the converter keeps the raw program (no decomposition),
and that the converted program, raw and decomposed, computes what PyTorch
does. Values are float32 sums and products of a few terms, exact or within a
few ulp, so the comparisons are exact unless a tolerance says otherwise.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from support.coreai_run import Lambda, assert_converted_matches
from torch import nn
from torch._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex

from coreai_torch.converter import TorchConverter, UnsupportedOpsError
from coreai_torch.converter.decomp import prepare
from coreai_torch.converter.graph_lowering import is_lowerable
from coreai_torch.converter.mutation import unsupported_mutations

EXACT = {"rtol": 0, "atol": 0}


def _kept_raw(module: nn.Module, *args: torch.Tensor) -> bool:
    program = torch.export.export(module, args)
    return prepare(program, lambda target: is_lowerable(target, {})) is program


def _x(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


def _residual(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    y += x  # add_ on a fresh tensor
    y.div_(3)
    return y


def _slice_assignment(x: torch.Tensor) -> torch.Tensor:
    # OPT/BLOOM-style mask code: slice + copy_, select + fill_.
    mask = torch.zeros(4, 6)
    mask[:, :3] = x[:, :3]
    mask[1:, 4] = 0.5
    return mask


def _write_through_permuted_view(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = x * 1
    t = y.t()
    t[0] += 1  # row 0 of the transpose is column 0 of y
    return y, t


def _stale_view_is_recomputed(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    column = y[:, 1]  # taken before the write below
    y[0].mul_(10)
    return column + 0


def _split_piece_and_unbind(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    _first, second = y.split([2, 4], dim=1)
    second.zero_()
    y.unbind(0)[3].fill_(7)
    return y


def _index_put(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y[torch.tensor([0, 2])] = torch.ones(6)
    return y


def _through_reshape_and_contiguous(x: torch.Tensor) -> torch.Tensor:
    y = (x * 1).reshape(2, 12)  # a view of the product
    y[:, ::5] = -1.0
    z = x.t().contiguous()  # a copy: writing it leaves x alone
    z.add_(100)
    return y + z[0, 0]


def _stale_expanded_view(x: torch.Tensor) -> torch.Tensor:
    # transformers' repeat_kv: a cache read through an expand view. Taken
    # before the write, the view sees it (it is computed again).
    cache = x[:, :1] * 1
    wide = cache[:, None, :].expand(4, 3, 1)
    cache.add_(1)
    return wide.reshape(4, 3) * 2


def _aliases(x: torch.Tensor) -> torch.Tensor:
    y = torch.multiply(x, 3).subtract(1)
    y.multiply_(torch.clip(x, -0.5, 0.5))  # in place: the alias's out-of-place twin
    return torch.where(torch.greater(y, 0), torch.negative(y), torch.true_divide(y, 4))


@pytest.mark.parametrize(
    "function",
    [
        _aliases,
        _residual,
        _slice_assignment,
        _write_through_permuted_view,
        _stale_view_is_recomputed,
        _split_piece_and_unbind,
        _index_put,
        _through_reshape_and_contiguous,
        _stale_expanded_view,
    ],
)
def test_in_place_ops_are_lowered_without_decomposition(function) -> None:
    x = _x(4, 6)
    module = Lambda(function)
    assert _kept_raw(module, x)
    # Sums of a few float32 terms in the same order: exact.
    assert_converted_matches(module, [x], **EXACT)


def _write_through_strided_view(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y.as_strided((3,), (7,)).add_(1)  # the diagonal, through strides
    return y


def _write_through_expanded_view(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y.expand(4, 6).mul_(0.5)  # to its own shape: each element once, so eager allows it
    return y


def test_a_write_through_an_expanded_view_decomposes_the_program() -> None:
    # An expand view is read like any view (_stale_expanded_view), never written through.
    module, x = Lambda(_write_through_expanded_view), _x(4, 6)
    reasons = unsupported_mutations(
        torch.export.export(module, (x,)).graph, lambda target: is_lowerable(target, {})
    )
    expected = "writes through a view made by aten.expand.default, which cannot be written through"
    assert [reason for _, reason in reasons] == [expected]
    assert not _kept_raw(module, x)
    assert_converted_matches(module, [x], **EXACT)  # decomposed, it converts


def test_a_mutation_that_cannot_be_followed_decomposes_the_program() -> None:
    x = _x(3, 6)
    program = torch.export.export(Lambda(_write_through_strided_view), (x,))
    problems = unsupported_mutations(program.graph, lambda target: is_lowerable(target, {}))
    assert [reason for _, reason in problems] == [
        "is a view made by aten.as_strided.default, which cannot be written through"
    ]
    assert not _kept_raw(Lambda(_write_through_strided_view), x)
    # Decomposed, the write is an as_strided_scatter, which has no lowering either:
    # the error names it and the line that wrote it.
    with pytest.raises(UnsupportedOpsError, match=r"as_strided_scatter: \S+\.py:\d+ in forward"):
        TorchConverter().add_exported_program(program).to_coreai()


class PlainAttributeCache(nn.Module):
    """A KV-cache-like tensor held as a plain attribute, written through a slice."""

    def __init__(self) -> None:
        super().__init__()
        self.cache = torch.zeros(2, 4, 3)  # not register_buffer: a constant of the export

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        self.cache.index_copy_(1, positions, x)  # the write the error names
        return self.cache * 2


def test_writes_into_a_constant_tensor_are_refused_by_line() -> None:
    program = torch.export.export(PlainAttributeCache(), (_x(2, 2, 3), torch.tensor([0, 2])))
    before = str(program.graph)
    line = _source_line_of(PlainAttributeCache.forward, "index_copy_")
    with pytest.raises(ValueError, match="lifted as constants") as raised:
        TorchConverter().add_exported_program(program).to_coreai()
    message = str(raised.value)
    assert "index_copy_.default writes into constant 'cache'" in message
    assert f"test_raw_exports.py:{line} in forward" in message
    assert "register_buffer" in message
    # torch's own refusal is kept as the cause; the user's program is left as it was.
    assert isinstance(raised.value.__cause__, Exception)
    assert str(program.graph) == before


class Logit(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.logit(x) * 2  # aten.logit has no lowering: decomposed


def test_a_failed_decomposition_names_what_called_for_it(monkeypatch) -> None:
    import coreai_torch.converter.decomp as decomp

    def refuse(program: torch.export.ExportedProgram) -> None:
        raise AssertionError("torch's own words")

    monkeypatch.setattr(decomp, "decompose", refuse)
    program = torch.export.export(Logit(), (_x(2, 3).sigmoid(),))
    line = _source_line_of(Logit.forward, "logit")
    with pytest.raises(RuntimeError, match="cannot be lowered as torch.export wrote it") as raised:
        TorchConverter().add_exported_program(program)
    message = str(raised.value)
    assert "aten.logit.default has no lowering (" in message
    assert f"test_raw_exports.py:{line} in forward" in message
    assert "AssertionError: torch's own words" in message
    assert isinstance(raised.value.__cause__, AssertionError)


def _source_line_of(function, text: str) -> int:
    import inspect

    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, line in enumerate(lines) if text in line)


class WindowMask(nn.Module):
    """Nested vmaps over query and key positions, as transformers builds custom masks."""

    def forward(self, positions: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        def allowed(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
            return (k <= q) & (q < k + 3)

        mask = torch.vmap(torch.vmap(allowed, in_dims=(None, 0)), in_dims=(0, None))
        return mask(positions, keys).float() * 2


class BatchDimOne(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.vmap(lambda a, b: a * b + b, in_dims=(1, 0))(x, y)


class IndexInsideVmap(nn.Module):
    """``table[r, r]`` with a vmapped index, written as transformers' mask functions are."""

    def forward(self, table: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        with TransformGetItemToIndex():
            return torch.vmap(lambda r: table[r, r] > 0)(rows)


class SumInsideVmap(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.vmap(lambda row: row.sum() * row)(x)


@pytest.mark.parametrize(
    ("module", "inputs", "raw"),
    [
        (WindowMask(), (torch.arange(5.0), torch.arange(7.0)), True),
        (BatchDimOne(), (_x(3, 4, 2), _x(4, 2)), True),
        (IndexInsideVmap(), (_x(4, 4), torch.tensor([3, 0, 2])), True),
        # A reduction inside the region is not inlined: the program is decomposed.
        (SumInsideVmap(), (_x(3, 5),), False),
    ],
    ids=["nested-mask", "batch-dim-1", "indexing", "reduction"],
)
def test_vmap_regions(module: nn.Module, inputs: tuple, raw: bool) -> None:
    assert _kept_raw(module, *inputs) is raw
    # A sum of 5 float32 values in another order may differ in the last bit.
    assert_converted_matches(module, list(inputs), rtol=1e-6, atol=1e-6)


class Regions(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            y = self.linear(x) * 2
        with torch.autocast("cpu", enabled=False):
            z = F.relu(y.float() + 1)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            w = self.linear(z)
        return w.float() + y


def test_grad_mode_and_autocast_regions_are_inlined() -> None:
    x = _x(2, 4)
    program = torch.export.export(Regions(), (x,))
    regions = {str(n.target) for n in program.graph.nodes if "wrap_with" in str(n.target)}
    assert regions == {"wrap_with_set_grad_enabled", "wrap_with_autocast"}
    assert _kept_raw(Regions(), x)
    # The autocast region computes its matmul in bfloat16 (8 significant bits),
    # as torch does: results of size ~1 agree to bfloat16 rounding.
    assert_converted_matches(Regions(), [x], rtol=1e-2, atol=1e-2)

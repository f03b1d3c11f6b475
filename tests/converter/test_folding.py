"""Constant folding (``folding.py``), shared constants and weights stored as resources.

Calls computed from the program's constants alone run in eager PyTorch at
conversion time; these tests check which calls fold, that the converted
programs still compute what PyTorch does (run in Core AI's CPU runtime), and
what the folded values let lowerings leave out (the attention guard for
queries that a mask closes entirely).
"""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F
from support.coreai_run import assert_converted_matches, convert_program, run_program
from torch.export.graph_signature import InputKind

from coreai_torch import TorchConverter
from coreai_torch.converter.converter import _lifted_tensor
from coreai_torch.converter.folding import LARGEST, fold_constants
from coreai_torch.converter.graph_lowering import live_nodes


def _folded_targets(module: torch.nn.Module, *args: torch.Tensor, user_lowered=()) -> list[str]:
    """The targets of the calls ``fold_constants`` folds in ``module``'s export."""
    program = torch.export.export(module, args)
    specs = {spec.arg.name: spec for spec in program.graph_signature.input_specs}
    constants = {
        node: _lifted_tensor(program, specs[node.name], node)
        for node in program.graph.nodes
        if node.op == "placeholder" and specs[node.name].kind != InputKind.USER_INPUT
    }
    folded = fold_constants(
        program.graph, constants, live_nodes(program.graph), lambda t: t in user_lowered
    )
    return [str(node.target) for node in folded.values]


class _Rotary(torch.nn.Module):
    """A transformer's position tables: a buffer, an arange, cos and sin, a causal mask."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, 8, 2) / 8.0)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.shape[1], dtype=torch.float32)
        angles = torch.outer(positions, self.inv_freq)
        table = torch.cat([angles, angles], dim=-1)
        causal = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
        rotated = x * table.cos() + x.flip(-1) * table.sin()
        scores = rotated @ rotated.transpose(-1, -2)
        return scores.masked_fill(~causal, -1e4)


def test_tables_built_from_constants_fold_and_the_program_matches_pytorch() -> None:
    x = torch.randn(2, 6, 8)
    folded = _folded_targets(_Rotary(), x)
    for op in ("aten.arange.", "aten.cos.", "aten.sin.", "aten.tril.", "aten.cat."):
        assert any(t.startswith(op) for t in folded), (op, folded)
    # Nothing that reads the input folds.
    assert not any(t.startswith(("aten.mul.", "aten.flip.", "aten.matmul.")) for t in folded)
    assert_converted_matches(_Rotary(), [x])


def test_a_repeated_folded_call_is_computed_once() -> None:
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            first = x * torch.arange(4.0).cos()
            return first + x * torch.arange(4.0).cos()  # the same table, built again

    program = torch.export.export(Model(), (torch.randn(4),))
    folded = fold_constants(program.graph, {}, live_nodes(program.graph), lambda t: False)
    repeats = {node.name: earlier.name for node, earlier in folded.repeats.items()}
    assert repeats == {"arange_1": "arange", "cos_1": "cos"}
    cos, cos_1 = (n for n in folded.values if n.name in ("cos", "cos_1"))
    assert folded.values[cos] is folded.values[cos_1]
    assert_converted_matches(Model(), [torch.randn(4)])


def test_random_and_unspecified_values_and_user_lowered_calls_do_not_fold() -> None:
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            noise = torch.rand(3)  # a new value at each run
            scratch = torch.empty(3)  # contents unspecified
            return x + noise.sum() + (scratch * 0).sum() + torch.arange(3).float().cos()

    folded = _folded_targets(Model(), torch.randn(3))
    assert "aten.rand.default" not in folded
    assert "aten.empty.memory_format" not in folded
    assert "aten.cos.default" in folded
    # A user's lowering of an op is theirs to run, constants or not.
    user = _folded_targets(Model(), torch.randn(3), user_lowered=(torch.ops.aten.cos.default,))
    assert "aten.cos.default" not in user


def test_large_results_stay_computations() -> None:
    side = math.isqrt(LARGEST) + 1  # side * side > LARGEST elements

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            big = torch.ones(side, side).cumsum(0)
            small = torch.ones(4).cumsum(0)
            return x + big[:4, :4].sum() + small.sum()

    folded = _folded_targets(Model(), torch.randn(4))
    assert folded.count("aten.cumsum.default") == 1  # only the small one
    assert_converted_matches(Model(), [torch.randn(4)])


def test_memory_written_in_place_does_not_fold() -> None:
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            table = torch.zeros(4)
            total_before = table.sum()  # reads the table before the write
            table[1:3] = 5.0  # a slice assignment: an in-place copy into a view
            return x + table + total_before

    folded = _folded_targets(Model(), torch.randn(4))
    assert not any(t.startswith(("aten.zeros.", "aten.slice.", "aten.sum.")) for t in folded)
    assert_converted_matches(Model(), [torch.randn(4)])


def _ops(program: object, name: str) -> int:
    return len(re.findall(rf"= {re.escape(name)}[ (]", str(program)))


class _Attention(torch.nn.Module):
    def __init__(self, mask: torch.Tensor | None) -> None:
        super().__init__()
        self.mask = mask

    def forward(self, q: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        mask = self.mask if mask is None else mask
        return F.scaled_dot_product_attention(q, q, q, attn_mask=mask)


def test_attention_with_a_constant_mask_that_closes_no_row_has_no_guard() -> None:
    q = torch.randn(1, 2, 5, 4)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    program, _, _ = convert_program(torch.export.export(_Attention(causal), (q,)))
    assert _ops(program, "coreai.reduce_max") == 0
    assert_converted_matches(_Attention(causal), [q])


def test_attention_guard_stays_for_masks_that_may_close_a_row() -> None:
    q = torch.randn(1, 2, 5, 4)
    # A constant mask whose second query may attend to nothing: torch gives zeros there.
    closed = torch.ones(5, 5, dtype=torch.bool).tril()
    closed[1] = False
    program, names, outputs = convert_program(torch.export.export(_Attention(closed), (q,)))
    assert _ops(program, "coreai.reduce_max") == 1
    got = run_program(program, dict(zip(names, [q], strict=True)))[outputs[0]]
    want = _Attention(closed)(q)
    assert torch.equal(want[:, :, 1], torch.zeros_like(want[:, :, 1]))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    # A mask the program is given at run time is unknown: the guard stays.
    dynamic = torch.export.export(_Attention(None), (q, closed))
    program, _, _ = convert_program(dynamic)
    assert _ops(program, "coreai.reduce_max") == 1
    assert_converted_matches(_Attention(None), [q, closed])


def _resource_names(program: object) -> list[str]:
    return re.findall(r"dense_resource<([^>]+)>", str(program))


def test_equal_weights_share_one_resource_and_small_equal_constants_one_op() -> None:
    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            weight = torch.randn(32, 32)
            self.a = torch.nn.Linear(32, 32, bias=False)
            self.b = torch.nn.Linear(32, 32, bias=False)
            with torch.no_grad():
                self.a.weight.copy_(weight)
                self.b.weight.copy_(weight)  # equal contents, another tensor
            self.register_buffer("s1", torch.arange(8.0))
            self.register_buffer("s2", torch.arange(8.0))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.a(x) + self.b(x * 2) + (self.s1 * self.s2).sum()

    model = Model().eval()
    x = torch.randn(3, 32)
    program, _, _ = convert_program(torch.export.export(model, (x,)))
    assert len(set(_resource_names(program))) == 1
    assert_converted_matches(model, [x])

    # Two entry points of one conversion store a weight once.
    converter = TorchConverter()
    exported = torch.export.export(model, (x,))
    converter.add_exported_program(exported, entrypoint_name="first")
    converter.add_exported_program(exported, entrypoint_name="second")
    both = converter.to_coreai()
    assert len(set(_resource_names(both))) == 1


def test_entry_points_of_one_conversion_store_a_large_weight_once() -> None:
    model = torch.nn.Linear(128, 128).eval()  # 64 KiB: matched by its memory, not hashed
    x = torch.randn(2, 128)
    exported = torch.export.export(model, (x,))
    converter = TorchConverter()
    converter.add_exported_program(exported, entrypoint_name="first")
    converter.add_exported_program(exported, entrypoint_name="second")
    both = converter.to_coreai()
    assert len(set(_resource_names(both))) == 1
    for entry in ("first", "second"):
        got = run_program(both, {"input": x}, entrypoint=entry)
        torch.testing.assert_close(next(iter(got.values())), model(x), rtol=1e-5, atol=1e-5)


def test_a_weight_is_copied_when_converted() -> None:
    model = torch.nn.Linear(64, 64).eval()
    x = torch.randn(2, 64)
    expected = model(x).detach()
    program, names, outputs = convert_program(torch.export.export(model, (x,)))
    with torch.no_grad():
        model.weight.mul_(0)  # the program keeps the weights it was converted with
    got = run_program(program, dict(zip(names, [x], strict=True)))[outputs[0]]
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_each_weight_gets_a_name_its_context_has_not_given() -> None:
    # MLIR makes a taken resource name unique by trying name_1, name_2, ... in
    # turn, a probe that grows with the resources already made. The names the
    # converter gives are free, so they reach the IR unchanged (a probed name
    # would end in _1, _2, ...), across every conversion of the converter's context.
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(32, 32, bias=False) for _ in range(3)]).eval()
    x = torch.randn(1, 2, 32)
    converter = TorchConverter().add_exported_program(torch.export.export(model, (x,)))
    first, second = converter.to_coreai(), converter.to_coreai()
    assert sorted(_resource_names(first)) == ["constant_0", "constant_1", "constant_2"]
    assert sorted(_resource_names(second)) == ["constant_3", "constant_4", "constant_5"]
    for program in (first, second):
        got = run_program(program, {"input": x})
        torch.testing.assert_close(next(iter(got.values())), model(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("decomposed", [False, True], ids=["linear", "core_aten_mm"])
def test_a_2d_product_keeps_the_weight_it_stored(decomposed: bool) -> None:
    # A 2-D product is built as a batch of one. Had the weight been
    # unsqueezed into that batch, Core AI's rewrite would fold the unsqueeze
    # into a second copy, a resource named by the hash of its bytes, and leave
    # the first unused. Core ATen programs multiply by the weight with mm and
    # addmm (its transpose folded when converting); raw ones with linear.
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 48), torch.nn.ReLU(), torch.nn.Linear(48, 16, bias=False)
    ).eval()
    x = torch.randn(5, 32)
    exported = torch.export.export(model, (x,))
    if decomposed:
        exported = exported.run_decompositions()
        targets = {n.target for n in exported.graph.nodes}
        assert {torch.ops.aten.mm.default, torch.ops.aten.addmm.default} <= targets
    program = TorchConverter().add_exported_program(exported).to_coreai()
    assert sorted(_resource_names(program)) == ["constant_0", "constant_1"]
    got = run_program(program, {"input": x})
    torch.testing.assert_close(next(iter(got.values())), model(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("value", [0.5, -0.0])
def test_a_large_weight_of_one_value_stays_inline(value: float) -> None:
    model = torch.nn.Linear(64, 64, bias=False).eval()
    with torch.no_grad():
        model.weight.fill_(value)
    x = torch.randn(2, 64)
    program, _, _ = convert_program(torch.export.export(model, (x,)))
    assert _resource_names(program) == []
    assert_converted_matches(model, [x])

"""Externalized submodules and composite ops, converted and run in ``coreai.runtime``.

The decoder block externalizes its attention (a plain ``noinline`` graph)
with a composite RoPE and SDPA nested inside it, a composite RMSNorm and a
composite gather-matmul over expert weights. The IR structure asserted here
(graph names up to their per-call suffix, ``private``/``noinline``, the
composite declarations, the invokes in order) is what Apple's coreai-torch
0.4.3 emits for the same model, decomposed, checked side by side with both
packages installed apart. Float32 programs in the CPU runtime agree with
PyTorch to about 1e-7 here; 1e-5 keeps a margin while a wrong mask, rotation
or expert (errors of 1e-2 and more) still fails.
"""

from __future__ import annotations

import re
import sys
import warnings

import pytest
import torch
from torch import nn

import coreai_torch
from coreai_torch import (
    ExternalizeSpec,
    TorchConverter,
    _patch_model_for_externalization,
    _subexport_and_restore,
)
from coreai_torch.composite_ops import SDPA, GatherMM, RMSNorm, RMSNormImpl, RoPE
from coreai_torch.runtime import run_program

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
HIDDEN, HEADS, EXPERTS, LENGTH = 16, 2, 3, 5


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN, bias=False)
        self.rope = RoPE(base=100.0)
        self.sdpa = SDPA(is_causal=True)
        self.o = nn.Linear(HIDDEN, HIDDEN, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, HEADS, HIDDEN // HEADS).permute(2, 0, 3, 1, 4)
        y = self.sdpa(self.rope(q), self.rope(k), v)
        return self.o(y.transpose(1, 2).reshape(b, s, HIDDEN))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = RMSNorm(HIDDEN, eps=1e-6)
        self.attn = Attention()
        self.experts = nn.Parameter(torch.randn(EXPERTS, HIDDEN, HIDDEN) * 0.1)
        self.gmm = GatherMM()

    def forward(self, x: torch.Tensor, expert: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm(x))
        return self.gmm(x.unsqueeze(-2), self.experts, None, expert).squeeze(-2)


SPECS = [
    Attention,
    ExternalizeSpec(RMSNormImpl, "rms_norm", ["eps"]),
    ExternalizeSpec(SDPA, "sdpa", ["scale", "is_causal", "window_size"]),
    ExternalizeSpec(RoPE, "rope", ["scale", "base", "dims", "interleaved"]),
    ExternalizeSpec(GatherMM, "gather_mm", ["num_batch_axes"]),
]

# What Apple's converter emits for Block (graph name with the suffix cut,
# attributes, argument names, composite declaration).
EXPECTED_GRAPHS = [
    (
        "norm.rmsnorm_impl",
        "private noinline",
        ["input", "scale"],
        '#coreai.composite_declaration<"rms_norm" = {input_names = ["input", "scale"], '
        "op_attrs = {eps = 9.99999997E-7 : f32, version = 1 : si64}, "
        'output_names = ["output"]}>',
    ),
    (
        "attn.rope",
        "private noinline",
        ["input"],
        '#coreai.composite_declaration<"rope" = {input_names = ["input"], op_attrs = '
        "{base = 1.000000e+02 : f32, interleaved = false, scale = 1.000000e+00 : f32, "
        'version = 1 : si64}, output_names = ["output"]}>',
    ),
    (
        "attn.sdpa",
        "private noinline",
        ["query", "key", "value"],
        '#coreai.composite_declaration<"sdpa" = {input_names = ["query", "key", "value"], '
        "op_attrs = {is_causal = true, version = 1 : si64, window_size = 0 : si64}, "
        'output_names = ["output"]}>',
    ),
    ("attn", "noinline", ["x"], None),
    (
        "gmm",
        "private noinline",
        ["lhs", "rhs", "rhs_indices"],
        '#coreai.composite_declaration<"gather_mm" = {input_names = ["lhs", "rhs", '
        '"rhs_indices"], op_attrs = {num_batch_axes = 0 : si64, version = 1 : si64}, '
        'output_names = ["output"]}>',
    ),
    ("main", "", ["x", "expert"], None),
]
# Core AI's rewrite makes the two calls of the rope graph (same body) one graph.
EXPECTED_INVOKES = ["attn.rope", "attn.rope", "attn.sdpa", "norm.rmsnorm_impl", "attn", "gmm"]

_GRAPH = re.compile(
    r"coreai\.graph ((?:private |noinline )*)@(\S+?)\((.*?)\) -> .*? attributes \{(.*?)\} \{"
)


def structure(program: object) -> tuple[list[tuple], list[str]]:
    """The graphs (name less suffix, attributes, argument names, declaration) and invokes."""
    text = str(program)
    graphs = []
    for attributes, name, arguments, extra in _GRAPH.findall(text):
        declaration = re.search(r"composite_decl = (#coreai\.composite_declaration<.*>)", extra)
        graphs.append(
            (
                _unsuffixed(name),
                attributes.strip(),
                re.findall(r'coreai\.name = "([^"]*)"', arguments),
                declaration[1] if declaration else None,
            )
        )
    invokes = [_unsuffixed(c) for c in re.findall(r"coreai\.invoke @(\S+?)\(", text)]
    return graphs, invokes


def _unsuffixed(name: str) -> str:
    return re.sub(r"_[0-9a-f]{8}$", "", name)


@pytest.fixture(scope="module")
def block() -> tuple[Block, torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = Block().eval()
    with torch.no_grad():
        model.norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(1, LENGTH, HIDDEN)
    expert = torch.tensor([[0, 2, 1, 1, 0]])
    with torch.no_grad():
        return model, x, expert, model(x, expert)


@pytest.fixture(scope="module")
def raw_conversion(block: tuple) -> tuple[object, list]:
    model, x, expert, _ = block
    _patch_model_for_externalization(model, SPECS)
    program = torch.export.export(model, (x, expert))
    externalized = _subexport_and_restore(model, program)
    converted = (
        TorchConverter()
        .add_exported_program(
            program,
            input_names=["x", "expert"],
            output_names=["y"],
            _externalized_exported_programs=externalized,
        )
        .to_coreai()
    )
    return converted, externalized


def test_raw_export_converts_to_apples_structure_and_runs(block: tuple, raw_conversion) -> None:
    model, x, expert, expected = block
    converted, externalized = raw_conversion
    assert structure(converted) == (EXPECTED_GRAPHS, EXPECTED_INVOKES)
    out = run_program(converted, {"x": x, "expert": expert})["y"]
    torch.testing.assert_close(out, expected, **TOLERANCE)
    # One program per call: rope is called twice inside the attention.
    assert sorted(_unsuffixed(p.name) for p in externalized) == [
        "attn",
        "attn.rope",
        "attn.rope",
        "attn.sdpa",
        "gmm",
        "norm.rmsnorm_impl",
    ]
    # Every forward is the class's again; the model computes as before.
    assert not any("forward" in vars(m) for m in model.modules())
    with torch.no_grad():
        torch.testing.assert_close(model(x, expert), expected, rtol=0, atol=0)


def test_add_pytorch_module_externalizes_a_decomposed_export(block: tuple) -> None:
    model, x, expert, expected = block

    def export(module: nn.Module) -> torch.export.ExportedProgram:
        program = torch.export.export(module, (x, expert))
        return program.run_decompositions(coreai_torch.get_decomp_table())

    converted = (
        TorchConverter()
        .add_pytorch_module(
            model,
            export_fn=export,
            externalize_modules=SPECS,
            input_names=["x", "expert"],
            output_names=["y"],
        )
        .to_coreai()
    )
    assert structure(converted) == (EXPECTED_GRAPHS, EXPECTED_INVOKES)
    out = run_program(converted, {"x": x, "expert": expert})["y"]
    torch.testing.assert_close(out, expected, **TOLERANCE)
    assert not any("forward" in vars(m) for m in model.modules())


class Norms(nn.Module):
    """Two composite norms over a dynamic length, and a weight-free block between."""

    def __init__(self) -> None:
        super().__init__()
        self.first = RMSNorm(HIDDEN, eps=1e-5)
        self.second = RMSNorm(HIDDEN, eps=1e-5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.relu(self.first(x)))


def test_dynamic_lengths_stay_dynamic_in_the_externalized_graphs() -> None:
    model = Norms()
    with torch.no_grad():
        model.first.weight.uniform_(0.5, 1.5)
    _patch_model_for_externalization(model, [ExternalizeSpec(RMSNormImpl, "rms_norm", ["eps"])])
    length = torch.export.Dim("length")  # no upper bound
    program = torch.export.export(
        model, (torch.randn(2, 4, HIDDEN),), dynamic_shapes=({1: length},)
    )
    externalized = _subexport_and_restore(model, program)
    converted = TorchConverter().add_exported_program(
        program, _externalized_exported_programs=externalized
    )
    converted = converted.to_coreai()
    text = str(converted)
    assert "@first.rmsnorm_impl_" in text and "@second.rmsnorm_impl_" not in text  # merged
    assert re.search(r"@first\.rmsnorm_impl_\w+\(%arg0: tensor<2x\?x16xf32>", text)
    for steps in (3, 9):
        x = torch.randn(2, steps, HIDDEN)
        out = run_program(converted, {"x": x})
        with torch.no_grad():
            torch.testing.assert_close(next(iter(out.values())), model(x), **TOLERANCE)


# -- the patch itself ----------------------------------------------------------------


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.tensor([2.0, 3.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Scaled()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x).sum()


def test_patched_forward_computes_and_differentiates_as_the_original() -> None:
    model = Outer()
    x = torch.tensor([1.0, -1.0], requires_grad=True)
    _patch_model_for_externalization(model, [Scaled])
    assert model.inner.forward is not Scaled.forward.__get__(model.inner)
    model(x).backward()
    # d/dx sum(x * w) = w, d/dw = x
    torch.testing.assert_close(x.grad, torch.tensor([2.0, 3.0]), rtol=0, atol=0)
    torch.testing.assert_close(model.inner.weight.grad, torch.tensor([1.0, -1.0]), rtol=0, atol=0)
    program = torch.export.export(model, (torch.ones(2),))
    calls = [n.target.namespace for n in program.graph.nodes if n.op == "call_function"]
    assert calls[:1] == ["coreai_torch_ext"]
    assert len(_subexport_and_restore(model, program)) == 1
    assert "forward" not in vars(model.inner)
    assert _subexport_and_restore(model, program) == []  # nothing patched any more


def test_spec_and_patch_errors_say_what_to_do() -> None:
    with pytest.raises(ValueError, match="give composite_op_name"):
        ExternalizeSpec(RMSNormImpl, composite_attrs=["eps"])
    with pytest.warns(UserWarning, match="no submodule of Outer is a Linear"):
        _patch_model_for_externalization(Outer(), [nn.Linear])

    class Untyped(nn.Module):
        def forward(self, x):
            return x

    class Holder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.part = Untyped()

    holder = Holder()
    with pytest.raises(TypeError, match=r"cannot externalize 'part' \(Untyped\).*Annotate"):
        _patch_model_for_externalization(holder, [Untyped])
    assert "forward" not in vars(holder.part)

    model = Outer()
    _patch_model_for_externalization(model, [Scaled])
    with pytest.raises(RuntimeError, match="already patched.*_subexport_and_restore"):
        _patch_model_for_externalization(model, [Scaled])
    program = torch.export.export(model, (torch.ones(2),))
    # The patched call without the programs that stand for it: named, with its line.
    with pytest.raises(ValueError, match=r"calls the externalized submodule op .*test_externalize"):
        TorchConverter().add_exported_program(program, _externalized_exported_programs=[])
    with pytest.raises(TypeError, match="takes the list coreai_torch._subexport_and_restore"):
        TorchConverter().add_exported_program(program, _externalized_exported_programs=[object()])
    _subexport_and_restore(model, program)


def test_a_model_exported_before_patching_is_warned_about() -> None:
    model = Outer()
    program = torch.export.export(model, (torch.ones(2),))
    _patch_model_for_externalization(model, [Scaled])
    with pytest.warns(UserWarning, match="'inner' is not called in the exported program"):
        assert _subexport_and_restore(model, program) == []
    assert "forward" not in vars(model.inner)


class Cached(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.cache.add_(x)
        return self.cache * 1


class HoldsCache(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cached = Cached()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cached(x) + 1


def test_state_inside_an_externalized_graph_is_refused() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.library warns of the op's undeclared write
        model = HoldsCache()
        _patch_model_for_externalization(model, [Cached])
        program = torch.export.export(model, (torch.ones(2),))
        externalized = _subexport_and_restore(model, program)
    with pytest.raises(
        NotImplementedError,
        match=r"'cached_\w+' writes into \['cache'\] \(.*test_externalize.py:\d+ in forward: "
        r"self.cache.add_\(x\)\).*outside",
    ):
        TorchConverter().add_exported_program(program, _externalized_exported_programs=externalized)


def test_apple_names_import_as_apples_users_import_them(monkeypatch) -> None:
    from coreai_torch import generate_composite_decl
    from coreai_torch._composite_declaration import generate_composite_decl as declared
    from coreai_torch.externalize import ExternalizeSpec as Same

    assert Same is ExternalizeSpec and declared is generate_composite_decl
    assert {"ExternalizeSpec", "_subexport_and_restore"} <= set(coreai_torch.__all__)
    # `from coreai_torch import composite_ops` before anything imported it.
    for name in [m for m in sys.modules if m.startswith("coreai_torch.composite_ops")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delattr(coreai_torch, "composite_ops")
    from coreai_torch import composite_ops

    assert (
        composite_ops.GatedDeltaUpdate.__module__
        == "coreai_torch.composite_ops._gated_delta_update"
    )

"""Stateful programs: mutated buffers and inputs become Core AI state.

The decoder is Llama-shaped (RMSNorm, rotary embeddings, grouped-query
attention, SwiGLU) with a static KV cache per layer that ``index_copy_``
fills; its prefill and decode entry points share the cache. Converted
programs run in ``coreai.runtime`` with the state carried from call to call
and are compared with the eager model doing the same calls. Float32 programs
in the CPU runtime agree with PyTorch to about 1e-6 here; 1e-4 keeps a
margin while a wrong cache position (errors of 1e-1 and more) still fails.
"""

from __future__ import annotations

import copy
import re

import pytest
import torch
from torch import nn

from coreai_torch import MetalParameter, TorchMetalKernel
from coreai_torch.converter import TorchConverter, get_decomp_table
from coreai_torch.converter.decomp import decompose, prepare
from coreai_torch.converter.graph_lowering import is_lowerable
from coreai_torch.runtime import LoadedProgram

TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}
VOCAB, HIDDEN, HEADS, KV_HEADS, LAYERS, MAX_LEN, PROMPT = 32, 32, 4, 2, 2, 12, 5
HEAD_DIM = HIDDEN // HEADS


def _scale_values(values: torch.Tensor, scale: float) -> torch.Tensor:
    return values * scale


# Computes the values a layer writes into its value cache.
scale_values = TorchMetalKernel(
    "state_test_scale_values",
    ["values", "scale"],
    ["scaled"],
    src="scaled[id] = values[id] * scale;",
    torch_defn=_scale_values,
    metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")],
)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Layer(nn.Module):
    def __init__(self, value_kernel: bool) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(HIDDEN, eps=1e-5)
        self.q = nn.Linear(HIDDEN, HEADS * HEAD_DIM, bias=False)
        self.k = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.v = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.o = nn.Linear(HEADS * HEAD_DIM, HIDDEN, bias=False)
        self.mlp_norm = nn.RMSNorm(HIDDEN, eps=1e-5)
        self.gate = nn.Linear(HIDDEN, 2 * HIDDEN, bias=False)
        self.up = nn.Linear(HIDDEN, 2 * HIDDEN, bias=False)
        self.down = nn.Linear(2 * HIDDEN, HIDDEN, bias=False)
        self.value_kernel = value_kernel
        cache = torch.zeros(1, KV_HEADS, MAX_LEN, HEAD_DIM)
        self.register_buffer("k_cache", cache.clone())
        self.register_buffer("v_cache", cache.clone())

    def _heads(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        return x.view(1, -1, heads, HEAD_DIM).transpose(1, 2)

    def forward(self, x, positions, cos, sin, mask):
        h = self.norm(x)
        q = _rotate(self._heads(self.q(h), HEADS), cos, sin)
        k = _rotate(self._heads(self.k(h), KV_HEADS), cos, sin)
        v = self._heads(self.v(h), KV_HEADS)
        if self.value_kernel:
            n = v.numel()
            v = scale_values(
                v.reshape(-1),
                0.5,
                threads_per_grid=(n, 1, 1),
                threads_per_thread_group=(32, 1, 1),
                result_shapes=[[n]],
            ).view(v.shape)
        else:
            v = v * 0.5  # what the kernel computes
        self.k_cache.index_copy_(2, positions, k)
        self.v_cache[:, :, positions] = v  # slice assignment: index_put_
        attended = nn.functional.scaled_dot_product_attention(
            q, self.k_cache, self.v_cache, attn_mask=mask, enable_gqa=True
        )
        x = x + self.o(attended.transpose(1, 2).reshape(1, -1, HEADS * HEAD_DIM))
        h = self.mlp_norm(x)
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))


class Decoder(nn.Module):
    """Tokens and their positions in, logits out; the KV cache is the state."""

    def __init__(self, value_kernel: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList(Layer(value_kernel) for _ in range(LAYERS))
        self.norm = nn.RMSNorm(HIDDEN, eps=1e-5)
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)
        inverse = 1.0 / (10000 ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM))
        self.register_buffer("inverse_frequency", inverse, persistent=False)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        angles = positions[:, None].float() * self.inverse_frequency[None, :]
        angles = torch.cat([angles, angles], dim=-1)
        cos, sin = angles.cos(), angles.sin()
        mask = torch.arange(MAX_LEN)[None, :] <= positions[:, None]
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, positions, cos, sin, mask)
        return self.head(self.norm(x))


def _export(model: nn.Module, length: int) -> torch.export.ExportedProgram:
    tokens = torch.zeros(1, length, dtype=torch.long)
    return torch.export.export(model, (tokens, torch.arange(length)))


def _cache_names(model: nn.Module) -> list[str]:
    return [name for name, _ in model.named_buffers() if name.endswith("_cache")]


@pytest.fixture(scope="module")
def decoder() -> Decoder:
    torch.manual_seed(0)
    return Decoder().eval()


@pytest.fixture(scope="module")
def exports(decoder: Decoder) -> dict[str, torch.export.ExportedProgram]:
    return {"prefill": _export(decoder, PROMPT), "decode": _export(decoder, 1)}


def _convert(exports: dict, decomposed: bool) -> object:
    converter = TorchConverter()
    for entry, program in exports.items():
        program = decompose(program) if decomposed else program
        converter.add_exported_program(
            program,
            input_names=["tokens", "positions"],
            output_names=["logits"],
            entrypoint_name=entry,
        )
    return converter.to_coreai()


@pytest.mark.parametrize("decomposed", [False, True], ids=["raw", "decomposed"])
def test_decoder_prefill_and_decode_steps_carry_the_cache(
    decoder: Decoder, exports: dict, decomposed: bool
) -> None:
    program = _convert(exports, decomposed)
    text = str(program)
    # Each layer's two caches are handles of both entry points, named as
    # Apple's converter names them (the buffer placeholders).
    state_names = ["b_" + name.replace(".", "_") for name in _cache_names(decoder)]
    for name in state_names:
        assert text.count(f'MutableBuffers.buffer_mutation = "{name}"') == 2, name
    assert len(re.findall(r"!coreai\.handle<tensor<1x2x12x8xf32>>", text)) >= 2 * len(state_names)

    eager = copy.deepcopy(decoder)
    state = {name: torch.zeros(1, KV_HEADS, MAX_LEN, HEAD_DIM) for name in state_names}
    torch.manual_seed(1)
    prompt = torch.randint(0, VOCAB, (1, PROMPT))
    with LoadedProgram(program) as loaded, torch.no_grad():
        got = loaded.run({"tokens": prompt, "positions": torch.arange(PROMPT)}, "prefill", state)
        want = eager(prompt, torch.arange(PROMPT))
        torch.testing.assert_close(got["logits"], want, **TOLERANCE)
        token = want[:, -1:].argmax(-1)
        for position in range(PROMPT, PROMPT + 3):
            inputs = {"tokens": token, "positions": torch.tensor([position])}
            got = loaded.run(inputs, "decode", state)
            want = eager(token, torch.tensor([position]))
            torch.testing.assert_close(got["logits"], want, **TOLERANCE)
            token = want.argmax(-1)
    # The carried state is the eager model's cache after the same calls.
    for name, buffer in zip(state_names, _cache_names(eager), strict=True):
        torch.testing.assert_close(state[name], eager.get_buffer(buffer), **TOLERANCE)


def test_kernel_computing_the_cached_values_converts() -> None:
    torch.manual_seed(0)
    with_kernel = Decoder(value_kernel=True).eval()
    program = _export(with_kernel, 1)
    text = str(
        TorchConverter()
        .register_custom_kernels([scale_values])
        .add_exported_program(program, state_names=[f"cache{i}" for i in range(2 * LAYERS)])
        .to_coreai()
    )
    # One kernel per layer feeds the value cache's write.
    assert text.count("coreai.metal4_kernel") == LAYERS
    for i in range(2 * LAYERS):
        assert f'MutableBuffers.buffer_mutation = "cache{i}"' in text
    assert text.count("coreai.write_handle") == 2 * LAYERS
    # The kernel-free twin (same weights, v * 0.5 in PyTorch) runs in the
    # runtime: the decoder test above runs it over several steps.
    twin = Decoder(value_kernel=False).eval()
    twin.load_state_dict(with_kernel.state_dict())
    tokens = torch.tensor([[3]])
    with torch.no_grad():
        torch.testing.assert_close(
            with_kernel(tokens, torch.tensor([0])), twin(tokens, torch.tensor([0]))
        )


class _Mutates(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.zeros(3))
        self.register_buffer("steps", torch.zeros(1, dtype=torch.long))

    def forward(self, x: torch.Tensor, seen: torch.Tensor) -> torch.Tensor:
        self.total.add_(x)
        self.steps.add_(1)
        seen.copy_(torch.maximum(seen, x))  # a mutated input
        return self.total / self.steps


@pytest.mark.parametrize("decomposed", [False, True], ids=["raw", "decomposed"])
def test_buffers_and_a_mutated_input_are_state(decomposed: bool) -> None:
    program = torch.export.export(_Mutates(), (torch.ones(3), torch.zeros(3)))
    if decomposed:
        program = program.run_decompositions(get_decomp_table())
    converted = TorchConverter().add_exported_program(program, output_names=["mean"]).to_coreai()
    text = str(converted)
    # Default names: the placeholders, buffers first (Apple's converter's).
    arguments = re.search(r"coreai\.graph @main\((.*?)\) ->", text)[1]
    assert re.findall(r'coreai\.name = "(\w+)"', arguments) == ["b_total", "b_steps", "x", "seen"]
    eager = _Mutates()
    state = {"b_total": torch.zeros(3), "b_steps": torch.zeros(1, dtype=torch.int32)}
    state["seen"] = torch.zeros(3)
    seen = torch.zeros(3)
    with LoadedProgram(converted) as loaded:
        for _ in range(3):
            x = torch.randn(3)
            got = loaded.run({"x": x}, state=state)
            torch.testing.assert_close(got["mean"], eager(x, seen), **TOLERANCE)
    torch.testing.assert_close(state["b_total"], eager.total, **TOLERANCE)
    torch.testing.assert_close(state["seen"], seen)
    assert state["b_steps"].tolist() == [3]


def test_state_names_are_checked_against_the_states() -> None:
    program = torch.export.export(_Mutates(), (torch.ones(3), torch.zeros(3)))
    with pytest.raises(ValueError, match=r"state_names has 2 entries .* 3 stateful inputs"):
        TorchConverter().add_exported_program(program, state_names=["a", "b"])
    with pytest.raises(ValueError, match="duplicates"):
        TorchConverter().add_exported_program(program, state_names=["a", "b", "a"])
    # input_names name the inputs that are not state.
    converter = TorchConverter().add_exported_program(program, input_names=["x", "seen"])
    with pytest.raises(ValueError, match=r"2 input_names given .* 1 inputs \['x'\]"):
        converter.to_coreai()


def test_a_written_parameter_is_refused_with_what_to_do() -> None:
    class Writes(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(3), requires_grad=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.weight.add_(x)
            return self.weight * 2

    program = torch.export.export(Writes(), (torch.ones(3),))
    with pytest.raises(ValueError, match=r"writes into 'p_weight', a parameter.*register_buffer"):
        TorchConverter().add_exported_program(program)


def _static_cache_llama() -> nn.Module:
    """transformers' static-cache wrapper of a one-layer Llama (transformers 5.24)."""
    transformers = pytest.importorskip("transformers")
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    model.generation_config = transformers.GenerationConfig(
        use_cache=True,
        cache_implementation="static",
        max_length=MAX_LEN,
        cache_config={"batch_size": 1, "max_cache_len": MAX_LEN, "device": "cpu"},
    )
    return TorchExportableModuleWithStaticCache(model, batch_size=1, max_cache_len=MAX_LEN)


def _export_static_cache(wrapped: nn.Module, length: int, strict: bool) -> object:
    kwargs = {
        "input_ids": torch.zeros(1, length, dtype=torch.long),
        "cache_position": torch.arange(length),
    }
    return torch.export.export(wrapped, (), kwargs, strict=strict)


def test_transformers_static_cache_non_strict_export_is_refused_with_what_to_do() -> None:
    # The wrapper registers the cache tensors as buffers, but the layers reach
    # them through the cache object: a non-strict export lifts them as
    # constants, records no buffer mutation, and torch's run_decompositions
    # stops on the program with a bare AssertionError.
    program = _export_static_cache(_static_cache_llama(), 3, strict=False)
    assert program.graph_signature.buffers_to_mutate == {}
    with pytest.raises(ValueError, match="lifted as constants") as raised:
        TorchConverter().add_exported_program(program)
    message = str(raised.value)
    assert re.search(r"node index_copy_: aten\.index_copy_\.default writes into constant", message)
    assert "modeling_llama.py:" in message
    assert "register_buffer" in message and "strict=True" in message


def test_transformers_static_cache_strict_export_decodes_with_its_cache_as_state() -> None:
    wrapped = _static_cache_llama()
    eager = copy.deepcopy(wrapped)
    exports = {
        "prefill": _export_static_cache(wrapped, PROMPT, strict=True),
        "decode": _export_static_cache(wrapped, 1, strict=True),
    }
    for program in exports.values():
        # Lowered as exported: repeat_kv reads the cache, after the step's
        # write, through an expand view.
        assert prepare(program, lambda target: is_lowerable(target, {})) is program
    converter = TorchConverter()
    for entry, program in exports.items():
        converter.add_exported_program(program, entrypoint_name=entry, output_names=["logits"])
    program = converter.to_coreai()
    text = str(program)
    names = sorted(set(re.findall(r'MutableBuffers.buffer_mutation = "([^"]+)"', text)))
    # The wrapper's buffers (the layer's keys, values and filled length, 0-d),
    # named as in the decomposed program, not after dynamo's path to them.
    assert names == ["b_cumulative_length_0", "b_key_cache_0", "b_value_cache_0"]
    decomposed = decompose(exports["decode"]).graph_signature.buffers_to_mutate.values()
    assert sorted("b_" + buffer for buffer in decomposed) == names
    buffers = {**exports["prefill"].state_dict, **exports["prefill"].constants}
    state = {n: torch.zeros_like(buffers[n.removeprefix("b_")]) for n in names}
    torch.manual_seed(1)
    tokens = torch.randint(0, VOCAB, (1, PROMPT))
    with LoadedProgram(program) as loaded, torch.no_grad():
        positions = torch.arange(PROMPT)
        for step in range(3):
            inputs = {"input_ids": tokens, "cache_position": positions}
            got = loaded.run(inputs, "prefill" if step == 0 else "decode", state)["logits"]
            want = eager(**inputs)
            torch.testing.assert_close(got, want, **TOLERANCE)
            tokens = want[:, -1:].argmax(-1)
            positions = positions[-1:] + 1

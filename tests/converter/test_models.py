"""Whole models: exported, converted, run in Core AI's CPU runtime, compared with PyTorch.

The transformers models are built from tiny configs with random weights (no
download). Each is wrapped so that its forward takes tensors and returns one
tensor (logits or the last hidden state).

Tolerance: rtol = atol = 1e-4 on float32 outputs of size O(1). Every layer
adds a few float32 roundings (~1e-7 relative) from summing in another order;
layer norms, softmaxes and residual sums carry them through a few layers, and
the largest differences observed are below 1e-6, so 1e-4 keeps a wide margin
while any wrong op (errors of 1e-2 and more) still fails.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from support.coreai_run import assert_converted_matches, convert, run_program
from torch.export import Dim

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.slow

MODEL_TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}
VOCAB = 97


def _ids(length: int, seed: int = 0, batch: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (batch, length), generator=generator)


class FirstOutput(nn.Module):
    """``model(*inputs, **options)[0]``: logits or last hidden state, as one tensor."""

    def __init__(self, model: nn.Module, **options: object) -> None:
        super().__init__()
        self.model = model.eval()
        self.options = options

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.model(*inputs, return_dict=True, **self.options)[0]


def _tiny_llama() -> nn.Module:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return FirstOutput(transformers.LlamaForCausalLM(config), use_cache=False)


def test_bert_with_attention_mask() -> None:
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    model = FirstOutput(transformers.BertModel(config, add_pooling_layer=False))
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0, 0]])
    assert_converted_matches(model, [_ids(8), mask], **MODEL_TOLERANCE)


def test_gpt2_lm_head() -> None:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, n_positions=64
    )
    model = FirstOutput(transformers.GPT2LMHeadModel(config), use_cache=False)
    assert_converted_matches(model, [_ids(8)], **MODEL_TOLERANCE)


def test_llama_static() -> None:
    assert_converted_matches(_tiny_llama(), [_ids(8)], **MODEL_TOLERANCE)


def test_llama_dynamic_sequence_length() -> None:
    model = _tiny_llama()
    seq = Dim("seq", min=2, max=48)
    program, input_names, output_names = convert(model, [_ids(8)], (({1: seq},),))
    for length in (3, 8, 21):
        ids = _ids(length, seed=length)
        got = run_program(program, {input_names[0]: ids})[output_names[0]]
        torch.testing.assert_close(got, model(ids), **MODEL_TOLERANCE)


def test_vit() -> None:
    torch.manual_seed(0)
    config = transformers.ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=16,
        patch_size=4,
        num_channels=3,
    )
    model = FirstOutput(transformers.ViTModel(config, add_pooling_layer=False))
    pixels = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    assert_converted_matches(model, [pixels], **MODEL_TOLERANCE)


class _Block(nn.Module):
    """A ResNet basic block: two 3x3 conv-BN layers and a (projected) shortcut."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.shortcut(x))


class TinyResNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 8, 3, 1, 1, bias=False),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        )
        self.layers = nn.Sequential(_Block(8, 8, 1), _Block(8, 16, 2), _Block(16, 32, 2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.head(torch.flatten(self.pool(x), 1))


def _randomize_batch_norm_statistics(model: nn.Module) -> None:
    """Fresh BN layers are the identity; give them statistics worth converting."""
    generator = torch.Generator().manual_seed(2)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            n = module.num_features
            module.running_mean.copy_(torch.randn(n, generator=generator) * 0.1)
            module.running_var.copy_(torch.rand(n, generator=generator) + 0.5)
            module.weight.data.copy_(torch.rand(n, generator=generator) + 0.5)
            module.bias.data.copy_(torch.randn(n, generator=generator) * 0.1)


def test_resnet_style_cnn() -> None:
    torch.manual_seed(0)
    model = TinyResNet()
    _randomize_batch_norm_statistics(model)
    model.eval()
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    assert_converted_matches(model, [images], **MODEL_TOLERANCE)

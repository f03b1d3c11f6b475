"""The model zoo: common model families built from tiny random configs (no download).

Each :class:`Family` builds a module whose forward takes tensors and returns
tensors, example inputs, and (where the model allows) the dimensions to export
as dynamic together with inputs of other sizes to run the dynamic program on.
``tests/converter/test_zoo.py`` converts every family and
``benchmarks/bench_conversion.py`` times them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.export import Dim

VOCAB = 97
HIDDEN = 32
HEADS = 4
KV_HEADS = 2
LAYERS = 2
FFN = 64


@dataclass(frozen=True)
class Family:
    """One model family of the zoo.

    ``build()`` returns the module (in eval mode) and its example inputs.
    ``dynamic`` maps an input index to the dims exported as dynamic (the
    ``torch.export`` spec of that input); it is absent for fixed-shape models.
    """

    name: str
    kind: str
    build: Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]
    dynamic: dict[int, dict[int, Dim]] | None = None
    # Float outputs are compared with these; see test_zoo.py for why they are enough.
    tolerance: dict[str, float] = field(default_factory=lambda: {"rtol": 1e-4, "atol": 1e-4})

    def dynamic_shapes(self, model: nn.Module, count: int) -> tuple[Any, ...] | None:
        """The ``dynamic_shapes`` argument of ``torch.export.export`` for ``count`` inputs."""
        if self.dynamic is None:
            return None
        specs = tuple(self.dynamic.get(i) for i in range(count))
        parameters = inspect.signature(model.forward).parameters.values()
        if any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in parameters):
            return (specs,)  # forward(*inputs): one argument holding them all
        return specs

    def other_inputs(self, inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """Inputs like ``inputs`` with other sizes along the dynamic dims (``OTHER_SIZES``)."""
        resized = []
        for index, tensor in enumerate(inputs):
            shape = list(tensor.shape)
            for dim, spec in (self.dynamic or {}).get(index, {}).items():
                shape[dim] = OTHER_SIZES[spec.__name__]
            if tensor.is_floating_point():
                resized.append(randn(*shape, seed=7 + index))
            elif index > 0 and int(tensor.max()) <= 1:
                resized.append(padding_mask(*shape))
            else:
                resized.append(ids(*shape, seed=5 + index, vocab=int(tensor.max()) + 1))
        return tuple(resized)


def transformers_module():
    import transformers

    return transformers


class Outputs(nn.Module):
    """``model(*inputs, **options)`` reduced to its tensors: logits or hidden states."""

    def __init__(self, model: nn.Module, names: tuple[str, ...] = (), **options: Any) -> None:
        super().__init__()
        self.model = model.eval()
        self.names = names
        self.options = options

    def forward(self, *inputs: torch.Tensor) -> Any:
        keywords = dict(zip(self.names, inputs[len(inputs) - len(self.names) :], strict=True))
        positional = inputs[: len(inputs) - len(self.names)]
        out = self.model(*positional, **keywords, return_dict=True, **self.options)
        return out[0]


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def ids(batch: int, length: int, seed: int = 0, vocab: int = VOCAB) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=_generator(seed))


def padding_mask(batch: int, length: int) -> torch.Tensor:
    """Ones, with the last positions of the first sequence padded."""
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[0, length - max(1, length // 4) :] = 0
    return mask


def randn(*shape: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(*shape, generator=_generator(seed))


# -- builders ------------------------------------------------------------------

BATCH = Dim("batch", min=1, max=8)
SEQ = Dim("seq", min=3, max=48)
TOKENS = {0: BATCH, 1: SEQ}
TARGET = Dim("target", min=2, max=48)
OTHER_SIZES = {"batch": 3, "seq": 11, "target": 6}


def _tiny(config_name: str, **overrides: Any) -> Any:
    config_class = getattr(transformers_module(), config_name)
    settings = {
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "intermediate_size": FFN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "max_position_embeddings": 64,
    }
    settings.update(overrides)
    return config_class(**settings)


def _randomize_norms(model: nn.Module) -> None:
    """Fresh norm layers are the identity; give them weights and statistics worth converting."""
    generator = _generator(2)
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            n = module.num_features
            module.running_mean.copy_(torch.randn(n, generator=generator) * 0.1)
            module.running_var.copy_(torch.rand(n, generator=generator) + 0.5)
        if (
            isinstance(module, nn.BatchNorm2d | nn.LayerNorm | nn.GroupNorm)
            and getattr(module, "weight", None) is not None
        ):
            module.weight.data.copy_(torch.rand(module.weight.shape, generator=generator) + 0.5)
            module.bias.data.copy_(torch.randn(module.bias.shape, generator=generator) * 0.1)


def causal_lm(
    name: str,
    model_class: str,
    config_name: str,
    *,
    kind: str = "decoder",
    length: int = 8,
    dynamic: dict[int, Dim] | None = TOKENS,
    with_mask: bool = False,
    **overrides: Any,
) -> Family:
    """A decoder-only language model: input ids (and a padding mask) to logits.

    ``dynamic`` is the spec of the ids' dims (batch and length by default).
    """

    def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        torch.manual_seed(0)
        config = _tiny(config_name, **overrides)
        model = getattr(transformers_module(), model_class)(config)
        names = ("attention_mask",) if with_mask else ()
        inputs = (ids(2, length),) + ((padding_mask(2, length),) if with_mask else ())
        return Outputs(model, names, use_cache=False), inputs

    spec = {0: dynamic, 1: dynamic} if with_mask else {0: dynamic}
    return Family(name, kind, build, dynamic=spec if dynamic else None)


def encoder(name: str, model_class: str, config_name: str, **overrides: Any) -> Family:
    """A text encoder: ids and a padding mask to the last hidden state."""

    def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        torch.manual_seed(0)
        model = getattr(transformers_module(), model_class)(_tiny(config_name, **overrides))
        return Outputs(model, ("attention_mask",)), (ids(2, 8), padding_mask(2, 8))

    return Family(name, "encoder", build, dynamic={0: TOKENS, 1: TOKENS})


def seq2seq(name: str, model_class: str, config_name: str, **overrides: Any) -> Family:
    """An encoder-decoder: source ids, source mask and decoder ids to logits."""

    def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        torch.manual_seed(0)
        settings = {
            "d_model": HIDDEN,
            "encoder_layers": LAYERS,
            "decoder_layers": LAYERS,
            "encoder_attention_heads": HEADS,
            "decoder_attention_heads": HEADS,
            "encoder_ffn_dim": FFN,
            "decoder_ffn_dim": FFN,
            "pad_token_id": 1,
            "decoder_start_token_id": 2,
        }
        settings.update(overrides)
        config = _tiny(config_name, **settings)
        model = getattr(transformers_module(), model_class)(config)
        inputs = (ids(2, 8), padding_mask(2, 8), ids(2, 5, seed=3))
        return Outputs(model, ("attention_mask", "decoder_input_ids"), use_cache=False), inputs

    target = {0: BATCH, 1: TARGET}
    return Family(name, "encoder-decoder", build, dynamic={0: TOKENS, 1: TOKENS, 2: target})


def vision(
    name: str,
    model_class: str,
    config_name: str,
    *,
    size: int = 32,
    channels: int = 3,
    kind: str = "vision",
    **overrides: Any,
) -> Family:
    """An image model: pixels to its first output (hidden state or feature map)."""

    def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        torch.manual_seed(0)
        config_class = getattr(transformers_module(), config_name)
        model = getattr(transformers_module(), model_class)(config_class(**overrides))
        _randomize_norms(model)
        return Outputs(model), (randn(2, channels, size, size),)

    return Family(name, kind, build, dynamic={0: {0: BATCH}})


def audio(
    name: str, model_class: str, config_name: str, shape: tuple[int, ...], **overrides: Any
) -> Family:
    """A speech model: waveform or features to the last hidden state."""

    def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        torch.manual_seed(0)
        config_class = getattr(transformers_module(), config_name)
        model = getattr(transformers_module(), model_class)(config_class(**overrides))
        _randomize_norms(model)
        return Outputs(model), (randn(2, *shape),)

    return Family(name, "audio", build, dynamic={0: {0: BATCH}})


def torch_nn(
    name: str,
    kind: str,
    module: Callable[[], nn.Module],
    shape: tuple[int, ...],
    *,
    dynamic: dict[int, dict[int, Dim]] | None = None,
) -> Family:
    """A model built from torch.nn layers, on one float input."""

    def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        torch.manual_seed(0)
        model = module().eval()
        _randomize_norms(model)
        return model, (randn(*shape),)

    return Family(name, kind, build, dynamic=dynamic)


# -- torch.nn models -----------------------------------------------------------


class Recurrent(nn.Module):
    """An embedding-free recurrent tagger: stacked (bidirectional) RNN, then a linear head."""

    def __init__(self, cell: type[nn.RNNBase], bidirectional: bool, **options: Any) -> None:
        super().__init__()
        self.rnn = cell(
            16, 24, num_layers=2, batch_first=True, bidirectional=bidirectional, **options
        )
        self.head = nn.Linear(24 * (2 if bidirectional else 1), 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return self.head(out)


class UnfoldPatches(nn.Module):
    """im2col: sliding 3x3 patches, projected, folded back into an image."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4 * 9, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        patches = F.unfold(x, kernel_size=3, padding=1, stride=2)
        mixed = self.proj(patches.transpose(1, 2))
        return mixed.transpose(1, 2).reshape(x.shape[0], 8, 4, 4)


class BicubicDecoder(nn.Module):
    """A small decoder head that upsamples feature maps bicubically (super-resolution style)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.out = nn.Conv2d(6, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.conv(x))
        y = F.interpolate(y, scale_factor=2, mode="bicubic", align_corners=False)
        skip = F.interpolate(x, size=(20, 20), mode="bicubic", align_corners=True)
        return self.out(y) + skip


class AttentionTransformer(nn.Module):
    """torch.nn.Transformer (encoder-decoder) with a causal target mask."""

    def __init__(self) -> None:
        super().__init__()
        self.transformer = nn.Transformer(
            d_model=HIDDEN,
            nhead=HEADS,
            num_encoder_layers=LAYERS,
            num_decoder_layers=LAYERS,
            dim_feedforward=FFN,
            dropout=0.0,
            batch_first=True,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        target = x[:, :5]
        mask = nn.Transformer.generate_square_subsequent_mask(5)
        return self.transformer(x, target, tgt_mask=mask, tgt_is_causal=True)


class RegionBlock(nn.Module):
    """Rotary self-attention whose rotation runs under ``torch.autocast(enabled=False)`` and
    whose mask is built under ``torch.no_grad()``, as many code bases write them (the
    export keeps both as higher-order regions)."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)
        self.out = nn.Linear(HIDDEN, HIDDEN)
        head = HIDDEN // HEADS
        self.register_buffer("inv_freq", 1 / 10000 ** (torch.arange(0, head, 2) / head))

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        first, second = x.chunk(2, dim=-1)
        return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        qkv = self.qkv(x).view(batch, length, 3, HEADS, HIDDEN // HEADS).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        with torch.autocast("cpu", enabled=False):
            angles = torch.arange(length, dtype=torch.float32)[:, None] * self.inv_freq
            cos, sin = angles.cos(), angles.sin()
            q, k = self._rotate(q.float(), cos, sin), self._rotate(k.float(), cos, sin)
        with torch.no_grad():
            mask = torch.ones(length, length, dtype=torch.bool).tril()
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(y.transpose(1, 2).reshape(batch, length, HIDDEN))


class SmallCNN(nn.Module):
    """A VGG-style classifier: conv-BN-ReLU blocks, max and adaptive pooling."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1, groups=2),
            nn.BatchNorm2d(16),
            nn.Hardswish(),
            nn.AdaptiveAvgPool2d((3, 3)),
        )
        self.head = nn.Linear(16 * 9, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(x), 1))


# -- the zoo -------------------------------------------------------------------

_VISION_TINY = {"image_size": 32, "num_channels": 3}
_VIT = {
    **_VISION_TINY,
    "hidden_size": HIDDEN,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": HEADS,
    "intermediate_size": FFN,
    "patch_size": 8,
}
_WAV2VEC2 = {
    "hidden_size": HIDDEN,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": HEADS,
    "intermediate_size": FFN,
    "conv_dim": (16, 16, 16),
    "conv_stride": (5, 2, 2),
    "conv_kernel": (10, 3, 3),
    "num_conv_pos_embeddings": 8,
    "num_conv_pos_embedding_groups": 4,
    "vocab_size": VOCAB,
}

FAMILIES: list[Family] = [
    # Decoders.
    causal_lm("llama", "LlamaForCausalLM", "LlamaConfig", num_key_value_heads=KV_HEADS),
    causal_lm(
        "llama-rope-llama3",
        "LlamaForCausalLM",
        "LlamaConfig",
        num_key_value_heads=KV_HEADS,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        },
    ),
    causal_lm(
        "qwen2-rope-yarn",
        "Qwen2ForCausalLM",
        "Qwen2Config",
        num_key_value_heads=KV_HEADS,
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
    ),
    causal_lm(
        "mistral-sliding-window",
        "MistralForCausalLM",
        "MistralConfig",
        num_key_value_heads=KV_HEADS,
        sliding_window=4,
        length=10,
    ),
    causal_lm("qwen3", "Qwen3ForCausalLM", "Qwen3Config", num_key_value_heads=KV_HEADS, head_dim=8),
    causal_lm(
        "phi3", "Phi3ForCausalLM", "Phi3Config", num_key_value_heads=KV_HEADS, pad_token_id=0
    ),
    causal_lm("phi-partial-rotary", "PhiForCausalLM", "PhiConfig", partial_rotary_factor=0.5),
    causal_lm("gemma", "GemmaForCausalLM", "GemmaConfig", num_key_value_heads=1, head_dim=8),
    causal_lm(
        "gemma2-softcap",
        "Gemma2ForCausalLM",
        "Gemma2Config",
        num_key_value_heads=KV_HEADS,
        head_dim=8,
        sliding_window=4,
        attn_logit_softcapping=5.0,
        final_logit_softcapping=3.0,
        length=10,
    ),
    causal_lm(
        "gemma3-local-global",
        "Gemma3ForCausalLM",
        "Gemma3TextConfig",
        num_key_value_heads=KV_HEADS,
        head_dim=8,
        sliding_window=4,
        layer_types=["sliding_attention", "full_attention"],
        length=10,
    ),
    causal_lm("gpt2", "GPT2LMHeadModel", "GPT2Config", n_positions=64),
    causal_lm(
        "gpt-neo-local",
        "GPTNeoForCausalLM",
        "GPTNeoConfig",
        attention_types=[[["global", "local"], 1]],
        window_size=4,
        length=10,
    ),
    causal_lm(
        "gptj-interleaved-rope", "GPTJForCausalLM", "GPTJConfig", rotary_dim=4, n_positions=64
    ),
    causal_lm("gpt-neox", "GPTNeoXForCausalLM", "GPTNeoXConfig", rotary_pct=0.5),
    causal_lm("opt", "OPTForCausalLM", "OPTConfig", ffn_dim=FFN, word_embed_proj_dim=HIDDEN),
    causal_lm("bloom-alibi", "BloomForCausalLM", "BloomConfig", n_head=HEADS, with_mask=True),
    causal_lm(
        "falcon",
        "FalconForCausalLM",
        "FalconConfig",
        new_decoder_architecture=True,
        num_kv_heads=KV_HEADS,
    ),
    causal_lm(
        "mpt-alibi",
        "MptForCausalLM",
        "MptConfig",
        n_heads=HEADS,
        d_model=HIDDEN,
        expansion_ratio=2,
        max_seq_len=64,
    ),
    causal_lm("olmo2", "Olmo2ForCausalLM", "Olmo2Config", num_key_value_heads=KV_HEADS),
    causal_lm("stablelm", "StableLmForCausalLM", "StableLmConfig", num_key_value_heads=KV_HEADS),
    causal_lm("codegen", "CodeGenForCausalLM", "CodeGenConfig", n_ctx=64, rotary_dim=4),
    causal_lm(
        "starcoder2",
        "Starcoder2ForCausalLM",
        "Starcoder2Config",
        num_key_value_heads=KV_HEADS,
        sliding_window=4,
        length=10,
    ),
    causal_lm("cohere", "CohereForCausalLM", "CohereConfig", num_key_value_heads=KV_HEADS),
    causal_lm(
        "granite",
        "GraniteForCausalLM",
        "GraniteConfig",
        num_key_value_heads=KV_HEADS,
        embedding_multiplier=2.0,
        attention_multiplier=0.5,
        residual_multiplier=0.5,
        logits_scaling=2.0,
    ),
    causal_lm(
        "mixtral-moe",
        "MixtralForCausalLM",
        "MixtralConfig",
        kind="decoder-moe",
        experts_implementation="batched_mm",
        num_key_value_heads=KV_HEADS,
        num_local_experts=4,
        num_experts_per_tok=2,
    ),
    causal_lm(
        "qwen2-moe",
        "Qwen2MoeForCausalLM",
        "Qwen2MoeConfig",
        kind="decoder-moe",
        experts_implementation="batched_mm",
        num_key_value_heads=KV_HEADS,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=16,
        shared_expert_intermediate_size=32,
    ),
    causal_lm(
        "olmoe",
        "OlmoeForCausalLM",
        "OlmoeConfig",
        kind="decoder-moe",
        experts_implementation="batched_mm",
        num_key_value_heads=KV_HEADS,
        num_experts=4,
        num_experts_per_tok=2,
    ),
    # Encoders.
    encoder("bert", "BertModel", "BertConfig"),
    encoder("roberta", "RobertaModel", "RobertaConfig", pad_token_id=1),
    encoder(
        "distilbert",
        "DistilBertModel",
        "DistilBertConfig",
        dim=HIDDEN,
        n_layers=LAYERS,
        n_heads=HEADS,
        hidden_dim=FFN,
    ),
    encoder("albert", "AlbertModel", "AlbertConfig", embedding_size=16),
    encoder("electra", "ElectraModel", "ElectraConfig", embedding_size=16),
    encoder(
        "deberta-v2",
        "DebertaV2Model",
        "DebertaV2Config",
        relative_attention=True,
        position_buckets=8,
        pos_att_type=["p2c", "c2p"],
    ),
    encoder("mpnet", "MPNetModel", "MPNetConfig"),
    encoder(
        "gemma3-bidirectional-vmap-mask",
        "Gemma3TextModel",
        "Gemma3TextConfig",
        num_key_value_heads=KV_HEADS,
        head_dim=8,
        sliding_window=4,
        use_bidirectional_attention=True,
    ),
    encoder(
        "modernbert",
        "ModernBertModel",
        "ModernBertConfig",
        global_attn_every_n_layers=2,
        local_attention=4,
        pad_token_id=0,
    ),
    # Encoder-decoders.
    seq2seq(
        "t5",
        "T5ForConditionalGeneration",
        "T5Config",
        d_kv=8,
        d_ff=FFN,
        num_layers=LAYERS,
        num_heads=HEADS,
        relative_attention_num_buckets=8,
    ),
    seq2seq("bart", "BartForConditionalGeneration", "BartConfig"),
    seq2seq("marian", "MarianMTModel", "MarianConfig"),
    seq2seq("pegasus", "PegasusForConditionalGeneration", "PegasusConfig"),
    # Vision.
    vision("vit", "ViTModel", "ViTConfig", **_VIT),
    vision("deit", "DeiTModel", "DeiTConfig", **_VIT),
    vision(
        "beit-relative-bias", "BeitModel", "BeitConfig", **_VIT, use_relative_position_bias=True
    ),
    vision("dinov2", "Dinov2Model", "Dinov2Config", **{**_VIT, "image_size": 16}, size=24),
    vision(
        "swin-windowed",
        "SwinForImageClassification",
        "SwinConfig",
        num_labels=5,
        image_size=32,
        patch_size=2,
        embed_dim=16,
        depths=[2, 2],
        num_heads=[2, 4],
        window_size=4,
    ),
    vision(
        "resnet",
        "ResNetModel",
        "ResNetConfig",
        embedding_size=8,
        hidden_sizes=[8, 16],
        depths=[1, 1],
    ),
    vision(
        "convnext",
        "ConvNextModel",
        "ConvNextConfig",
        num_stages=2,
        hidden_sizes=[8, 16],
        depths=[1, 1],
    ),
    vision(
        "mobilenet-v2",
        "MobileNetV2Model",
        "MobileNetV2Config",
        depth_multiplier=0.25,
        image_size=32,
    ),
    vision(
        "segformer-hierarchical",
        "SegformerModel",
        "SegformerConfig",
        num_encoder_blocks=2,
        depths=[1, 1],
        sr_ratios=[2, 1],
        hidden_sizes=[8, 16],
        num_attention_heads=[1, 2],
        patch_sizes=[7, 3],
        strides=[4, 2],
        mlp_ratios=[2, 2],
    ),
    vision(
        "poolformer",
        "PoolFormerModel",
        "PoolFormerConfig",
        hidden_sizes=[8, 16],
        depths=[1, 1],
        num_encoder_blocks=2,
        patch_sizes=[7, 3],
        strides=[4, 2],
        padding=[2, 1],
    ),
    vision(
        "regnet",
        "RegNetModel",
        "RegNetConfig",
        embedding_size=8,
        hidden_sizes=[8, 16],
        depths=[1, 1],
        groups_width=8,
    ),
    # Audio front ends.
    audio("wav2vec2-weight-norm", "Wav2Vec2Model", "Wav2Vec2Config", (400,), **_WAV2VEC2),
    audio("hubert", "HubertModel", "HubertConfig", (400,), **_WAV2VEC2),
    audio(
        "ast-spectrogram",
        "ASTModel",
        "ASTConfig",
        (32, 16),
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=FFN,
        max_length=32,
        num_mel_bins=16,
        patch_size=8,
        frequency_stride=8,
        time_stride=8,
    ),
    # State-space models.
    causal_lm(
        "mamba",
        "MambaForCausalLM",
        "MambaConfig",
        kind="state-space",
        # transformers' selective scan guards on the sequence length: batch only.
        dynamic={0: BATCH},
        state_size=8,
        expand=2,
        conv_kernel=4,
        time_step_rank=4,
    ),
    causal_lm(
        "mamba2",
        "Mamba2ForCausalLM",
        "Mamba2Config",
        kind="state-space",
        dynamic={0: BATCH},
        state_size=8,
        expand=2,
        head_dim=8,
        num_heads=8,
        n_groups=1,
        chunk_size=4,
        conv_kernel=4,
    ),
    # Recurrent layers and other torch.nn models.
    torch_nn(
        "lstm-bidirectional",
        "recurrent",
        lambda: Recurrent(nn.LSTM, True),
        (2, 7, 16),
        dynamic={0: {0: BATCH}},
    ),
    torch_nn(
        "gru", "recurrent", lambda: Recurrent(nn.GRU, False), (2, 7, 16), dynamic={0: {0: BATCH}}
    ),
    torch_nn(
        "rnn-tanh",
        "recurrent",
        lambda: Recurrent(nn.RNN, True),
        (2, 7, 16),
        dynamic={0: {0: BATCH}},
    ),
    torch_nn("unfold-im2col", "vision", UnfoldPatches, (2, 4, 8, 8), dynamic={0: {0: BATCH}}),
    torch_nn(
        "bicubic-upsampling", "vision", BicubicDecoder, (2, 3, 10, 10), dynamic={0: {0: BATCH}}
    ),
    torch_nn(
        "nn-transformer",
        "encoder-decoder",
        AttentionTransformer,
        (2, 9, HIDDEN),
        dynamic={0: {0: BATCH}},
    ),
    torch_nn(
        "rope-autocast-no-grad-regions",
        "decoder",
        RegionBlock,
        (2, 7, HIDDEN),
        dynamic={0: {0: BATCH, 1: SEQ}},
    ),
    torch_nn("small-cnn", "vision", SmallCNN, (2, 3, 16, 16), dynamic={0: {0: BATCH}}),
]

BY_NAME = {family.name: family for family in FAMILIES}

"""The composite ops' reference modules against independent computations.

References are written differently from the modules (torch's SDPA with an
explicit mask, complex rotation, Python indexing, einsum) and in float64
where they can be. Float32 results agree to about 1e-6; 1e-5 keeps a margin
while a mask off by one position or a wrong rotation (errors of 1e-1) fails.
The masked-out score of the modules is -1e4, not -inf: its softmax weight,
exp(-1e4), is 0 in float32.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from coreai_torch.composite_ops import SDPA, GatedDeltaUpdate, GatherMM, RMSNormImpl, RoPE

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


@pytest.fixture(scope="module")
def qkv() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    # 4 query heads over 2 key/value heads; 3 queries, the newest of 5 keys.
    return torch.randn(2, 4, 3, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)


def _reference(query, key, value, mask=None, scale=None) -> torch.Tensor:
    return F.scaled_dot_product_attention(
        query.double(), key.double(), value.double(), attn_mask=mask, scale=scale, enable_gqa=True
    ).float()


def test_rms_norm_is_x_over_its_rms_times_scale() -> None:
    x, scale = torch.randn(3, 8), torch.randn(8)
    wide = x.double()
    expected = wide / torch.sqrt((wide**2).mean(-1, keepdim=True) + 1e-6) * scale.double()
    torch.testing.assert_close(RMSNormImpl(1e-6)(x, scale), expected.float(), **TOLERANCE)
    # A float32 scale of a float16 input multiplies before rounding to float16.
    half = RMSNormImpl(1e-6)(x.half(), scale)
    assert half.dtype == torch.float16
    torch.testing.assert_close(half, expected.half(), rtol=1e-3, atol=1e-3)


def test_sdpa_causal_mask_is_aligned_to_the_newest_query(qkv) -> None:
    query, key, value = qkv
    lower_right = torch.ones(3, 5, dtype=torch.bool).tril(diagonal=5 - 3)
    torch.testing.assert_close(
        SDPA(is_causal=True)(query, key, value),
        _reference(query, key, value, lower_right),
        **TOLERANCE,
    )
    # Without masks it is torch's attention; a given mask replaces the causal one.
    torch.testing.assert_close(SDPA()(query, key, value), _reference(query, key, value))
    mask = torch.rand(3, 5) > 0.3
    mask[:, 0] = True  # every query attends somewhere
    torch.testing.assert_close(
        SDPA(scale=0.3, is_causal=True)(query, key, value, mask),
        _reference(query, key, value, mask, scale=0.3),
        **TOLERANCE,
    )
    additive = torch.randn(3, 5)
    torch.testing.assert_close(
        SDPA()(query, key, value, additive), _reference(query, key, value, additive), **TOLERANCE
    )


@pytest.mark.parametrize("causal", [True, False])
def test_sdpa_sliding_window_attends_keys_less_than_the_window_away(qkv, causal: bool) -> None:
    query, key, value = qkv
    position = torch.arange(3).unsqueeze(1) + 2  # of each query among the 5 keys
    distance = position - torch.arange(5).unsqueeze(0)
    window = (distance >= 0) & (distance < 2) if causal else distance.abs() < 2
    torch.testing.assert_close(
        SDPA(is_causal=causal, window_size=2)(query, key, value),
        _reference(query, key, value, window),
        **TOLERANCE,
    )


def test_sdpa_sinks_take_softmax_mass_and_attend_nothing(qkv) -> None:
    query, key, value = qkv
    sinks = torch.randn(4)
    keys = key.repeat_interleave(2, dim=1).double()
    scores = query.double() @ keys.transpose(-1, -2) / 8**0.5
    weights = scores.exp() / (
        scores.exp().sum(-1, keepdim=True) + sinks.double().exp()[:, None, None]
    )
    expected = (weights @ value.repeat_interleave(2, dim=1).double()).float()
    torch.testing.assert_close(SDPA()(query, key, value, None, sinks), expected, **TOLERANCE)
    with pytest.raises(NotImplementedError, match="no attention sinks"):
        SDPA(_use_hf_impl=True)(query, key, value, None, sinks)


def test_sdpa_in_transformers_order_computes_the_same(qkv) -> None:
    query, key, value = qkv
    torch.testing.assert_close(
        SDPA(is_causal=True, _use_hf_impl=True)(query, key, value),
        SDPA(is_causal=True)(query, key, value),
        **TOLERANCE,
    )


def _rotated_by_complex(x: torch.Tensor, angles: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """Pairs as complex numbers times e^(i angle): the rotation, written another way."""
    half = angles.shape[-1]
    if interleaved:
        pairs = x.double().reshape(*x.shape[:-1], half, 2)
    else:
        pairs = torch.stack((x[..., :half], x[..., half:]), dim=-1).double()
    turned = torch.view_as_real(
        torch.view_as_complex(pairs.contiguous()) * torch.polar(torch.ones_like(angles), angles)
    )
    if interleaved:
        return turned.reshape(x.shape).float()
    return torch.cat((turned[..., 0], turned[..., 1]), dim=-1).float()


def test_rope_rotates_pairs_by_position_times_frequency(qkv) -> None:
    query = qkv[0]  # (2, 4, 3, 8)
    positions = torch.arange(3, dtype=torch.float64)
    freqs = 100.0 ** -(torch.arange(4, dtype=torch.float64) / 4)
    angles = positions[:, None] * freqs * 0.5
    torch.testing.assert_close(
        RoPE(scale=0.5, base=100.0)(query), _rotated_by_complex(query, angles, False), **TOLERANCE
    )
    # Interleaved pairs, only the first 4 of 8 entries rotated, positions per batch row.
    ids = torch.tensor([[4.0, 5.0, 6.0], [0.0, 2.0, 9.0]])
    angles = ids.double()[:, None, :, None] * 1e4 ** -(torch.arange(2, dtype=torch.float64) / 2)
    out = RoPE(dims=4, interleaved=True)(query, position_ids=ids)
    torch.testing.assert_close(
        out[..., :4], _rotated_by_complex(query[..., :4], angles, True), **TOLERANCE
    )
    torch.testing.assert_close(out[..., 4:], query[..., 4:], rtol=0, atol=0)
    # An offset per row is position_ids starting there.
    torch.testing.assert_close(
        RoPE()(query, offset=torch.tensor([4.0, 7.0])),
        RoPE()(query, position_ids=torch.tensor([[4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])),
        **TOLERANCE,
    )
    with pytest.raises(ValueError, match="rotates an even number"):
        RoPE(dims=3)(query)


def test_gather_mm_multiplies_the_indexed_rows() -> None:
    lhs, rhs = torch.randn(5, 3, 4), torch.randn(6, 4, 2)
    left, right = torch.tensor([[0, 4], [1, 1]]), torch.tensor([[5, 0], [2, 2]])
    out = GatherMM()(lhs, rhs, left, right)
    assert out.shape == (2, 2, 3, 2)
    for i in range(2):
        for j in range(2):
            torch.testing.assert_close(out[i, j], lhs[left[i, j]] @ rhs[right[i, j]])
    # Indexing the axis after one batch axis: the same rows of every batch entry.
    tokens, experts = torch.randn(2, 3, 1, 4), torch.randn(2, 5, 4, 2)
    choice = torch.tensor([4, 0, 2])
    out = GatherMM(num_batch_axes=1)(tokens, experts, None, choice)
    expected = torch.stack([experts[b][choice] for b in range(2)])
    torch.testing.assert_close(out, tokens @ expected)


def test_gated_delta_update_is_the_delta_rule_step_by_step() -> None:
    torch.manual_seed(1)
    b, h, length, dk, dv = 1, 2, 4, 3, 2
    q, k = torch.randn(b, h, length, dk), torch.randn(b, h, length, dk)
    v, g, beta = torch.randn(b, h, length, dv), -torch.rand(b, h, length), torch.rand(b, h, length)
    state = torch.randn(b, h, dk, dv)
    out, final = GatedDeltaUpdate()(q, k, v, g, beta, state)
    # The rule as written in the papers, in float64: S <- a S + beta k (v - S^T k)^T.
    qn = F.normalize(q.double(), dim=-1, eps=0) * dk**-0.5
    kn = F.normalize(k.double(), dim=-1, eps=0)
    s = state.double()
    reads = []
    for t in range(length):
        s = s * g[:, :, t, None, None].double().exp()
        error = v[:, :, t].double() - torch.einsum("bhkv,bhk->bhv", s, kn[:, :, t])
        s = s + beta[:, :, t, None, None] * torch.einsum("bhk,bhv->bhkv", kn[:, :, t], error)
        reads.append(torch.einsum("bhkv,bhk->bhv", s, qn[:, :, t]))
    # rsqrt(|x|^2 + 1e-6) is normalize's 1/|x| to about 1e-6 for these sizes.
    torch.testing.assert_close(out, torch.stack(reads, dim=1).float(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(final, s.float(), rtol=1e-4, atol=1e-4)

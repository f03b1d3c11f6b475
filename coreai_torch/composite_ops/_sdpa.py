"""The ``sdpa`` composite: scaled dot-product attention with the masks LLMs decode with.

Beyond ``torch.nn.functional.scaled_dot_product_attention``: grouped-query
attention that exports with dynamic lengths, attention sinks, sliding
windows, and a causal mask aligned to the last query (the queries are the
newest tokens when fewer than the keys, as in decoding).
"""

from __future__ import annotations

import torch

from ._utils import Version

# What a masked-out score gets: large enough to vanish in the softmax, small
# enough that float16 arithmetic on it stays finite.
_MASKED = -1e4


def _positions_mask(
    query: torch.Tensor, key: torch.Tensor, is_causal: bool, window_size: int
) -> torch.Tensor | None:
    """The boolean mask (True = attend) that ``is_causal`` and ``window_size`` ask for.

    Query ``i`` sits at position ``i + (keys - queries)`` among the keys.
    Causal: keys up to its position. A window of ``w``: keys less than ``w``
    positions away, only those before it (itself included) when causal.
    """
    if not is_causal and window_size <= 0:
        return None
    queries, keys = query.shape[-2], key.shape[-2]
    position = torch.arange(queries, device=query.device).unsqueeze(1) + (keys - queries)
    key_position = torch.arange(keys, device=query.device).unsqueeze(0)
    distance = position - key_position  # > 0: the key comes before the query
    if window_size <= 0:
        return distance >= 0
    if is_causal:
        return (distance >= 0) & (distance < window_size)
    return distance.abs() < window_size


def _repeat_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """Each key/value head repeated for its group of query heads (GQA)."""
    groups = heads // x.shape[1]
    if groups == 1:
        return x
    # index_select rather than repeat_interleave: the latter's reshape adds a
    # size guard torch.export cannot prove for a dynamic length.
    index = torch.arange(x.shape[1], device=x.device).repeat_interleave(groups)
    return torch.index_select(x, 1, index)


def _attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    sinks: torch.Tensor | None,
    scale: float | None,
) -> torch.Tensor:
    key = _repeat_heads(key, query.shape[1])
    value = _repeat_heads(value, query.shape[1])
    if scale is None:
        scale = query.shape[-1] ** -0.5
    scores = torch.matmul(scale * query, key.transpose(-1, -2))
    if mask is not None:
        if mask.dtype == torch.bool:
            mask = _MASKED * torch.logical_not(mask).to(query.dtype)
        scores = scores + mask
    if sinks is None:
        return torch.matmul(torch.softmax(scores, dim=-1), value)
    # A sink is one more logit per head that takes part of the softmax's mass
    # and attends to nothing.
    sink = sinks.reshape(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
    weights = torch.softmax(torch.cat((scores, sink), dim=-1), dim=-1)
    return torch.matmul(weights[..., :-1], value)


def _attention_as_transformers(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float | None,
) -> torch.Tensor:
    """Hugging Face's order of operations (its float16 rounding): repeated heads, torch SDPA."""
    groups = query.shape[1] // key.shape[1]

    def repeat(x: torch.Tensor) -> torch.Tensor:
        b, heads, length, dim = x.shape
        expanded = x.unsqueeze(2).expand(b, heads, groups, length, dim)
        return expanded.reshape(b, heads * groups, length, dim).contiguous()

    return torch.nn.functional.scaled_dot_product_attention(
        query.contiguous(),
        repeat(key),
        repeat(value),
        attn_mask=mask,  # a causal mask is built already: lower-right aligned
        scale=scale,
    ).contiguous()


class SDPA(torch.nn.Module):
    """Scaled dot-product attention of ``(batch, heads, length, dim)`` tensors.

    Key and value may have fewer heads than the query (grouped-query
    attention). ``attn_mask`` (boolean: True attends; or float, added to the
    scores) replaces the mask ``is_causal`` and ``window_size`` build.
    ``sinks`` holds one logit per query head.

    >>> q = k = v = torch.ones(1, 2, 3, 4)
    >>> SDPA(is_causal=True)(q, k[:, :1], v[:, :1]).shape
    torch.Size([1, 2, 3, 4])
    """

    def __init__(
        self,
        scale: float | None = None,
        is_causal: bool = False,
        window_size: int = 0,
        _use_hf_impl: bool = False,
    ) -> None:
        super().__init__()
        self.scale = scale
        self.is_causal = is_causal
        self.window_size = window_size
        self.version = Version.v1
        self._use_hf_impl = _use_hf_impl

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        sinks: torch.Tensor | None = None,
    ) -> torch.Tensor:
        mask = attn_mask
        if mask is None:
            mask = _positions_mask(query, key, self.is_causal, self.window_size)
        if not self._use_hf_impl:
            return _attention(query, key, value, mask, sinks, self.scale)
        if sinks is not None:
            raise NotImplementedError(
                "SDPA(_use_hf_impl=True) has no attention sinks; use SDPA() for sinks"
            )
        return _attention_as_transformers(query, key, value, mask, self.scale)

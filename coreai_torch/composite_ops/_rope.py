"""The ``rope`` composite: rotary position embedding."""

from __future__ import annotations

import torch

from ._utils import Version


def _rotated_dims(input: torch.Tensor, dims: int | None) -> int:
    size = input.shape[-1]
    rotated = size if dims is None or dims >= size else dims
    if rotated < 2 or rotated % 2:
        raise ValueError(
            f"RoPE: rotates an even number (at least 2) of the last axis's {size} entries; "
            f"dims={dims} asks for {rotated}"
        )
    return rotated


def _cos_sin(
    input: torch.Tensor,
    half: int,
    position_ids: torch.Tensor | None,
    freqs: torch.Tensor | None,
    offset: int | torch.Tensor,
    scale: float,
    base: float,
    match_transformers: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The rotation of each position: angles ``position * freqs * scale``, in float32."""
    if position_ids is not None:
        positions = position_ids.unsqueeze(1)  # (batch, 1, length): broadcast over heads
    else:
        steps = torch.arange(input.shape[-2], device=input.device)
        if isinstance(offset, torch.Tensor):
            offset = offset.reshape(-1, 1, 1)  # one offset per batch row
        positions = offset + steps
    if freqs is None:
        # float32 throughout: base ** (i / half) loses the text in float16.
        exponents = torch.arange(half, dtype=torch.float32, device=input.device) / half
        freqs = 1.0 / torch.pow(base, exponents)
    freqs = freqs * scale
    if match_transformers:
        freqs = freqs.to(input.dtype)  # transformers' rounding, worse numerics
    angles = positions.float().unsqueeze(-1) * freqs.float()
    return angles.cos().to(input.dtype), angles.sin().to(input.dtype)


def _rotate(
    input: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotated: int, interleaved: bool
) -> torch.Tensor:
    """Pairs ``(x1, x2)`` turned by the angle: halves of the rotated part, or neighbours."""
    half = rotated // 2
    if interleaved:
        x1, x2 = input[..., :rotated:2], input[..., 1:rotated:2]
    else:
        x1, x2 = input[..., :half], input[..., half:rotated]
    y1 = cos * x1 - sin * x2
    y2 = sin * x1 + cos * x2
    if interleaved:
        y = torch.stack((y1, y2), dim=-1).reshape(*y1.shape[:-1], rotated)
    else:
        y = torch.cat((y1, y2), dim=-1)
    if rotated < input.shape[-1]:
        y = torch.cat((y, input[..., rotated:]), dim=-1)
    return y


class RoPE(torch.nn.Module):
    """Rotary position embedding of the last axis of ``(batch, heads, length, dim)`` inputs.

    The angles come from ``cos`` and ``sin`` when given (``(..., dims / 2)``),
    else from positions: ``position_ids`` (``(batch, length)``), or ``offset``
    (per batch row) plus ``0 .. length - 1``; times ``freqs`` (default
    ``base ** -(i / (dims / 2))``) and ``scale``. Only the first ``dims``
    entries rotate; ``interleaved`` pairs neighbours instead of halves.

    >>> x = torch.tensor([[[[1.0, 0.0]]]])
    >>> RoPE()(x, offset=torch.tensor([1.0]))  # one radian
    tensor([[[[0.5403, 0.8415]]]])
    """

    def __init__(
        self,
        scale: float = 1.0,
        base: float = 1e4,
        dims: int | None = None,
        interleaved: bool = False,
        _use_hf_impl: bool = False,
    ) -> None:
        super().__init__()
        self.scale = float(scale)
        self.base = float(base)
        self.dims = dims
        self.interleaved = interleaved
        self.version = Version.v1
        self._use_hf_impl = _use_hf_impl

    def forward(
        self,
        input: torch.Tensor,
        cos: torch.Tensor | None = None,
        sin: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        freqs: torch.Tensor | None = None,
        offset: torch.Tensor | None = None,
    ) -> torch.Tensor:
        rotated = _rotated_dims(input, self.dims)
        if cos is None or sin is None:
            cos, sin = _cos_sin(
                input,
                rotated // 2,
                position_ids,
                freqs,
                0 if offset is None else offset,
                self.scale,
                self.base,
                self._use_hf_impl,
            )
        return _rotate(input, cos, sin, rotated, self.interleaved)

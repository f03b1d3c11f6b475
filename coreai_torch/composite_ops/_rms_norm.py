"""The ``rms_norm`` composite: ``x / sqrt(mean(x**2) + eps) * scale`` over the last axis."""

from __future__ import annotations

import torch

from ._utils import Version


class RMSNormImpl(torch.nn.Module):
    """RMS normalization with the scale as an argument: the module to externalize.

    The scale is an argument rather than a parameter so that it is an input of
    the composite's graph, as the ``rms_norm`` declaration says.

    >>> norm = RMSNormImpl(eps=1e-6)
    >>> norm(torch.tensor([[3.0, 4.0]]), torch.tensor([1.0, 2.0]))
    tensor([[0.8485, 2.2627]])
    """

    def __init__(self, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.axes = -1
        self.version = Version.v1

    def forward(self, input: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        # Squares and their mean in float32: float16 squares overflow past 256
        # and a float16 sum loses the small terms.
        wide = input.to(torch.float32)
        inverse_rms = torch.rsqrt((wide * wide).mean(self.axes, keepdim=True) + self.eps)
        normalized = input * inverse_rms
        if scale.dtype == torch.float32 and input.dtype != torch.float32:
            # A float32 scale (Gemma's) multiplies before rounding to the input's type.
            return (normalized * scale).to(input.dtype)
        return normalized.to(input.dtype) * scale


class RMSNorm(torch.nn.Module):
    """RMS normalization over the last axis with a learned scale (ones at first).

    With ``n_heads`` the scale has shape ``(n_heads, 1, dim)``: one per head of
    a ``(batch, n_heads, length, dim)`` input (query and key norms in one).

    >>> RMSNorm(4, eps=1e-6)(torch.ones(2, 4)).shape
    torch.Size([2, 4])
    """

    def __init__(self, dim: int, eps: float = 1e-5, n_heads: int | None = None) -> None:
        super().__init__()
        shape = (dim,) if n_heads is None else (n_heads, 1, dim)
        self.weight = torch.nn.Parameter(torch.ones(shape))
        self.rmsnorm_impl = RMSNormImpl(eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rmsnorm_impl(x, self.weight)

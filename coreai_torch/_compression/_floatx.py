"""Sub-byte float tensors: not converted yet.

coreai-opt checks state-dict values against :class:`SubbyteTensor` when it
saves and reloads compressed weights, and builds a :class:`Float4Tensor` for
fp4 (``float4_e2m1fn``) weights. Neither float format is converted by this
package yet: no tensor is ever a ``SubbyteTensor`` here, and making a
``Float4Tensor`` raises, naming what to use instead.
"""

from __future__ import annotations

from typing import Any

import torch


class SubbyteTensor(torch.Tensor):
    """The base of packed sub-byte tensors (none exist in this package)."""


class Float4Tensor(SubbyteTensor):
    """fp4 weights packed two to a byte: refused (not converted yet)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Float4Tensor:
        raise NotImplementedError(
            "fp4 (float4_e2m1fn) weights are not supported by coreai_torch's converter yet; "
            "compress with an integer format (int8, int4), palettization or pruning instead"
        )

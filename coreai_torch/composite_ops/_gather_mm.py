"""The ``gather_mm`` composite: rows gathered from either operand, then a matmul."""

from __future__ import annotations

import torch

from ._utils import Version


def _gather(x: torch.Tensor, indices: torch.Tensor, axis: int) -> torch.Tensor:
    """``x`` indexed by ``indices`` along ``axis``, which the indices' shape replaces."""
    picked = torch.index_select(x, axis, indices.flatten().to(torch.int32))
    return picked.reshape(*x.shape[:axis], *indices.shape, *x.shape[axis + 1 :])


class GatherMM(torch.nn.Module):
    """``matmul(lhs[lhs_indices], rhs[rhs_indices])``, indexing axis ``num_batch_axes``.

    Either index tensor may be left out (that operand is used whole). The
    mixture-of-experts form: ``rhs`` a stack of expert weights and
    ``rhs_indices`` the expert of each token.

    >>> experts = torch.stack([torch.eye(2), 2 * torch.eye(2)])
    >>> GatherMM()(torch.ones(2, 1, 2), experts, rhs_indices=torch.tensor([1, 0]))
    tensor([[[2., 2.]],
    <BLANKLINE>
            [[1., 1.]]])
    """

    def __init__(self, num_batch_axes: int = 0) -> None:
        super().__init__()
        self.num_batch_axes = int(num_batch_axes)
        self.version = Version.v1

    def forward(
        self,
        lhs: torch.Tensor,
        rhs: torch.Tensor,
        lhs_indices: torch.Tensor | None = None,
        rhs_indices: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if lhs_indices is not None:
            lhs = _gather(lhs, lhs_indices, self.num_batch_axes)
        if rhs_indices is not None:
            rhs = _gather(rhs, rhs_indices, self.num_batch_axes)
        return torch.matmul(lhs, rhs)

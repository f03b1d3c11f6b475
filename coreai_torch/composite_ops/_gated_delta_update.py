"""The ``gated_delta_update`` composite: the gated delta rule of linear attention."""

from __future__ import annotations

import torch

from ._utils import Version


def _l2_normalized(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + 1e-6)


class GatedDeltaUpdate(torch.nn.Module):
    """The gated delta rule over a sequence (Qwen3-Next's and Gated DeltaNet's layers).

    Arguments: ``query``, ``key`` ``(batch, heads, length, dk)``, ``value``
    ``(batch, heads, length, dv)``, the log decay ``g`` and the write strength
    ``beta`` ``(batch, heads, length)``, and the state ``(batch, heads, dk, dv)``.
    At each step ``t`` the state decays by ``exp(g_t)``, moves towards
    ``k_t -> v_t`` by ``beta_t`` and is read with ``q_t``. Returns the reads
    ``(batch, length, heads, dv)`` and the final state, in the query's type
    (the recurrence runs in float32).

    The steps are a Python loop, unrolled by ``torch.export`` for the
    sequence length it sees: a symbolic length is refused (it needs a
    ``while_loop``, which the converter does not lower yet).

    >>> q = k = torch.ones(1, 1, 2, 1)
    >>> out, state = GatedDeltaUpdate(use_qk_l2_norm=False)(
    ...     q, k, torch.ones(1, 1, 2, 1), torch.zeros(1, 1, 2), torch.ones(1, 1, 2),
    ...     torch.zeros(1, 1, 1, 1))
    >>> out.flatten().tolist(), state.flatten().tolist()
    ([1.0, 1.0], [1.0])
    """

    def __init__(self, use_qk_l2_norm: bool = True) -> None:
        super().__init__()
        self.use_qk_l2_norm = use_qk_l2_norm
        self.version = Version.v1

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        initial_state: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        dtype = query.dtype
        if self.use_qk_l2_norm:
            query, key = _l2_normalized(query), _l2_normalized(key)
        # The recurrence accumulates over the whole sequence: float32.
        query, key, value, g, beta = (x.float() for x in (query, key, value, g, beta))
        query = query * query.shape[-1] ** -0.5
        length = key.shape[2]
        if not isinstance(length, int):
            raise NotImplementedError(
                "GatedDeltaUpdate: the sequence length is symbolic under torch.export; its "
                "steps are unrolled, so export it with a static length (leave the length "
                "axis out of dynamic_shapes)"
            )
        decay = g.exp()
        state = initial_state.float()
        reads = []
        for t in range(length):
            state = state * decay[:, :, t, None, None]
            k_t = key[:, :, t, :, None]  # (b, h, dk, 1)
            remembered = (state * k_t).sum(dim=-2)  # what the state maps k_t to
            delta = (value[:, :, t] - remembered) * beta[:, :, t, None]
            state = state + k_t * delta.unsqueeze(-2)
            reads.append((state * query[:, :, t, :, None]).sum(dim=-2))
        output = torch.stack(reads, dim=1)  # (b, length, h, dv)
        return output.to(dtype), state.to(dtype)

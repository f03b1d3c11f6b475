"""The seed kernels: the examples of Apple's ``TorchMetalKernel`` documentation.

Written the way a user writes them, and defined once: the demo
(``python -m coreai_torch demo``) runs them and the test suite checks them.
Importing this module defines their ops (``torch.ops.coreai_metal_kernels.*``).

>>> import torch
>>> from coreai_torch.examples import custom_add
>>> x = torch.arange(4.0)
>>> custom_add(x, x, threads_per_grid=(4, 1, 1), threads_per_thread_group=(4, 1, 1),
...            result_shapes=[[4]])
tensor([0., 2., 4., 6.])
"""

from __future__ import annotations

import torch
from torch import nn

from . import MetalParameter
from .kernel import TorchMetalKernel

__all__ = [
    "AddModel",
    "MatmulModel",
    "SinCosModel",
    "custom_add",
    "custom_matmul",
    "rms_norm",
    "scale_shift",
    "sincos",
]

_ID = [MetalParameter("id", "uint", "thread_position_in_grid")]


def torch_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


custom_add = TorchMetalKernel(
    name="vector_add",
    input_names=["x", "y"],
    result_names=["output"],
    src="output[id] = x[id] + y[id];",
    torch_defn=torch_add,
    metal_params=_ID,
)


class AddModel(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return custom_add(
            x,
            y,
            threads_per_grid=(x.shape[0], 1, 1),
            threads_per_thread_group=(1, 1, 1),
            result_shapes=[list(x.shape)],
        )


def torch_sincos(x: torch.Tensor) -> list[torch.Tensor]:
    return [torch.sin(x), torch.cos(x)]


sincos = TorchMetalKernel(
    name="sincos",
    input_names=["x"],
    result_names=["out_sin", "out_cos"],
    src="out_sin[id] = sin(x[id]); out_cos[id] = cos(x[id]);",
    torch_defn=torch_sincos,
    metal_params=_ID,
)


class SinCosModel(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        results = sincos(
            x,
            threads_per_grid=(x.shape[0], 1, 1),
            threads_per_thread_group=(1, 1, 1),
            result_shapes=[list(x.shape), list(x.shape)],
        )
        return results[0] + results[1]


def torch_matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.matmul(x, y)


# Metal dimension 0 is torch's innermost: a torch [M, K] tensor is read A[k, m].
custom_matmul = TorchMetalKernel(
    "matmul",
    input_names=["A", "B"],
    result_names=["C"],
    src="""
        const uint K = A.get_extent(0);
        const uint M = A.get_extent(1);
        const uint N = B.get_extent(0);
        if (gid.x >= N || gid.y >= M) return;
        TYPE sum = 0.0f;
        for (uint k = 0; k < K; ++k) {
            sum += A[k, gid.y] * B[gid.x, k];
        }
        C[gid.x, gid.y] = sum;
    """,
    torch_defn=torch_matmul,
    metal_params=[MetalParameter("gid", "uint2", "thread_position_in_grid")],
    template_dtypes={"A": "TYPE"},
)


class MatmulModel(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        m, n = a.shape[0], b.shape[1]
        return custom_matmul(
            a,
            b,
            threads_per_grid=(n, m, 1),
            threads_per_thread_group=(8, 8, 1),
            result_shapes=[[m, n]],
        )


def torch_scale_shift(x: torch.Tensor, n: int, scale: float, negate: bool) -> torch.Tensor:
    out = x * scale + n
    return -out if negate else out


scale_shift = TorchMetalKernel(
    "scale_shift",
    input_names=["x", "n", "scale", "negate"],
    result_names=["out"],
    src="""
        if (id >= out.get_extent(0)) return;
        float v = x[id] * scale + n;
        out[id] = negate ? -v : v;
    """,
    torch_defn=torch_scale_shift,
    metal_params=_ID,
)


def torch_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    variance = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(variance + eps)).to(x.dtype) * weight


# One threadgroup per row; 32 threads (one SIMD-group) reduce the sum of squares
# with simd_sum. A torch [rows, dim] tensor is read as x[col, row].
rms_norm = TorchMetalKernel(
    "rms_norm",
    ["x", "weight", "eps"],
    ["out"],
    src="""
        const uint dim = x.get_extent(0);
        const uint row = group.x;
        float partial = 0.0f;
        for (uint c = lane; c < dim; c += 32) {
            float v = x[c, row];
            partial += v * v;
        }
        const float scale = rsqrt(simd_sum(partial) / float(dim) + eps);
        for (uint c = lane; c < dim; c += 32) {
            out[c, row] = x[c, row] * scale * weight[c];
        }
    """,
    torch_defn=torch_rms_norm,
    metal_params=[
        MetalParameter("group", "uint3", "threadgroup_position_in_grid"),
        MetalParameter("lane", "uint", "thread_index_in_simdgroup"),
    ],
)

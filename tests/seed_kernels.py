"""The kernels of Apple's TorchMetalKernel documentation, written the same way a user would.

Shared by the front-end, export and converter tests.
"""

import torch
from torch import nn

from coreai_torch import MetalParameter, TorchMetalKernel


def torch_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


custom_add = TorchMetalKernel(
    name="vector_add",
    input_names=["x", "y"],
    result_names=["output"],
    src="output[id] = x[id] + y[id];",
    torch_defn=torch_add,
    metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")],
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
    metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")],
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
    metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")],
)

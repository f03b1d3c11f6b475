"""Rank-0 results and 0-d tensor inputs of kernels in converted programs.

Core AI's runtime binds tensors only: a 0-d tensor input cannot be the
``constant T&`` parameter Apple's rendering gives it (nothing is baked in for
it, unlike a scalar). It reaches the kernel as a one-element tensor read into a
local of its name, so the body is the one that runs eagerly. A rank-0 result is
a rank-0 tensor. These programs must verify and save (Linux cannot run
metal4_kernel).
"""

from __future__ import annotations

from pathlib import Path

import torch
from support.kernels import rank0_sum
from torch import nn

from coreai_torch.converter import TorchConverter


class Model(nn.Module):
    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        total = rank0_sum(
            x,
            bias,
            threads_per_grid=(1, 1, 1),
            threads_per_thread_group=(1, 1, 1),
            result_shapes=[[]],
        )
        return total * 2


def test_rank_zero_result_and_zero_d_input_convert(tmp_path: Path) -> None:
    args = (torch.arange(6.0), torch.tensor(0.5))
    assert Model()(*args).item() == 31.0  # eagerly: (15 + 0.5) * 2
    program = torch.export.export(Model(), args)
    converted = (
        TorchConverter()
        .register_custom_kernels([rank0_sum])
        .add_exported_program(program, input_names=["x", "bias"], output_names=["y"])
        .to_coreai()
    )
    text = str(converted)
    assert text.count("coreai.metal4_kernel") == 1
    # The 0-d input is a one-element tensor parameter, read into `bias`.
    assert "tensor<device float, metal::dextents<int, 1>, tensor_handle> coreai_buf_bias" in text
    assert "const float bias = coreai_buf_bias[0];" in text
    assert "constant float& bias" not in text
    # The rank-0 result is a rank-0 tensor of the kernel and of the program.
    assert "tensor<device float, metal::dextents<int, 0>, tensor_handle> total" in text
    assert "tensor<0xui32>" in text  # its (empty) result shape
    converted.save_asset(tmp_path / "rank0.aimodel")
    assert (tmp_path / "rank0.aimodel").is_dir()

"""The user-lowering examples of Apple's custom-op-lowering guide, run unchanged.

They import ``get_operand`` / ``get_operands`` from ``coreai_torch._utils`` and
register lowerings with the ``(values_map, node, loc)`` signature. (The guide
also calls ``program.optimize()``, which coreai-core 1.0.0b3's ``AIProgram``
does not have; ``to_coreai`` already returns an optimized program.)
"""

import numpy as np
import pytest
import torch
from coreai._compiler.dialects import coreai
from torch import nn

from coreai_torch import TorchConverter, get_decomp_table
from coreai_torch._utils import get_operand, get_operands
from coreai_torch.runtime import run_program

# The guide calls run_decompositions itself, which warns from inside torch 2.13
# (a deprecated pytree class met while deep-copying); not ours to fix.
_TORCH_DEEPCOPY_WARNING = "ignore:`isinstance\\(treespec, LeafSpec\\)`:FutureWarning"
pytestmark = pytest.mark.filterwarnings(_TORCH_DEEPCOPY_WARNING)


@torch.library.custom_op("guide_lib::scaled_add", mutates_args=())
def scaled_add(x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    return x + scale * y


@scaled_add.register_fake
def _(x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.empty_like(x)


class ScaledAddModel(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.ops.guide_lib.scaled_add(x, y, 0.5)


def test_scaled_add_lowering_with_get_operands():
    exported = torch.export.export(ScaledAddModel().eval(), (torch.randn(4, 8), torch.randn(4, 8)))
    exported = exported.run_decompositions(get_decomp_table())
    converter = TorchConverter()

    @converter.register_torch_lowering("guide_lib::scaled_add.default")
    def lower_scaled_add(values_map, node, loc):
        x, y = get_operands(values_map, node, [0, 1], loc)
        scale_val = coreai.constant(node.args[2], dtype=x.type.element_type)
        return coreai.broadcasting_add(x, coreai.broadcasting_mul(y, scale_val, loc=loc), loc=loc)

    program = converter.add_exported_program(
        exported, input_names=["x", "y"], output_names=["result"]
    ).to_coreai()
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    out = run_program(program, {"x": x, "y": y})["result"]
    # One multiply and one add in float32 on both sides: identical up to rounding order.
    torch.testing.assert_close(out, x + 0.5 * y, rtol=1e-6, atol=1e-6)


class PoolModel(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.adaptive_avg_pool2d(x, (1, 1))


def test_override_builtin_lowering_with_get_operand():
    exported = torch.export.export(PoolModel().eval(), (torch.randn(1, 3, 8, 8),))
    exported = exported.run_decompositions(get_decomp_table())
    converter = TorchConverter()

    @converter.register_torch_lowering("aten::_adaptive_avg_pool2d.default", allow_override=True)
    def lower_pool(values_map, node, loc):
        x = get_operand(values_map, node, 0, loc)
        out_h, out_w = node.args[1]
        in_h, in_w = x.type.shape[2], x.type.shape[3]
        stride_h, stride_w = in_h // out_h, in_w // out_w
        kernel_h, kernel_w = in_h - (out_h - 1) * stride_h, in_w - (out_w - 1) * stride_w
        return coreai.broadcasting_divide(
            coreai.sumpool2d(
                x,
                kernel_size=np.array([kernel_h, kernel_w], dtype=np.uint32),
                strides=np.array([stride_h, stride_w], dtype=np.uint32),
                dilation=coreai.constant([1, 1], dtype=np.uint32),
            ),
            coreai.cast(float(kernel_h * kernel_w), x.type.element_type),
        )

    program = converter.add_exported_program(exported).to_coreai()
    x = torch.randn(1, 3, 8, 8)
    (out,) = run_program(program, {"x": x}).values()
    # A 64-term float32 sum: summation order differs from torch's, ~1e-6 relative.
    torch.testing.assert_close(out, x.mean((2, 3), keepdim=True), rtol=1e-5, atol=1e-6)


def test_get_operand_constants():
    class Affine(nn.Module):
        def forward(self, x):
            return x * 3 + 1.5

    exported = torch.export.export(Affine(), (torch.randn(4),))
    seen = {}
    converter = TorchConverter()

    @converter.register_torch_lowering("aten::mul.Tensor", allow_override=True)
    def lower_mul(values_map, node, loc):
        x, k = get_operands(values_map, node, [0, 1], loc)
        seen["k"] = str(k.type)
        return coreai.broadcasting_mul(x, coreai.cast(k, x.type.element_type))

    program = converter.add_exported_program(exported, input_names=["x"]).to_coreai()
    assert seen["k"] == "tensor<si32>"
    x = torch.randn(4)
    (out,) = run_program(program, {"x": x}).values()
    torch.testing.assert_close(out, x * 3 + 1.5)

"""Views, joins, creation and dtype conversions; static and dynamic shapes.

These ops move or create values without arithmetic (except arange), so every
result must match PyTorch exactly.
"""

from __future__ import annotations

import pytest
import torch
from support.coreai_run import Lambda, assert_converted_matches, convert, run_program
from torch.export import Dim


def _data(*shape: int) -> torch.Tensor:
    return torch.arange(torch.Size(shape).numel(), dtype=torch.float32).reshape(shape)


SHAPE_OPS = {
    "view": lambda x: x.view(-1),
    "reshape": lambda x: x.reshape(4, 6),
    "permute": lambda x: x.permute(2, 0, 1),
    "transpose": lambda x: x.transpose(0, 2),
    "mT": lambda x: x.mT,
    "expand": lambda x: x[:, :1].expand(2, 5, 4),
    "expand_new_dim": lambda x: x[None].expand(3, 2, 3, 4),
    "squeeze": lambda x: x[:, :1].squeeze(1),
    "squeeze_noop": lambda x: x.squeeze(0),
    "unsqueeze": lambda x: x.unsqueeze(-1),
    "flatten": lambda x: x.flatten(1),
    "flatten_range": lambda x: x.flatten(0, 1),
    "unflatten": lambda x: x.unflatten(2, (2, 1, 2)),
    "slice": lambda x: x[:, 1:3],
    "slice_step": lambda x: x[..., ::2],
    "slice_negative": lambda x: x[:, -2:],
    "slice_past_end": lambda x: x[:, 1:100],
    "select": lambda x: x[1],
    "select_negative": lambda x: x[:, -1],
    "narrow": lambda x: x.narrow(2, 1, 2),
    "cat": lambda x: torch.cat([x, x * 2], 1),
    "cat_negative_dim": lambda x: torch.cat([x, x], -1),
    "stack": lambda x: torch.stack([x, x + 1], 1),
    "split": lambda x: x.split(2, 2),
    "split_sizes": lambda x: x.split([1, 2], 1),
    "chunk": lambda x: x.chunk(2, -1),
    "chunk_fewer_than_asked": lambda x: x.chunk(3, -1),
    "unbind": lambda x: x.unbind(1),
    "repeat": lambda x: x.repeat(2, 1, 3),
    "repeat_new_dims": lambda x: x.repeat(2, 1, 1, 1),
    "tile": lambda x: x.tile((2,)),
    "tile_new_dims": lambda x: x.tile((2, 1, 3, 1)),
    "flip": lambda x: x.flip(0, 2),
    "roll": lambda x: x.roll(1, 2),
    "roll_two": lambda x: x.roll((1, -1), (0, 1)),
    "roll_flat": lambda x: x.roll(5),
    "contiguous": lambda x: x.transpose(0, 1).contiguous(),
    "clone": lambda x: x.clone(),
}


@pytest.mark.parametrize("name", sorted(SHAPE_OPS))
def test_shape_op(name: str) -> None:
    assert_converted_matches(Lambda(SHAPE_OPS[name]), [_data(2, 3, 4)])


CREATION = {
    "arange": lambda x: torch.arange(5) + x.sum().long(),
    "arange_float_step": lambda x: torch.arange(1, 4, 0.5) * x[0, 0],
    "full": lambda x: torch.full((2, 3), 1.5) + x,
    "zeros": lambda x: torch.zeros(3) + x[0],
    "ones_int": lambda x: torch.ones(2, 3, dtype=torch.int32) + x.int(),
    "zeros_like": lambda x: torch.zeros_like(x),
    "ones_like": lambda x: torch.ones_like(x) * 2,
    "full_like": lambda x: torch.full_like(x, 3),
    "to_half": lambda x: x.to(torch.float16),
    "to_device_and_dtype": lambda x: x.to("cpu", torch.float16),
    "to_same_device": lambda x: (x * 2).to(x.device),
    "new_ones": lambda x: x.new_ones(2, 4) + x[:, :1],
    "new_zeros": lambda x: x.new_zeros((3,), dtype=torch.int32),
    "new_full": lambda x: x.new_full((2, 3), 2.5) * x,
    # new_empty's contents are unspecified: only its shape and dtype reach the result.
    "new_empty": lambda x: torch.zeros_like(x.new_empty(4, 2)),
    "to_int": lambda x: (x * 1.5).int(),
    "to_long": lambda x: (x - 2.5).long(),
    "to_bool": lambda x: (x - 1).bool(),
    "bool_to_float": lambda x: (x > 2).float(),
    "type_as": lambda x: x.type_as(torch.ones(1, dtype=torch.int32)),
    "int_to_float_div": lambda x: x.int() / 2,
}


@pytest.mark.parametrize("name", sorted(CREATION))
def test_creation_and_conversion(name: str) -> None:
    # Conversions are exact: every value is representable in the target type.
    assert_converted_matches(Lambda(CREATION[name]), [_data(2, 3) * 0.5])


def test_int64_input_is_int32_in_the_program() -> None:
    program, _, _ = convert(Lambda(lambda i: i * 2), [torch.arange(6)])
    assert "tensor<6xsi32>" in str(program)
    assert "si64" not in str(program)
    assert_converted_matches(Lambda(lambda i: (i * 2, i.sum())), [torch.arange(6)])


BATCH = Dim("batch", min=3, max=64)


DYNAMIC = {
    "elementwise": lambda x: torch.relu(x) * 2,
    "view": lambda x: x.view(x.shape[0] * 2, -1),
    "flatten": lambda x: x.flatten(),
    "sum": lambda x: x.sum(0, keepdim=True),
    "mean_dynamic_axis": lambda x: x.mean(0),
    "var_dynamic_axis": lambda x: x.var(0),
    "slice_to_size": lambda x: x[: x.shape[0] - 1],
    "slice_tail": lambda x: x[1:],
    "select_last": lambda x: x[-1],
    "expand": lambda x: x[:, :1].expand(-1, 6),
    "cat": lambda x: torch.cat([x, x], 0),
    "full": lambda x: torch.full((x.shape[0], 2), 3.0),
    "full_computed_size": lambda x: torch.full((x.shape[0] + 1, 2), 3.0),
    "ones_like": lambda x: torch.ones_like(x),
    "new_ones": lambda x: x.new_ones(x.shape[0], 2) + x[:, :2],
    "arange": lambda x: torch.arange(x.shape[0]).float(),
    "repeat": lambda x: x.repeat(2, 1),
    "permute": lambda x: x.permute(1, 0),
    "softmax": lambda x: x.softmax(0),
}


@pytest.mark.parametrize("name", sorted(DYNAMIC))
def test_dynamic_batch(name: str) -> None:
    # Exported at batch 4, run at batch 6: sizes are computed in the program.
    assert_converted_matches(
        Lambda(DYNAMIC[name]),
        [_data(4, 6)],
        run_args=[_data(6, 6) - 10],
        dynamic_shapes=(({0: BATCH},),),
        rtol=1e-5,
        atol=1e-5,
    )


def test_dynamic_program_has_no_constant_batch() -> None:
    program, _, _ = convert(
        Lambda(lambda x: x.view(x.shape[0] * 2, -1)), [_data(4, 6)], dynamic_shapes=(({0: BATCH},),)
    )
    text = str(program)
    assert "tensor<?x6xf32>" in text
    # The one symbolic size is left for reshape to infer: no size is baked in.
    assert "dense<[-1, 3]>" in text and "dense<[8, 3]>" not in text
    for batch in (1, 5):
        x = _data(batch, 6)
        out = run_program(program, {"in0": x})["out0"]
        torch.testing.assert_close(out, x.view(batch * 2, -1), rtol=0, atol=0)

"""Recurrent layers: lstm, gru, rnn_tanh and rnn_relu, unrolled over time.

``torch.export`` keeps ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` as one op whose
``params`` are, per layer and direction, ``w_ih, w_hh[, b_ih, b_hh]``. The
input projection of every time step is one matmul per layer and direction;
the recurrence is unrolled step by step (the sequence length must be static,
the batch may be dynamic). A bidirectional layer runs the reverse direction
over the reversed steps and concatenates both along the features, as torch
does. Gate order is torch's: LSTM ``i, f, g, o``; GRU ``r, z, n``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import RankedTensorType, Value

from ..lowering_context import LoweringContext
from ..registry import register_lowering
from ._layout import i32, permute, squeeze, swap_last_two, unsqueeze
from .linalg import matmul

aten = torch.ops.aten

# One step: (projected input [B, G], state, recurrent weight, recurrent bias)
# -> (output h [B, H], new state).
Step = Callable[[Value, Any, Value, Value | None], tuple[Value, Any]]


def _chunks(x: Value, count: int, width: int) -> list[Value]:
    """The ``count`` equal feature chunks of a [B, count * width] value."""
    pieces = []
    for k in range(count):
        starts = i32([0, k * width])
        ends = np.array([np.iinfo(np.int32).max, (k + 1) * width], dtype=np.int32)
        pieces.append(coreai.slice_(x, starts, ends, i32([1, 1])))
    return pieces


def _recurrent(h: Value, weight: Value, bias: Value | None) -> Value:
    out = matmul(h, swap_last_two(weight))
    return out if bias is None else coreai.broadcasting_add(out, bias)


def _lstm_step(projected: Value, state: Any, weight: Value, bias: Value | None):
    h, c = state
    width = weight.type.shape[1]
    gates = coreai.broadcasting_add(projected, _recurrent(h, weight, bias))
    i, f, g, o = _chunks(gates, 4, width)
    c = coreai.broadcasting_add(
        coreai.broadcasting_mul(coreai.sigmoid(f), c),
        coreai.broadcasting_mul(coreai.sigmoid(i), coreai.tanh(g)),
    )
    h = coreai.broadcasting_mul(coreai.sigmoid(o), coreai.tanh(c))
    return h, (h, c)


def _gru_step(projected: Value, state: Any, weight: Value, bias: Value | None):
    h = state
    width = weight.type.shape[1]
    x_r, x_z, x_n = _chunks(projected, 3, width)
    h_r, h_z, h_n = _chunks(_recurrent(h, weight, bias), 3, width)
    r = coreai.sigmoid(coreai.broadcasting_add(x_r, h_r))
    z = coreai.sigmoid(coreai.broadcasting_add(x_z, h_z))
    n = coreai.tanh(coreai.broadcasting_add(x_n, coreai.broadcasting_mul(r, h_n)))
    # (1 - z) * n + z * h, written as n + z * (h - n).
    h = coreai.broadcasting_add(n, coreai.broadcasting_mul(z, coreai.broadcasting_sub(h, n)))
    return h, h


def _simple_step(activation):
    def step(projected: Value, state: Any, weight: Value, bias: Value | None):
        h = activation(coreai.broadcasting_add(projected, _recurrent(state, weight, bias)))
        return h, h

    return step


def _run_layer(
    steps: list[Value], state: Any, weights: list[Value], step: Step
) -> tuple[list[Value], Any]:
    """One direction of one layer over ``steps`` (each [B, I]); returns outputs and state."""
    w_ih, w_hh, *biases = weights
    b_ih, b_hh = biases if biases else (None, None)
    # The input projection of all steps at once: [T, B, I] @ [I, G].
    stacked = coreai.concat(np.int32(0), [unsqueeze(s, 0) for s in steps])
    projected = coreai.broadcasting_batch_matmul(stacked, swap_last_two(w_ih))
    if b_ih is not None:
        projected = coreai.broadcasting_add(projected, b_ih)
    outputs = []
    for t in range(len(steps)):
        x_t = squeeze(_time_slice(projected, t), [0])
        h, state = step(x_t, state, w_hh, b_hh)
        outputs.append(h)
    return outputs, state


def _time_slice(x: Value, t: int) -> Value:
    """``x[t : t + 1]`` along the leading (time) dim, keeping the known sizes of the others."""
    rank = x.type.rank
    ends = np.full(rank, np.iinfo(np.int32).max, dtype=np.int32)
    ends[0] = t + 1
    starts = np.zeros(rank, dtype=np.int32)
    starts[0] = t
    step = coreai.slice_(x, starts, ends, np.ones(rank, dtype=np.int32))
    # The builder cannot tell the sizes a slice to "the end" keeps; a cast to
    # the same element type states them.
    known = RankedTensorType.get([1, *x.type.shape[1:]], x.type.element_type)
    return coreai.cast(step, known)


def _recurrent_network(ctx: LoweringContext, node: fx.Node, step: Step, lstm: bool) -> list[Value]:
    layers, bidirectional = ctx.arg("num_layers"), bool(ctx.arg("bidirectional"))
    if ctx.arg("train") and ctx.arg("dropout"):
        raise NotImplementedError(
            f"{node.name}: {node.target} with dropout={ctx.arg('dropout')} in training mode; "
            "a converted model runs inference, so call model.eval() before exporting"
        )
    source = ctx.arg("input")
    dtype = ctx.result_dtype(0)
    fake = ctx.fake(source)
    batch_first = bool(ctx.arg("batch_first"))
    unbatched = fake.dim() == 2
    time_axis = 1 if batch_first and not unbatched else 0
    length = fake.shape[time_axis]
    if not isinstance(length, int):
        raise NotImplementedError(
            f"{node.name}: {node.target} over a sequence of symbolic length {length}; the "
            "recurrence is unrolled, so export with a static sequence length"
        )
    x = ctx.value(source, dtype)
    if unbatched:
        x = unsqueeze(x, 1)
    elif batch_first:
        x = permute(x, [1, 0, 2])
    steps = [squeeze(_time_slice(x, t), [0]) for t in range(length)]
    params = [ctx.value(p, dtype) for p in ctx.arg("params")]
    per_direction = 4 if ctx.arg("has_biases") else 2
    if len(params) != layers * (2 if bidirectional else 1) * per_direction:
        raise NotImplementedError(
            f"{node.name}: {node.target} with {len(params)} parameter tensors; projections "
            "(LSTM proj_size) are not converted"
        )
    hx = ctx.arg("hx")
    initial = [ctx.value(h, dtype) for h in (hx if lstm else [hx])]
    if unbatched:
        initial = [unsqueeze(h, 1) for h in initial]
    directions = 2 if bidirectional else 1
    finals: list[list[Value]] = [[] for _ in initial]
    for layer in range(layers):
        outputs_per_direction = []
        for direction in range(directions):
            index = layer * directions + direction
            weights = params[index * per_direction : (index + 1) * per_direction]
            state_parts = [squeeze(_time_slice(h, index), [0]) for h in initial]
            state = tuple(state_parts) if lstm else state_parts[0]
            ordered = steps if direction == 0 else steps[::-1]
            outputs, state = _run_layer(ordered, state, weights, step)
            outputs_per_direction.append(outputs if direction == 0 else outputs[::-1])
            for parts, value in zip(finals, state if lstm else (state,), strict=True):
                parts.append(unsqueeze(value, 0))
        steps = [
            coreai.concat(np.int32(1), list(outs)) if directions == 2 else outs[0]
            for outs in zip(*outputs_per_direction, strict=True)
        ]
    output = coreai.concat(np.int32(0), [unsqueeze(s, 0) for s in steps])
    states = [coreai.concat(np.int32(0), parts) if len(parts) > 1 else parts[0] for parts in finals]
    if unbatched:
        output = squeeze(output, [1])
        states = [squeeze(s, [1]) for s in states]
    elif batch_first:
        output = permute(output, [1, 0, 2])
    return [output, *states]


@register_lowering(aten.lstm.input)
def lower_lstm(ctx: LoweringContext, node: fx.Node) -> list[Value]:
    return _recurrent_network(ctx, node, _lstm_step, lstm=True)


@register_lowering(aten.gru.input)
def lower_gru(ctx: LoweringContext, node: fx.Node) -> list[Value]:
    return _recurrent_network(ctx, node, _gru_step, lstm=False)


@register_lowering(aten.rnn_tanh.input)
def lower_rnn_tanh(ctx: LoweringContext, node: fx.Node) -> list[Value]:
    return _recurrent_network(ctx, node, _simple_step(coreai.tanh), lstm=False)


@register_lowering(aten.rnn_relu.input)
def lower_rnn_relu(ctx: LoweringContext, node: fx.Node) -> list[Value]:
    return _recurrent_network(ctx, node, _simple_step(coreai.relu), lstm=False)

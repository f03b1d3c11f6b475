"""Neural-network op families, each converted and run in Core AI's CPU runtime.

Tolerances:
- Ops that only move data (gather, index, scatter, pad, max pool, nearest
  upsampling, triangular masks, integer scans) must match exactly.
- float32 arithmetic uses rtol = atol = 1e-5. The inputs are O(1) and every
  result is a sum of at most ~150 products, so a different but correct
  summation order moves a result by about sqrt(150) * 2^-24 * |sum| ~ 1e-6;
  1e-5 leaves a 10x margin and still catches any wrong term (~1e-1).
- float16 results use rtol = atol = 2e-3: one half-precision rounding of the
  result is 2^-11 ~ 4.9e-4 relative, and our reductions accumulate in float32
  like torch's, so the results differ by at most a couple of such roundings.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from support.coreai_run import Lambda, assert_converted_matches, convert, run_program
from torch.export import Dim

FP32 = {"rtol": 1e-5, "atol": 1e-5}
FP16 = {"rtol": 2e-3, "atol": 2e-3}
EXACT = {"rtol": 0.0, "atol": 0.0}


def _randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed + 17 * len(shape) + sum(shape))
    return torch.randn(*shape, generator=generator).to(dtype)


def _randint(high: int, *shape: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed + 31 * sum(shape))
    return torch.randint(0, high, shape, generator=generator)


def _permutation_rows(n: int, *leading: int, keep: int, seed: int = 0) -> torch.Tensor:
    """Distinct indices along the last dim (scatter results are undefined for duplicates)."""
    return torch.argsort(_randn(*leading, n, seed=seed), dim=-1)[..., :keep]


def _assigned(x: torch.Tensor, where: tuple, values: torch.Tensor) -> torch.Tensor:
    """``x`` with ``x[where] = values``: an in-place index_put_ on a copy."""
    out = x.clone()
    out[where] = values
    return out


X3 = _randn(2, 5, 8)
X4 = _randn(2, 4, 7, 6)


def _repeat_kv(x: torch.Tensor, repeats: int) -> torch.Tensor:
    """transformers' repeat_kv: each head ``repeats`` times in a row (heads at dim -3)."""
    *lead, heads, length, size = x.shape
    expanded = x.unsqueeze(-3).expand(*lead, heads, repeats, length, size)
    return expanded.reshape(*lead, heads * repeats, length, size)


# Query, key and value with 4 (6) query heads for 2 key/value heads.
_QKV_GROUPED_2 = [_randn(2, 4, 5, 8), _randn(2, 2, 6, 8, seed=1), _randn(2, 2, 6, 8, seed=2)]
_QKV_GROUPED_3 = [_randn(2, 6, 5, 8), _randn(2, 2, 6, 8, seed=1), _randn(2, 2, 6, 8, seed=2)]

# name -> (function, inputs, tolerance)
CASES: dict[str, tuple[Callable, list[torch.Tensor], dict]] = {
    # linalg
    "mm": (torch.mm, [_randn(3, 4), _randn(4, 5, seed=1)], FP32),
    "bmm": (torch.bmm, [_randn(2, 3, 4), _randn(2, 4, 5, seed=1)], FP32),
    "matmul_3d_2d": (torch.matmul, [_randn(2, 3, 4), _randn(4, 5, seed=1)], FP32),
    "matmul_broadcast": (torch.matmul, [_randn(2, 1, 3, 4), _randn(3, 4, 5, seed=1)], FP32),
    "matmul_vector_left": (torch.matmul, [_randn(4), _randn(2, 4, 5, seed=1)], FP32),
    "matmul_vector_right": (torch.matmul, [_randn(2, 3, 4), _randn(4, seed=1)], FP32),
    "matmul_dot": (torch.matmul, [_randn(4), _randn(4, seed=1)], FP32),
    "linear": (F.linear, [X3, _randn(6, 8, seed=1), _randn(6, seed=2)], FP32),
    "linear_no_bias": (F.linear, [X3, _randn(6, 8, seed=1)], FP32),
    "addmm": (
        lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0),
        [_randn(5), _randn(3, 4, seed=1), _randn(4, 5, seed=2)],
        FP32,
    ),
    "addmm_beta0_ignores_nan": (
        lambda c, a, b: torch.addmm(c, a, b, beta=0.0),
        [torch.full((3, 5), float("nan")), _randn(3, 4, seed=1), _randn(4, 5, seed=2)],
        FP32,
    ),
    "baddbmm": (
        lambda c, a, b: torch.baddbmm(c, a, b, beta=0.5, alpha=2.0),
        [_randn(2, 3, 5), _randn(2, 3, 4, seed=1), _randn(2, 4, 5, seed=2)],
        FP32,
    ),
    "matmul_fp16": (
        torch.matmul,
        [_randn(2, 3, 16, dtype=torch.float16), _randn(16, 5, seed=1, dtype=torch.float16)],
        FP16,
    ),
    # normalisation
    "layer_norm": (
        lambda x, w, b: F.layer_norm(x, (8,), w, b),
        [X3, _randn(8, seed=1), _randn(8, seed=2)],
        FP32,
    ),
    "layer_norm_two_dims": (lambda x: F.layer_norm(x, (5, 8), eps=1e-3), [X3], FP32),
    "layer_norm_fp16": (
        lambda x: F.layer_norm(x, (8,)),
        [_randn(2, 5, 8, dtype=torch.float16)],
        FP16,
    ),
    "group_norm": (
        lambda x, w, b: F.group_norm(x, 2, w, b),
        [X4, _randn(4, seed=1), _randn(4, seed=2)],
        FP32,
    ),
    "group_norm_no_affine_1d": (lambda x: F.group_norm(x, 5), [_randn(2, 5, 9)], FP32),
    "batch_norm": (
        lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b, training=False, eps=1e-3),
        [X4, _randn(4, seed=1), torch.rand(4) + 0.5, _randn(4, seed=2), _randn(4, seed=3)],
        FP32,
    ),
    "batch_norm_1d_no_affine": (
        lambda x, m, v: F.batch_norm(x, m, v, training=False),
        [X3, _randn(5, seed=1), torch.rand(5) + 0.5],
        FP32,
    ),
    "rms_norm": (lambda x, w: F.rms_norm(x, (8,), w), [X3, _randn(8, seed=1)], FP32),
    "rms_norm_default_eps": (lambda x: F.rms_norm(x, (5, 8)), [X3], FP32),
    "rms_norm_fp16": (
        lambda x, w: F.rms_norm(x, (8,), w, eps=1e-6),
        [_randn(2, 5, 8, dtype=torch.float16), _randn(8, seed=1, dtype=torch.float16)],
        FP16,
    ),
    # indexing
    "embedding": (lambda w, i: F.embedding(i, w), [_randn(10, 4), _randint(10, 2, 3)], EXACT),
    "index_select": (
        lambda x, i: x.index_select(1, i),
        [X3, torch.tensor([0, 2, 4, 4])],
        EXACT,
    ),
    "index_select_scalar_index": (
        lambda x, i: x.index_select(2, i),
        [X3, torch.tensor(3)],
        EXACT,
    ),
    "gather": (lambda x, i: x.gather(2, i), [X3, _randint(8, 2, 5, 3)], EXACT),
    "gather_smaller_index": (lambda x, i: x.gather(1, i), [X3, _randint(5, 1, 3, 4)], EXACT),
    "index_one_tensor": (lambda x, i: x[:, i], [X3, torch.tensor([0, 2, 2])], EXACT),
    "index_negative": (lambda x, i: x[i], [X3, torch.tensor([-1, 0])], EXACT),
    "index_separated_broadcast": (
        lambda x, i, j: x[i, :, j],
        [X3, torch.tensor([0, 1, 1]), torch.tensor([[0], [7]])],
        EXACT,
    ),
    "index_adjacent_middle": (
        lambda x, i, j: x[:, i, j],
        [X3, torch.tensor([0, 1, 4]), torch.tensor([7, 0, -1])],
        EXACT,
    ),
    "index_put": (
        lambda x, i, v: x.index_put((i,), v),
        [X3, torch.tensor([1]), _randn(5, 8, seed=1)],
        EXACT,
    ),
    "index_put_broadcast_value": (
        lambda x, i, j: x.index_put((i, j), torch.tensor(7.0)),
        [X3, torch.tensor([0, 1]), torch.tensor([4, 2])],
        EXACT,
    ),
    "index_put_middle": (
        lambda x, i, v: _assigned(x, (slice(None), i), v),
        [X3, torch.tensor([3, 0]), _randn(2, 2, 8, seed=1)],
        EXACT,
    ),
    "index_put_separated": (
        lambda x, i, j, v: _assigned(x, (i, slice(None), j), v),
        [X3, torch.tensor([1, 0]), torch.tensor([6, 2]), _randn(2, 5, seed=1)],
        EXACT,
    ),
    "index_copy_middle": (
        lambda x, i, v: x.index_copy(1, i, v),
        [X3, torch.tensor([4, 0]), _randn(2, 2, 8, seed=1)],
        EXACT,
    ),
    "scatter_src": (
        lambda x, i, s: x.scatter(2, i, s),
        [X3, _permutation_rows(8, 2, 5, keep=3), _randn(2, 5, 3, seed=1)],
        EXACT,
    ),
    "scatter_index_smaller": (
        lambda x, i, s: x.scatter(2, i, s),
        [X3, _permutation_rows(8, 1, 3, keep=2), _randn(2, 5, 3, seed=1)],
        EXACT,
    ),
    "scatter_value": (
        lambda x, i: x.scatter(1, i, 1.5),
        [X3, _permutation_rows(5, 2, 8, keep=2).transpose(1, 2).contiguous()],
        EXACT,
    ),
    "scatter_add": (
        lambda x, i, s: x.scatter_add(2, i, s),
        [X3, _randint(8, 2, 5, 6), _randn(2, 5, 6, seed=1)],
        FP32,
    ),
    "scatter_reduce_amax": (
        lambda x, i, s: x.scatter_reduce(2, i, s, "amax"),
        [X3, _randint(8, 2, 5, 6), _randn(2, 5, 6, seed=1)],
        EXACT,
    ),
    "slice_scatter_step": (
        lambda x, s: torch.slice_scatter(x, s, 2, 1, 7, 2),
        [X3, _randn(2, 5, 3, seed=1)],
        EXACT,
    ),
    "slice_scatter_to_end": (
        lambda x, s: torch.slice_scatter(x, s, 1, 2),
        [X3, _randn(2, 3, 8, seed=1)],
        EXACT,
    ),
    "select_scatter": (
        lambda x, s: torch.select_scatter(x, s, 1, -1),
        [X3, _randn(2, 8, seed=1)],
        EXACT,
    ),
    # padding
    "pad_constant": (lambda x: F.pad(x, (1, 2), value=3.0), [X3], EXACT),
    "pad_negative_crops": (lambda x: F.pad(x, (-1, 2, 1, -2)), [X3], EXACT),
    "pad_reflect_1d": (lambda x: F.pad(x, (1, 2), mode="reflect"), [X3], EXACT),
    "pad_reflect_2d": (lambda x: F.pad(x, (1, 2, 2, 1), mode="reflect"), [X4], EXACT),
    "pad_replicate": (lambda x: F.pad(x, (1, 2, 1, 1), mode="replicate"), [X4], EXACT),
    "pad_circular": (lambda x: F.pad(x, (1, 2, 1, 1), mode="circular"), [X4], EXACT),
    # convolution
    "conv1d": (
        lambda x, w, b: F.conv1d(x, w, b, padding=1, stride=2),
        [X3, _randn(3, 5, 3, seed=1), _randn(3, seed=2)],
        FP32,
    ),
    "conv1d_dilated": (
        lambda x, w: F.conv1d(x, w, padding=2, dilation=2),
        [_randn(2, 4, 9), _randn(6, 4, 3, seed=1)],
        FP32,
    ),
    "conv2d_groups_stride": (
        lambda x, w, b: F.conv2d(x, w, b, padding=1, stride=2, groups=2),
        [X4, _randn(6, 2, 3, 3, seed=1), _randn(6, seed=2)],
        FP32,
    ),
    "conv2d_dilation_asymmetric": (
        lambda x, w: F.conv2d(x, w, padding=(2, 1), dilation=(2, 1)),
        [X4, _randn(3, 4, 3, 3, seed=1)],
        FP32,
    ),
    "conv2d_depthwise": (
        lambda x, w: F.conv2d(x, w, padding=1, groups=4),
        [X4, _randn(4, 1, 3, 3, seed=1)],
        FP32,
    ),
    "conv2d_same_even_kernel": (
        lambda x, w: F.conv2d(x, w, padding="same"),
        [X4, _randn(3, 4, 4, 4, seed=1)],
        FP32,
    ),
    "conv_transpose2d": (
        lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
        [X4, _randn(4, 3, 3, 3, seed=1), _randn(3, seed=2)],
        FP32,
    ),
    "conv_transpose2d_groups": (
        lambda x, w: F.conv_transpose2d(x, w, stride=2, groups=2),
        [X4, _randn(4, 3, 2, 2, seed=1)],
        FP32,
    ),
    "conv_transpose1d": (
        lambda x, w: F.conv_transpose1d(x, w, stride=2),
        [X3, _randn(5, 2, 3, seed=1)],
        FP32,
    ),
    "conv3d": (
        lambda x, w: F.conv3d(x, w, padding=1),
        [_randn(1, 2, 4, 5, 6), _randn(3, 2, 3, 3, 3, seed=1)],
        FP32,
    ),
    # pooling
    "max_pool2d": (lambda x: F.max_pool2d(x, 2), [X4], EXACT),
    "max_pool2d_pad_stride": (lambda x: F.max_pool2d(x, 3, stride=2, padding=1), [X4], EXACT),
    "max_pool2d_ceil": (lambda x: F.max_pool2d(x, 3, stride=2, ceil_mode=True), [X4], EXACT),
    "max_pool2d_ceil_pad": (
        lambda x: F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True),
        [X4],
        EXACT,
    ),
    "max_pool2d_dilation": (lambda x: F.max_pool2d(x, 2, dilation=2), [X4], EXACT),
    "max_pool2d_unbatched": (lambda x: F.max_pool2d(x, 2), [_randn(4, 7, 6)], EXACT),
    "avg_pool2d": (lambda x: F.avg_pool2d(x, 2), [X4], FP32),
    "avg_pool2d_pad": (lambda x: F.avg_pool2d(x, 3, stride=2, padding=1), [X4], FP32),
    "avg_pool2d_pad_excluded": (
        lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False),
        [X4],
        FP32,
    ),
    "avg_pool2d_ceil": (lambda x: F.avg_pool2d(x, 3, stride=2, ceil_mode=True), [X4], FP32),
    "avg_pool2d_ceil_pad": (
        lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True),
        [X4],
        FP32,
    ),
    "avg_pool2d_divisor": (lambda x: F.avg_pool2d(x, 2, divisor_override=3), [X4], FP32),
    "adaptive_avg_pool2d_1": (lambda x: F.adaptive_avg_pool2d(x, 1), [X4], FP32),
    "adaptive_avg_pool2d_unbatched": (lambda x: F.adaptive_avg_pool2d(x[0], (2, 3)), [X4], FP32),
    "adaptive_avg_pool2d_uneven": (lambda x: F.adaptive_avg_pool2d(x, (3, 4)), [X4], FP32),
    "adaptive_avg_pool2d_even": (lambda x: F.adaptive_avg_pool2d(x, (7, 3)), [X4], FP32),
    # attention
    "sdpa": (
        F.scaled_dot_product_attention,
        [_randn(1, 2, 4, 8), _randn(1, 2, 6, 8, seed=1), _randn(1, 2, 6, 8, seed=2)],
        FP32,
    ),
    "sdpa_causal_rectangular": (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        [_randn(1, 2, 4, 8), _randn(1, 2, 6, 8, seed=1), _randn(1, 2, 6, 8, seed=2)],
        FP32,
    ),
    "sdpa_bool_mask_with_empty_row": (
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
        [
            _randn(1, 2, 4, 8),
            _randn(1, 2, 6, 8, seed=1),
            _randn(1, 2, 6, 8, seed=2),
            torch.tensor(
                [[1, 0, 1, 1, 0, 1], [0] * 6, [1] * 6, [0, 0, 0, 0, 0, 1]], dtype=torch.bool
            ),
        ],
        FP32,
    ),
    "sdpa_float_mask_scale": (
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.3),
        [
            _randn(1, 2, 4, 8),
            _randn(1, 2, 6, 8, seed=1),
            _randn(1, 2, 6, 8, seed=2),
            _randn(1, 1, 4, 6, seed=3),
        ],
        FP32,
    ),
    "sdpa_gqa_causal": (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
        [_randn(2, 4, 5, 8), _randn(2, 2, 5, 8, seed=1), _randn(2, 2, 5, 8, seed=2)],
        FP32,
    ),
    "sdpa_gqa_mask_per_head": (
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True),
        [*_QKV_GROUPED_2, _randn(2, 4, 5, 6, seed=3) > -0.8],
        FP32,
    ),
    "sdpa_gqa_mask_per_batch": (
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True),
        [*_QKV_GROUPED_3, _randn(2, 1, 5, 6, seed=3)],
        FP32,
    ),
    # transformers' repeat_kv before attention: read as grouped-query attention.
    "sdpa_repeat_kv_mask_per_head": (
        lambda q, k, v, m: F.scaled_dot_product_attention(
            q, _repeat_kv(k, 3), _repeat_kv(v, 3), attn_mask=m
        ),
        [*_QKV_GROUPED_3, _randn(2, 6, 5, 6, seed=3)],
        FP32,
    ),
    # A mask computed from constants (known when converting), with a first
    # row that attends to nothing.
    "sdpa_repeat_kv_known_mask": (
        lambda q, k, v: F.scaled_dot_product_attention(
            q, _repeat_kv(k, 3), _repeat_kv(v, 3), attn_mask=torch.ones(5, 6).tril(-1) > 0
        ),
        _QKV_GROUPED_3,
        FP32,
    ),
    # Repeated by the model, and again by enable_gqa: six query heads per key head.
    "sdpa_repeat_kv_and_enable_gqa": (
        lambda q, k, v: F.scaled_dot_product_attention(
            q, _repeat_kv(k, 3), _repeat_kv(v, 3), is_causal=True, enable_gqa=True
        ),
        [_randn(1, 12, 5, 8), _randn(1, 2, 5, 8, seed=1), _randn(1, 2, 5, 8, seed=2)],
        FP32,
    ),
    "sdpa_repeat_kv_causal_3d": (
        lambda q, k, v: F.scaled_dot_product_attention(
            q, _repeat_kv(k, 2), _repeat_kv(v, 2), is_causal=True
        ),
        [_randn(4, 5, 8), _randn(2, 5, 8, seed=1), _randn(2, 5, 8, seed=2)],
        FP32,
    ),
    "sdpa_repeat_kv_also_returned": (
        lambda q, k, v: (
            F.scaled_dot_product_attention(q, _repeat_kv(k, 2), _repeat_kv(v, 2)),
            _repeat_kv(k, 2),
        ),
        [_randn(1, 4, 5, 8), _randn(1, 2, 5, 8, seed=1), _randn(1, 2, 5, 8, seed=2)],
        FP32,
    ),
    "sdpa_3d": (
        F.scaled_dot_product_attention,
        [_randn(3, 4, 8), _randn(3, 6, 8, seed=1), _randn(3, 6, 8, seed=2)],
        FP32,
    ),
    "sdpa_fp16": (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        [_randn(1, 2, 5, 16, seed=s, dtype=torch.float16) for s in range(3)],
        FP16,
    ),
    # upsampling
    "nearest_x2": (lambda x: F.interpolate(x, scale_factor=2), [X4], EXACT),
    "nearest_to_size": (lambda x: F.interpolate(x, size=(9, 9)), [X4], EXACT),
    "nearest_x1_5": (lambda x: F.interpolate(x, scale_factor=1.5), [X4], EXACT),
    "nearest_down": (lambda x: F.interpolate(x, size=(3, 4)), [X4], EXACT),
    "nearest_exact": (
        lambda x: F.interpolate(x, size=(10, 11), mode="nearest-exact"),
        [X4],
        EXACT,
    ),
    "bilinear_x2": (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), [X4], FP32),
    "bilinear_to_size": (lambda x: F.interpolate(x, size=(8, 9), mode="bilinear"), [X4], FP32),
    "bilinear_x1_7": (lambda x: F.interpolate(x, scale_factor=1.7, mode="bilinear"), [X4], FP32),
    "bilinear_align_corners": (
        lambda x: F.interpolate(x, size=(8, 9), mode="bilinear", align_corners=True),
        [X4],
        FP32,
    ),
    "bilinear_down": (lambda x: F.interpolate(x, size=(3, 4), mode="bilinear"), [X4], FP32),
    # scans and triangles
    "cumsum": (lambda x: x.cumsum(1), [X4], FP32),
    "cumsum_int": (lambda x: x.cumsum(-1), [_randint(5, 3, 6)], EXACT),
    "cumsum_bool": (lambda x: (x > 0).cumsum(-1), [_randn(3, 6)], EXACT),
    "cumprod": (lambda x: x.cumprod(2), [X4], FP32),
    "triu": (lambda x: x.triu(1), [X4], EXACT),
    "tril": (lambda x: x.tril(-1), [X4], EXACT),
    "tril_int": (lambda x: x.tril(), [_randint(5, 5, 6)], EXACT),
    # diff: exact for integers; one float32 subtraction per element otherwise.
    "diff": (torch.diff, [X3], FP32),
    "diff_dim0_twice": (lambda x: torch.diff(x, n=2, dim=0), [_randn(5, 3)], FP32),
    "diff_prepend_append": (
        lambda x, p, a: torch.diff(x, dim=1, prepend=p, append=a),
        [X3, _randn(2, 1, 8, seed=1), _randn(2, 3, 8, seed=2)],
        FP32,
    ),
    "diff_int": (lambda i: torch.diff(i, n=3), [_randint(50, 2, 9)], EXACT),
    "diff_bool": (lambda x: torch.diff(x > 0), [X3], EXACT),
    # Dropout in inference is the identity.
    "dropout_eval": (lambda x: F.dropout(x, 0.3, training=False) * 2, [X3], EXACT),
    "dropout_training_p0": (lambda x: F.dropout(x, 0.0, training=True), [X3], EXACT),
    "dropout1d_eval": (lambda x: F.dropout1d(x, 0.3, training=False), [X3], EXACT),
    "alpha_dropout_eval": (lambda x: F.alpha_dropout(x, 0.3, training=False), [X3], EXACT),
    "feature_alpha_dropout_eval": (
        lambda x: F.feature_alpha_dropout(x, 0.3, training=False),
        [X4],
        EXACT,
    ),
    # einsum: pairwise batched matmuls (sums of at most 8 products).
    "einsum_attention": (
        lambda q, k: torch.einsum("bhld,bhmd->bhlm", q, k),
        [_randn(2, 2, 3, 4), _randn(2, 2, 5, 4, seed=1)],
        FP32,
    ),
    "einsum_ellipsis": (
        lambda a, b: torch.einsum("...ij,...jk", a, b),
        [_randn(2, 3, 4), _randn(4, 5, seed=1)],
        FP32,
    ),
    "einsum_chain": (
        lambda a, b, c: torch.einsum("ij,jk,kl->il", a, b, c),
        [_randn(2, 3), _randn(3, 4, seed=1), _randn(4, 5, seed=2)],
        FP32,
    ),
    "einsum_outer_and_sum": (
        lambda a, b: torch.einsum("i,j->ij", a, b).sum() + torch.einsum("ij->", a[:, None] * b),
        [_randn(3), _randn(4, seed=1)],
        FP32,
    ),
    "einsum_broadcast_batch": (
        lambda a, b: torch.einsum("bid,bcd->bc", a, b),
        [_randn(2, 1, 4), _randn(2, 3, 4, seed=1)],
        FP32,
    ),
    # im2col is a one-hot depthwise convolution: every product is by 1 or 0.
    "unfold": (lambda x: F.unfold(x, kernel_size=3), [X4], EXACT),
    "unfold_strided_padded": (
        lambda x: F.unfold(x, kernel_size=(2, 3), stride=2, padding=1, dilation=(1, 2)),
        [X4],
        EXACT,
    ),
    # Bicubic weights sum 4 taps per dim, computed like torch's in float32.
    "bicubic_scale": (
        lambda x: F.interpolate(x, scale_factor=2, mode="bicubic", align_corners=False),
        [X4],
        FP32,
    ),
    "bicubic_size_align_corners": (
        lambda x: F.interpolate(x, size=(9, 4), mode="bicubic", align_corners=True),
        [X4],
        FP32,
    ),
    "bicubic_fractional_scale": (
        lambda x: F.interpolate(x, scale_factor=1.7, mode="bicubic", align_corners=False),
        [X4],
        FP32,
    ),
    "vector_norm_3": (lambda x: torch.linalg.vector_norm(x, 3, dim=(1, 2)), [X3], FP32),
    "vector_norm_inf": (lambda x: torch.linalg.vector_norm(x, float("inf"), dim=-1), [X3], EXACT),
    "vector_norm_0": (lambda x: torch.linalg.vector_norm(x.round(), 0), [X3], EXACT),
    "weight_norm": (
        lambda v, g: torch._weight_norm(v, g, 0),
        [_randn(6, 3, 4), _randn(6, 1, 1, seed=1)],
        FP32,
    ),
    "adaptive_avg_pool1d": (lambda x: F.adaptive_avg_pool1d(x, 3), [X3], FP32),
    "as_strided_reshape_permute": (lambda x: x.as_strided((4, 2, 3), (1, 12, 4)), [X4], EXACT),
    "as_strided_broadcast_offset": (lambda x: x.as_strided((3, 2), (0, 5), 2), [X3], EXACT),
    "topk": (lambda x: torch.topk(x, 3, dim=-1), [X3], EXACT),
    "topk_smallest": (lambda x: torch.topk(x, 2, dim=1, largest=False), [X3], EXACT),
    "sort_descending": (lambda x: torch.sort(x, dim=-1, descending=True), [X3], EXACT),
    "argsort_stable": (lambda x: torch.argsort(x.round(), dim=1, stable=True), [X3], EXACT),
    "repeat_interleave": (lambda x: x.repeat_interleave(3, dim=1), [X3], EXACT),
    "repeat_interleave_flat": (lambda x: x.repeat_interleave(2), [X3], EXACT),
    "meshgrid_xy": (
        lambda a, b: torch.meshgrid(a, b, indexing="xy"),
        [_randn(3), _randn(4, seed=1)],
        EXACT,
    ),
    "square_and_minimum": (lambda x, y: torch.square(x) + torch.min(x, y), [X3, X3 * 2], EXACT),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_nn_op(name: str) -> None:
    function, inputs, tolerance = CASES[name]
    assert_converted_matches(Lambda(function), inputs, **tolerance)


# -- dynamic shapes: one program, run at several sizes -------------------------

SEQ = Dim("seq", min=2, max=64)
BATCH = Dim("batch", min=1, max=16)

DYNAMIC_CASES: dict[str, tuple[Callable, list[torch.Tensor], tuple, list[list[torch.Tensor]]]] = {
    "linear_batch": (
        F.linear,
        [_randn(3, 8), _randn(5, 8, seed=1)],
        ({0: BATCH}, None),
        [[_randn(n, 8, seed=n), _randn(5, 8, seed=1)] for n in (1, 4, 9)],
    ),
    "layer_norm_seq": (
        lambda x: F.layer_norm(x, (8,)),
        [_randn(2, 5, 8)],
        ({1: SEQ},),
        [[_randn(2, n, 8, seed=n)] for n in (2, 7, 33)],
    ),
    "sdpa_causal_seq": (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        [_randn(1, 2, 5, 8, seed=s) for s in range(3)],
        ({2: SEQ}, {2: SEQ}, {2: SEQ}),
        [[_randn(1, 2, n, 8, seed=n + s) for s in range(3)] for n in (2, 6, 17)],
    ),
    "sdpa_repeat_kv_seq": (
        lambda q, k, v: F.scaled_dot_product_attention(
            q, _repeat_kv(k, 2), _repeat_kv(v, 2), is_causal=True
        ),
        [_randn(1, 4, 5, 8), _randn(1, 2, 5, 8, seed=1), _randn(1, 2, 5, 8, seed=2)],
        ({2: SEQ}, {2: SEQ}, {2: SEQ}),
        [
            [_randn(1, 4, n, 8, seed=n), *(_randn(1, 2, n, 8, seed=n + s) for s in (1, 2))]
            for n in (2, 6, 17)
        ],
    ),
    "embedding_seq": (
        lambda w, i: F.embedding(i, w),
        [_randn(10, 4), _randint(10, 1, 5)],
        (None, {1: SEQ}),
        [[_randn(10, 4), _randint(10, 1, n, seed=n)] for n in (2, 9, 20)],
    ),
    "conv2d_batch": (
        lambda x, w: F.conv2d(x, w, padding=1),
        [_randn(2, 3, 6, 6), _randn(4, 3, 3, 3, seed=1)],
        ({0: BATCH}, None),
        [[_randn(n, 3, 6, 6, seed=n), _randn(4, 3, 3, 3, seed=1)] for n in (1, 3)],
    ),
    "max_pool2d_spatial": (
        lambda x: F.max_pool2d(x, 2, padding=1),
        [_randn(1, 2, 6, 8)],
        ({2: Dim("h", min=2, max=32), 3: Dim("w", min=2, max=32)},),
        [[_randn(1, 2, h, w, seed=h)] for h, w in ((4, 4), (7, 9))],
    ),
    "diff_seq": (
        lambda x: torch.diff(x, n=2, dim=1),
        [_randn(2, 5)],
        # torch.export guards that the second difference is not of length 1.
        ({1: Dim("length", min=4, max=64)},),
        [[_randn(2, n, seed=n)] for n in (4, 13)],
    ),
    "cumsum_seq": (
        lambda x: x.cumsum(1),
        [_randn(2, 5)],
        ({1: SEQ},),
        [[_randn(2, n, seed=n)] for n in (2, 13)],
    ),
    "triu_seq": (
        lambda x: x.triu(1),
        [_randn(5, 5)],
        ({0: SEQ, 1: SEQ},),
        [[_randn(n, n, seed=n)] for n in (2, 6, 11)],
    ),
    "index_select_seq": (
        lambda x, i: x.index_select(0, i),
        [_randn(6, 4), torch.tensor([0, 5, 2])],
        (None, {0: SEQ}),
        [[_randn(6, 4), _randint(6, n, seed=n)] for n in (2, 8)],
    ),
}


@pytest.mark.parametrize("name", sorted(DYNAMIC_CASES))
def test_nn_op_dynamic(name: str) -> None:
    function, example, dynamic_shapes, runs = DYNAMIC_CASES[name]
    # Lambda takes *args, so the per-input specs are wrapped in one more tuple.
    program, input_names, output_names = convert(Lambda(function), example, (dynamic_shapes,))
    for run_args in runs:
        got = run_program(program, dict(zip(input_names, run_args, strict=True)))
        want = function(*run_args)
        torch.testing.assert_close(got[output_names[0]], want, **FP32)


def test_repeated_key_value_heads_are_not_built() -> None:
    # repeat_kv's copies are never made: each key and value head is broadcast
    # over its group of query heads inside the attention.
    inputs = [_randn(1, 4, 5, 8), _randn(1, 2, 5, 8, seed=1), _randn(1, 2, 5, 8, seed=2)]

    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, _repeat_kv(k, 2), _repeat_kv(v, 2))

    program, _, _ = convert(Lambda(attention), inputs)
    ir = str(program)
    assert "broadcast_to" not in ir and "broadcast_in_dims" not in ir, ir
    # The two query heads of each key head as the rows of one matrix, against
    # the key itself, transposed.
    assert "tensor<1x2x10x8xf32>" in ir and "tensor<1x2x8x5xf32>" in ir, ir


class _MemoryAttention(torch.nn.Module):
    """Attention to a learned memory, repeated per group of query heads."""

    def __init__(self) -> None:
        super().__init__()
        self.memory = torch.nn.Parameter(_randn(1, 2, 6, 8, seed=4))

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        memory = _repeat_kv(self.memory, 2)
        return F.scaled_dot_product_attention(q, memory, memory)


def test_attention_to_repeated_parameter_heads() -> None:
    # The parameter is read by the attention alone (its FX user, the repeat,
    # is left out), so it must still become a constant.
    assert_converted_matches(_MemoryAttention(), [_randn(1, 4, 5, 8)], **FP32)


# -- what is refused, and how ------------------------------------------------------


def _conversion_error(function: Callable, inputs: list[torch.Tensor]) -> str:
    with pytest.raises(NotImplementedError) as info:
        convert(Lambda(function), inputs)
    return str(info.value)


def test_max_pool_indices_are_refused() -> None:
    message = _conversion_error(lambda x: F.max_pool2d(x, 2, return_indices=True), [X4])
    assert "indices of max_pool2d" in message


def test_boolean_mask_index_is_refused() -> None:
    message = _conversion_error(lambda x, m: x[m], [X3, X3 > 0])
    assert "boolean mask" in message


def test_attention_dropout_is_refused() -> None:
    inputs = [_randn(1, 2, 4, 8, seed=s) for s in range(3)]
    message = _conversion_error(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.5), inputs
    )
    assert "dropout_p=0.5" in message


def test_training_dropout_is_refused() -> None:
    message = _conversion_error(lambda x: F.dropout(x, 0.25, training=True), [X3])
    assert "train=True with p=0.25" in message
    assert "model.eval()" in message


def test_training_batch_norm_is_refused() -> None:
    stats = [torch.zeros(5), torch.ones(5)]
    message = _conversion_error(lambda x, m, v: F.batch_norm(x, m, v, training=True), [X3, *stats])
    assert "training=True" in message


class _Recurrent(torch.nn.Module):
    def __init__(self, layer: torch.nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor):
        return self.layer(x)


RECURRENT = {
    "lstm_2_layers_bidirectional": lambda: torch.nn.LSTM(
        6, 4, 2, batch_first=True, bidirectional=True
    ),
    "gru_time_major_bidirectional": lambda: torch.nn.GRU(6, 4, 2, bidirectional=True),
    "rnn_relu_no_bias": lambda: torch.nn.RNN(6, 4, nonlinearity="relu", bias=False),
    "rnn_tanh_batch_first": lambda: torch.nn.RNN(6, 4, batch_first=True),
}


@pytest.mark.filterwarnings("ignore:The tensor attributes self.layer._flat_weights")
@pytest.mark.parametrize("name", sorted(RECURRENT))
def test_recurrent_layers(name: str) -> None:
    torch.manual_seed(0)
    module = _Recurrent(RECURRENT[name]()).eval()
    # Outputs and final states: five steps of products of O(1) values.
    assert_converted_matches(module, [_randn(2, 5, 6)], **FP32)


@pytest.mark.filterwarnings("ignore:The tensor attributes self.layer._flat_weights")
def test_unbatched_lstm() -> None:
    torch.manual_seed(0)
    module = _Recurrent(torch.nn.LSTM(6, 4)).eval()
    assert_converted_matches(module, [_randn(5, 6)], **FP32)


def test_overlapping_as_strided_is_refused_naming_the_strides() -> None:
    with pytest.raises(NotImplementedError, match=r"strides \[1, 1\].*overlapping windows"):
        convert(Lambda(lambda x: x.as_strided((3, 3), (1, 1))), [X3])

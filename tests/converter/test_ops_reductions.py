"""Reductions, softmax and log_softmax, run in Core AI's runtime against PyTorch.

float32 tolerance rtol=1e-5, atol=1e-5: a reduction may add in a different
order than PyTorch (pairwise vs vectorised), an error of a few ulp of the
partial sums; var/std and log_softmax subtract nearly equal numbers, so the
absolute floor is 1e-5 rather than 1e-6.
"""

from __future__ import annotations

import pytest
import torch
from support.coreai_run import Lambda, assert_converted_matches

RTOL, ATOL = 1e-5, 1e-5


def _data() -> torch.Tensor:
    generator = torch.Generator().manual_seed(3)
    return torch.randn(3, 4, 5, generator=generator)


REDUCTIONS = {
    "sum_all": lambda x: x.sum(),
    "sum_dim": lambda x: x.sum(1),
    "sum_dims_keepdim": lambda x: x.sum((0, 2), keepdim=True),
    "sum_negative_dim": lambda x: x.sum(-1),
    "mean": lambda x: x.mean(1),
    "mean_all": lambda x: x.mean(),
    "mean_keepdim": lambda x: x.mean(-1, keepdim=True),
    "amax": lambda x: x.amax(2),
    "amin": lambda x: x.amin((0, 1)),
    "max_all": lambda x: x.max(),
    "min_all": lambda x: x.min(),
    "max_dim": lambda x: x.max(1),
    "min_dim_keepdim": lambda x: x.min(2, keepdim=True),
    "argmax": lambda x: x.argmax(1),
    "argmax_flat": lambda x: x.argmax(),
    "argmin": lambda x: x.argmin(-1),
    "argmin_keepdim": lambda x: x.argmin(0, keepdim=True),
    "prod": lambda x: x.prod(1),
    "var": lambda x: x.var(1),
    "var_unbiased_false": lambda x: x.var(2, unbiased=False, keepdim=True),
    "var_correction": lambda x: torch.var(x, (0, 2), correction=2),
    "std": lambda x: x.std(1),
    "std_all": lambda x: x.std(),
    "std_biased": lambda x: x.std(-1, unbiased=False, keepdim=True),
    "std_correction": lambda x: x.std((0, 1), correction=0),
    "any": lambda x: (x > 1).any(1),
    "all": lambda x: (x > -2).all(),
    "any_float": lambda x: x.any(2),
    "sum_bool": lambda x: (x > 0).sum(1),
    "sum_int": lambda x: (x * 10).int().sum(0),
    "softmax": lambda x: x.softmax(-1),
    "softmax_dim0": lambda x: torch.softmax(x, 0),
    "log_softmax": lambda x: x.log_softmax(1),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction(name: str) -> None:
    assert_converted_matches(Lambda(REDUCTIONS[name]), [_data()], rtol=RTOL, atol=ATOL)


def test_argmax_ties_pick_the_first_index() -> None:
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]])
    assert_converted_matches(Lambda(lambda a: (a.argmax(1), a.argmin(1), a.max(1))), [x])


def test_softmax_large_values_do_not_overflow() -> None:
    x = torch.tensor([[1000.0, 1001.0, 999.0], [-1000.0, 0.0, 50.0]])
    assert_converted_matches(
        Lambda(lambda a: (a.softmax(1), a.log_softmax(1))), [x], rtol=RTOL, atol=ATOL
    )


def test_float16_mean() -> None:
    # float16 sums of 5 values: a few roundings of 2^-11 relative each.
    x = _data().half()
    assert_converted_matches(Lambda(lambda a: a.mean(-1)), [x], rtol=2e-3, atol=2e-3)

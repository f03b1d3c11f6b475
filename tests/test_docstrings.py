"""The runnable examples in public docstrings run and print what they show."""

import doctest

import pytest

import coreai_torch._composite_declaration
import coreai_torch.composite_ops._gated_delta_update
import coreai_torch.composite_ops._gather_mm
import coreai_torch.composite_ops._rms_norm
import coreai_torch.composite_ops._rope
import coreai_torch.composite_ops._sdpa
import coreai_torch.contract
import coreai_torch.converter.converter
import coreai_torch.examples
import coreai_torch.externalize
import coreai_torch.kernel
import coreai_torch.launches
import coreai_torch.modes
import coreai_torch.runtime
import coreai_torch.user_files


@pytest.mark.parametrize(
    "module",
    [
        coreai_torch._composite_declaration,
        coreai_torch.composite_ops._gated_delta_update,
        coreai_torch.composite_ops._gather_mm,
        coreai_torch.composite_ops._rms_norm,
        coreai_torch.composite_ops._rope,
        coreai_torch.composite_ops._sdpa,
        coreai_torch.contract,
        coreai_torch.converter.converter,
        coreai_torch.examples,
        coreai_torch.externalize,
        coreai_torch.kernel,
        coreai_torch.launches,
        coreai_torch.modes,
        coreai_torch.runtime,
        coreai_torch.user_files,
    ],
    ids=lambda m: m.__name__,
)
def test_docstring_examples(module) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0

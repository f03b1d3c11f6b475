"""A pytest plugin that times the test corpora's kernel calls in default and in debug mode.

bench_debug_checks.py loads it into a child pytest session over the corpora
(``-p debug_overhead_plugin``, with benchmarks/ on the path). The first call
of each distinct kernel call (kernel, argument dtypes and shapes, grid,
threadgroup, result shapes) on CPU tensors is repeated: in default mode, then
with ``kernel.debug`` on (compiled with the checks; its first call, which
compiles, is not timed), interleaved repetition by repetition. The test itself
goes on with the default-mode result, so the corpora's own checks still judge
it. One JSON object per timed call is appended to the file named by
``COREAI_TORCH_DEBUG_OVERHEAD_OUT``:

    {"test", "kernel", "default_s", "debug_s", "identical"}    or
    {"test", "kernel", "refused"}    (the debug call raised: what it said)

``identical``: whether the debug results equal the default ones bit for bit
(debug mode runs the same code over guarded copies of the tensors).
``COREAI_TORCH_DEBUG_OVERHEAD_REPS`` sets the repetitions (default 3).
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch
from timing import Plan, measure_interleaved

from coreai_torch import TorchMetalKernel
from coreai_torch.launches import Launch, LaunchHook, set_launch_hook

_OUT = os.environ["COREAI_TORCH_DEBUG_OVERHEAD_OUT"]
_REPS = int(os.environ.get("COREAI_TORCH_DEBUG_OVERHEAD_REPS", "3"))
_seen: set[tuple] = set()
_previous: LaunchHook | None = None  # the session's own hook (tests/conftest.py)
_timing = False  # the timed calls' launches pass through


def _describe(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return (value.dtype, tuple(value.shape), tuple(value.stride()))
    if isinstance(value, (list, tuple)):
        return tuple(_describe(v) for v in value)
    return (type(value), value)


def _identical(kernel: TorchMetalKernel, a: Any, b: Any) -> bool:
    outs_a, outs_b = kernel.as_result_list(a), kernel.as_result_list(b)
    try:
        for x, y in zip(outs_a, outs_b, strict=True):
            torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True)
    except (AssertionError, ValueError):
        return False
    return True


def _run(launch: Launch) -> Any:
    return _previous(launch) if _previous is not None else launch.run()


def _time_both(launch: Launch, inputs: tuple) -> dict[str, Any]:
    kernel = launch.kernel
    kwargs = {
        "threads_per_grid": launch.threads_per_grid,
        "threads_per_thread_group": launch.threads_per_thread_group,
        "result_shapes": launch.result_shapes,
    }

    def call(debug: bool) -> Any:
        kernel.debug = debug
        try:
            return kernel(*inputs, **kwargs)
        finally:
            kernel.debug = False

    try:
        debug_out = call(True)  # compiles the debug specialization
    except Exception as exc:  # what debug mode found (or could not do)
        first = str(exc).strip().splitlines()
        return {"refused": f"{type(exc).__name__}: {first[0] if first else ''}"}
    default_out = call(False)
    default, debug = measure_interleaved(
        [lambda: call(False), lambda: call(True)], Plan(warmup=0, reps=_REPS, calls=1)
    )
    return {
        "default_s": default.median,
        "debug_s": debug.median,
        "identical": _identical(kernel, default_out, debug_out),
    }


def _measuring(launch: Launch) -> Any:
    global _timing
    kernel = launch.kernel
    if _timing or kernel.debug or launch.device != "cpu":
        return _run(launch)
    # Inputs the kernel writes to are timed as the test left them before the call.
    inputs = tuple(v.clone() if isinstance(v, torch.Tensor) else v for v in launch.inputs)
    out = _run(launch)
    key = (
        repr(kernel.identity),
        _describe(inputs),
        _describe(launch.threads_per_grid),
        _describe(launch.threads_per_thread_group),
        _describe(launch.result_shapes),
    )
    if key in _seen:
        return out
    _seen.add(key)
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
    _timing = True
    try:
        record = {"test": test, "kernel": kernel.name, **_time_both(launch, inputs)}
    finally:
        _timing = False
    with open(_OUT, "a") as f:
        f.write(json.dumps(record) + "\n")
    return out


def pytest_sessionstart(session: Any) -> None:
    """Wraps the session's launch hook, which tests/conftest.py set up by now."""
    global _previous
    _previous = set_launch_hook(_measuring)

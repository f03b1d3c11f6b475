"""Timing and row helpers shared by the Python benchmarks.

Every benchmark row is a dict with the keys of the report table
(``metric, ours, baseline, ratio, target, pass``) plus ``key``, a stable
identifier, and ``ours_best`` / ``baseline_best`` where there is a best case.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Plan:
    """How to time a call: warm-up calls, then ``reps`` repetitions of ``calls`` calls."""

    warmup: int
    reps: int
    calls: int


@dataclass(frozen=True)
class Timing:
    """Seconds per call: the median over repetitions, and the best repetition."""

    median: float
    best: float


def measure(fn: Callable[[], Any], plan: Plan) -> Timing:
    """Times ``fn`` as ``plan`` says; each repetition gives one per-call time."""
    for _ in range(plan.warmup):
        fn()
    per_call = []
    for _ in range(plan.reps):
        start = time.perf_counter()
        for _ in range(plan.calls):
            fn()
        per_call.append((time.perf_counter() - start) / plan.calls)
    return Timing(statistics.median(per_call), min(per_call))


def measure_interleaved(fns: Sequence[Callable[[], Any]], plan: Plan) -> list[Timing]:
    """Times several calls against each other, alternating them repetition by repetition.

    On a shared machine a burst of load then slows every contender alike,
    instead of only the one that happened to be running, which keeps ratios
    between them meaningful.
    """
    for fn in fns:
        for _ in range(plan.warmup):
            fn()
    per_call: list[list[float]] = [[] for _ in fns]
    for _ in range(plan.reps):
        for fn, times in zip(fns, per_call):
            start = time.perf_counter()
            for _ in range(plan.calls):
                fn()
            times.append((time.perf_counter() - start) / plan.calls)
    return [Timing(statistics.median(t), min(t)) for t in per_call]


def row(
    key: str,
    metric: str,
    ours: float,
    *,
    baseline: float | None = None,
    target: str = "-",
    passed: bool | None = None,
    ours_best: float | None = None,
    baseline_best: float | None = None,
) -> dict[str, Any]:
    """One table row; ``ratio`` is ours / baseline of the values shown."""
    return {
        "key": key,
        "metric": metric,
        "ours": ours,
        "baseline": baseline,
        "ratio": ours / baseline if baseline else None,
        "target": target,
        "pass": passed,
        "ours_best": ours_best,
        "baseline_best": baseline_best,
    }

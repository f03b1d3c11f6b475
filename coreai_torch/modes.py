"""Execution mode switches: run the Metal source ("kernel") or ``torch_defn`` ("reference").

The global mode starts from ``COREAI_TORCH_EXECUTION_MODE`` (default ``kernel``);
each kernel's ``execution_mode`` attribute, when not ``None``, overrides it.
"""

from __future__ import annotations

import os

MODES = ("kernel", "reference")

_mode = os.environ.get("COREAI_TORCH_EXECUTION_MODE", "kernel").strip().lower() or "kernel"
if _mode not in MODES:
    raise ValueError(
        f"COREAI_TORCH_EXECUTION_MODE={_mode!r} is not one of {MODES}; unset it or pick one."
    )


def set_execution_mode(mode: str) -> None:
    """Choose what eager calls run: ``"kernel"`` (the Metal source) or ``"reference"``.

    >>> import coreai_torch
    >>> coreai_torch.set_execution_mode("reference")   # torch_defn everywhere
    >>> coreai_torch.set_execution_mode("kernel")      # back to the default
    """
    global _mode
    if mode not in MODES:
        raise ValueError(f"execution mode must be one of {MODES}, got {mode!r}.")
    _mode = mode


def get_execution_mode() -> str:
    """The global execution mode (``"kernel"`` unless changed)."""
    return _mode


def resolve(kernel_mode: str | None) -> str:
    if kernel_mode is None:
        return _mode
    if kernel_mode not in MODES:
        raise ValueError(f"execution_mode must be None or one of {MODES}, got {kernel_mode!r}.")
    return kernel_mode


def debug_default() -> bool:
    """Debug mode for new kernels: on when ``COREAI_TORCH_DEBUG`` is set to 1/true/yes."""
    return os.environ.get("COREAI_TORCH_DEBUG", "").strip().lower() in ("1", "true", "yes", "on")

"""Exception types of coreai_torch."""

from __future__ import annotations

from .contract import COMPILE_ERROR_MARKER


class MetalCompileError(RuntimeError):
    """A kernel's Metal source failed to compile.

    The message names the kernel and the backend and carries the compiler's
    diagnostics, whose locations point at the user's own lines (``src:LINE``,
    ``helper_src:LINE``).
    """


def reraise_compile_error(exc: RuntimeError) -> None:
    """Re-raise a backend's compile failure as :class:`MetalCompileError`; else return."""
    message = str(exc)
    at = message.find(COMPILE_ERROR_MARKER)
    if at >= 0:
        raise MetalCompileError(message[at + len(COMPILE_ERROR_MARKER) :]) from None
    return None

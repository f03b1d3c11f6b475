"""Observing kernel launches: one hook sees every eager launch of every kernel.

A kernel call reaches its launch by one of two routes (``docs/internals.md``):
the C++ fast path of a repeated plain call, or the kernel's op (a new
specialization, autograd, ``torch.compile``'s compiled code, a call inside a
dispatch mode). Both end in the same place, ``KernelTable::launch``
(``csrc/python/kernel_table.cpp``), and that is where the hook sits, so it sees
every launch whichever route the call took. Tests use it to run every call on
a second device and compare; debug tooling uses it to time or log launches.
Calls that run ``torch_defn`` (reference mode) and traced calls launch nothing
and are not seen.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import _C

#: One launch as a hook sees it: ``kernel`` (the TorchMetalKernel),
#: ``inputs``, ``threads_per_grid``, ``threads_per_thread_group`` and
#: ``result_shapes`` as the call gave them, ``device`` ("cpu", "cuda:0" ...),
#: ``handle`` (the specialization's), ``registration()`` (its
#: ``register_kernel`` arguments) and ``run()``, which launches it once and
#: returns its results.
Launch = _C.Launch

LaunchHook = Callable[[Launch], Any]


def set_launch_hook(hook: LaunchHook | None) -> LaunchHook | None:
    """Sets the function every eager kernel launch goes through; returns the previous one.

    The hook is called with a :data:`Launch` in place of the launch, and what
    it returns is what the kernel call returns: a hook that observes calls
    ``launch.run()`` and returns its result. An exception it raises is the
    call's. A kernel called inside the hook launches through the hook too.
    ``None`` removes the hook; a chained hook calls the one it replaced.

    Example::

        >>> import torch
        >>> from coreai_torch.examples import custom_add
        >>> from coreai_torch.launches import set_launch_hook
        >>> seen = []
        >>> def log(launch):
        ...     seen.append((launch.kernel.name, launch.device))
        ...     return launch.run()
        >>> previous = set_launch_hook(log)
        >>> x = torch.ones(4)
        >>> out = custom_add(x, x, threads_per_grid=(4, 1, 1),
        ...                  threads_per_thread_group=(4, 1, 1), result_shapes=[[4]])
        >>> _ = set_launch_hook(previous)
        >>> seen, out.tolist()
        ([('vector_add', 'cpu')], [2.0, 2.0, 2.0, 2.0])
    """
    if hook is not None and not callable(hook):
        raise TypeError(
            f"set_launch_hook: the hook must be callable (it is called with each Launch) "
            f"or None, got {type(hook).__name__}"
        )
    return _C._set_launch_hook(hook)

"""Helpers shared by the tests (``tests/conftest.py`` puts ``tests/`` on the path).

- ``kernel_testing``: call a kernel and pass its op through ``torch.library.opcheck``.
- ``cpu_launch``: register and launch specializations through ``torch.ops.coreai_torch``
  directly, rendered by the contract module.
- ``msl_harness``: compile and run small C++ programs against the Metal headers.
- ``coreai_run``: convert modules and run them in Core AI's CPU runtime.
- ``kernels``: test kernels that several test modules call.

The seed kernels live in the package (``coreai_torch.examples``), shared with the demo.
"""

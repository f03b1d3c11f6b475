"""Helpers shared by the tests (``tests/conftest.py`` puts ``tests/`` on the path).

- ``kernel_testing``: call a kernel and pass its op through ``torch.library.opcheck``;
  device mode (``COREAI_TORCH_TEST_DEVICE=cuda``: every kernel call also runs on the
  GPU and must agree with the CPU backend) and the record of launched kernels that
  ``tests/cuda/test_ptx_compile.py`` compiles for the GPU.
- ``cpu_launch``: register and launch specializations through ``torch.ops.coreai_torch``
  directly, rendered by the contract module.
- ``msl_harness``: compile and run small C++ programs against the Metal headers (on
  one GPU thread in device mode, through ``cuda_runner``).
- ``cuda_tools``: the GPU marker and ``ptxas``.
- ``coreai_run``: convert modules and run them in Core AI's CPU runtime.
- ``kernels``: test kernels that several test modules call.

The seed kernels live in the package (``coreai_torch.examples``), shared with the demo.
"""

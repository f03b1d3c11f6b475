import importlib.util

import pytest
from support.kernel_testing import TEST_DEVICE, install_device_mode, record_launched_kernels

# coreai-core's dialect modules import coreai.authoring circularly unless the
# latter is imported first; test modules import `coreai._compiler.dialects`
# directly (as Apple's lowering guide does after importing coreai_torch). The
# GPU machine has no coreai-core: the eager tests run there without it.
if importlib.util.find_spec("coreai") is not None:
    import coreai.authoring  # noqa: F401

if TEST_DEVICE:
    install_device_mode()

record_launched_kernels()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The PTX check compiles what the rest of the session launched: it runs last.
    last = [item for item in items if item.path.name == "test_ptx_compile.py"]
    items[:] = [item for item in items if item not in last] + last

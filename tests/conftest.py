import importlib.util
from collections.abc import Iterator

import pytest
from support import kernel_testing, ptx_check
from support.kernel_testing import install_launch_hook

from coreai_torch import kernel_op

# coreai-core's dialect modules import coreai.authoring circularly unless the
# latter is imported first; test modules import `coreai._compiler.dialects`
# directly (as Apple's lowering guide does after importing coreai_torch). The
# GPU machine has no coreai-core: the eager tests run there without it.
if importlib.util.find_spec("coreai") is not None:
    import coreai.authoring  # noqa: F401

install_launch_hook()  # device mode and the GPU compile check see every launch
ptx_check.activate()


@pytest.fixture(params=["default", "debug"])
def default_and_debug_mode(request: pytest.FixtureRequest) -> Iterator[str]:
    """The test twice: as written, then with every kernel in CPU debug mode.

    For the kernel corpora: debug mode's race and synchronisation checks must
    find no error in any of them, and their results must still be right. In
    the debug pass ``run_checked`` leaves out opcheck (the op's registration
    does not depend on the mode, and the default pass checks it).
    """
    if request.param == "default":
        yield request.param
        return
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("COREAI_TORCH_DEBUG", "1")  # kernels the test defines
    defined = list(kernel_op.ACTIVE.values())  # kernels its module defined
    modes = [k.debug for k in defined]
    for k in defined:
        k.debug = True
    kernel_testing.DEBUG_PASS = True
    try:
        yield request.param
    finally:
        kernel_testing.DEBUG_PASS = False
        for k, mode in zip(defined, modes):
            k.debug = mode
        monkeypatch.undo()

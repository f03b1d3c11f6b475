"""Ctrl-C (SIGINT) stops a runaway kernel with KeyboardInterrupt and leaves
the process usable."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from support.child_process import LineReader, child_env, spawn

# A kernel that never ends when `spin` is set. The loop touches a volatile so
# that the compiler may not assume it terminates (C++ lets it delete a loop
# without side effects). One runs in loop mode, one (with a barrier) in the
# group-loop form, and the same with group loops turned off in fiber mode;
# 64 groups keep every intra-op thread busy.
CHILD = """
import os
import torch
from coreai_torch import MetalParameter, TorchMetalKernel
from support.cpu_launch import Scalar, Tensor, kernel

BODY = '''{barrier}
volatile uint turns = 0;
while (spin) {{ turns = turns + 1; }}
out[id] = x[id] + 1.0f;'''

def through_ops(mode, barrier):
    k = kernel("spin_" + mode, [Tensor("x"), Scalar("spin", "bool")], [Tensor("out")],
               BODY.format(barrier=barrier), [("id", "uint", "thread_position_in_grid")])
    return lambda x, spin: k(x, spin, grid=(4096, 1, 1), group=(64, 1, 1), shapes=[[4096]])[0]

def through_kernel(mode, barrier):
    def reference(x: torch.Tensor, spin: bool) -> torch.Tensor:
        return x + 1
    gid = MetalParameter("id", "uint", "thread_position_in_grid")
    k = TorchMetalKernel("spin_" + mode, ["x", "spin"], ["out"], BODY.format(barrier=barrier),
                         reference, metal_params=[gid])
    return lambda x, spin: k(x, spin, threads_per_grid=(4096, 1, 1),
                             threads_per_thread_group=(64, 1, 1), result_shapes=[[4096]])

x = torch.arange(4096, dtype=torch.float32)
BARRIER = "threadgroup_barrier(mem_flags::mem_threadgroup);"
for mode, barrier in (("loop", ""), ("group_loops", BARRIER), ("fibers", BARRIER)):
    if mode == "fibers":
        os.environ["COREAI_TORCH_CPU_GROUP_LOOPS"] = "0"  # read when the kernel compiles
    call = ROUTE(mode, barrier)
    assert torch.equal(call(x, False), x + 1)  # compiled and warm
    print("spinning", mode, flush=True)
    try:
        call(x, True)
        print("returned")
    except KeyboardInterrupt:
        print("KeyboardInterrupt", mode, flush=True)
    assert torch.equal(call(x, False), x + 1)
print("done")
"""


@pytest.mark.parametrize("route", ["through_kernel", "through_ops"])
def test_sigint_stops_a_runaway_kernel(tmp_path: Path, route: str) -> None:
    # through_kernel: TorchMetalKernel's fast path (keeps the GIL for small
    # launches); through_ops: torch.ops.coreai_torch.launch (the dispatcher).
    p = spawn(CHILD.replace("ROUTE", route), child_env(tmp_path))
    lines = LineReader(p)
    for mode in ("loop", "group_loops", "fibers"):
        assert lines.next() == f"spinning {mode}"
        time.sleep(1.0)  # inside the endless launch by now
        p.send_signal(signal.SIGINT)
        assert lines.next() == f"KeyboardInterrupt {mode}"
    assert lines.finish() == ["done"]


def test_sigint_while_kernel_code_keeps_calling_the_launcher(tmp_path: Path) -> None:
    # In debug mode every out-of-bounds access calls into the launcher, which
    # takes a lock to record it: an interrupt that arrives there waits for the
    # call to return (kernel_guard.h). The kernel below does little else.
    code = """
    import torch
    from support.cpu_launch import Scalar, Tensor, kernel
    k = kernel("reporting", [Tensor("x"), Scalar("spin", "bool")], [Tensor("out")], '''
        volatile uint turns = 0;
        while (spin) { out[1u << 20] = 0.0f; turns = turns + 1; }
        out[id] = x[id] + 1.0f;''', [("id", "uint", "thread_position_in_grid")], debug=True)
    x = torch.arange(64, dtype=torch.float32)
    run = lambda spin: k(x, spin, grid=(64, 1, 1), group=(32, 1, 1), shapes=[[64]])[0]
    assert torch.equal(run(False), x + 1)
    print("spinning", flush=True)
    try:
        run(True)
    except KeyboardInterrupt:
        print("KeyboardInterrupt", flush=True)
    assert torch.equal(run(False), x + 1)
    print("done")
    """
    p = spawn(code, child_env(tmp_path))
    lines = LineReader(p)
    assert lines.next() == "spinning"
    time.sleep(1.0)
    p.send_signal(signal.SIGINT)
    assert lines.next() == "KeyboardInterrupt"
    assert lines.finish() == ["done"]
